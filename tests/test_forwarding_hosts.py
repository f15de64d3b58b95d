"""Where packets go between hosts: tunnels, VLANs and origins, walked with the fake switch."""

from __future__ import annotations

import pytest
from datapath_states import (
    BROADCAST,
    E1,
    E2,
    E3,
    E5,
    GW_A_IP,
    GW_A_MAC,
    GW_A_PORT,
    NET_A,
    R1,
    R2,
    R3,
    R4,
    TUN_H2,
    TUN_H3,
    UPLINK,
    VLAN_C,
    VNI_A,
    VNI_B,
    arp_request,
    cluster,
    from_tunnel,
    ipv4,
)

from datapath.flows import Flow
from datapath.pipeline import (
    ETH_TYPE_IPV4,
    OFPVID_PRESENT,
    EndpointState,
    compile_flows,
)
from testbed.fakeoftable import walk


@pytest.fixture(scope="module")
def multi() -> set[Flow]:
    return compile_flows(cluster())


def test_unicast_to_another_hosts_endpoint_goes_through_its_tunnel(multi: set[Flow]) -> None:
    result = walk(multi, ipv4(E1, R1.mac, R1.ipv4))
    assert result.outputs == [TUN_H2]
    assert result.sent(TUN_H2)["tunnel_id"] == VNI_A


def test_broadcast_reaches_only_hosts_with_endpoints_in_the_network(multi: set[Flow]) -> None:
    result = walk(multi, ipv4(E1, BROADCAST, "10.1.0.255"))
    assert result.ports == {E2.ofport, GW_A_PORT, TUN_H2}  # h3 has no endpoint of net A
    assert result.sent(TUN_H2)["tunnel_id"] == VNI_A
    result = walk(multi, ipv4(E3, BROADCAST, "10.1.0.255"))
    assert result.ports == {TUN_H3} and result.sent(TUN_H3)["tunnel_id"] == VNI_B


def test_what_arrives_from_a_host_stays_on_this_host(multi: set[Flow]) -> None:
    bcast = from_tunnel(TUN_H2, VNI_A, R1.mac, BROADCAST)
    assert walk(multi, bcast).ports == {E1.ofport, E2.ofport}  # no gateway, no tunnel back
    assert walk(multi, from_tunnel(TUN_H2, VNI_A, R1.mac, E2.mac)).outputs == [E2.ofport]
    # ... and never crosses into another network, whatever MAC it is sent to.
    assert walk(multi, from_tunnel(TUN_H2, VNI_A, R1.mac, E3.mac)).ports <= {E1.ofport, E2.ofport}
    assert walk(multi, from_tunnel(TUN_H3, VNI_B, R2.mac, BROADCAST)).ports == {E3.ofport}
    assert walk(multi, from_tunnel(TUN_H2, 7777, R1.mac, E2.mac)).outputs == []  # unknown VNI
    assert GW_A_PORT not in walk(multi, from_tunnel(TUN_H2, VNI_A, R1.mac, GW_A_MAC)).ports


def test_the_gateway_talks_only_to_this_hosts_endpoints(multi: set[Flow]) -> None:
    gw = EndpointState("gw", NET_A, GW_A_MAC, GW_A_IP, ofport=GW_A_PORT)
    assert walk(multi, ipv4(gw, R1.mac, R1.ipv4)).ports == {E1.ofport, E2.ofport}
    assert TUN_H2 not in walk(multi, ipv4(gw, BROADCAST, "10.1.0.255")).ports
    assert walk(multi, arp_request(gw, R1.ipv4)).ports == {E1.ofport, E2.ofport}


def test_arp_for_another_hosts_endpoint(multi: set[Flow]) -> None:
    reply = walk(multi, arp_request(E1, R1.ipv4)).sent(E1.ofport)
    assert (reply["arp_op"], reply["arp_sha"], reply["arp_spa"]) == (2, R1.mac, R1.ipv4)
    flood_mode = compile_flows(cluster("flood"))
    result = walk(flood_mode, arp_request(E1, R1.ipv4))
    assert result.outputs == [TUN_H2] and result.sent(TUN_H2)["tunnel_id"] == VNI_A


def test_vlan_network_tags_frames_on_the_uplink(multi: set[Flow]) -> None:
    result = walk(multi, ipv4(E5, R3.mac, R3.ipv4))
    assert result.outputs == [UPLINK]
    assert result.sent(UPLINK)["vlan_vid"] == OFPVID_PRESENT | VLAN_C
    # The VLAN may hold hosts netplugin does not know: its floods always reach the uplink.
    assert walk(multi, ipv4(E5, BROADCAST, "10.3.0.255")).ports == {UPLINK}
    tagged = {
        "in_port": UPLINK,
        "vlan_vid": OFPVID_PRESENT | VLAN_C,
        "eth_src": R3.mac,
        "eth_dst": E5.mac,
        "eth_type": ETH_TYPE_IPV4,
    }
    result = walk(multi, tagged)
    assert result.outputs == [E5.ofport] and "vlan_vid" not in result.sent(E5.ofport)
    assert walk(multi, {**tagged, "vlan_vid": OFPVID_PRESENT | 301}).outputs == []
    assert walk(multi, {**tagged, "eth_dst": BROADCAST}).ports == {E5.ofport}


def test_remote_endpoints_of_networks_not_on_this_host_cost_no_flows(multi: set[Flow]) -> None:
    state = cluster()
    state.remote_endpoints.remove(R4)
    assert compile_flows(state) == multi
