"""Where packets go on one host: the compiled pipeline, walked with the fake switch."""

from __future__ import annotations

from typing import Any

import pytest
from datapath_states import (
    BROADCAST,
    E1,
    E2,
    E3,
    E4,
    GW_A_IP,
    GW_A_MAC,
    GW_A_PORT,
    NET_A,
    arp_request,
    ipv4,
    world,
)

from datapath.flows import Flow
from datapath.pipeline import (
    ETH_TYPE_IPV6,
    PIPELINE,
    DesiredState,
    EndpointState,
    compile_flows,
)
from testbed.fakeoftable import walk


@pytest.fixture(scope="module")
def flows() -> set[Flow]:
    return compile_flows(world())


def test_same_network_unicast_reaches_only_the_destination(flows: set[Flow]) -> None:
    assert walk(flows, ipv4(E1, E2.mac, E2.ipv4)).outputs == [E2.ofport]
    assert walk(flows, ipv4(E2, E1.mac, E1.ipv4)).outputs == [E1.ofport]


def test_broadcast_reaches_every_other_port_of_the_network(flows: set[Flow]) -> None:
    pkt = ipv4(E1, BROADCAST, "10.1.0.255")
    assert sorted(walk(flows, pkt).outputs) == [E2.ofport, E4.ofport, GW_A_PORT]


def test_multicast_and_unknown_unicast_flood_within_the_network(flows: set[Flow]) -> None:
    for dst in ("01:00:5e:00:00:01", "02:99:99:99:99:99"):
        assert walk(flows, ipv4(E2, dst, "10.1.0.77")).ports == {E1.ofport, E4.ofport, GW_A_PORT}


def test_broadcast_from_each_port_reaches_all_the_others_of_its_network(
    flows: set[Flow],
) -> None:
    a_ports = {E1.ofport, E2.ofport, E4.ofport, GW_A_PORT}
    for src in (E1, E2, E4):
        assert walk(flows, ipv4(src, BROADCAST, "10.1.0.255")).ports == a_ports - {src.ofport}


def test_arp_request_for_a_known_address_is_answered_by_the_switch(flows: set[Flow]) -> None:
    result = walk(flows, arp_request(E1, E2.ipv4))
    assert result.outputs == [E1.ofport]  # back to the asker; E2 never sees it
    reply = result.sent(E1.ofport)
    assert (reply["arp_op"], reply["arp_sha"], reply["arp_spa"]) == (2, E2.mac, E2.ipv4)
    assert (reply["eth_src"], reply["eth_dst"]) == (E2.mac, E1.mac)
    assert (reply["arp_tha"], reply["arp_tpa"]) == (E1.mac, E1.ipv4)
    # The gateway answers for itself: the host's kernel learns the endpoint's MAC.
    assert walk(flows, arp_request(E1, GW_A_IP)).outputs == [GW_A_PORT]


def test_arp_flood_mode_sends_a_request_for_a_known_address_to_its_owner_only() -> None:
    state = world()
    state.arp_mode = "flood"
    flows = compile_flows(state)
    assert walk(flows, arp_request(E1, E2.ipv4)).outputs == [E2.ofport]
    assert walk(flows, arp_request(E1, GW_A_IP)).outputs == [GW_A_PORT]


def test_arp_request_for_an_unknown_address_floods(flows: set[Flow]) -> None:
    assert walk(flows, arp_request(E1, "10.1.0.99")).ports == {E2.ofport, E4.ofport, GW_A_PORT}


def test_gratuitous_arp_floods_to_the_others(flows: set[Flow]) -> None:
    assert walk(flows, arp_request(E1, E1.ipv4)).ports == {E2.ofport, E4.ofport, GW_A_PORT}


