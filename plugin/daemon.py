"""The netplugin agent process: Docker driver socket, datapath agent and OpenFlow app, and
this host's place in the cluster (registration, peers, networks mirrored into docker)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from common import keys
from common.credentials import AGENT_TOKEN_ENV, CredentialError, client_cert, client_token
from common.etcd_tls import EtcdTls
from common.flags import split_endpoints
from common.loop import Backoff, Reconciler
from common.models import Network
from common.records import HostRecord
from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.hostnat import Iptables
from datapath.hostports import HostPorts
from datapath.netns import NetlinkNetns
from datapath.ofapp import FlowController
from datapath.ovs import Ovs, detect_datapath_type
from datapath.plugcost import PlugCosts
from datapath.poollinks import NetlinkPoolLinks
from datapath.portpool import PortPool, Shape
from datapath.ports import PortConflict, PublishedPort
from datapath.report import counts
from datapath.underlay import Underlay, discover, ensure_userspace_tunneling
from datapath.veth import Into, NetlinkLinks
from store import Store, StoreError
from store.startup import open_store_at_start

from . import kube
from .app import create_app
from .bgp_host import HostBgp
from .cluster import ClusterView, HostRegistration
from .cluster_sync import ClusterSync, local_network
from .cni_api import create_cni_app
from .cni_api import parse_error as cni_parse_error
from .cni_service import CniService
from .containers import ContainerReporter
from .docker_events import DockerEvents
from .docker_sync import DockerSync, cluster_networks_in
from .driver import Driver
from .inspect_api import AgentStatus, Window, create_inspect_app, parse_listen, serve_tcp
from .inspect_api import parse_error as inspect_parse_error
from .master_client import MasterClient, leader_url_from_store
from .metrics import AgentMetrics
from .options import DriverError
from .plugin_name import DriverName
from .server import make_socket_server
from .swarm import SwarmSweep

log = logging.getLogger("netplugin")


def _mirrored_network(view: ClusterView, tenant: str, name: str) -> Network | None:
    """A network's config from the agent's mirror of the store (None until it arrives)."""
    record = view.networks.get(keys.network(tenant, name)[len(keys.NETWORKS) :])
    return record.config if record is not None else None


class AgentDatapath:
    """The driver's Datapath, backed by this host's HostDatapath; networks arrive on demand."""

    def __init__(
        self,
        agent: HostDatapath,
        master: MasterClient,
        tenant_tags: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.agent = agent
        self.master = master
        self.tenant_tags = tenant_tags  # the agent's mirror: tenant -> its tag (its VRF)

    def _ensure_network(self, net: Network) -> str:
        held = self.agent.network(net.id)
        if held is None or _addressing(held) != (
            net.subnet,
            net.gateway,
            net.ipv6Subnet,
            net.ipv6Gateway,
            net.encap,
        ):  # new here, or deleted and made again otherwise: the agent replaces it
            # The config alone lacks the tag the master chose: ask for the whole record.
            record = self.master.network_record(net.tenantName, net.networkName)
            self.agent.ensure_network(local_network(record, self._tenant_tag(net.tenantName)))
        return net.id

    def create_endpoint_port(
        self,
        endpoint_id: str,
        network: Network,
        mac: str,
        ipv4: str,
        ipv6: str,
        mtu: int,
        group: str = "",
        into: Into | None = None,
    ) -> str:
        network_id = self._ensure_network(network)
        ep = EndpointState(endpoint_id, network_id, mac, ipv4, ipv6, group)
        return self.agent.create_endpoint_port(ep, into)

    def plug(
        self, endpoint_id: str, network: Network, mac: str, mtu: int, into: Into | None = None
    ) -> str:
        return self.agent.plug(endpoint_id, self._ensure_network(network), mac, into)

    def delete_endpoint_port(self, endpoint_id: str) -> None:
        self.agent.delete_endpoint_port(endpoint_id)

    def settle(self, endpoint_id: str) -> None:
        self.agent.teardown.wait(endpoint_id, self.agent.ready_timeout)

    def remove_network(self, network_id: str) -> None:
        self.agent.remove_network(network_id)

    def has_endpoint(self, endpoint_id: str) -> bool:
        return self.agent.has_endpoint(endpoint_id)

    def endpoint_oper(self, endpoint_id: str) -> dict[str, Any]:
        return self.agent.endpoint_oper(endpoint_id)

    def publish(self, endpoint_id: str, ports: list[PublishedPort]) -> list[PublishedPort]:
        if not ports and not self.agent.has_endpoint(endpoint_id):
            return []  # revoked after the endpoint is gone: nothing is published
        try:
            return list(self.agent.publish(endpoint_id, ports))
        except PortConflict as e:
            raise DriverError(str(e), 409) from None

    def published_ports(self, endpoint_id: str) -> list[PublishedPort]:
        return list(self.agent.published_ports().get(endpoint_id, ()))

    def _tenant_tag(self, tenant: str, wait: float = 5.0) -> int:
        """The tenant's tag, waiting a moment for a tenant made just now to reach the
        mirror; 0 if it has none (bridge mode does not need it, routing mode refuses the
        network, naming it)."""
        if self.agent.fwd_mode != "routing":
            wait = 0.0
        deadline = time.monotonic() + wait
        while not (tag := self.tenant_tags().get(tenant, 0)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return tag


def _addressing(n: NetworkState) -> tuple[str, ...]:
    return (n.subnet, n.gateway, n.ipv6_subnet, n.ipv6_gateway, n.encap)


class LocalDocker:
    """This host's dockerd, through one docker SDK client made on first use.

    docker-py talks to dockerd when constructed, and a dockerd that is restoring containers
    on our networks waits for us: connecting at start would deadlock the two.
    """

    def __init__(self, docker_host: str) -> None:
        self.docker_host = docker_host
        self._client: Any = None
        self._lock = threading.Lock()

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self.new_client()
            return self._client

    def new_client(self) -> Any:
        """A client of its own (dockerd's event stream holds its connection open)."""
        import docker

        kwargs: dict[str, Any] = {"timeout": 10}
        if self.docker_host:
            return docker.DockerClient(base_url=self.docker_host, **kwargs)
        return docker.from_env(**kwargs)

    def plugins(self) -> list[dict[str, Any]]:
        """dockerd's plugins, as GET /plugins lists them."""
        return list(self.client().api.plugins())

    def _network(self, network_id: str) -> Any:
        from docker.errors import NotFound

        try:
            return self.client().networks.get(network_id)
        except NotFound:
            return None

    def name(self, network_id: str) -> str | None:
        """A docker network's name (None while dockerd does not know it)."""
        net = self._network(network_id)
        return None if net is None else str(net.name)

    def swarm_networks(self) -> set[str] | None:
        """The swarm's network ids, if this dockerd is a swarm manager (None otherwise)."""
        api = self.client().api
        if not (api.info().get("Swarm") or {}).get("ControlAvailable"):
            return None
        return {n["Id"] for n in api.networks() if n.get("Scope") == "swarm"}

    def options(self, network_id: str) -> dict[str, str] | None:
        """A docker network's -o options (None while dockerd does not know it)."""
        net = self._network(network_id)
        return None if net is None else dict(net.attrs.get("Options") or {})


def _clear_stale_socket(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        with socket.socket(socket.AF_UNIX) as probe:
            if probe.connect_ex(path) == 0:
                raise SystemExit(f"netplugin: another netplugin is serving {path}")
        os.unlink(path)


def _underlay(args: Any, ovs: Ovs, datapath_type: str) -> Underlay | None:
    if not args.vtep_ip:
        return None
    if datapath_type == "netdev":
        return ensure_userspace_tunneling(ovs, args.vtep_ip, args.underlay_bridge, args.proc_sys)
    return discover(args.vtep_ip)


def _link_mtu(ifname: str) -> int:
    """The MTU of an interface (netlink: /sys may show another network namespace's)."""
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        found = ip.link_lookup(ifname=ifname)
        if not found:
            raise SystemExit(f"netplugin: --vlan-if {ifname}: no such interface")
        return int(ip.get_links(found[0])[0].get("mtu"))


def port_pool(args: Any, ovs: Ovs, mtu: int) -> PortPool | None:
    """The switch ports kept ready for new endpoints (--port-pool; 0: none), the first of
    them with ``mtu``; which endpoint each serves is recorded under --data-dir, a
    directory per --host (simulated hosts may share a data directory)."""
    if args.port_pool <= 0:
        return None
    records = Path(args.data_dir) / "pool-ports" / args.host.replace("/", "_")
    links = NetlinkPoolLinks(records, args.proc_sys)
    size = args.port_pool
    costs = PlugCosts(args.cni_pair)  # which pair a CNI pod gets
    return PortPool(
        ovs, links, args.bridge, size, batch=min(8, size), shape=Shape(mtu), costs=costs
    )


def open_cluster_store(args: Any) -> Store:
    """The cluster store the flags name; a TLS problem with etcd ends the program with a
    one-line message (an etcd that is down is waited for by the mirrors)."""
    try:
        return open_store_at_start(
            split_endpoints(args.etcd_endpoints),
            args.data_dir,
            EtcdTls(args.etcd_ca, args.etcd_cert, args.etcd_key),
        )
    except StoreError as e:  # StoreStartError, or a damaged embedded store
        raise SystemExit(f"netplugin: {e}") from None


def run(args: Any) -> None:
    """Start everything; serve until SIGINT/SIGTERM, then exit (os-ken threads need os._exit)."""
    try:
        token = client_token(args.auth_token_file, os.environ.get(AGENT_TOKEN_ENV, ""))
    except CredentialError as e:
        raise SystemExit(f"netplugin: --auth-token-file: {e}") from None
    try:
        cert = client_cert(args.tls_cert, args.tls_key)
    except CredentialError as e:
        raise SystemExit(f"netplugin: {e}") from None
    store = open_cluster_store(args)  # first: a bad TLS setup must stop us before OVS
    # Calls follow the leader the masters elected, and ride out a failover.
    try:
        master = MasterClient(
            args.netmaster,
            leader=leader_url_from_store(store),
            tls_ca=args.tls_ca,
            token=token,
            client_cert=cert,
        )
    except ValueError as e:
        raise SystemExit(f"netplugin: --netmaster {args.netmaster!r}: {e}") from None
    if args.api_listen:
        try:
            parse_listen(args.api_listen)
        except ValueError as e:
            raise SystemExit(f"netplugin: --api-listen: {e}") from None
    _clear_stale_socket(args.socket)
    for path in (args.api_socket, args.cni_socket):
        if path:
            _clear_stale_socket(path)
    metrics = AgentMetrics()
    status = AgentStatus()
    controller = FlowController(listen_host="127.0.0.1", listen_port=args.of_port)
    controller.on_reconcile = metrics.reconciled
    controller.start()
    ovs = Ovs(args.ovsdb)
    datapath_type = detect_datapath_type()
    underlay = _underlay(args, ovs, datapath_type)
    config = HostConfig(
        bridge=args.bridge,
        controller=f"tcp:127.0.0.1:{args.of_port}",
        datapath_type=datapath_type,
        mtu=args.mtu,
        uplink_mtu=underlay.mtu if underlay else 1500,
        vlan_mtu=_link_mtu(args.vlan_if) if args.vlan_if else 1500,
        vlan_uplink=args.vlan_if,
        tunnels=underlay is not None,
    )
    links, ports = NetlinkLinks(args.proc_sys), HostPorts(args.proc_sys)
    pool = port_pool(args, ovs, config.mtu_for("vxlan"))
    agent = HostDatapath(config, ovs, controller, Iptables(), links, ports, pool)
    controller.on_connect = agent.switch_connected
    agent.start()

    docker = LocalDocker(args.docker_host)
    docker_sync = DockerSync(
        docker.client,
        lambda: cluster_networks_in(store),  # read now: a mirror may lag
        driver=DriverName(args.plugin_name, args.managed, docker.plugins),
    )
    woken: list[Reconciler] = []  # the loops a change of the cluster view wakes
    view = ClusterView(store, lambda: [loop.poke() for loop in woken])
    # The containers of this host's endpoints (their labels are what services select).
    reporter = ContainerReporter(
        args.host,
        view.endpoints.values,
        lambda: list(docker.client().api.containers(all=True)),
        master.set_endpoint_container,
    )
    docker_events = DockerEvents(docker.new_client)  # one stream, for both
    docker_events.subscribe(docker_sync.on_event)
    docker_events.subscribe(reporter.on_event)

    def resynced(result: dict[str, int]) -> None:
        status.resynced(result)
        docker_sync.poke()

    cluster_sync = ClusterSync(
        view,
        agent,
        args.host,
        on_resync=resynced,
        store_flags=f"--data-dir {args.data_dir}, --etcd-endpoints {args.etcd_endpoints!r}",
    )
    # In swarm mode docker's networks are the swarm's: none is copied from the cluster (a
    # manager's docker would make each a swarm network, a worker's refuses).
    woken += [cluster_sync, reporter] if args.swarm else [cluster_sync, reporter, docker_sync]
    registration = HostRegistration(
        store,
        HostRecord(
            host=args.host,
            vtep_ip=args.vtep_ip,
            ctrl_ip=args.ctrl_ip,
            datapath=datapath_type,
            uplink_mtu=config.uplink_mtu,
            vlan_if=args.vlan_if,
        ),
        args.host_ttl,
    )
    # Routing mode with BGP: the router port, the session with the router, its report.
    peering = HostBgp(view, agent, args.host, registration.put_leased)
    woken.append(peering)

    driver = Driver(
        master,
        AgentDatapath(agent, master, view.tenant_tags),
        host=args.host,
        mtu=args.mtu,
        docker_name=docker.name,
        docker_options=docker.options,
        local_network=lambda tenant, name: _mirrored_network(view, tenant, name),
        swarm=args.swarm,
    )
    # dockerd's `network create` event names a network the moment `docker network create`
    # is answered (the driver's own lookup only polls, from inside CreateNetwork).
    docker_sync.created = driver.docker_network_created
    app = create_app(driver, metrics)
    server = make_socket_server(args.socket, app)
    # The operator's window (plugin.inspect_api): a unix socket, and TCP if asked (GETs).
    window = Window(agent, controller, view, args.host, args.vtep_ip, status)
    # The TCP listener first: an operator who sees the unix sockets may use it at once.
    api_servers = []
    if args.api_listen:
        api_servers.append(serve_tcp(args.api_listen, create_inspect_app(window, metrics, True)))
    if args.cni_socket:
        pod_labels = kube.load(args.kubeconfig) if args.kubeconfig else None
        pods = AgentDatapath(agent, master, view.tenant_tags)
        cni_service = CniService(
            master, pods, NetlinkNetns(), args.host, args.mtu, pod_labels,
            local_network=lambda tenant, name: _mirrored_network(view, tenant, name),
        )  # fmt: skip
        cni_app = create_cni_app(cni_service, metrics)
        cni_server = make_socket_server(args.cni_socket, cni_app, error_body=cni_parse_error)
        api_servers.append(cni_server)
        threading.Thread(target=cni_server.serve_forever, name="cni", daemon=True).start()
    if args.api_socket:
        inspect_app = create_inspect_app(window, metrics)
        inspect = make_socket_server(args.api_socket, inspect_app, error_body=inspect_parse_error)
        api_servers.append(inspect)
        threading.Thread(target=inspect.serve_forever, name="inspect", daemon=True).start()
    loops: list[Reconciler] = [view.feed, registration, cluster_sync]
    if args.swarm:
        sweep = SwarmSweep(master, docker.swarm_networks)
        # dockerd or the master away: the next pass.
        loops.append(Reconciler("swarm-sweep", sweep.sweep, interval=10.0, expected=(Exception,)))
    else:
        loops.append(docker_sync)
    loops.append(peering)
    loops += [reporter, docker_events]
    if pool is not None:  # made while the host is quiet; errors are logged by the pool
        loops.append(Reconciler("port-pool", pool.refill, interval=0.2, expected=(Exception,)))
    if args.audit_interval > 0:

        def audit() -> None:  # repair what was changed behind our back
            metrics.audit_started(agent.audit())

        every = args.audit_interval
        loops.append(Reconciler("audit", audit, interval=every, backoff=Backoff(every, every)))
    metrics.watch_state(
        lambda: counts(agent),
        lambda: [(m.prefix, m.restarts) for m in view.mirrors()],
        loops,
        agent.teardown,
        pool,
    )
    for loop in loops:
        loop.start()

    def shutdown(signum: int, _frame: Any) -> None:
        log.info("netplugin stopping (signal %d); the datapath keeps forwarding", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    log.info(
        "netplugin serving %s (host %s, bridge %s, datapath %s, VTEP %s)",
        args.socket,
        args.host,
        args.bridge,
        datapath_type,
        f"{underlay.vtep_ip} on {underlay.device}, MTU {underlay.mtu}" if underlay else "none",
    )
    log.info(
        "inspect API and /metrics on %s",
        " and ".join(filter(None, (args.api_socket, args.api_listen))) or "nothing (disabled)",
    )
    try:
        server.serve_forever()
    finally:
        for api in api_servers:
            api.shutdown()
        for path in filter(None, (args.socket, args.api_socket, args.cni_socket)):
            with contextlib.suppress(OSError):
                os.unlink(path)
        for loop in reversed(loops):
            loop.stop()
        if left := agent.ports.stop(10.0):
            log.warning("%d deleted endpoints' ports are left; the next start removes them", left)
        controller.stop()
        ovs.close()
        store.close()
        logging.shutdown()
        os._exit(0)
