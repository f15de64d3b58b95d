"""The OpenFlow table pipeline, declared as data, and the pure compiler from desired network
state to the set of flows that realises it on one host's bridge.

Packet walk: classify (in_port, or the VNI/VLAN of what arrives from other hosts -> segment
and origin into metadata) -> ingress (anti-spoofing of local ports) -> arp (ARP for known
addresses: answered by the switch in proxy mode, sent to its owner in flood mode) -> policy
(placeholder) -> forward (known eth_dst -> its port, or its host's tunnel; anything else
floods within the segment).

Origins. Metadata carries the segment in its low 32 bits and where the packet came from in
two bits above: a local endpoint (00), this host's gateway port (GATEWAY), or another host
(REMOTE). Floods from a local endpoint reach the local ports and the hosts that have
endpoints in the network; floods from elsewhere stay on this host, so nothing loops between
hosts. The gateway (same address and MAC on every host) talks only to local endpoints.
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
ETH_TYPE_VLAN = 0x8100
ARP_REQUEST = 1
ARP_REPLY = 2
OFPVID_PRESENT = 0x1000
OFPP_IN_PORT = 0xFFFFFFF8  # output back where the packet came from

SEGMENT_MASK = 0xFFFF_FFFF
FROM_REMOTE = 1 << 32
FROM_GATEWAY = 1 << 33
ORIGIN_MASK = FROM_REMOTE | FROM_GATEWAY
SEGMENT_AND_ORIGIN = SEGMENT_MASK | ORIGIN_MASK

Miss = Literal["drop", "goto_next"]
ArpMode = Literal["proxy", "flood"]


@dataclass(frozen=True)
class TableSpec:
    """One table of the pipeline: its id, what a packet no flow matches does, and its job."""

    name: str
    id: int
    miss: Miss
    doc: str


CLASSIFY = TableSpec("classify", 0, "drop", "port, VNI or VLAN -> segment and origin")
INGRESS = TableSpec("ingress", 1, "drop", "source MAC/IP must be the endpoint's (anti-spoofing)")
ARP = TableSpec("arp", 2, "goto_next", "ARP request for a known address: answer or direct it")
POLICY = TableSpec("policy", 3, "goto_next", "placeholder for endpoint-group policy")
FORWARD = TableSpec("forward", 4, "drop", "known eth_dst -> port or host; else flood")

PIPELINE: tuple[TableSpec, ...] = (CLASSIFY, INGRESS, ARP, POLICY, FORWARD)

# Priorities inside a table: specific rules above catch-alls, the miss flow at 0.
PRIO_MISS = 0
PRIO_FLOOD = 10
PRIO_RULE = 100
PRIO_EXCEPTION = 110


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
class _Port:
    """A bridge port that belongs to a segment: an endpoint or a network's gateway."""

    ofport: int
    segment: int
    mac: str | None
    ipv4: str | None
    ipv6: str | None
    is_gateway: bool
    owner: str


@dataclass(frozen=True)
class _Remote:
    """A validated remote endpoint, with the actions that carry a packet to its host."""

    segment: int
    mac: str
    ipv4: str | None
    to_host: tuple[Action, ...]
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


def _check_ofport(owner: str, ofport: int) -> None:
    if not 0 < ofport < OFPP_MAX:
        raise ValueError(f"{owner}: ofport {ofport} is not a valid switch port")


@dataclass
class _World:
    """The validated state: ports by segment, remote endpoints, how to reach other hosts."""

    networks: dict[str, NetworkState]
    ports: list[_Port]
    remotes: list[_Remote]
    # segment -> actions that send a packet to every other host of the network
    flood_out: dict[int, tuple[Action, ...]]
    arp_mode: ArpMode


def _encap(
    net: NetworkState, host: str, state: DesiredState, tunnels: dict[str, int]
) -> tuple[Action, ...]:
    """Actions that carry a packet of ``net`` to ``host``; () when there is no way there."""
    if net.vni is not None:
        ofport = tunnels.get(host)
        if ofport is None:
            return ()
        return (("set_field", "tunnel_id", net.vni), ("output", ofport))
    if net.vlan is not None and state.uplink_port is not None:
        return _vlan_out(net.vlan, state.uplink_port)
    return ()