def test_networks_never_exchange_packets(flows: set[Flow]) -> None:
    a_ports = {E1.ofport, E2.ofport, E4.ofport, GW_A_PORT}
    # Unicast to a MAC of the other network is unknown here: it floods in net-a only.
    assert E3.ofport not in walk(flows, ipv4(E1, E3.mac, E3.ipv4)).ports
    assert walk(flows, ipv4(E3, E1.mac, E1.ipv4)).ports == set()
    assert walk(flows, ipv4(E3, BROADCAST, "10.1.0.255")).ports == set()
    assert walk(flows, arp_request(E3, E1.ipv4)).ports == set()
    assert E3.ofport not in walk(flows, arp_request(E1, E3.ipv4)).ports
    assert walk(flows, ipv4(E3, GW_A_MAC, GW_A_IP)).ports.isdisjoint(a_ports)


def test_spoofed_sources_are_dropped(flows: set[Flow]) -> None:
    spoofs = [
        ipv4(E1, E2.mac, E2.ipv4, eth_src=E4.mac),
        ipv4(E1, E2.mac, E2.ipv4, ipv4_src=E4.ipv4),
        ipv4(E1, E2.mac, E2.ipv4, ipv4_src="10.9.9.9"),
        arp_request(E1, E2.ipv4, arp_spa=E4.ipv4),
        arp_request(E1, E2.ipv4, arp_sha=E4.mac),
        arp_request(E1, E2.ipv4, eth_src=E4.mac, arp_sha=E4.mac),
        ipv4(E1, E2.mac, E2.ipv4, eth_type=0x88CC),  # other ethertypes
        ipv4(E1, E2.mac, E2.ipv4, in_port=99),  # a port we do not know
    ]
    for pkt in spoofs:
        result = walk(flows, pkt)
        assert result.outputs == [], (pkt, result.path)


def test_ipv6_only_from_endpoints_with_an_ipv6_address(flows: set[Flow]) -> None:
    def v6(src: EndpointState, src_ip: str) -> dict[str, Any]:
        return {
            "in_port": src.ofport,
            "eth_src": src.mac,
            "eth_dst": E2.mac,
            "eth_type": ETH_TYPE_IPV6,
            "ipv6_src": src_ip,
        }

    assert walk(flows, v6(E1, "fd00::1")).outputs == [E2.ofport]
    assert walk(flows, v6(E1, "fe80::1")).outputs == [E2.ofport]
    assert walk(flows, v6(E1, "::")).outputs == [E2.ofport]
    assert walk(flows, v6(E1, "fd00::99")).outputs == []
    assert walk(flows, v6(E2, "fe80::2")).outputs == []


def test_gateway_port_is_part_of_its_network(flows: set[Flow]) -> None:
    gw = EndpointState("gw", NET_A, GW_A_MAC, GW_A_IP, ofport=GW_A_PORT)
    assert walk(flows, ipv4(E1, GW_A_MAC, "8.8.8.8")).outputs == [GW_A_PORT]
    # The host routes for others: any source IP, but only its own MAC.
    assert walk(flows, ipv4(gw, E1.mac, E1.ipv4, ipv4_src="192.0.2.7")).outputs == [E1.ofport]
    assert walk(flows, ipv4(gw, E1.mac, E1.ipv4, eth_src=E2.mac)).outputs == []
    assert walk(flows, arp_request(gw, E2.ipv4)).sent(GW_A_PORT)["arp_sha"] == E2.mac


def test_everything_is_dropped_without_state() -> None:
    empty = compile_flows(DesiredState())
    assert {f.table for f in empty} == {t.id for t in PIPELINE}
    assert walk(empty, ipv4(E1, E2.mac, E2.ipv4)).outputs == []


def test_removed_endpoint_is_unreachable() -> None:
    state = world()
    state.endpoints.remove(E2)
    flows = compile_flows(state)
    assert walk(flows, ipv4(E1, E2.mac, E2.ipv4)).ports == {E4.ofport, GW_A_PORT}
    assert walk(flows, ipv4(E2, E1.mac, E1.ipv4)).outputs == []
