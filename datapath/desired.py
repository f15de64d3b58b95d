"""The desired state of one host's bridge, and its validation.

DesiredState is what the agent hands the compiler: networks, local endpoints and other
hosts' endpoints (datapath.local's NetworkState and EndpointState, as the agent holds
them), tunnels, the VLAN uplink, the endpoint groups of local networks with their policies'
rules and netprofiles (datapath.policy, datapath.qos) and their service LBs
(datapath.services). validate() refuses a state the switch cannot realise, naming the
object at fault, and returns it indexed the way the flow builders use it. Nothing here
knows about tables or flows.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from datapath.flows import CT_ZONE_MAX, OFPP_MAX, canonical_value
from datapath.local import EndpointState, NetworkState, vrf_segment
from datapath.policy import GroupState, RuleState, check_group
from datapath.ports import PublishedPort
from datapath.qos import QosState
from datapath.services import ProviderState, ServicePortState, ServiceState, check_service

ArpMode = Literal["proxy", "flood"]
FwdMode = Literal["bridge", "routing"]

# Routing mode's conntrack zones: one per VRF, VRF_ZONE_BASE | its tag, so a tag is at most
# VRF_TAG_MAX. Zones 0x4000-0x7fff (and their hairpin zones, | 0x8000) are never an
# ofport-based zone of bridge mode unless a gateway port's ofport reaches 0x4000 (16384
# ports on one bridge); and a bridge is in one mode at a time (fwdMode changes only while
# no network exists), so its zones never meet the other mode's flows.
VRF_ZONE_BASE = 0x4000
VRF_TAG_MAX = 0x3FFF


@dataclass(frozen=True)
class TunnelState:
    """The VXLAN port of this bridge that leads to one peer host."""

    host: str
    ofport: int


@dataclass
class DesiredState:
    """Everything the flows of one bridge are compiled from."""

    networks: list[NetworkState] = field(default_factory=list)
    endpoints: list[EndpointState] = field(default_factory=list)  # plugged into this bridge
    remote_endpoints: list[EndpointState] = field(default_factory=list)  # on other hosts
    tunnels: list[TunnelState] = field(default_factory=list)
    uplink_port: int | None = None  # VLAN networks reach other hosts through it
    arp_mode: ArpMode = "proxy"
    groups: list[GroupState] = field(default_factory=list)  # of the networks above
    services: list[ServiceState] = field(default_factory=list)  # of the networks above
    fwd_mode: FwdMode = "bridge"  # routing: a tenant's networks are routed in its VRF
    # Routing mode with BGP: the router port (datapath.bridgeports); VLAN networks then
    fabric_port: int | None = None  # reach other hosts through the fabric's router

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DesiredState:
        """Inverse of to_dict."""
        return cls(
            networks=[NetworkState(**n) for n in data.get("networks", [])],
            endpoints=[_endpoint_from_dict(e) for e in data.get("endpoints", [])],
            remote_endpoints=[_endpoint_from_dict(e) for e in data.get("remote_endpoints", [])],
            tunnels=[TunnelState(**t) for t in data.get("tunnels", [])],
            uplink_port=data.get("uplink_port"),
            arp_mode=data.get("arp_mode", "proxy"),
            groups=[_group_from_dict(g) for g in data.get("groups", [])],
            services=[_service_from_dict(s) for s in data.get("services", [])],
            fwd_mode=data.get("fwd_mode", "bridge"),
            fabric_port=data.get("fabric_port"),
        )


def _endpoint_from_dict(data: dict[str, Any]) -> EndpointState:
    ports = tuple(PublishedPort(**p) for p in data.get("port_mappings", ()))
    return EndpointState(**{**data, "port_mappings": ports})


def _group_from_dict(data: dict[str, Any]) -> GroupState:
    rules = tuple(
        RuleState(**{**r, "peer_cidrs": tuple(r.get("peer_cidrs", ()))})
        for r in data.get("rules", ())
    )
    qos = QosState(**data["qos"]) if data.get("qos") else None
    return GroupState(**{**data, "rules": rules, "qos": qos})


def _service_from_dict(data: dict[str, Any]) -> ServiceState:
    return ServiceState(
        **{
            **data,
            "ports": tuple(ServicePortState(**p) for p in data.get("ports", ())),
            "providers": tuple(ProviderState(**p) for p in data.get("providers", ())),
        }
    )


@dataclass(frozen=True)
class SegmentPort:
    """A bridge port that belongs to a segment: an endpoint or a network's gateway."""

    ofport: int
    segment: int
    mac: str | None
    ipv4: str | None
    ipv6: str | None
    is_gateway: bool
    owner: str
    group: str = ""  # an endpoint's group
    network: str = ""  # its network's ID


