"""Routing mode's flows (issue 25, datapath.routing), walked through the fake switch: two
networks of tenant A and one of tenant B on this host, and an endpoint of A's second network
on another host. A tenant's networks route to each other through one router MAC (TTL - 1,
MACs rewritten), once, at the sender's host; another tenant's never; what leaves the
tenant goes to the sender's network's gateway port; policies judge the routed packet."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from datapath_states import flows_only
from routing_states import (
    A1,
    A2,
    B1,
    DB,
    DENY_WEB_TO_DB,
    GW1,
    GW2,
    GW3,
    NET1,
    NET2,
    NET3,
    RA2,
    TUN,
    VNI_1,
    VNI_2,
    VNI_3,
    VRF_A,
    VRF_B,
    WEB,
    arp,
    ip,
    state,
)

from datapath.desired import VRF_ZONE_BASE, DesiredState, EndpointState
from datapath.flowmodel import FlowModel
from datapath.local import gateway_mac, vrf_segment
from datapath.pipeline import ETH_TYPE_IPV4, compile_flows
from datapath.policy import GroupState
from datapath.routing import OFPP_CONTROLLER, ROUTER_MAC
from datapath.tables import CONNTRACK, ROUTE
from testbed.fakeoftable import FakeConntrack, Walk, walk


def go(pkt: dict[str, Any], *groups: GroupState, ct: FakeConntrack | None = None) -> Walk:
    return walk(compile_flows(state(*groups)), pkt, conntrack=ct)


def test_a_packet_to_another_network_of_the_tenant_is_routed_to_its_local_endpoint() -> None:
    result = go(ip(A1, A2.ipv4))
    assert result.outputs == [A2.ofport]
    sent = result.sent(A2.ofport)
    assert (sent["eth_src"], sent["eth_dst"], sent["ip_ttl"]) == (ROUTER_MAC, A2.mac, 63)
    assert ROUTE.id in result.tables
    # Conntrack in the VRF's zone, one for the tenant on this host.
    assert result.committed == [VRF_ZONE_BASE | VRF_A]


def test_a_packet_to_a_remote_endpoint_leaves_with_its_networks_vni_and_mac() -> None:
    result = go(ip(A1, RA2.ipv4))
    assert result.outputs == [TUN]
    sent = result.sent(TUN)
    assert (sent["tunnel_id"], sent["eth_dst"], sent["ip_ttl"]) == (VNI_2, RA2.mac, 63)
    assert sent["eth_src"] == A1.mac  # the sender's MAC stays to the last hop (group tags)


def test_a_packet_from_another_host_is_not_routed_twice() -> None:
    arrived = {
        **ip(A1, A2.ipv4),
        "in_port": TUN,
        "tunnel_id": VNI_2,
        "eth_src": RA2.mac,
        "eth_dst": A2.mac,
        "ipv4_src": RA2.ipv4,
        "ip_ttl": 63,
    }
    result = go(arrived)
    assert result.outputs == [A2.ofport]
    assert ROUTE.id not in result.tables
    sent = result.sent(A2.ofport)
    assert (sent["eth_src"], sent["ip_ttl"]) == (ROUTER_MAC, 63)
    # What another host sends to the router MAC is not routed here: it goes nowhere.
    assert go({**arrived, "eth_dst": ROUTER_MAC}).outputs == []


@pytest.mark.parametrize("target", ["10.1.0.1", "10.2.0.1", A2.ipv4, RA2.ipv4])
def test_arp_for_any_address_of_the_vrf_is_answered_with_the_router_mac(target: str) -> None:
    result = go(arp(A1, target))
    assert result.outputs == [A1.ofport]
    reply = result.sent(A1.ofport)
    assert (reply["arp_op"], reply["arp_spa"], reply["arp_sha"]) == (2, target, ROUTER_MAC)
    assert (reply["eth_src"], reply["eth_dst"], reply["arp_tpa"]) == (ROUTER_MAC, A1.mac, A1.ipv4)


def test_another_tenant_gets_no_answer_and_no_route() -> None:
    for target in (A2.ipv4, RA2.ipv4):
        result = go(arp(B1, target))
        assert B1.ofport not in result.outputs  # no reply; its VRF's broadcast stays in it
        assert set(result.outputs) <= {GW3}
    for target in (A2.ipv4, RA2.ipv4, A1.ipv4, "10.2.0.1"):
        result = go(ip(B1, target))
        assert result.outputs == [], target
    # Nor does tenant A reach B's endpoint, which sits in A's net1 subnet.
    assert go(ip(A1, B1.ipv4)).outputs == []


def test_an_outside_address_goes_to_the_senders_gateway_port() -> None:
    for src, port, net in ((A1, GW1, NET1), (A2, GW2, NET2), (B1, GW3, NET3)):
        result = go(ip(src, "8.8.8.8"))
        assert result.outputs == [port]
        sent = result.sent(port)
        # The host kernel routes it on, and decrements the TTL itself.
        assert (sent["eth_dst"], sent["ip_ttl"]) == (gateway_mac(net.segment), 64)
    # A gateway address is the host's: delivered to that gateway port, no hop counted.
    result = go(ip(A1, "10.2.0.1"))
    assert result.outputs == [GW2] and result.sent(GW2)["ip_ttl"] == 64


def test_the_host_kernel_reaches_its_endpoints_through_the_router() -> None:
    from_kernel = {
        "in_port": GW2,
        "eth_src": gateway_mac(NET2.segment),
        "eth_dst": ROUTER_MAC,
        "eth_type": ETH_TYPE_IPV4,
        "ipv4_src": "8.8.8.8",
        "ipv4_dst": A2.ipv4,
        "ip_ttl": 60,
    }
    result = go(from_kernel)
    assert result.outputs == [A2.ofport] and result.sent(A2.ofport)["ip_ttl"] == 59


def test_a_deny_rule_between_groups_of_two_networks_drops_the_routed_packet() -> None:
    db = replace(DB, rules=(DENY_WEB_TO_DB,))
    ct = FakeConntrack()
    assert go(ip(A1, A2.ipv4), WEB, db, ct=ct).outputs == []
    # The other way is allowed, and its reply passes as established.
    ct = FakeConntrack()
    there = go(ip(A2, A1.ipv4), WEB, db, ct=ct)
    assert there.outputs == [A1.ofport]
    back = go(ip(A1, A2.ipv4, ipv4_src=A1.ipv4), WEB, db, ct=ct)
    assert back.outputs == [A2.ofport]
    # Without the rule the first packet passes.
    assert go(ip(A1, A2.ipv4), WEB, DB, ct=FakeConntrack()).outputs == [A2.ofport]


def test_ttl_1_is_dropped_in_the_route_table() -> None:
    for ttl in (1, 0):
        result = go(ip(A1, A2.ipv4, ip_ttl=ttl))
        assert result.outputs == [] and result.dropped_in == [ROUTE.id]
    assert go(ip(A1, A2.ipv4, ip_ttl=2)).sent(A2.ofport)["ip_ttl"] == 1


def test_broadcast_stays_in_the_vrf_on_this_host_and_unknown_unicast_is_dropped() -> None:
    result = go(ip(A1, "10.1.0.255", "ff:ff:ff:ff:ff:ff"))
    assert set(result.outputs) == {A2.ofport, GW1, GW2}  # no tunnel, no tenant B
    assert go(ip(A1, A2.ipv4, "02:42:99:99:99:99")).outputs == []


def test_classify_marks_the_tenants_vrf_for_its_ports_and_vnis() -> None:
    flows = flows_only(compile_flows(state()))
    marks = {
        dict(f.match).get("in_port") or dict(f.match).get("tunnel_id"): a[1]
        for f in flows
        if f.table == 0
        for a in f.actions
        if a[0] == "write_metadata"
    }
    seg_a, seg_b = vrf_segment(VRF_A), vrf_segment(VRF_B)
    assert marks[A1.ofport] == marks[A2.ofport] == seg_a
    assert marks[B1.ofport] == seg_b
    assert {marks[VNI_1], marks[VNI_2], marks[VNI_3]} == {seg_a | 1 << 32, seg_b | 1 << 32}
    assert marks[VNI_1] == marks[VNI_2] == seg_a | 1 << 32


def test_routing_mode_needs_every_networks_vrf_and_round_trips() -> None:
    bad = state()
    bad.networks = [NET1, replace(NET2, vrf=0), NET3]
    with pytest.raises(ValueError, match="network a:net2: routing mode needs"):
        compile_flows(bad)
    # Bridge mode does not need it.
    compile_flows(replace(bad, fwd_mode="bridge"))
    # Two networks of one tenant share one VRF: no address twice, no subnet twice.
    same_ip = replace(A2, id="x", ofport=9, network_id=NET1.id, mac="02:42:00:00:00:99")
    with pytest.raises(ValueError, match=re.escape("both use IP 10.2.0.2")):
        compile_flows(replace(state(), endpoints=[A1, A2, B1, same_ip]))
    twin = replace(NET2, id="a:twin", tag=6009, subnet=NET1.subnet, gateway_ofport=None)
    with pytest.raises(ValueError, match=re.escape("both use subnet 10.1.0.0/24")):
        compile_flows(replace(state(), networks=[NET1, NET2, NET3, twin]))
    assert DesiredState.from_dict(state().to_dict()) == state()


def test_the_model_agrees_in_routing_mode_and_back() -> None:
    model = FlowModel()
    model.replace(state(WEB, DB))
    assert model.flows() == compile_flows(state(WEB, DB))
    bridge = replace(state(WEB, DB), fwd_mode="bridge")
    model.replace(bridge)
    assert model.flows() == compile_flows(bridge)


def test_route_flows_of_one_example() -> None:
    """The route table of this host for tenant A, as the report shows it."""
    route = sorted(
        (f for f in flows_only(compile_flows(state())) if f.table == ROUTE.id),
        key=lambda f: (-f.priority, str(f)),
    )
    seg = vrf_segment(VRF_A)
    host = [f for f in route if ("dec_ttl",) in f.actions]
    assert {dict(f.match)["ipv4_dst"] for f in host} == {A1.ipv4, A2.ipv4, RA2.ipv4, B1.ipv4}
    assert all(f.actions[-1] == ("goto", CONNTRACK.id) for f in host)
    a2 = next(f for f in host if dict(f.match)["ipv4_dst"] == A2.ipv4)
    assert dict(a2.match)["metadata"] == (seg, 0xFFFF_FFFF)
    assert a2.actions == (("set_field", "eth_dst", A2.mac), ("dec_ttl",), ("goto", CONNTRACK.id))


def ns(src: EndpointState, src6: str, target: str) -> dict[str, Any]:
    return {
        "in_port": src.ofport,
        "eth_src": src.mac,
        "eth_dst": "33:33:ff:00:00:01",
        "eth_type": 0x86DD,
        "ipv6_src": src6,
        "ipv6_dst": "ff02::1:ff00:1",
        "ip_proto": 58,
        "icmpv6_type": 135,
        "ipv6_nd_target": target,
    }


def test_neighbour_solicitations_for_the_vrf_go_to_the_controller() -> None:
    """IPv6's ARP: a solicitation for an address of the VRF (a local or remote endpoint, a
    gateway) goes to the controller, which answers with the router MAC (datapath.ndp);
    one for the sender's own address (duplicate address detection) and another tenant's
    go on as before."""
    a1 = replace(A1, ipv6="fd01::2")
    a2 = replace(A2, ipv6="fd02::2")
    b1 = replace(B1, ipv6="fd01::9")
    ra2 = replace(RA2, ipv6="fd02::7")
    net1 = replace(NET1, ipv6_subnet="fd01::/64", ipv6_gateway="fd01::1")
    net3 = replace(NET3, ipv6_subnet="fd01::/64", ipv6_gateway="fd01::1")
    st = replace(
        state(), networks=[net1, NET2, net3], endpoints=[a1, a2, b1], remote_endpoints=[ra2]
    )
    flows = compile_flows(st)
    for target in ("fd02::2", "fd02::7", "fd01::1"):
        assert walk(flows, ns(a1, "fd01::2", target)).outputs == [OFPP_CONTROLLER], target
    # The host kernel (a gateway port) asks for this host's endpoints only.
    from_gw = {**ns(a1, "fd01::1", "fd01::2"), "in_port": GW1, "eth_src": gateway_mac(NET1.segment)}
    assert walk(flows, from_gw).outputs == [OFPP_CONTROLLER]
    assert OFPP_CONTROLLER not in walk(flows, {**from_gw, "ipv6_nd_target": "fd02::7"}).outputs
    # Duplicate address detection and another tenant's solicitation are not answered.
    assert OFPP_CONTROLLER not in walk(flows, ns(a1, "::", "fd01::2")).outputs
    assert OFPP_CONTROLLER not in walk(flows, ns(b1, "fd01::9", "fd02::2")).outputs
    # IPv6 to the router MAC is routed like IPv4: the remote endpoint's /128, one hop.
    pkt = {**ip(a1, ""), "eth_type": 0x86DD, "ipv6_src": "fd01::2", "ipv6_dst": "fd02::7"}
    pkt.pop("ipv4_src"), pkt.pop("ipv4_dst")
    result = walk(flows, pkt)
    assert result.outputs == [TUN] and result.sent(TUN)["eth_dst"] == ra2.mac
