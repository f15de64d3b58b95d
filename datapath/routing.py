"""Routing mode (issue 25): a tenant is one L3 segment, its VRF, routed by the switch.

Pure flow builders; datapath.pipeline.compile_flows calls them when the desired state's
fwd_mode is "routing" (the cluster's fwdMode, fed by the agent). Packet walk of a container
reaching another container of its tenant:

    classify 0    every local port of the tenant's networks, and what arrives with any of
                  their VNIs (or on their VLANs), is marked with the VRF's segment
                  (VRF_SEGMENT_BASE | the tenant's tag): everything after classify (zone,
                  services, group tags, rules, forward) is keyed by the VRF
    arp 20        a request (from this host's endpoints or gateway ports) for any address
                  of the VRF (a gateway, a local or a remote endpoint) is answered with
                  ROUTER_MAC; IP sent to ROUTER_MAC from this host goes to route
    route 25      to an endpoint E of the VRF: eth_dst = E's MAC, TTL - 1 (local or remote,
                  /32 and /128); to a gateway address: its gateway port's MAC; to an address
                  inside a subnet of a network of this host (any tenant's) that no endpoint
                  holds: dropped; anything else: eth_dst = the sender's network's gateway
                  MAC (the host kernel routes and NATs it out, and decrements the TTL)
    conntrack 30 .. policy_in 58   unchanged, in the VRF's zone (VRF_ZONE_BASE | tag)
    forward 60    (VRF, eth_dst) -> a local endpoint's port, with eth_src = ROUTER_MAC (the
                  hop it sees); or its host, with its own network's VNI (or VLAN)

A packet is routed once, at its sender's host: what arrives from another host already
carries its destination's MAC and skips route. The sender's MAC stays on the packet until
the last hop, so group tags (set by source MAC) and policies work as in bridge mode.

Floods: nothing floods across hosts (ARP is answered here, and remote MACs are known).
Broadcast and multicast from a local endpoint reach the VRF's local ports (its endpoints,
through the VRF's flood group as in bridge mode, and its gateway ports: gratuitous ARP,
IPv6 neighbour discovery on this host), from a gateway port its local endpoints, from
another host nothing; unknown unicast is dropped.

The ARP mode does not apply: there is nothing to flood a request to. IPv6 is routed like
IPv4, with /128 host routes; its neighbour solicitations for the VRF's addresses go to the
controller, which answers with the router MAC (datapath.ndp: the switch cannot write an
advertisement with the fields os-ken encodes), and one for the sender's own address
(duplicate address detection) passes on.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

from datapath.arp import ARP_REQUEST, responder
from datapath.desired import RemotePort, SegmentPort
from datapath.flood import flood_action, flood_groups
from datapath.flows import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_IPV6,
    Action,
    Entry,
    Flow,
    flow,
)
from datapath.local import NetworkState
from datapath.tables import (
    ARP,
    CLASSIFY,
    CONNTRACK,
    FORWARD,
    FROM_GATEWAY,
    FROM_REMOTE,
    ORIGIN_MASK,
    PRIO_EXCEPTION,
    PRIO_FLOOD,
    PRIO_RULE,
    ROUTE,
    SEGMENT_AND_ORIGIN,
    SEGMENT_MASK,
)

# Locally administered, one for the cluster; distinct from gateway MACs (02:4e:50/56:...),
# endpoint MACs (02:42:...) and VIP MACs (0e:4e:...).
ROUTER_MAC = "02:4e:52:00:00:01"

_FAMILY = {4: ("ipv4", ETH_TYPE_IPV4), 6: ("ipv6", ETH_TYPE_IPV6)}
IPPROTO_ICMPV6 = 58
ND_NEIGHBOR_SOLICIT = 135
OFPP_CONTROLLER = 0xFFFFFFFD
TO_CONTROLLER: Action = ("output", OFPP_CONTROLLER)
MULTICAST = ("01:00:00:00:00:00", "01:00:00:00:00:00")  # the group bit of eth_dst

# Route table priorities: host routes above the subnets' drops above the way out, which
# is longest prefix first (PRIO_OUT + prefix length stays below PRIO_SUBNET_DROP).
PRIO_HOST_ROUTE = 300
PRIO_SUBNET_DROP = 200
PRIO_OUT = 10


def _meta(segment: int, origins: int = 0) -> tuple[int, int]:
    """Metadata of ``segment`` whose origin bits in ``origins`` are 0."""
    return (segment, SEGMENT_MASK | origins)


def _arp_request(segment: int, origins: int, tpa: str) -> dict[str, object]:
    return {
        "metadata": _meta(segment, origins),
        "eth_type": ETH_TYPE_ARP,
        "arp_op": ARP_REQUEST,
        "arp_tpa": tpa,
    }


def _solicited(segment: int, origins: int, target: str) -> dict[str, object]:
    """IPv6 neighbour solicitations for ``target`` in the VRF, from the origins not in
    ``origins``."""
    return {
        "metadata": _meta(segment, origins),
        "eth_type": ETH_TYPE_IPV6,
        "ip_proto": IPPROTO_ICMPV6,
        "icmpv6_type": ND_NEIGHBOR_SOLICIT,
        "ipv6_nd_target": target,
    }


def nd_answer(segment: int, origins: int, target: str) -> Flow:
    """Solicitations for ``target`` go to the controller, which answers with the router
    MAC (datapath.ndp): the switch cannot write a neighbour advertisement itself."""
    return flow(ARP.id, PRIO_RULE, [TO_CONTROLLER], **_solicited(segment, origins, target))


def port_flows(port: SegmentPort) -> Iterable[Flow]:
    """A local port's ARP and ND answers, host route and forward flow (its classify and
    ingress flows are bridge mode's, with the VRF's segment)."""
    if port.ipv6:
        yield nd_answer(port.segment, FROM_REMOTE, port.ipv6)
    if port.ipv4:
        # From this host's endpoints and gateway ports: the gateway (the host kernel)
        # reaches this host's endpoints through the router too.
        yield flow(
            ARP.id,
            PRIO_RULE,
            responder(ROUTER_MAC, port.ipv4),
            **_arp_request(port.segment, FROM_REMOTE, port.ipv4),
        )
    if port.is_gateway:
        if port.mac:
            yield flow(
                FORWARD.id,
                PRIO_RULE,
                [("output", port.ofport)],
                metadata=_meta(port.segment, FROM_REMOTE),
                eth_dst=port.mac,
            )
        return
    if port.ipv4:
        # A request for one's own address (gratuitous ARP) passes on, as in bridge mode.
        request = {"eth_type": ETH_TYPE_ARP, "arp_op": ARP_REQUEST, "arp_tpa": port.ipv4}
        yield flow(ARP.id, PRIO_EXCEPTION, [ARP.goto(CONNTRACK)], in_port=port.ofport, **request)
    if port.ipv6:
        # So does a solicitation for one's own address (duplicate address detection).
        own = _solicited(port.segment, 0, port.ipv6)
        own.pop("metadata")
        yield flow(ARP.id, PRIO_EXCEPTION, [ARP.goto(CONNTRACK)], in_port=port.ofport, **own)
    yield from host_routes(port.segment, port.mac or "", port.ipv4, port.ipv6)
    yield flow(
        FORWARD.id,
        PRIO_RULE,
        [("set_field", "eth_src", ROUTER_MAC), ("output", port.ofport)],
        metadata=_meta(port.segment),
        eth_dst=port.mac,
    )


def remote_flows(remote: RemotePort, segment: int, to_host: tuple[Action, ...]) -> list[Flow]:
    """Another host's endpoint of the VRF: answered and routed here, sent to its host with
    its own network's VNI (``to_host``)."""
    flows = list(host_routes(segment, remote.mac, remote.ipv4, remote.ipv6))
    if remote.ipv6:
        flows.append(nd_answer(segment, ORIGIN_MASK, remote.ipv6))
    if remote.ipv4:
        # From local endpoints only: a gateway port reaches this host's endpoints alone.
        request = _arp_request(segment, ORIGIN_MASK, remote.ipv4)
        flows.append(flow(ARP.id, PRIO_RULE, responder(ROUTER_MAC, remote.ipv4), **request))
    flows.append(
        flow(
            FORWARD.id,
            PRIO_RULE,
            list(to_host),
            metadata=(segment, SEGMENT_AND_ORIGIN),
            eth_dst=remote.mac,
        )
    )
    return flows


