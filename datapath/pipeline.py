"""The pure compiler from a host's desired network state to the flows of its bridge.

Packet walk: classify (in_port, or the VNI/VLAN of what arrives from other hosts -> segment
and origin into metadata) -> ingress (anti-spoofing of local ports) -> arp (ARP for known
addresses: answered by the switch in proxy mode, sent to its owner in flood mode) ->
conntrack (IP of a network with a zone, in that zone) -> service (room for the next issue:
passes every packet on) -> policy (the conntrack gate, then group tags and rules: the flows
of datapath.policy) -> forward (known eth_dst -> its port, or its host's tunnel; anything
else floods within the segment). The tables and their graph are declared in
datapath.tables; every flow compiled here is checked against that declaration.

Origins. Metadata carries the segment in its low 32 bits and where the packet came from in
two bits above: a local endpoint (00), this host's gateway port (GATEWAY), or another host
(REMOTE). Floods from a local endpoint reach the local ports and the hosts that have
endpoints in the network; floods from elsewhere stay on this host, so nothing loops between
hosts. The gateway (same address and MAC on every host) talks only to local endpoints.
Segments never exchange packets; whatever no flow accepts is dropped.

This module also re-exports the names other rooms import from it: the table declaration
(datapath.tables) and the desired-state model (datapath.desired).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from datapath import policy, routing, services
from datapath.arp import ARP_REQUEST, OFPP_IN_PORT, responder
from datapath.desired import (
    ArpMode,
    DesiredState,
    EndpointState,
    FwdMode,
    NetworkState,
    RemotePort,
    SegmentPort,
    TunnelState,
    ValidState,
    ct_zone,
    segment_of,
    validate,
)
from datapath.flood import flood_action, flood_groups
from datapath.flows import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_IPV6,
    ETH_TYPE_VLAN,
    Action,
    Entry,
    Flow,
    flow,
)
from datapath.policy import GroupState, ct_flows, default_allow_flows, rule_flows, tag_flows
from datapath.qos import QosState, classify_flows
from datapath.services import ServiceState, by_network, service_flows
from datapath.tables import (
    ARP,
    CLASSIFY,
    CONNTRACK,
    FORWARD,
    FROM_GATEWAY,
    FROM_REMOTE,
    INGRESS,
    ORIGIN_MASK,
    PIPELINE,
    POLICY,
    PRIO_EXCEPTION,
    PRIO_FLOOD,
    PRIO_MISS,
    PRIO_RULE,
    SEGMENT_AND_ORIGIN,
    SEGMENT_MASK,
    SERVICE,
    Pipeline,
    TableSpec,
    WritePlan,
    install_order,
    removal_order,
    write_plan,
)

__all__ = [
    "ARP",
    "CLASSIFY",
    "CONNTRACK",
    "ETH_TYPE_ARP",
    "ETH_TYPE_IPV4",
    "ETH_TYPE_IPV6",
    "ETH_TYPE_VLAN",
    "FORWARD",
    "FROM_GATEWAY",
    "FROM_REMOTE",
    "INGRESS",
    "OFPP_IN_PORT",
    "OFPVID_PRESENT",
    "ORIGIN_MASK",
    "PIPELINE",
    "POLICY",
    "PRIO_EXCEPTION",
    "PRIO_FLOOD",
    "PRIO_MISS",
    "PRIO_RULE",
    "SEGMENT_AND_ORIGIN",
    "SEGMENT_MASK",
    "SERVICE",
    "ArpMode",
    "DesiredState",
    "EndpointState",
    "NetworkState",
    "Pipeline",
    "TableSpec",
    "TunnelState",
    "WritePlan",
    "compile_flows",
    "install_order",
    "removal_order",
    "write_plan",
]

OFPVID_PRESENT = 0x1000


def to_host(
    net: NetworkState, host: str, tunnels: Mapping[str, int], uplink: int | None
) -> tuple[Action, ...]:
    """Actions that carry a packet of ``net`` to ``host`` (the caller made sure there is a
    way: datapath.desired.reaches)."""
    if net.vni is not None:
        return (("set_field", "tunnel_id", net.vni), ("output", tunnels[host]))
    assert net.vlan is not None and uplink is not None
    return _vlan_out(net.vlan, uplink)


def _vlan_out(vlan: int, uplink: int) -> tuple[Action, ...]:
    return (
        ("push_vlan", ETH_TYPE_VLAN),
        ("set_field", "vlan_vid", OFPVID_PRESENT | vlan),
        ("output", uplink),
    )


def flood_out(
    net: NetworkState, hosts: Iterable[str], tunnels: Mapping[str, int], uplink: int | None
) -> tuple[Action, ...]:
    """Actions that send a packet of ``net`` to every other host of the network (``hosts``:
    those with endpoints in it that this host reaches)."""
    if net.vni is not None:
        hosts = sorted(hosts)
        if not hosts:
            return ()
        return (("set_field", "tunnel_id", net.vni), *(("output", tunnels[h]) for h in hosts))
    if net.vlan is not None and uplink is not None:
        # Always: the VLAN may hold hosts and routers netplugin does not know.
        return _vlan_out(net.vlan, uplink)
    return ()


def _origin(port: SegmentPort) -> int:
    return FROM_GATEWAY if port.is_gateway else 0


def _classify(port: SegmentPort, qos: QosState | None) -> Iterable[Entry]:
    """A port's classify flows; an endpoint's netprofile adds its meter and DSCP marking."""
    mark = ("write_metadata", port.segment | _origin(port), SEGMENT_AND_ORIGIN)
    yield from classify_flows(port.ofport, mark, CLASSIFY.goto(INGRESS), qos)


def _classify_remote(
    net: NetworkState, uplink: int | None, segment: int | None = None
) -> Iterable[Flow]:
    """What other hosts send skips ingress: its sender's host checked its source. It is
    marked with the network's segment, or ``segment`` (routing mode's VRF)."""
    segment = net.segment if segment is None else segment
    mark = ("write_metadata", segment | FROM_REMOTE, SEGMENT_AND_ORIGIN)
    goto = CLASSIFY.goto(ARP)
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


def _ingress(port: SegmentPort) -> Iterable[Flow]:
    goto = [INGRESS.goto(ARP)]
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


def _arp_request(segment: int, origin_mask: int, tpa: str) -> dict[str, Any]:
    return {
        "metadata": (segment, SEGMENT_MASK | origin_mask),
        "eth_type": ETH_TYPE_ARP,
        "arp_op": ARP_REQUEST,
        "arp_tpa": tpa,
    }


def _arp(port: SegmentPort, mode: ArpMode) -> Iterable[Flow]:
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
            responder(port.mac or "", port.ipv4),
            **_arp_request(port.segment, FROM_REMOTE, port.ipv4),
        )
    if not port.is_gateway:
        # A request for one's own address (gratuitous ARP) must still be flooded.
        request = {"eth_type": ETH_TYPE_ARP, "arp_op": ARP_REQUEST, "arp_tpa": port.ipv4}
        yield flow(ARP.id, PRIO_EXCEPTION, [PIPELINE.pass_on(ARP)], in_port=port.ofport, **request)


def _arp_remote(remote: RemotePort, to_host: tuple[Action, ...], mode: ArpMode) -> Iterable[Flow]:
    """ARP from a local endpoint for another host's endpoint: answered here or sent there."""
    if not remote.ipv4:
        return
    actions = responder(remote.mac, remote.ipv4) if mode == "proxy" else list(to_host)
    request = _arp_request(remote.network.segment, ORIGIN_MASK, remote.ipv4)
    yield flow(ARP.id, PRIO_RULE, actions, **request)


