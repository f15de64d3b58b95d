"""The OpenFlow table pipeline, declared as data, and the pure compiler from desired network
state to the set of flows that realises it on one host's bridge.

Packet walk: classify (in_port -> segment in metadata) -> ingress (anti-spoofing) -> arp
(requests for a known address go straight to its owner) -> policy (placeholder) -> forward
(known eth_dst -> its port; anything else floods to the other ports of the segment).
Segments never exchange packets; whatever no flow accepts is dropped.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from datapath.flows import OFPP_MAX, Action, Flow, canonical_value, flow

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD
ARP_REQUEST = 1

# The low 32 bits of metadata carry the segment; the high bits stay free for policy.
SEGMENT_MASK = 0xFFFF_FFFF

Miss = Literal["drop", "goto_next"]


@dataclass(frozen=True)
class TableSpec:
    """One table of the pipeline: its id, what a packet no flow matches does, and its job."""

    name: str
    id: int
    miss: Miss
    doc: str


CLASSIFY = TableSpec("classify", 0, "drop", "known port -> its segment into metadata")
INGRESS = TableSpec("ingress", 1, "drop", "source MAC/IP must be the endpoint's (anti-spoofing)")
ARP = TableSpec("arp", 2, "goto_next", "ARP request for a known address -> its owner only")
POLICY = TableSpec("policy", 3, "goto_next", "placeholder for endpoint-group policy")
FORWARD = TableSpec("forward", 4, "drop", "known eth_dst -> port; else flood within segment")

PIPELINE: tuple[TableSpec, ...] = (CLASSIFY, INGRESS, ARP, POLICY, FORWARD)

# Priorities inside a table: specific rules above catch-alls, the miss flow at 0.
PRIO_MISS = 0
PRIO_FLOOD = 10
PRIO_RULE = 100
PRIO_EXCEPTION = 110


@dataclass(frozen=True)
class NetworkState:
    """A network as one host sees it: its local segment and the host-side gateway port."""

    id: str
    segment: int
    gateway_port: int | None = None
    gateway_mac: str | None = None
    gateway_ip: str | None = None


@dataclass(frozen=True)
class EndpointState:
    """A container's interface: the bridge port it is plugged into and its addresses."""

    id: str
    network_id: str
    ofport: int
    mac: str
    ipv4: str | None = None
    ipv6: str | None = None


@dataclass
class DesiredState:
    """Everything the flows of one bridge are compiled from."""

    networks: list[NetworkState] = field(default_factory=list)
    endpoints: list[EndpointState] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DesiredState:
        """Inverse of to_dict."""
        return cls(
            networks=[NetworkState(**n) for n in data.get("networks", [])],
            endpoints=[EndpointState(**e) for e in data.get("endpoints", [])],
        )


@dataclass(frozen=True)
class _Port:
    """A bridge port that belongs to a segment: an endpoint or a network's gateway."""

    ofport: int
    segment: int
    mac: str | None
    ipv4: str | None
    ipv6: str | None
    is_gateway: bool
    owner: str


def next_table(spec: TableSpec) -> TableSpec:
    """The table after spec in the pipeline."""
    i = PIPELINE.index(spec)
    if i + 1 == len(PIPELINE):
        raise ValueError(f"table {spec.name} is the last one")
    return PIPELINE[i + 1]


def _goto_next(spec: TableSpec) -> Action:
    return ("goto", next_table(spec).id)


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