def fabric_remote_flows(remote: RemotePort, segment: int) -> list[Flow]:
    """Another host's endpoint of a network routed through the fabric: answered with the
    router MAC, so this host's endpoints send to it through the route table, whose way out
    (the sender's gateway port: the host kernel, with the routes BGP learned) leads to the
    fabric's router."""
    flows = [nd_answer(segment, ORIGIN_MASK, remote.ipv6)] if remote.ipv6 else []
    if remote.ipv4:
        request = _arp_request(segment, ORIGIN_MASK, remote.ipv4)
        flows.append(flow(ARP.id, PRIO_RULE, responder(ROUTER_MAC, remote.ipv4), **request))
    return flows


def fabric_flows(fabric_port: int, uplink: int) -> list[Flow]:
    """The host's router port on the untagged side of the VLAN uplink: what arrives there
    without a VLAN tag is the fabric's (its router's ARP and routed packets) and goes to
    the port (the host kernel), and what the port sends goes out."""
    return [
        flow(CLASSIFY.id, PRIO_EXCEPTION, [("output", fabric_port)], in_port=uplink, vlan_vid=0),
        flow(CLASSIFY.id, PRIO_EXCEPTION, [("output", uplink)], in_port=fabric_port),
    ]


def host_routes(segment: int, mac: str, ipv4: str | None, ipv6: str | None) -> Iterable[Flow]:
    """An endpoint's /32 and /128 in its VRF: its MAC, one hop less."""
    for version, address in ((4, ipv4), (6, ipv6)):
        if address:
            name, eth_type = _FAMILY[version]
            yield flow(
                ROUTE.id,
                PRIO_HOST_ROUTE,
                [("set_field", "eth_dst", mac), ("dec_ttl",), ROUTE.goto(CONNTRACK)],
                metadata=_meta(segment),
                eth_dst=ROUTER_MAC,
                eth_type=eth_type,
                **{f"{name}_dst": address},
            )