def _vlan_out(vlan: int, uplink: int) -> tuple[Action, ...]:
    return (
        ("push_vlan", ETH_TYPE_VLAN),
        ("set_field", "vlan_vid", OFPVID_PRESENT | vlan),
        ("output", uplink),
    )


def _validate(state: DesiredState) -> _World:
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

    remotes: list[_Remote] = []
    hosts_of: dict[int, set[str]] = {}
    for rep in state.remote_endpoints:
        owner = f"endpoint {rep.id} on host {rep.host}"
        if rep.id in seen_ids:
            raise ValueError(f"endpoint {rep.id} is listed twice")
        seen_ids.add(rep.id)
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
        to_host = _encap(net, rep.host, state, tunnels)
        if to_host:
            remotes.append(_Remote(net.segment, mac, ipv4, to_host, owner))
            hosts_of.setdefault(net.segment, set()).add(rep.host)

    flood_out: dict[int, tuple[Action, ...]] = {}
    for net in state.networks:
        if net.vni is not None:
            outs = [("output", tunnels[h]) for h in sorted(hosts_of.get(net.segment, ()))]
            if outs:
                flood_out[net.segment] = (("set_field", "tunnel_id", net.vni), *outs)
        elif net.vlan is not None and state.uplink_port is not None:
            # Always: the VLAN may hold hosts and routers netplugin does not know.
            flood_out[net.segment] = _vlan_out(net.vlan, state.uplink_port)
    return _World(
        networks, sorted(ports, key=lambda p: p.ofport), remotes, flood_out, state.arp_mode
    )


def _miss_flows() -> Iterable[Flow]:
    for spec in PIPELINE:
        actions = [_goto_next(spec)] if spec.miss == "goto_next" else []
        yield flow(spec.id, PRIO_MISS, actions)


def _origin(port: _Port) -> int:
    return FROM_GATEWAY if port.is_gateway else 0


def _classify(port: _Port) -> Iterable[Flow]:
    yield flow(
        CLASSIFY.id,
        PRIO_RULE,
        [
            ("write_metadata", port.segment | _origin(port), SEGMENT_AND_ORIGIN),
            _goto_next(CLASSIFY),
        ],
        in_port=port.ofport,
    )