def _forward(port: SegmentPort) -> Iterable[Flow]:
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


def _forward_remote(remote: RemotePort, to_host: tuple[Action, ...]) -> Iterable[Flow]:
    yield flow(
        FORWARD.id,
        PRIO_RULE,
        list(to_host),
        metadata=(remote.network.segment, SEGMENT_AND_ORIGIN),
        eth_dst=remote.mac,
    )


def _flood(segment: int, ports: list[SegmentPort], out: tuple[Action, ...]) -> Iterable[Entry]:
    """Broadcast, multicast and unknown unicast, one flow per origin, through the segment's
    flood group (datapath.flood): its endpoints are the group's buckets, so these flows do
    not change as endpoints come and go. The gateway hears only what this host's
    endpoints send."""
    yield from flood_groups(segment, (p.ofport for p in ports if not p.is_gateway))
    group = flood_action(segment)
    gateways = [("output", p.ofport) for p in ports if p.is_gateway]
    for origin, actions in (
        (0, [group, *gateways, *out]),
        (FROM_GATEWAY, [group]),
        (FROM_REMOTE, [group]),
    ):
        yield flow(FORWARD.id, PRIO_FLOOD, actions, metadata=(segment | origin, SEGMENT_AND_ORIGIN))


def port_flows(port: SegmentPort, mode: ArpMode, qos: QosState | None = None) -> Iterable[Entry]:
    """The flows of one local port (an endpoint or a gateway), and its meter: they depend on
    it and its group's netprofile (``qos``) alone."""
    yield from _classify(port, None if port.is_gateway else qos)
    yield from _ingress(port)
    yield from _arp(port, mode)
    yield from _forward(port)