@dataclass(frozen=True)
class RemotePort:
    """Another host's endpoint that this host can reach."""

    network: NetworkState
    host: str
    mac: str
    ipv4: str | None
    owner: str
    ipv6: str | None = None
    group: str = ""


@dataclass
class ValidState:
    """A validated DesiredState: ports by ofport, reachable remote endpoints, and how to
    reach other hosts."""

    networks: dict[str, NetworkState]
    ports: list[SegmentPort]  # sorted by ofport
    remotes: list[RemotePort]
    tunnels: dict[str, int]  # host -> tunnel ofport
    uplink_port: int | None
    # segment -> the hosts with endpoints in it that this host reaches
    hosts_of: dict[int, set[str]]
    arp_mode: ArpMode
    groups: dict[str, GroupState]
    services: dict[str, ServiceState] = field(default_factory=dict)
    fwd_mode: FwdMode = "bridge"
    fabric_port: int | None = None  # routing mode with BGP: see DesiredState

    def ports_of(self, segment: int) -> list[SegmentPort]:
        """The local ports of one segment, by ofport."""
        return [p for p in self.ports if p.segment == segment]


def _address(owner: str, value: str, version: int) -> str | None:
    if not value:
        return None
    try:
        addr = ipaddress.ip_interface(value).ip
    except ValueError as e:
        raise ValueError(f"{owner}: {value!r} is not an IP address") from e
    if addr.version != version:
        raise ValueError(f"{owner}: {value!r} is not an IPv{version} address")
    return str(addr)


def _unicast_mac(owner: str, value: str) -> str | None:
    if not value:
        return None
    mac = canonical_value("eth_src", value)
    if int(mac[:2], 16) & 1:
        raise ValueError(f"{owner}: MAC {mac} is a multicast address; use a unicast one")
    return mac


def _check_ofport(owner: str, ofport: int) -> None:
    if not 0 < ofport < OFPP_MAX:
        raise ValueError(f"{owner}: ofport {ofport} is not a valid switch port")


def reaches(net: NetworkState, host: str, tunnels: Mapping[str, int], uplink: int | None) -> bool:
    """True if this host has a way to carry packets of ``net`` to ``host``."""
    if net.vni is not None:
        return host in tunnels
    return net.vlan is not None and uplink is not None


# ---------------------------------------------------------------- what each object uses
#
# Every constraint between objects is "no two objects use one key" (an ofport, a MAC or IP
# in a segment, a VNI or VLAN, an endpoint ID...). Each object lists the keys it claims;
# validate() and the incremental datapath.flowmodel check the same claims, so they refuse
# the same states.

Key = tuple[Any, ...]
Claim = tuple[Key, str]  # (key, owner)
_IDS = ("network", "endpoint", "tunnel", "group", "service")