def _ports(state: DesiredState) -> list[_Port]:
    """Validate the state and list every segment port, sorted by ofport."""
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
        networks[net.id] = net
        segments[net.segment] = net.id

    ports: list[_Port] = []
    for net in state.networks:
        if net.gateway_port is not None:
            owner = f"network {net.id} gateway"
            ports.append(
                _Port(
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
            _Port(
                ep.ofport,
                net.segment,
                mac,
                _address(owner, ep.ipv4, 4),
                _address(owner, ep.ipv6, 6),
                False,
                owner,
            )
        )

    by_ofport: dict[int, _Port] = {}
    addresses: dict[tuple[int, str], _Port] = {}
    for port in ports:
        if not 0 < port.ofport < OFPP_MAX:
            raise ValueError(f"{port.owner}: ofport {port.ofport} is not a valid switch port")
        if port.ofport in by_ofport:
            other = by_ofport[port.ofport].owner
            raise ValueError(f"{other} and {port.owner} both use ofport {port.ofport}")
        by_ofport[port.ofport] = port
        for kind, addr in (("MAC", port.mac), ("IP", port.ipv4), ("IP", port.ipv6)):
            if addr is None:
                continue
            other = addresses.setdefault((port.segment, addr), port)
            if other is not port:
                raise ValueError(f"{other.owner} and {port.owner} both use {kind} {addr}")
    return sorted(ports, key=lambda p: p.ofport)


def _miss_flows() -> Iterable[Flow]:
    for spec in PIPELINE:
        actions = [_goto_next(spec)] if spec.miss == "goto_next" else []
        yield flow(spec.id, PRIO_MISS, actions)


def _classify(port: _Port) -> Iterable[Flow]:
    yield flow(
        CLASSIFY.id,
        PRIO_RULE,
        [("write_metadata", port.segment, SEGMENT_MASK), _goto_next(CLASSIFY)],
        in_port=port.ofport,
    )


def _ingress(port: _Port) -> Iterable[Flow]:
    goto = [_goto_next(INGRESS)]
    if port.is_gateway:
        # The host side routes for other subnets, so only its MAC is pinned, not its IPs.
        src = {"eth_src": port.mac} if port.mac else {}
        yield flow(INGRESS.id, PRIO_RULE, goto, in_port=port.ofport, **src)
        return
    own = {"in_port": port.ofport, "eth_src": port.mac}
    if port.ipv4:
        yield flow(
            INGRESS.id,
            PRIO_RULE,
            goto,
            **own,
            eth_type=ETH_TYPE_ARP,
            arp_spa=port.ipv4,
            arp_sha=port.mac,
        )
        yield flow(INGRESS.id, PRIO_RULE, goto, **own, eth_type=ETH_TYPE_IPV4, ipv4_src=port.ipv4)
    if port.ipv6:
        # Neighbour discovery needs the link-local source and, for DAD, the unspecified one.
        for src in (port.ipv6, "fe80::/10", "::"):
            yield flow(INGRESS.id, PRIO_RULE, goto, **own, eth_type=ETH_TYPE_IPV6, ipv6_src=src)


def _arp(port: _Port) -> Iterable[Flow]:
    if not port.ipv4:
        return
    request = {"eth_type": ETH_TYPE_ARP, "arp_op": ARP_REQUEST, "arp_tpa": port.ipv4}
    yield flow(
        ARP.id,
        PRIO_RULE,
        [("output", port.ofport)],
        metadata=(port.segment, SEGMENT_MASK),
        **request,
    )
    # A request for one's own address (gratuitous ARP) must still be flooded.
    yield flow(ARP.id, PRIO_EXCEPTION, [_goto_next(ARP)], in_port=port.ofport, **request)


def _forward(port: _Port, segment_ports: list[_Port]) -> Iterable[Flow]:
    if port.mac:
        yield flow(
            FORWARD.id,
            PRIO_RULE,
            [("output", port.ofport)],
            metadata=(port.segment, SEGMENT_MASK),
            eth_dst=port.mac,
        )
    others = [("output", p.ofport) for p in segment_ports if p.ofport != port.ofport]
    if others:
        # Broadcast, multicast and unknown unicast: the other ports of this segment only.
        yield flow(FORWARD.id, PRIO_FLOOD, others, in_port=port.ofport)


def compile_flows(state: DesiredState) -> set[Flow]:
    """All flows of the bridge for this state; raises ValueError naming a bad object."""
    ports = _ports(state)
    by_segment: dict[int, list[_Port]] = {}
    for port in ports:
        by_segment.setdefault(port.segment, []).append(port)
    flows: set[Flow] = set(_miss_flows())
    for port in ports:
        flows.update(_classify(port))
        flows.update(_ingress(port))
        flows.update(_arp(port))
        flows.update(_forward(port, by_segment[port.segment]))
    return flows


def install_order(flows: Iterable[Flow]) -> list[Flow]:
    """Adds from the last table back to the first, so a packet admitted by a new classify
    flow already finds the flows downstream of it."""
    return sorted(flows, key=lambda f: (-f.table, -f.priority, repr(f.match), repr(f.actions)))


def removal_order(flows: Iterable[Flow]) -> list[Flow]:
    """Deletes from the first table on, so traffic stops entering before its path goes."""
    return sorted(flows, key=lambda f: (f.table, -f.priority, repr(f.match), repr(f.actions)))