def network_flows(
    net: NetworkState, ports: list[SegmentPort], out: tuple[Action, ...], uplink: int | None
) -> Iterable[Entry]:
    """What arrives from other hosts, the segment's floods and flood group (``ports``: its
    local ports by ofport, ``out``: flood_out), and its conntrack and default allow if
    tracked."""
    yield from _classify_remote(net, uplink)
    yield from _flood(net.segment, ports, out)
    zone = ct_zone(net)
    if zone is not None:
        yield from ct_flows(net.segment, zone)
        yield from default_allow_flows(net.segment, zone)


def remote_flows(remote: RemotePort, to_host: tuple[Action, ...], mode: ArpMode) -> Iterable[Flow]:
    """The flows of another host's endpoint (``to_host``: the way there)."""
    yield from _arp_remote(remote, to_host, mode)
    yield from _forward_remote(remote, to_host)


def own_group(
    groups: Mapping[str, GroupState], group_id: str, net: NetworkState
) -> GroupState | None:
    """An endpoint's group, if it is known and of the endpoint's network ``net``."""
    group = groups.get(group_id) if group_id else None
    return group if group is not None and group.network_id == net.id else None


def endpoint_tags(
    net: NetworkState,
    mac: str,
    group_id: str,
    groups: Mapping[str, GroupState],
    local: bool,
    mode: FwdMode = "bridge",
) -> list[Flow]:
    """An endpoint's group tag flows: none unless its network is tracked here and its group
    is known, tagged and of that network."""
    group = own_group(groups, group_id, net)
    if ct_zone(net, mode) is None or group is None:
        return []
    return tag_flows(segment_of(net, mode), mac, group.tag, local)


def fabric_tags(remote: RemotePort, groups: Mapping[str, GroupState], mode: FwdMode) -> list[Flow]:
    """A fabric-routed remote endpoint's group tag, by its addresses (policy's)."""
    group = own_group(groups, remote.group, remote.network)
    if group is None:
        return []
    addresses = [a for a in (remote.ipv4, remote.ipv6) if a]
    return policy.address_tag_flows(segment_of(remote.network, mode), addresses, group.tag)


def endpoint_qos(
    port: SegmentPort, net: NetworkState, groups: Mapping[str, GroupState]
) -> QosState | None:
    """The netprofile of a local endpoint's group, if the group is known and of its network."""
    group = own_group(groups, port.group, net)
    return group.qos if group is not None else None


def network_services(
    net: NetworkState, services: Iterable[ServiceState], mode: FwdMode = "bridge"
) -> list[Entry]:
    """The flows and groups of a network's services (``services``: those on it)."""
    return service_flows(segment_of(net, mode), ct_zone(net, mode), list(services))


def group_flows(
    group: GroupState, net: NetworkState | None, mode: FwdMode = "bridge"
) -> list[Flow]:
    """A group's rule flows, if its network is on this host and tracked."""
    zone = ct_zone(net, mode) if net is not None else None
    return rule_flows(group, zone) if zone is not None else []


def static_flows() -> list[Flow]:
    """The flows that depend on nothing: each table's miss, the conntrack gate and the ND
    bypass."""
    return [
        *(PIPELINE.miss_flow(spec) for spec in PIPELINE),
        *policy.static_flows(),
        *services.static_flows(),
    ]


