"""Docker remote network driver semantics on top of the master and a datapath (the IPAM
half is plugin/ipam_driver.py)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from common.models import NAME_RE, EndpointRequest, Network

from . import schemas as s
from .attach import Datapath, DatapathFailure, attach, detach
from .master_client import MasterClient, MasterError
from .options import (
    GENERIC,
    INTERNAL,
    PORTMAP,
    DriverError,
    NetworkRef,
    mac_for,
    option_ref,
    port_bindings,
    portmap_value,
    prefixlen,
    request_model,
    strip_len,
    truthy,
)
from .swarm import SwarmNetworks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PluggedEndpoint:
    """An endpoint this driver plugged in on this host: the interface Docker moves into the
    container at Join, and the addresses it got."""

    docker_network_id: str
    ifname: str
    ipv4: str
    ipv6: str
    network: Network | None = None  # as it was at CreateEndpoint: Join answers from it


class Driver(SwarmNetworks):
    """Docker's NetworkDriver calls; the IpamDriver calls come with it (one plugin serves
    both)."""

    def __init__(
        self,
        master: MasterClient,
        datapath: Datapath,
        host: str = "",
        mtu: int = 1450,
        docker_name: Callable[[str], str | None] | None = None,
        docker_options: Callable[[str], dict[str, str] | None] | None = None,
        local_network: Callable[[str, str], Network | None] | None = None,
        swarm: bool = False,
    ) -> None:
        # The agent's mirror of the cluster's networks (tenant, name) -> Network: read there
        # first, the master asked only for what the mirror does not have yet.
        self.local_network = local_network
        # Docker's CreateNetwork carries no name: docker_name(network_id) asks dockerd later.
        self.docker_name = docker_name
        # The -o options dockerd keeps for a network: after a restart they tell which cluster
        # network a docker network on this host stands for.
        self.docker_options = docker_options
        self._naming = threading.Lock()
        super().__init__(master, swarm)
        self.datapath = datapath
        self.host = host
        self.mtu = mtu
        self._networks: dict[str, NetworkRef] = {}
        self._endpoints: dict[str, PluggedEndpoint] = {}

    # --- networks ---
    def _ref(self, network_id: str) -> NetworkRef:
        """Docker's NetworkID -> master network; after a restart, recover it from dockerd's
        options of the network (networks mirrored from the cluster) or from the master."""
        ref = self._networks.get(network_id)
        if ref is not None:
            return ref
        opts = None
        if self.docker_options is not None:
            try:
                opts = self.docker_options(network_id)
            except Exception as e:  # dockerd busy: the master scan below still works
                log.debug("network %s: docker options lookup failed: %s", network_id, e)
        ref = option_ref(opts or {}) or self._made_for(network_id)
        if ref is None:
            raise DriverError(f"network {network_id} is not known to netmaster", 404)
        self._networks[network_id] = ref
        return ref

    def _network(self, network_id: str) -> tuple[NetworkRef, Network]:
        ref = self._ref(network_id)
        mirrored = self.local_network(ref.tenant, ref.name) if self.local_network else None
        # Only the docker network it was made for: a network deleted and made again under
        # the same name is another docker network, and the mirror may still hold the old one.
        if mirrored is not None and mirrored.dockerNetworkID == network_id:
            return ref, mirrored
        return ref, self.master.get_network(ref.tenant, ref.name)

    def create_network(self, req: s.CreateNetwork) -> dict[str, Any]:
        opts = req.Options or {}
        generic = opts.get(GENERIC) or {}
        if not isinstance(generic, dict):
            raise DriverError(f"option {GENERIC} must be a map of -o options")
        if self.swarm:
            if truthy(opts.get(INTERNAL)):
                raise DriverError(
                    f"swarm network {req.NetworkID}: --internal is not supported on "
                    "netplugin's swarm networks; create it without --internal"
                )
            # A node plugging a network the manager allocated: its generic options are
            # AllocateNetwork's answer, naming the cluster network.
            self._networks[req.NetworkID] = self._swarm_network(req.NetworkID, generic)
            return {}
        ref = self._make_network(req, generic, truthy(opts.get(INTERNAL)))
        self._networks[req.NetworkID] = ref
        if self.docker_name is not None and ref.name == req.NetworkID[:12]:
            # dockerd knows the name only once CreateNetwork has returned: learn it soon after.
            threading.Thread(
                target=self._learn_name,
                args=(req.NetworkID, 10.0),
                name=f"naming-{ref.name}",
                daemon=True,
            ).start()
        return {}

    def _make_network(
        self, req: s.CreateNetwork, generic: dict[str, Any], internal: bool
    ) -> NetworkRef:
        """The cluster network a docker network stands for: the existing one its options
        name (-o network=), or one made now; the pools Docker got book in it."""
        tenant = str(generic.get("tenant") or "default")
        ref = option_ref(generic)
        if ref is not None:
            # This docker network stands for an existing cluster network or endpoint group
            # (every host's agent creates one so): nothing to create, only to remember.
            self._cluster_network(ref.tenant, ref.name)
            if ref.group:
                self._cluster_group(ref.tenant, ref.group, ref.name, "-o")
            self.bind_docker_pools(req, ref)  # Docker books in its pool (or group's) too
            return ref
        if generic.get("group"):
            self._group_without_network(tenant, str(generic["group"]), "-o")
        # Docker does not pass the network name in CreateNetwork.
        name = str(generic.get("name") or req.NetworkID[:12])
        fields: dict[str, Any] = {
            "tenantName": tenant,
            "networkName": name,
            "encap": str(generic.get("encap") or "vxlan"),
            "dockerNetworkID": req.NetworkID,
            "internal": internal,
        }
        if generic.get("pkt-tag") not in (None, ""):
            try:
                fields["pktTag"] = int(generic["pkt-tag"])
            except (TypeError, ValueError):
                tag = generic["pkt-tag"]
                raise DriverError(f"option pkt-tag {tag!r} is not a number") from None
        for data, subnet, gateway in (
            (req.IPv4Data, "subnet", "gateway"),
            (req.IPv6Data, "ipv6Subnet", "ipv6Gateway"),
        ):
            if data:
                fields[subnet] = data[0].Pool
                fields[gateway] = strip_len(data[0].Gateway)
        self.master.create_network(request_model(Network, fields, f"network {tenant}:{name}"))
        try:
            self.bind_docker_pools(req, NetworkRef(tenant, name))  # one booking per address
        except Exception:
            self.master.delete_network(tenant, name)  # refused: leave nothing behind
            raise
        return NetworkRef(tenant, name)

    def docker_network_created(self, network_id: str, name: str) -> None:
        """dockerd announced one of its networks (its `network create` event, sent as it
        answers `docker network create`): the name CreateNetwork could not carry. A network
        this driver made under its docker-ID placeholder takes it now, not at the next look."""
        ref = self._networks.get(network_id)
        if ref is None or ref.name != network_id[:12]:
            return  # not ours, named already, or made before this agent started
        try:
            self._take_name(network_id, lambda _: name, "dockerd's create event")
        except Exception:  # the caller follows dockerd's events: never stop it
            log.exception("network %s: cannot take its docker name %s", network_id, name)

    def _learn_name(self, network_id: str, patience: float) -> None:
        """The thread CreateNetwork starts: ask dockerd for the name until it knows the network
        (at most ``patience`` seconds), unless dockerd's create event named it first or the
        network is removed meanwhile."""
        deadline = time.monotonic() + patience
        while network_id in self._networks:
            try:
                _, settled = self._take_name(network_id, self._ask_docker, "asked dockerd")
            except DriverError:  # removed meanwhile: nothing left to name
                return
            if settled or time.monotonic() >= deadline:
                return
            time.sleep(0.2)

    def _ask_docker(self, network_id: str) -> str | None:
        if self.docker_name is None:
            return None
        try:
            return self.docker_name(network_id)
        except Exception as e:  # dockerd busy or unreachable: the ID name stays usable
            log.debug("network %s: docker name lookup failed: %s", network_id, e)
            return None

    def _take_name(
        self, network_id: str, docker_name: Callable[[str], str | None], source: str
    ) -> tuple[NetworkRef, bool]:
        """The network's ref once it has its docker name (renamed now if still a
        placeholder; ``source``: where the name came from, for the log), and whether that is
        settled (False: docker does not know the network yet)."""
        with self._naming:
            ref = self._ref(network_id)
            if ref.name != network_id[:12]:
                return ref, True
            docker = docker_name(network_id)
            if not docker:
                return ref, False
            name = docker.split("/", 1)[0]  # NAME/TENANT is how tenants appear in docker
            if not NAME_RE.match(name):
                log.warning(
                    "network %s: docker name %r is not a valid netplugin name", network_id, name
                )
                return ref, True
            try:
                self.master.rename_network(ref.tenant, ref.name, name)
            except MasterError as e:
                log.warning("network %s: keeping name %s: %s", network_id, ref.name, e)
                return ref, True
            ref = replace(ref, name=name)
            self._networks[network_id] = ref
            log.info("network %s is %s:%s (%s)", network_id, ref.tenant, name, source)
            return ref, True

    def delete_network(self, req: s.DeleteNetwork) -> dict[str, Any]:
        if self.swarm:
            # A node's last task of the network left: the network is the swarm's until the
            # manager frees it (FreeNetwork).
            self._networks.pop(req.NetworkID, None)
            return {}
        try:
            ref = self._ref(req.NetworkID)
        except DriverError:
            return {}  # already gone
        if ref.group:
            self._delete_group(ref)
            self._networks.pop(req.NetworkID, None)
            return {}
        try:
            self.master.delete_network(ref.tenant, ref.name)
        except MasterError as e:
            if e.status != 404:
                # Docker drops its own copy whatever we answer (libnetwork honours no remote
                # driver's refusal here); the docker sync puts it back once docker is done.
                log.warning(
                    "docker network rm of %s:%s refused: %s; docker removes its copy on this "
                    "host anyway and it is restored from the cluster",
                    ref.tenant,
                    ref.name,
                    e,
                )
                raise
        self.datapath.remove_network(f"{ref.tenant}:{ref.name}")
        self._networks.pop(req.NetworkID, None)
        return {}

    def _delete_group(self, ref: NetworkRef) -> None:
        """`docker network rm` of a group's docker network deletes the group (refused while
        it has endpoints, as for networks). Its network stays, on the switch too. A group
        that is gone, or now on another network (the sync removes this docker network for
        that), is left alone."""
        try:
            if self.master.get_group(ref.tenant, ref.group).networkName != ref.name:
                return
            self.master.delete_group(ref.tenant, ref.group)
        except MasterError as e:
            if e.status == 404:
                return
            log.warning(
                "docker network rm of endpoint group %s:%s refused: %s; docker removes its "
                "copy on this host anyway and it is restored from the cluster",
                ref.tenant,
                ref.group,
                e,
            )
            raise

    # --- endpoints ---
    def create_endpoint(self, req: s.CreateEndpoint) -> dict[str, Any]:
        if not self.swarm:  # a swarm network is named at AllocateNetwork
            # `docker network create x && docker run --net x` can beat the background
            # rename; the network surely exists in dockerd now, and must be named before it
            # has endpoints.
            self._take_name(req.NetworkID, self._ask_docker, "asked dockerd")
        ref, net = self._network(req.NetworkID)
        iface = req.Interface or s.EndpointInterface()
        ipv4, ipv6 = strip_len(iface.Address), strip_len(iface.AddressIPv6)
        mac = iface.MacAddress or mac_for(ipv4, ipv6, req.EndpointID)
        request = request_model(
            EndpointRequest,
            {
                "endpointID": req.EndpointID,
                "tenantName": ref.tenant,
                "networkName": ref.name,
                "groupName": ref.group,
                "host": self.host,
                "ipAddress": ipv4,
                "ipv6Address": ipv6,
                "macAddress": mac,
                # Docker's RequestAddress came first: the endpoint takes that address over
                # atomically.
                "adoptAddress": bool(ipv4),
                # In swarm mode the manager's allocator booked the address for the task.
                "swarmTask": self.swarm and bool(ipv4),
            },
            f"endpoint {req.EndpointID}",
        )
        try:
            ep, ifname = attach(self.master, self.datapath, request, net, self.mtu)
        except DatapathFailure as failure:
            # The host failed, not the request: a 500 that names the datapath's own words.
            raise DriverError(
                f"endpoint {req.EndpointID}: the datapath could not plug it: {failure}", 500
            ) from failure
        ipv4, ipv6 = ep.ipAddress or ipv4, ep.ipv6Address or ipv6
        self._endpoints[req.EndpointID] = PluggedEndpoint(req.NetworkID, ifname, ipv4, ipv6, net)
        # Docker fails and rolls back if we set a field it already set: reply with empty ones only.
        reply: dict[str, str] = {}
        if not iface.Address and ipv4:
            reply["Address"] = f"{ipv4}/{prefixlen(net.subnet)}"
        if not iface.AddressIPv6 and ipv6:
            reply["AddressIPv6"] = f"{ipv6}/{prefixlen(net.ipv6Subnet)}"
        if not iface.MacAddress:
            reply["MacAddress"] = mac
        return {"Interface": reply} if reply else {}

    def endpoint_oper_info(self, req: s.EndpointOperInfo) -> dict[str, Any]:
        oper = self.datapath.endpoint_oper(req.EndpointID)
        return {"Value": {**oper, **portmap_value(self.datapath.published_ports(req.EndpointID))}}

    def delete_endpoint(self, req: s.DeleteEndpoint) -> dict[str, Any]:
        detach(self.master, self.datapath, req.EndpointID)
        self._endpoints.pop(req.EndpointID, None)
        return {}

    def join(self, req: s.Join) -> dict[str, Any]:
        ep = self._endpoints.get(req.EndpointID)
        if ep is not None and ep.network is not None:
            net = ep.network
        else:
            _, net = self._network(req.NetworkID)
        if ep is None:
            # A restarted plugin: ask the master, and let the datapath find the existing port.
            m = self.master.get_endpoint(req.EndpointID)
            ipv4, ipv6 = m.ipAddress, m.ipv6Address
            mac = m.macAddress or mac_for(ipv4, ipv6, req.EndpointID)
            ifname = self.datapath.create_endpoint_port(
                req.EndpointID, net, mac, ipv4, ipv6, self.mtu, group=m.group_id
            )
            ep = PluggedEndpoint(req.NetworkID, ifname, ipv4, ipv6, net)
            self._endpoints[req.EndpointID] = ep
        reply: dict[str, Any] = {
            "InterfaceName": {"SrcName": ep.ifname, "DstPrefix": "eth"},
            "StaticRoutes": [],
            "DisableGatewayService": False,
        }
        if net.internal:
            reply["DisableGatewayService"] = True
            return reply
        if net.gateway:
            reply["Gateway"] = strip_len(net.gateway)
        # Modern Docker fails on v6 gateways/routes for a v4-only interface.
        if ep.ipv6 and net.ipv6Gateway:
            reply["GatewayIPv6"] = strip_len(net.ipv6Gateway)
        return reply

    def leave(self, req: s.Leave) -> dict[str, Any]:
        return {}

    def program_external_connectivity(self, req: s.ProgramExternalConnectivity) -> dict[str, Any]:
        portmap = (req.Options or {}).get(PORTMAP)
        if not portmap:
            return {}
        local = self._endpoints.get(req.EndpointID)
        ipv4 = local.ipv4 if local else self.master.get_endpoint(req.EndpointID).ipAddress
        if not ipv4:
            raise DriverError(f"endpoint {req.EndpointID} has no IPv4 address to publish ports to")
        self.datapath.publish(req.EndpointID, port_bindings(portmap, ipv4))
        return {}

    def revoke_external_connectivity(self, req: s.RevokeExternalConnectivity) -> dict[str, Any]:
        self.datapath.publish(req.EndpointID, [])
        return {}

    def discover_new(self, req: s.DiscoverNew) -> dict[str, Any]:
        return {}

    def discover_delete(self, req: s.DiscoverDelete) -> dict[str, Any]:
        return {}
