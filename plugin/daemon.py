"""The netplugin agent process: Docker driver socket, datapath agent and OpenFlow app."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from typing import Any

from werkzeug.serving import make_server

from datapath.agent import AgentConfig, DatapathAgent, LocalEndpoint, LocalNetwork
from datapath.hostnat import Iptables, PortMapping
from datapath.ofapp import FlowController
from datapath.ovs import Ovs

from .app import create_app
from .driver import Driver, PortBinding
from .master_client import MasterClient, MasterError

log = logging.getLogger("netplugin")


def local_network(net: dict[str, Any], oper: dict[str, Any]) -> LocalNetwork:
    return LocalNetwork(
        id=f"{net.get('tenantName') or 'default'}:{net['networkName']}",
        tag=int(oper["pktTag"]),
        subnet=net.get("subnet", ""),
        gateway=net.get("gateway", ""),
        ipv6_subnet=net.get("ipv6Subnet", ""),
        ipv6_gateway=net.get("ipv6Gateway", ""),
        internal=bool(net.get("internal")),
    )


class AgentDatapath:
    """The driver's Datapath, backed by the host's DatapathAgent; networks arrive on demand."""

    def __init__(self, agent: DatapathAgent, master: MasterClient) -> None:
        self.agent = agent
        self.master = master

    def _ensure_network(self, net: dict[str, Any]) -> str:
        tenant, name = net.get("tenantName") or "default", net["networkName"]
        network_id = f"{tenant}:{name}"
        if not self.agent.has_network(network_id):
            oper = self.master.inspect_network(tenant, name)["Oper"]
            self.agent.ensure_network(local_network(net, oper))
        return network_id

    def create_endpoint_port(
        self, endpoint_id: str, network: dict[str, Any], mac: str, ipv4: str, ipv6: str, mtu: int
    ) -> str:
        network_id = self._ensure_network(network)
        return self.agent.create_endpoint_port(
            LocalEndpoint(id=endpoint_id, network_id=network_id, mac=mac, ipv4=ipv4, ipv6=ipv6)
        )

    def delete_endpoint_port(self, endpoint_id: str) -> None:
        self.agent.delete_endpoint_port(endpoint_id)

    def remove_network(self, network_id: str) -> None:
        self.agent.remove_network(network_id)

    def endpoint_oper(self, endpoint_id: str) -> dict[str, Any]:
        return self.agent.endpoint_oper(endpoint_id)

    def publish(self, endpoint_id: str, mappings: list[PortBinding]) -> None:
        if not mappings and not self.agent.has_endpoint(endpoint_id):
            return  # revoked after the endpoint is gone: nothing is published
        self.agent.set_port_mappings(
            endpoint_id,
            [
                PortMapping(m.proto, m.host_ip, m.host_port, m.container_ip, m.container_port)
                for m in mappings
            ],
        )


def docker_namer(docker_host: str) -> Any:
    """A lookup of a docker network's name by ID (None while dockerd does not know it).

    The client is made on first use: docker-py talks to dockerd when constructed, and a
    dockerd that is restoring containers on our networks waits for us, so connecting at
    start would deadlock the two.
    """
    import docker
    from docker.errors import NotFound

    clients: list[Any] = []

    def name(network_id: str) -> str | None:
        if not clients:
            kwargs: dict[str, Any] = {"timeout": 2}
            clients.append(
                docker.DockerClient(base_url=docker_host, **kwargs)
                if docker_host
                else docker.from_env(**kwargs)
            )
        try:
            return str(clients[0].networks.get(network_id).name)
        except NotFound:
            return None

    return name


def resync(agent: DatapathAgent, master: MasterClient, host: str) -> dict[str, int]:
    """After a (re)start: this host's endpoints from the master, reconciled with the switch."""
    endpoints = [e for e in master.list_endpoints() if e.get("host") == host]
    networks: dict[str, LocalNetwork] = {}
    for e in endpoints:
        key = (e["tenantName"], e["networkName"])
        nid = f"{key[0]}:{key[1]}"
        if nid not in networks:
            insp = master.inspect_network(*key)
            networks[nid] = local_network(insp["Config"], insp["Oper"])
    return agent.resync(
        networks.values(),
        [
            LocalEndpoint(
                id=e["endpointID"],
                network_id=f"{e['tenantName']}:{e['networkName']}",
                mac=e["macAddress"],
                ipv4=e.get("ipAddress", ""),
                ipv6=e.get("ipv6Address", ""),
            )
            for e in endpoints
        ],
    )


def _clear_stale_socket(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        with socket.socket(socket.AF_UNIX) as probe:
            if probe.connect_ex(path) == 0:
                raise SystemExit(f"netplugin: another netplugin is serving {path}")
        os.unlink(path)


def run(args: Any) -> None:
    """Start everything; serve until SIGINT/SIGTERM, then exit (os-ken threads need os._exit)."""
    master = MasterClient(args.netmaster)
    _clear_stale_socket(args.socket)
    controller = FlowController(listen_host="127.0.0.1", listen_port=args.of_port)
    controller.start()
    ovs = Ovs(args.ovsdb)
    agent = DatapathAgent(
        AgentConfig(bridge=args.bridge, controller=f"tcp:127.0.0.1:{args.of_port}", mtu=args.mtu),
        ovs,
        controller,
        Iptables(),
    )
    controller.on_connect = agent.switch_connected
    agent.start()
    driver = Driver(
        master,
        AgentDatapath(agent, master),
        host=args.host,
        mtu=args.mtu,
        docker_name=docker_namer(args.docker_host),
    )
    app = create_app(driver)
    server = make_server(f"unix://{args.socket}", 0, app, threaded=True)
    os.chmod(args.socket, 0o600)

    def resync_forever() -> None:
        # The master may start after us (make run starts both): retry until it answers.
        delay = 0.5
        while True:
            try:
                log.info("resynced with netmaster: %s", resync(agent, master, args.host))
                return
            except MasterError as e:
                log.warning("resync with netmaster failed (%s); retrying", e)
            except Exception:
                log.exception("resync failed; retrying")
            threading.Event().wait(delay)
            delay = min(delay * 2, 10)

    threading.Thread(target=resync_forever, name="resync", daemon=True).start()

    def shutdown(signum: int, _frame: Any) -> None:
        log.info("netplugin stopping (signal %d); the datapath keeps forwarding", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGTERM, shutdown)
    log.info("netplugin serving %s (host %s, bridge %s)", args.socket, args.host, args.bridge)
    try:
        server.serve_forever()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(args.socket)
        controller.stop()
        ovs.close()
        logging.shutdown()
        os._exit(0)