def conflict_message(key: Key, first: str, second: str) -> str:
    """Why two owners cannot both claim ``key``."""
    kind = key[0]
    if kind == "network":
        return f"network {key[1]} is listed twice"
    if kind == "endpoint":
        return f"endpoint {key[1]} is listed twice"
    if kind == "tunnel":
        return f"host {key[1]} has two tunnels"
    if kind == "group":
        return f"group {key[1]} is listed twice"
    if kind == "service":
        return f"service {key[1]} is listed twice"
    if kind == "select_group":
        return f"{first} and {second} share group id {key[1]}"
    if kind == "group_tag":
        return f"{first} and {second} share tag {key[1]}"
    if kind in ("vni", "vlan"):
        return f"{first} and {second} share {kind.upper()} {key[1]}"
    if kind == "ofport":
        return f"{first} and {second} both use ofport {key[1]}"
    return f"{first} and {second} both use {kind} {key[2]}"  # MAC or IP, in one segment


class Claims:
    """Who claims which key; a key claimed twice is a conflict. Claims can be withdrawn,
    so the incremental model keeps one of these for the whole host."""

    def __init__(self) -> None:
        self._owners: dict[Key, list[str]] = {}
        self.conflicts: set[Key] = set()

    def add(self, claims: Iterable[Claim]) -> None:
        for key, owner in claims:
            owners = self._owners.setdefault(key, [])
            owners.append(owner)
            if len(owners) > 1:
                self.conflicts.add(key)

    def remove(self, claims: Iterable[Claim]) -> None:
        for key, owner in claims:
            owners = self._owners[key]
            owners.remove(owner)
            if len(owners) <= 1:
                self.conflicts.discard(key)
            if not owners:
                del self._owners[key]

    def check(self) -> None:
        """Raise ValueError naming one conflict, if there is any."""
        if self.conflicts:
            # An object listed twice claims everything twice: say that, not one of them.
            key = min(self.conflicts, key=lambda k: (k[0] not in _IDS, repr(k)))
            first, second = self._owners[key][:2]
            raise ValueError(conflict_message(key, first, second))


def check_network(net: NetworkState, mode: FwdMode = "bridge") -> None:
    """Refuse a network that is wrong by itself (in ``mode``)."""
    if net.encap not in ("vxlan", "vlan"):
        raise ValueError(f"network {net.id}: encap {net.encap!r} is neither vxlan nor vlan")
    if net.vni is not None and not 0 < net.vni < 1 << 24:
        raise ValueError(f"network {net.id}: VNI {net.vni} is out of 1-16777215")
    if net.vlan is not None and not 0 < net.vlan < 4095:
        raise ValueError(f"network {net.id}: VLAN {net.vlan} is out of 1-4094")
    if not isinstance(net.vrf, int) or not 0 <= net.vrf <= VRF_TAG_MAX:
        raise ValueError(f"network {net.id}: VRF tag {net.vrf!r} is out of 0-{VRF_TAG_MAX}")
    if mode == "routing":
        if not net.vrf:
            raise ValueError(
                f"network {net.id}: routing mode needs its tenant's VRF tag, and it has none"
            )
        for subnet in (net.subnet, net.ipv6_subnet):
            try:
                ipaddress.ip_network(subnet or "::/0", strict=False)
            except ValueError:
                raise ValueError(f"network {net.id}: subnet {subnet!r} is not a CIDR") from None
        return  # its zone is its VRF's, not its gateway port
    if net.gateway_ofport is not None and net.gateway_ofport > CT_ZONE_MAX:
        raise ValueError(
            f"network {net.id}: gateway port {net.gateway_ofport} is its conntrack zone, "
            f"which must fit 16 bits (at most {CT_ZONE_MAX})"
        )


def ct_zone(net: NetworkState, mode: FwdMode = "bridge") -> int | None:
    """The network's conntrack zone on this host: in bridge mode its gateway port's ofport
    (unique on the bridge, kept while the port lives; None: the network is not tracked (no
    gateway port), so its traffic meets no policy); in routing mode its VRF's, always."""
    if mode == "routing":
        return VRF_ZONE_BASE | net.vrf
    return net.gateway_ofport


def segment_of(net: NetworkState, mode: FwdMode = "bridge") -> int:
    """The segment classify writes for the network: its own, or in routing mode its VRF's."""
    return vrf_segment(net.vrf) if mode == "routing" else net.segment


