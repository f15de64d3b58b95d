"""The desired state of one host's bridge, and its validation.

DesiredState is what the agent hands the compiler: networks, local endpoints, other hosts'
endpoints, tunnels and the VLAN uplink. validate() refuses a state the switch cannot
realise, naming the object at fault, and returns it indexed the way the flow builders
use it. Nothing here knows about tables or flows.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from datapath.flows import OFPP_MAX, canonical_value
from datapath.tables import SEGMENT_MASK

ArpMode = Literal["proxy", "flood"]


@dataclass(frozen=True)
class NetworkState:
    """A network as one host sees it: its local segment, the host-side gateway port, and
    how it reaches other hosts (a VNI over tunnels, or a VLAN on the uplink)."""

    id: str
    segment: int
    gateway_port: int | None = None
    gateway_mac: str | None = None
    gateway_ip: str | None = None
    vni: int | None = None
    vlan: int | None = None


@dataclass(frozen=True)
class EndpointState:
    """A container's interface: the bridge port it is plugged into and its addresses."""

    id: str
    network_id: str
    ofport: int
    mac: str
    ipv4: str | None = None
    ipv6: str | None = None


@dataclass(frozen=True)
class RemoteEndpointState:
    """An endpoint of a local network that lives on another host."""

    id: str
    network_id: str
    host: str
    mac: str
    ipv4: str | None = None
    ipv6: str | None = None


@dataclass(frozen=True)
class TunnelState:
    """The VXLAN port of this bridge that leads to one peer host."""

    host: str
    ofport: int