def compile_flows(state: DesiredState) -> set[Entry]:
    """All flows (and meters and groups) of the bridge for this state; raises ValueError
    naming a bad object, or a flow its table's declaration does not allow."""
    world = validate(state)
    if world.fwd_mode == "routing":
        flows = _routed(world)
        PIPELINE.check_all(flows)
        return flows
    tunnels, uplink = world.tunnels, world.uplink_port
    flows: set[Entry] = set(static_flows())
    for net in world.networks.values():
        out = flood_out(net, world.hosts_of.get(net.segment, ()), tunnels, uplink)
        flows.update(network_flows(net, world.ports_of(net.segment), out, uplink))
    by_segment = {net.segment: net for net in world.networks.values()}
    groups = world.groups
    for port in world.ports:
        if port.is_gateway:
            flows.update(port_flows(port, world.arp_mode))
            continue
        net = by_segment[port.segment]
        flows.update(port_flows(port, world.arp_mode, endpoint_qos(port, net, groups)))
        flows.update(endpoint_tags(net, port.mac, port.group, groups, True))
    for remote in world.remotes:
        to = to_host(remote.network, remote.host, tunnels, uplink)
        flows.update(remote_flows(remote, to, world.arp_mode))
        tags = endpoint_tags(remote.network, remote.mac, remote.group, groups, False)
        flows.update(tags)
    for group in groups.values():
        flows.update(group_flows(group, world.networks.get(group.network_id)))
    for net_id, on_net in by_network(world.services.values()).items():
        flows.update(network_services(world.networks[net_id], on_net))
    PIPELINE.check_all(flows)
    return flows


def _fabric_routed(world: ValidState, net: NetworkState) -> bool:
    """Whether ``net`` reaches other hosts through the fabric's router (a VLAN network in
    routing mode on a host peering by BGP), not straight over the uplink."""
    return world.fabric_port is not None and net.vlan is not None


def _routed(world: ValidState) -> set[Entry]:
    """Routing mode's flows (datapath.routing): bridge mode's classify, ingress, conntrack,
    policy and services keyed by each tenant's VRF, and routing's ARP, route, forward and
    floods."""
    mode: FwdMode = "routing"
    tunnels, uplink = world.tunnels, world.uplink_port
    flows: set[Entry] = set(static_flows())
    if world.fabric_port is not None and uplink is not None:
        flows.update(routing.fabric_flows(world.fabric_port, uplink))
    for net in world.networks.values():
        segment, zone = segment_of(net, mode), ct_zone(net, mode)
        assert zone is not None
        fabric = _fabric_routed(world, net)
        if not fabric:
            flows.update(_classify_remote(net, uplink, segment))
        flows.update(routing.network_flows(net, segment, fabric))
        flows.update(ct_flows(segment, zone))
        flows.update(default_allow_flows(segment, zone))
    for segment, ports in routing.vrf_ports(world.ports).items():
        flows.update(routing.flood_flows(segment, ports))
    groups = world.groups
    for port in world.ports:
        net = world.networks[port.network]
        qos = None if port.is_gateway else endpoint_qos(port, net, groups)
        flows.update(_classify(port, qos))
        flows.update(_ingress(port))
        flows.update(routing.port_flows(port))
        if not port.is_gateway:
            flows.update(endpoint_tags(net, port.mac or "", port.group, groups, True, mode))
    for remote in world.remotes:
        net = remote.network
        if _fabric_routed(world, net):
            flows.update(routing.fabric_remote_flows(remote, segment_of(net, mode)))
            flows.update(fabric_tags(remote, groups, mode))
            continue
        to = to_host(net, remote.host, tunnels, uplink)
        flows.update(routing.remote_flows(remote, segment_of(net, mode), to))
        flows.update(endpoint_tags(net, remote.mac, remote.group, groups, False, mode))
    for group in groups.values():
        flows.update(group_flows(group, world.networks.get(group.network_id), mode))
    for net_id, on_net in by_network(world.services.values()).items():
        flows.update(network_services(world.networks[net_id], on_net, mode))
    return flows
