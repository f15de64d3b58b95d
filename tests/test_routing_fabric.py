"""Routing mode with BGP (datapath.routing's fabric flows), walked through the fake switch:
tenant A has a VLAN network (routed through the fabric's router) and a VXLAN network
(routed between the hosts' switches), each with an endpoint here and one on host h2. The
host's router port sits on the untagged side of the VLAN uplink."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from routing_states import TUN, VNI_2, VRF_A, arp, ip

from datapath.desired import DesiredState, EndpointState, NetworkState, TunnelState
from datapath.flowmodel import FlowModel
from datapath.local import gateway_mac
from datapath.pipeline import compile_flows
from datapath.policy import GroupState, RuleState
from datapath.routing import ROUTER_MAC
from testbed.fakeoftable import Walk, walk

UPLINK, FABRIC, GWV, GWX = 40, 41, 31, 32
VLAN = 300
NETV = NetworkState(
    "a:vl", VLAN, "10.80.0.0/24", "10.80.0.1", encap="vlan", gateway_ofport=GWV, vrf=VRF_A
)
NETX = NetworkState("a:vx", VNI_2, "10.81.0.0/24", "10.81.0.1", gateway_ofport=GWX, vrf=VRF_A)
V1 = EndpointState("v1", NETV.id, "02:42:0a:50:00:02", "10.80.0.2", ofport=1)
X1 = EndpointState("x1", NETX.id, "02:42:0a:51:00:02", "10.81.0.2", ofport=2)
RV = EndpointState("rv", NETV.id, "02:42:0a:50:00:07", "10.80.0.7", host="h2")
RX = EndpointState("rx", NETX.id, "02:42:0a:51:00:07", "10.81.0.7", host="h2")


def state(fabric: int | None = FABRIC) -> DesiredState:
    return DesiredState(
        networks=[NETV, NETX],
        endpoints=[V1, X1],
        remote_endpoints=[RV, RX],
        tunnels=[TunnelState("h2", TUN)],
        uplink_port=UPLINK,
        fwd_mode="routing",
        fabric_port=fabric,
    )


def go(pkt: dict[str, Any], fabric: int | None = FABRIC) -> Walk:
    return walk(compile_flows(state(fabric)), pkt)


def test_a_remote_endpoint_of_a_vlan_network_is_reached_through_the_host_kernel() -> None:
    # Answered with the router MAC, like any address of the VRF ...
    reply = go(arp(V1, RV.ipv4)).sent(V1.ofport)
    assert (reply["arp_spa"], reply["arp_sha"]) == (RV.ipv4, ROUTER_MAC)
    # ... and routed to the sender's gateway port: the kernel's route from BGP leads to
    # the router. Nothing leaves on the uplink, tagged or not.
    result = go(ip(V1, RV.ipv4))
    assert result.outputs == [GWV]
    assert result.sent(GWV)["eth_dst"] == gateway_mac(NETV.segment)
    # From the VXLAN network of the tenant too, through its own gateway port.
    assert go(ip(X1, RV.ipv4)).outputs == [GWX]


def test_a_vxlan_network_of_the_tenant_is_still_routed_between_the_switches() -> None:
    result = go(ip(V1, RX.ipv4))
    assert result.outputs == [TUN] and result.sent(TUN)["tunnel_id"] == VNI_2


def test_the_router_port_is_the_untagged_side_of_the_uplink() -> None:
    from_router = {
        "in_port": UPLINK,
        "eth_src": "02:00:00:00:00:fe",
        "eth_dst": "ff:ff:ff:ff:ff:ff",
        "eth_type": 0x0806,
    }
    assert go(from_router).outputs == [FABRIC]
    assert go({**from_router, "in_port": FABRIC}).outputs == [UPLINK]
    # A VLAN network's tagged frames from other hosts are not the fabric's: in routing mode
    # with BGP nothing of the network arrives tagged, and what does goes nowhere.
    tagged = {**ip(V1, V1.ipv4, V1.mac), "in_port": UPLINK, "vlan_vid": 0x1000 | VLAN}
    assert go(tagged).outputs == []


def test_without_a_router_port_vlan_networks_are_routed_over_the_uplink() -> None:
    result = go(ip(V1, RV.ipv4), fabric=None)
    assert result.outputs == [UPLINK]
    sent = result.sent(UPLINK)
    assert (sent["vlan_vid"], sent["eth_dst"], sent["ip_ttl"]) == (0x1000 | VLAN, RV.mac, 63)
    assert go({"in_port": UPLINK, "eth_type": 0x0806}, fabric=None).outputs == []


def test_the_router_port_outside_routing_mode_is_ignored() -> None:
    bridge = replace(state(), fwd_mode="bridge", networks=[replace(NETV, vrf=0)], endpoints=[])
    assert compile_flows(bridge) == compile_flows(replace(bridge, fabric_port=None))


def test_the_incremental_model_compiles_what_the_full_compile_does() -> None:
    model = FlowModel()
    model.replace(state(fabric=None))
    model.replace(state())
    assert model.flows() == compile_flows(state())
    model.replace(state(fabric=None))
    assert model.flows() == compile_flows(state(fabric=None))


def test_group_rules_judge_what_comes_over_the_fabric_by_its_address() -> None:
    """A packet from another host's endpoint through the fabric arrives from the host
    kernel with the gateway's MAC: its group is found by its source address, so a rule
    naming that group applies (and one naming another group does not)."""
    web = GroupState("a:web", NETV.id, 11, rules=(RuleState("in", 10, "deny", peer_tag=33),))
    db, other = GroupState("a:db", NETV.id, 33), GroupState("a:other", NETV.id, 44)
    v1, rv = replace(V1, group=web.id), replace(RV, group=db.id)
    st = replace(state(), endpoints=[v1, X1], remote_endpoints=[rv, RX], groups=[web, db, other])
    from_kernel = {
        "in_port": GWV,
        "eth_src": gateway_mac(NETV.segment),
        "eth_dst": ROUTER_MAC,
        "eth_type": 0x0800,
        "ipv4_src": RV.ipv4,
        "ipv4_dst": V1.ipv4,
        "ip_ttl": 62,
    }
    assert walk(compile_flows(st), from_kernel).outputs == []  # denied: from group db
    allowed = replace(st, remote_endpoints=[replace(rv, group=other.id), RX])
    assert walk(compile_flows(allowed), from_kernel).outputs == [V1.ofport]
    # The incremental model agrees with the full compile.
    model = FlowModel()
    model.replace(st)
    assert model.flows() == compile_flows(st)