def _classify_remote(net: NetworkState, uplink: int | None) -> Iterable[Flow]:
    """What other hosts send skips ingress: its sender's host checked its source."""
    mark = ("write_metadata", net.segment | FROM_REMOTE, SEGMENT_AND_ORIGIN)
    goto = ("goto", ARP.id)
    if net.vni is not None:
        # A local port's packets carry tunnel_id 0, and no VNI is 0: no in_port needed.
        yield flow(CLASSIFY.id, PRIO_RULE, [mark, goto], tunnel_id=net.vni)
    elif net.vlan is not None and uplink is not None:
        yield flow(
            CLASSIFY.id,
            PRIO_RULE,
            [("pop_vlan",), mark, goto],
            in_port=uplink,
            vlan_vid=OFPVID_PRESENT | net.vlan,
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


def _responder(mac: str, ip: str) -> list[Action]:
    """Turn an ARP request into the reply of ``mac``/``ip`` and send it back."""
    return [
        ("move", "eth_src", "eth_dst", 48),
        ("set_field", "eth_src", mac),
        ("set_field", "arp_op", ARP_REPLY),
        ("move", "arp_sha", "arp_tha", 48),
        ("move", "arp_spa", "arp_tpa", 32),
        ("set_field", "arp_sha", mac),
        ("set_field", "arp_spa", ip),
        ("output", OFPP_IN_PORT),
    ]


def _arp_request(segment: int, origin_mask: int, tpa: str) -> dict[str, Any]:
    return {
        "metadata": (segment, SEGMENT_MASK | origin_mask),
        "eth_type": ETH_TYPE_ARP,
        "arp_op": ARP_REQUEST,
        "arp_tpa": tpa,
    }


def _arp(port: _Port, mode: ArpMode) -> Iterable[Flow]:
    if not port.ipv4:
        return
    if port.is_gateway or mode == "flood":
        # To its owner, from anywhere in the segment (the gateway answers for itself).
        origins = FROM_REMOTE if port.is_gateway else 0
        yield flow(
            ARP.id,
            PRIO_RULE,
            [("output", port.ofport)],
            **_arp_request(port.segment, origins, port.ipv4),
        )
    else:
        # Answered by the switch for this host's ports; another host's request floods here.
        yield flow(
            ARP.id,
            PRIO_RULE,
            _responder(port.mac or "", port.ipv4),
            **_arp_request(port.segment, FROM_REMOTE, port.ipv4),
        )
    if not port.is_gateway:
        # A request for one's own address (gratuitous ARP) must still be flooded.
        request = {"eth_type": ETH_TYPE_ARP, "arp_op": ARP_REQUEST, "arp_tpa": port.ipv4}
        yield flow(ARP.id, PRIO_EXCEPTION, [_goto_next(ARP)], in_port=port.ofport, **request)


def _arp_remote(remote: _Remote, mode: ArpMode) -> Iterable[Flow]:
    """ARP from a local endpoint for another host's endpoint: answered here or sent there."""
    if not remote.ipv4:
        return
    actions = _responder(remote.mac, remote.ipv4) if mode == "proxy" else list(remote.to_host)
    yield flow(ARP.id, PRIO_RULE, actions, **_arp_request(remote.segment, ORIGIN_MASK, remote.ipv4))


def _forward(port: _Port) -> Iterable[Flow]:
    if port.mac:
        # The gateway is for this host's endpoints only; endpoints take any origin.
        origins = FROM_REMOTE if port.is_gateway else 0
        yield flow(
            FORWARD.id,
            PRIO_RULE,
            [("output", port.ofport)],
            metadata=(port.segment, SEGMENT_MASK | origins),
            eth_dst=port.mac,
        )


def _forward_remote(remote: _Remote) -> Iterable[Flow]:
    yield flow(
        FORWARD.id,
        PRIO_RULE,
        list(remote.to_host),
        metadata=(remote.segment, SEGMENT_AND_ORIGIN),
        eth_dst=remote.mac,
    )


def _flood(segment: int, ports: list[_Port], out: tuple[Action, ...]) -> Iterable[Flow]:
    """Broadcast, multicast and unknown unicast, one flow per origin. The switch never
    sends a packet back out of its in_port, so listing every port is safe."""
    endpoints = [("output", p.ofport) for p in ports if not p.is_gateway]
    gateways = [("output", p.ofport) for p in ports if p.is_gateway]
    for origin, actions in (
        (0, [*endpoints, *gateways, *out]),
        (FROM_GATEWAY, endpoints),
        (FROM_REMOTE, endpoints),
    ):
        if actions:
            yield flow(
                FORWARD.id, PRIO_FLOOD, actions, metadata=(segment | origin, SEGMENT_AND_ORIGIN)
            )


def compile_flows(state: DesiredState) -> set[Flow]:
    """All flows of the bridge for this state; raises ValueError naming a bad object."""
    world = _validate(state)
    by_segment: dict[int, list[_Port]] = {}
    for port in world.ports:
        by_segment.setdefault(port.segment, []).append(port)
    flows: set[Flow] = set(_miss_flows())
    for net in world.networks.values():
        flows.update(_classify_remote(net, state.uplink_port))
        flows.update(
            _flood(
                net.segment, by_segment.get(net.segment, []), world.flood_out.get(net.segment, ())
            )
        )
    for port in world.ports:
        flows.update(_classify(port))
        flows.update(_ingress(port))
        flows.update(_arp(port, world.arp_mode))
        flows.update(_forward(port))
    for remote in world.remotes:
        flows.update(_arp_remote(remote, world.arp_mode))
        flows.update(_forward_remote(remote))
    return flows


def install_order(flows: Iterable[Flow]) -> list[Flow]:
    """Adds from the last table back to the first, so a packet admitted by a new classify
    flow already finds the flows downstream of it."""
    return sorted(flows, key=lambda f: (-f.table, -f.priority, repr(f.match), repr(f.actions)))


def removal_order(flows: Iterable[Flow]) -> list[Flow]:
    """Deletes from the first table on, so traffic stops entering before its path goes."""
    return sorted(flows, key=lambda f: (f.table, -f.priority, repr(f.match), repr(f.actions)))