def gateway_port(net: NetworkState, segment: int | None = None) -> SegmentPort | None:
    """The network's host-side gateway port, if it has one."""
    if net.gateway_ofport is None:
        return None
    owner = f"network {net.id} gateway"
    _check_ofport(owner, net.gateway_ofport)
    return SegmentPort(
        net.gateway_ofport,
        net.segment if segment is None else segment,
        _unicast_mac(owner, net.gateway_mac),
        _address(owner, net.gateway, 4),
        None,
        True,
        owner,
        network=net.id,
    )


def endpoint_port(ep: EndpointState, net: NetworkState, segment: int | None = None) -> SegmentPort:
    """A local endpoint's port in its network's segment."""
    owner = f"endpoint {ep.id}"
    _check_ofport(owner, ep.ofport)
    mac = _unicast_mac(owner, ep.mac)
    if mac is None:
        raise ValueError(f"{owner}: a MAC address is required")
    return SegmentPort(
        ep.ofport,
        net.segment if segment is None else segment,
        mac,
        _address(owner, ep.ipv4, 4),
        _address(owner, ep.ipv6, 6),
        False,
        owner,
        ep.group,
        net.id,
    )


def remote_owner(rep: EndpointState) -> str:
    """Another host's endpoint, as errors name it; refused without its host."""
    if not rep.host:
        raise ValueError(f"endpoint {rep.id}: another host's endpoint without its host")
    return f"endpoint {rep.id} on host {rep.host}"


def remote_port(
    rep: EndpointState, net: NetworkState, segment: int | None = None
) -> tuple[RemotePort, list[Claim]]:
    """Another host's endpoint of a local network, and the addresses it claims there (in
    ``segment``: its network's, or in routing mode its VRF's)."""
    owner = remote_owner(rep)
    mac = _unicast_mac(owner, rep.mac)
    if mac is None:
        raise ValueError(f"{owner}: a MAC address is required")
    ipv4 = _address(owner, rep.ipv4, 4)
    ipv6 = _address(owner, rep.ipv6, 6)
    segment = net.segment if segment is None else segment
    claims = [(("MAC", segment, mac), owner)]
    claims += [(("IP", segment, ip), owner) for ip in (ipv4, ipv6) if ip is not None]
    return RemotePort(net, rep.host, mac, ipv4, owner, ipv6, rep.group), claims


def network_claims(
    net: NetworkState, gateway: SegmentPort | None, mode: FwdMode = "bridge"
) -> list[Claim]:
    """Its ID and tag (its segment follows from the tag), and its gateway port's; in routing
    mode its subnets in its VRF (no two networks of one tenant share one)."""
    owner = f"network {net.id}"
    claims = [(("network", net.id), owner)]
    if mode == "routing":
        claims += [
            (("subnet", vrf_segment(net.vrf), str(ipaddress.ip_network(s, strict=False))), owner)
            for s in (net.subnet, net.ipv6_subnet)
            if s
        ]
    if net.vni is not None:
        claims.append((("vni", net.vni), owner))
    if net.vlan is not None:
        claims.append((("vlan", net.vlan), owner))
    return claims + (port_claims(gateway) if gateway is not None else [])


def port_claims(port: SegmentPort) -> list[Claim]:
    """A local port's ofport, and its MAC and IPs in its segment."""
    claims = [(("ofport", port.ofport), port.owner)]
    if port.mac is not None:
        claims.append((("MAC", port.segment, port.mac), port.owner))
    claims += [
        (("IP", port.segment, ip), port.owner) for ip in (port.ipv4, port.ipv6) if ip is not None
    ]
    return claims


def endpoint_claims(endpoint_id: str, owner: str) -> list[Claim]:
    """Endpoint IDs are unique across this host's and other hosts' endpoints."""
    return [(("endpoint", endpoint_id), owner)]