def _subnets(net: NetworkState) -> list[tuple[int, str, str]]:
    """(IP version, subnet, gateway address or "") of a network's families."""
    out = []
    for subnet, gateway in ((net.subnet, net.gateway), (net.ipv6_subnet, net.ipv6_gateway)):
        if subnet:
            canonical = ipaddress.ip_network(subnet, strict=False)
            out.append((canonical.version, str(canonical), gateway))
    return out


def network_flows(net: NetworkState, segment: int, fabric_routed: bool = False) -> list[Flow]:
    """A network's part of its VRF: IP to the router goes to route; no endpoint's address
    in its subnets goes anywhere (unless ``fabric_routed``: other hosts' endpoints of it
    are reached through the host kernel's routes from BGP); with a gateway port here, its
    gateway addresses reach it and what its endpoints send elsewhere leaves through it."""
    flows = [
        flow(
            ARP.id,
            PRIO_RULE,
            [ARP.goto(ROUTE)],
            metadata=_meta(segment, FROM_REMOTE),
            eth_dst=ROUTER_MAC,
            eth_type=eth_type,
        )
        for eth_type in (ETH_TYPE_IPV4, ETH_TYPE_IPV6)
    ]
    for version, subnet, gateway in _subnets(net):
        name, eth_type = _FAMILY[version]
        # Not keyed by the VRF: another tenant's subnets on this host are no way out either.
        if not fabric_routed:
            drop = {"eth_dst": ROUTER_MAC, "eth_type": eth_type, f"{name}_dst": subnet}
            flows.append(flow(ROUTE.id, PRIO_SUBNET_DROP, [], **drop))
        if net.gateway_ofport is None:
            continue
        to_gateway: list[Action] = [
            ("set_field", "eth_dst", net.gateway_mac),
            ROUTE.goto(CONNTRACK),
        ]
        router = {"metadata": _meta(segment), "eth_dst": ROUTER_MAC, "eth_type": eth_type}
        if gateway:
            address = str(ipaddress.ip_interface(gateway).ip)
            if version == 6:  # the IPv4 gateway's ARP answer is its port's (port_flows)
                flows.append(nd_answer(segment, FROM_REMOTE, address))
            flows.append(
                flow(ROUTE.id, PRIO_HOST_ROUTE, to_gateway, **router, **{f"{name}_dst": address})
            )
        prefix = ipaddress.ip_network(subnet).prefixlen
        flows.append(
            flow(ROUTE.id, PRIO_OUT + prefix, to_gateway, **router, **{f"{name}_src": subnet})
        )
    return flows


def flood_flows(segment: int, ports: list[SegmentPort]) -> list[Entry]:
    """Broadcast and multicast of a VRF stay on this host: from a local endpoint to its
    local ports, from a gateway port to its local endpoints (the VRF's flood group,
    datapath.flood); from other hosts, nothing."""
    group = flood_action(segment)
    gateways = [("output", p.ofport) for p in ports if p.is_gateway]
    flows: list[Entry] = [*flood_groups(segment, (p.ofport for p in ports if not p.is_gateway))]
    for origin, actions in ((0, [group, *gateways]), (FROM_GATEWAY, [group])):
        flows.append(
            flow(
                FORWARD.id,
                PRIO_FLOOD,
                actions,
                metadata=(segment | origin, SEGMENT_AND_ORIGIN),
                eth_dst=MULTICAST,
            )
        )
    return flows


def vrf_ports(ports: Iterable[SegmentPort]) -> Mapping[int, list[SegmentPort]]:
    """Local ports by VRF segment, by ofport."""
    out: dict[int, list[SegmentPort]] = {}
    for p in sorted(ports, key=lambda p: p.ofport):
        out.setdefault(p.segment, []).append(p)
    return out