@dataclass
class DesiredState:
    """Everything the flows of one bridge are compiled from."""

    networks: list[NetworkState] = field(default_factory=list)
    endpoints: list[EndpointState] = field(default_factory=list)
    remote_endpoints: list[RemoteEndpointState] = field(default_factory=list)
    tunnels: list[TunnelState] = field(default_factory=list)
    uplink_port: int | None = None  # VLAN networks reach other hosts through it
    arp_mode: ArpMode = "proxy"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DesiredState:
        """Inverse of to_dict."""
        return cls(
            networks=[NetworkState(**n) for n in data.get("networks", [])],
            endpoints=[EndpointState(**e) for e in data.get("endpoints", [])],
            remote_endpoints=[RemoteEndpointState(**e) for e in data.get("remote_endpoints", [])],
            tunnels=[TunnelState(**t) for t in data.get("tunnels", [])],
            uplink_port=data.get("uplink_port"),
            arp_mode=data.get("arp_mode", "proxy"),
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


@dataclass(frozen=True)
class RemotePort:
    """Another host's endpoint that this host can reach."""

    network: NetworkState
    host: str
    mac: str
    ipv4: str | None
    owner: str


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

    def ports_of(self, segment: int) -> list[SegmentPort]:
        """The local ports of one segment, by ofport."""
        return [p for p in self.ports if p.segment == segment]


def _address(owner: str, value: str | None, version: int) -> str | None:
    if value is None:
        return None
    try:
        addr = ipaddress.ip_interface(value).ip
    except ValueError as e:
        raise ValueError(f"{owner}: {value!r} is not an IP address") from e
    if addr.version != version:
        raise ValueError(f"{owner}: {value!r} is not an IPv{version} address")
    return str(addr)


def _unicast_mac(owner: str, value: str | None) -> str | None:
    if value is None:
        return None
    mac = canonical_value("eth_src", value)
    if int(mac[:2], 16) & 1:
        raise ValueError(f"{owner}: MAC {mac} is a multicast address; use a unicast one")
    return mac


def _check_ofport(owner: str, ofport: int) -> None:
    if not 0 < ofport < OFPP_MAX:
        raise ValueError(f"{owner}: ofport {ofport} is not a valid switch port")


def _reaches(net: NetworkState, host: str, state: DesiredState, tunnels: dict[str, int]) -> bool:
    """True if this host has a way to carry packets of ``net`` to ``host``."""
    if net.vni is not None:
        return host in tunnels
    return net.vlan is not None and state.uplink_port is not None


def _networks(state: DesiredState) -> dict[str, NetworkState]:
    networks: dict[str, NetworkState] = {}
    segments: dict[int, str] = {}
    for net in state.networks:
        if net.id in networks:
            raise ValueError(f"network {net.id} is listed twice")
        if not 0 < net.segment <= SEGMENT_MASK:
            raise ValueError(f"network {net.id}: segment {net.segment} is out of 1-{SEGMENT_MASK}")
        if net.segment in segments:
            raise ValueError(
                f"networks {segments[net.segment]} and {net.id} share segment {net.segment}"
            )
        if net.vni is not None and net.vlan is not None:
            raise ValueError(f"network {net.id}: a VNI and a VLAN; pick one encapsulation")
        if net.vni is not None and not 0 < net.vni < 1 << 24:
            raise ValueError(f"network {net.id}: VNI {net.vni} is out of 1-16777215")
        if net.vlan is not None and not 0 < net.vlan < 4095:
            raise ValueError(f"network {net.id}: VLAN {net.vlan} is out of 1-4094")
        networks[net.id] = net
        segments[net.segment] = net.id
    return networks


def _local_ports(state: DesiredState, networks: dict[str, NetworkState]) -> list[SegmentPort]:
    ports: list[SegmentPort] = []
    for net in state.networks:
        if net.gateway_port is not None:
            owner = f"network {net.id} gateway"
            ports.append(
                SegmentPort(
                    net.gateway_port,
                    net.segment,
                    _unicast_mac(owner, net.gateway_mac),
                    _address(owner, net.gateway_ip, 4),
                    None,
                    True,
                    owner,
                )
            )
    seen_ids: set[str] = set()
    for ep in state.endpoints:
        owner = f"endpoint {ep.id}"
        if ep.id in seen_ids:
            raise ValueError(f"{owner} is listed twice")
        seen_ids.add(ep.id)
        net = networks.get(ep.network_id)
        if net is None:
            raise ValueError(f"{owner}: network {ep.network_id} is unknown")
        mac = _unicast_mac(owner, ep.mac)
        if mac is None:
            raise ValueError(f"{owner}: a MAC address is required")
        ports.append(
            SegmentPort(
                ep.ofport,
                net.segment,
                mac,
                _address(owner, ep.ipv4, 4),
                _address(owner, ep.ipv6, 6),
                False,
                owner,
            )
        )
    return ports


def validate(state: DesiredState) -> ValidState:
    """The state, validated; raises ValueError naming the object at fault."""
    networks = _networks(state)
    tunnels: dict[str, int] = {}
    used_ofports: dict[int, str] = {}
    for t in state.tunnels:
        owner = f"tunnel to host {t.host}"
        _check_ofport(owner, t.ofport)
        if t.host in tunnels:
            raise ValueError(f"host {t.host} has two tunnels")
        tunnels[t.host] = t.ofport
        used_ofports[t.ofport] = owner
    if state.uplink_port is not None:
        _check_ofport("uplink", state.uplink_port)
        if state.uplink_port in used_ofports:
            raise ValueError(f"uplink and {used_ofports[state.uplink_port]} share an ofport")
        used_ofports[state.uplink_port] = "uplink"

    ports = _local_ports(state, networks)
    by_ofport: dict[int, SegmentPort] = {}
    addresses: dict[tuple[int, str], str] = {}

    def claim(segment: int, kind: str, addr: str | None, owner: str) -> None:
        if addr is None:
            return
        other = addresses.setdefault((segment, addr), owner)
        if other != owner:
            raise ValueError(f"{other} and {owner} both use {kind} {addr}")

    for port in ports:
        _check_ofport(port.owner, port.ofport)
        if port.ofport in by_ofport or port.ofport in used_ofports:
            other = (
                by_ofport[port.ofport].owner
                if port.ofport in by_ofport
                else used_ofports[port.ofport]
            )
            raise ValueError(f"{other} and {port.owner} both use ofport {port.ofport}")
        by_ofport[port.ofport] = port
        claim(port.segment, "MAC", port.mac, port.owner)
        claim(port.segment, "IP", port.ipv4, port.owner)
        claim(port.segment, "IP", port.ipv6, port.owner)

    local_ids = {ep.id for ep in state.endpoints}
    remotes: list[RemotePort] = []
    hosts_of: dict[int, set[str]] = {}
    for rep in state.remote_endpoints:
        owner = f"endpoint {rep.id} on host {rep.host}"
        if rep.id in local_ids:
            raise ValueError(f"endpoint {rep.id} is listed twice")
        local_ids.add(rep.id)
        net = networks.get(rep.network_id)
        if net is None:
            continue  # a network without local endpoints: nothing here talks to it
        mac = _unicast_mac(owner, rep.mac)
        if mac is None:
            raise ValueError(f"{owner}: a MAC address is required")
        ipv4 = _address(owner, rep.ipv4, 4)
        claim(net.segment, "MAC", mac, owner)
        claim(net.segment, "IP", ipv4, owner)
        claim(net.segment, "IP", _address(owner, rep.ipv6, 6), owner)
        if _reaches(net, rep.host, state, tunnels):
            remotes.append(RemotePort(net, rep.host, mac, ipv4, owner))
            hosts_of.setdefault(net.segment, set()).add(rep.host)
    return ValidState(
        networks,
        sorted(ports, key=lambda p: p.ofport),
        remotes,
        tunnels,
        state.uplink_port,
        hosts_of,
        state.arp_mode,
    )
