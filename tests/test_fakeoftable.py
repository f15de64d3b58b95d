"""The fake switch itself: a walker that is wrong would make every datapath test lie."""

from __future__ import annotations

import pytest
from fakeoftable import (
    CT_ESTABLISHED,
    CT_NEW,
    CT_TRACKED,
    OFPP_IN_PORT,
    OFPVID_PRESENT,
    NotModelled,
    walk,
)

from datapath.flows import Flow, flow

MAC_1, MAC_2 = "02:00:00:00:00:01", "02:00:00:00:00:02"
PKT = {"in_port": 1, "eth_src": MAC_1, "eth_dst": MAC_2, "eth_type": 0x0800}


def test_the_highest_priority_match_wins_and_a_miss_drops() -> None:
    flows = {
        flow(0, 10, [("output", 5)]),
        flow(0, 100, [("output", 2)], eth_dst=MAC_2),
        flow(0, 200, [("output", 3)], eth_dst=MAC_1),
    }
    assert walk(flows, PKT).outputs == [2]
    assert walk(flows, {**PKT, "eth_dst": "02:00:00:00:00:09"}).outputs == [5]
    result = walk({flow(0, 100, [("output", 2)], eth_dst=MAC_1)}, PKT)
    assert result.outputs == [] and result.dropped_in == [0] and result.path == []


def test_two_best_matches_at_one_priority_are_an_error() -> None:
    flows = {flow(0, 100, [("output", 2)], eth_dst=MAC_2), flow(0, 100, [], in_port=1)}
    with pytest.raises(NotModelled, match="overlapping"):
        walk(flows, PKT)


def test_goto_and_metadata_carry_the_packet_through_tables() -> None:
    flows = {
        flow(0, 100, [("write_metadata", 0x0107, 0x00FF), ("goto", 3)], in_port=1),
        flow(3, 100, [("write_metadata", 0x0200, 0xFF00), ("goto", 7)], metadata=(0x07, 0xFF)),
        flow(7, 100, [("output", 4)], metadata=0x0207),
        flow(7, 0),
    }
    result = walk(flows, PKT)
    assert result.outputs == [4] and result.tables == [0, 3, 7]
    assert "metadata" not in result.sent(4)
    # Without the first write, table 3 has nothing for it.
    assert walk(flows, {**PKT, "in_port": 2}).dropped_in == [0]


def test_goto_backwards_is_refused() -> None:
    # flow() refuses a backward goto, so build the value directly.
    flows = {flow(0, 1, [("goto", 2)]), Flow(2, 1, (), (("goto", 1),))}
    with pytest.raises(NotModelled, match="forward"):
        walk(flows, PKT)


def test_output_never_returns_to_the_in_port_except_through_in_port() -> None:
    flows = {flow(0, 1, [("output", 1), ("output", 2), ("output", OFPP_IN_PORT)])}
    assert walk(flows, PKT).outputs == [2, 1]
    with pytest.raises(NotModelled, match="reserved port"):
        walk({flow(0, 1, [("output", 0xFFFFFFFB)])}, PKT)


def test_edits_apply_to_the_outputs_after_them() -> None:
    flows = {
        flow(
            0,
            1,
            [
                ("output", 2),
                ("move", "eth_src", "eth_dst", 48),
                ("set_field", "eth_src", "02:00:00:00:00:0a"),
                ("push_vlan", 0x8100),
                ("set_field", "vlan_vid", OFPVID_PRESENT | 7),
                ("output", 3),
                ("pop_vlan",),
                ("output", 4),
            ],
        )
    }
    result = walk(flows, PKT)
    assert result.sent(2) == {**PKT, "tunnel_id": 0}
    assert result.sent(3)["eth_dst"] == MAC_1 and result.sent(3)["eth_src"] == "02:00:00:00:00:0a"
    assert result.sent(3)["vlan_vid"] == OFPVID_PRESENT | 7
    assert "vlan_vid" not in result.sent(4)


@pytest.mark.parametrize(
    "action",
    [("pop_vlan",), ("set_field", "vlan_vid", 0x1001), ("group", 1), ("learn", "x")],
)
def test_what_the_walker_cannot_model_raises(action: tuple[object, ...]) -> None:
    with pytest.raises(NotModelled):
        walk({flow(0, 1, [action, ("output", 2)])}, PKT)


def test_masked_address_matches() -> None:
    flows = {
        flow(0, 100, [("output", 2)], ipv6_src="fe80::/10"),
        flow(0, 90, [("output", 3)], ipv4_dst="10.1.0.0/16"),
        flow(0, 80, [("output", 4)], eth_dst=("01:00:00:00:00:00", "01:00:00:00:00:00")),
    }
    assert walk(flows, {**PKT, "ipv6_src": "fe80::1"}).outputs == [2]
    assert walk(flows, {**PKT, "ipv6_src": "fd00::1", "ipv4_dst": "10.2.0.3"}).outputs == []
    assert walk(flows, {**PKT, "ipv6_src": "fd00::1", "ipv4_dst": "10.1.200.3"}).outputs == [3]
    assert walk(flows, {**PKT, "eth_dst": "ff:ff:ff:ff:ff:ff"}).outputs == [4]


def test_ct_recirculates_with_the_state_conntrack_reports() -> None:
    new, est = CT_TRACKED | CT_NEW, CT_TRACKED | CT_ESTABLISHED
    flows = {
        flow(0, 100, [("meter", 7), ("ct", False, 5, 2)], eth_type=0x0800),
        flow(2, 100, [("output", 9)], ct_state=(est, est), ct_zone=5),
        flow(2, 90, [("ct", True, 5, None), ("output", 8)], ct_state=(new, new)),
        flow(2, 0),
    }
    fresh = walk(flows, PKT)
    assert fresh.outputs == [8] and fresh.committed == [5] and fresh.meters == [7]
    assert fresh.tables == [0, 2]
    assert walk(flows, PKT, ct_state=est).outputs == [9]
    assert walk(flows, PKT, ct_state=CT_TRACKED).outputs == []


def test_a_recirculation_loop_is_reported() -> None:
    with pytest.raises(NotModelled, match="loop"):
        walk({flow(0, 1, [("ct", False, 1, 0)])}, PKT)