def group_claims(group: GroupState, networks: Mapping[str, NetworkState]) -> list[Claim]:
    """A group's ID and tag; refuses a bad group, or one of a network not on this host."""
    check_group(group)
    owner = f"group {group.id}"
    if group.network_id not in networks:
        raise ValueError(f"{owner}: network {group.network_id} is unknown")
    claims = [(("group", group.id), owner)]
    if group.tag:
        claims.append((("group_tag", group.tag), owner))
    return claims


def service_claims(service: ServiceState, networks: Mapping[str, NetworkState]) -> list[Claim]:
    """A service's ID and its ports' group ids; refuses a bad service, or one of a network
    not on this host."""
    check_service(service)
    owner = f"service {service.id}"
    if service.network_id not in networks:
        raise ValueError(f"{owner}: network {service.network_id} is unknown")
    claims = [(("service", service.id), owner)]
    claims += [(("select_group", service.group_id(i)), owner) for i in range(len(service.ports))]
    return claims


def tunnel_claims(tunnel: TunnelState) -> list[Claim]:
    owner = f"tunnel to host {tunnel.host}"
    _check_ofport(owner, tunnel.ofport)
    return [(("tunnel", tunnel.host), owner), (("ofport", tunnel.ofport), owner)]


def uplink_claims(ofport: int, owner: str = "uplink") -> list[Claim]:
    _check_ofport(owner, ofport)
    return [(("ofport", ofport), owner)]


def validate(state: DesiredState) -> ValidState:
    """The state, validated; raises ValueError naming the object at fault."""
    claims = Claims()
    networks: dict[str, NetworkState] = {}
    ports: list[SegmentPort] = []
    mode = state.fwd_mode
    if mode not in ("bridge", "routing"):
        raise ValueError(f"forwarding mode {mode!r} is neither bridge nor routing")
    for net in state.networks:
        check_network(net, mode)
        gateway = gateway_port(net, segment_of(net, mode))
        claims.add(network_claims(net, gateway, mode))
        networks.setdefault(net.id, net)
        if gateway is not None:
            ports.append(gateway)
    tunnels: dict[str, int] = {}
    for t in state.tunnels:
        claims.add(tunnel_claims(t))
        tunnels.setdefault(t.host, t.ofport)
    for port, owner in ((state.uplink_port, "uplink"), (state.fabric_port, "fabric port")):
        if port is not None:
            claims.add(uplink_claims(port, owner))
    # The fabric port is used in routing mode with a VLAN uplink only.
    fabric = state.fabric_port if mode == "routing" and state.uplink_port is not None else None
    for ep in state.endpoints:
        net = networks.get(ep.network_id)
        if net is None:
            raise ValueError(f"endpoint {ep.id}: network {ep.network_id} is unknown")
        port = endpoint_port(ep, net, segment_of(net, mode))
        claims.add(endpoint_claims(ep.id, port.owner))
        claims.add(port_claims(port))
        ports.append(port)
    remotes: list[RemotePort] = []
    hosts_of: dict[int, set[str]] = {}
    for rep in state.remote_endpoints:
        claims.add(endpoint_claims(rep.id, remote_owner(rep)))
        net = networks.get(rep.network_id)
        if net is None:
            continue  # a network without local endpoints: nothing here talks to it
        remote, addresses = remote_port(rep, net, segment_of(net, mode))
        claims.add(addresses)
        if reaches(net, rep.host, tunnels, state.uplink_port):
            remotes.append(remote)
            hosts_of.setdefault(net.segment, set()).add(rep.host)
    groups: dict[str, GroupState] = {}
    for group in state.groups:
        claims.add(group_claims(group, networks))
        groups.setdefault(group.id, group)
    services: dict[str, ServiceState] = {}
    for service in state.services:
        claims.add(service_claims(service, networks))
        services.setdefault(service.id, service)
    claims.check()
    return ValidState(
        networks,
        sorted(ports, key=lambda p: p.ofport),
        remotes,
        tunnels,
        state.uplink_port,
        hosts_of,
        state.arp_mode,
        groups,
        services,
        mode,
        fabric,
    )
