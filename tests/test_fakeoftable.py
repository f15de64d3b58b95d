"""The fake switch itself: a walker that is wrong would make every datapath test lie."""

from __future__ import annotations

import pytest

from datapath.flows import Flow, flow, group
from testbed.fakeoftable import (
    CT_DNAT,
    CT_ESTABLISHED,
    CT_INVALID,
    CT_NEW,
    CT_REPLY,
    CT_SNAT,
    CT_TRACKED,
    OFPP_IN_PORT,
    OFPVID_PRESENT,
    FakeConntrack,
    NotModelled,
    walk,
)

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


# A stateful pipeline as issue 10's: table 0 puts IP through ct in the zone of reg6 and
# resumes in 2; new connections to port 80 are committed (marked 7), other new ones dropped,
# established ones and replies pass.
TRK, NEW, EST, RPL, INV = CT_TRACKED, CT_NEW, CT_ESTABLISHED, CT_REPLY, CT_INVALID
ZONE = ("reg", "reg6", 0, 16)
STATEFUL = {
    flow(0, 100, [("set_field", "reg6", 0x8000_0009), ("goto", 1)], eth_type=0x0800),
    flow(0, 90, [("output", 9)]),
    flow(1, 100, [("ct", False, ZONE, 2)]),
    flow(2, 100, [("output", 9)], ct_state=(TRK | EST, TRK | EST)),
    flow(2, 90, [("drop",)], ct_state=(TRK | INV, TRK | INV)),
    flow(
        2,
        80,
        [("ct", True, ZONE, None, [("set_field", "ct_mark", 7)]), ("output", 9)],
        ct_state=(TRK | NEW, TRK | NEW),
        tcp_dst=80,
    ),
    flow(2, 0),
}
A, B = "10.77.0.1", "10.77.0.2"
TCP = {**PKT, "ip_proto": 6}
SYN = {**TCP, "ipv4_src": A, "ipv4_dst": B, "tcp_src": 40000, "tcp_dst": 80}
REPLY = {**TCP, "in_port": 3, "ipv4_src": B, "ipv4_dst": A, "tcp_src": 80, "tcp_dst": 40000}


def test_conntrack_tells_a_connection_s_packets_from_unsolicited_ones() -> None:
    ct = FakeConntrack()
    syn = walk(STATEFUL, SYN, conntrack=ct)
    assert syn.outputs == [9] and syn.committed == [9]  # zone 9: the low 16 bits of reg6
    # The commit's mark is the connection's: the packets after it see it, the SYN does not.
    assert syn.sent(9)["ct_state"] == TRK | NEW and syn.sent(9).get("ct_mark", 0) == 0
    assert syn.sent(9)["reg6"] == 0x8000_0009  # registers survive the recirculation
    reply = walk(STATEFUL, REPLY, conntrack=ct)
    assert reply.outputs == [9] and reply.committed == []
    assert reply.sent(9)["ct_state"] == TRK | EST | RPL and reply.sent(9)["ct_mark"] == 7
    ack = walk(STATEFUL, SYN, conntrack=ct)
    assert ack.sent(9)["ct_state"] == TRK | EST
    # Unsolicited: B opening to A's port 80 is a connection of its own; port 22 is not let in.
    assert walk(STATEFUL, {**REPLY, "tcp_src": 22}, conntrack=ct).outputs == []
    assert walk(STATEFUL, {**SYN, "tcp_dst": 22}, conntrack=ct).outputs == []
    assert len(ct.connections) == 1
    # Another zone is another table: the same packets there are new.
    other = {**SYN, "in_port": 1, "reg6": 0}
    flows = {f for f in STATEFUL if f.table} | {flow(0, 100, [("goto", 1)])}
    assert walk(flows, {**REPLY, "tcp_src": 80}, conntrack=ct).outputs == []
    assert walk(flows, other, conntrack=ct).committed == [0]


def test_a_retransmitted_syn_is_new_until_the_reply() -> None:
    ct = FakeConntrack()
    walk(STATEFUL, SYN, conntrack=ct)
    again = walk(STATEFUL, SYN, conntrack=ct)
    assert again.sent(9)["ct_state"] == TRK | NEW and again.committed == [9]
    assert len(ct.connections) == 1  # committing again changes nothing


def test_conntrack_of_non_ip_and_of_udp_and_icmp() -> None:
    ct = FakeConntrack()
    flows = {
        flow(0, 100, [("ct", True, 3, 2)]),
        flow(2, 100, [("output", 9)], ct_state=(TRK | EST, TRK | EST)),
        flow(2, 90, [("output", 8)], ct_state=(TRK | NEW, TRK | NEW)),
        flow(2, 80, [("output", 7)], ct_state=(TRK | INV, TRK | INV)),
    }
    assert walk(flows, {**PKT, "eth_type": 0x0806}, conntrack=ct).outputs == [7]
    ping = {**PKT, "ip_proto": 1, "ipv4_src": A, "ipv4_dst": B}
    pong = {**ping, "in_port": 2, "ipv4_src": B, "ipv4_dst": A}
    assert walk(flows, ping, conntrack=ct).outputs == [8]
    assert walk(flows, pong, conntrack=ct).outputs == [9]
    v6 = {**PKT, "eth_type": 0x86DD, "ip_proto": 17, "ipv6_src": "fd00::1", "ipv6_dst": "fd00::2"}
    query = {**v6, "udp_src": 5353, "udp_dst": 53}
    answer = {**query, "in_port": 2, "ipv6_src": "FD00::2", "ipv6_dst": "fd00::1"}
    assert walk(flows, query, conntrack=ct).outputs == [8]
    assert walk(flows, {**answer, "udp_src": 53, "udp_dst": 5353}, conntrack=ct).outputs == [9]
    assert walk(flows, {**answer, "udp_src": 54, "udp_dst": 5353}, conntrack=ct).outputs == [8]


def test_registers_read_zero_until_set_and_move_like_fields() -> None:
    flows = {
        flow(0, 100, [("move", "reg5", "reg7", 32), ("goto", 1)]),
        flow(1, 100, [("output", 2)], reg7=0, ct_state=0),
        flow(1, 90, [("output", 3)], reg7=(1 << 31, 1 << 31)),
    }
    assert walk(flows, PKT).outputs == [2]
    assert walk(flows, {**PKT, "reg5": 0x8000_0001}).outputs == [3]


def test_nat_binds_at_commit_and_translates_both_directions() -> None:
    vip, provider = "10.77.0.100", "10.77.0.3"
    dnat = ("nat", "dst", provider, None, 8080, None, ())
    unnat = ("nat", "", None, None, None, None, ())
    to_vip = {**SYN, "ipv4_dst": vip}
    flows = {
        # New connections to the VIP are bound; everything else meets ct(nat) first.
        flow(0, 10, [("ct", False, 1, 1, [unnat])], eth_type=0x0800),
        flow(
            1,
            10,
            [("ct", True, 1, None, [dnat]), ("output", 3)],
            ct_state=(0x21, 0x21),
            ipv4_dst=vip,
            eth_type=0x0800,
        ),
        flow(1, 5, [("output", 3)], ct_state=(0x20, 0x28)),
        flow(1, 6, [("output", 1)], ct_state=(0x28, 0x28)),
    }
    ct = FakeConntrack()
    first = walk(flows, to_vip, conntrack=ct)
    assert first.sent(3)["ipv4_dst"] == provider and first.sent(3)["tcp_dst"] == 8080
    reply = {**REPLY, "ipv4_src": provider, "tcp_src": 8080}
    back = walk(flows, reply, conntrack=ct)
    sent = back.sent(1)
    assert (sent["ipv4_src"], sent["tcp_src"], sent["ct_state"] & CT_SNAT) == (vip, 80, CT_SNAT)
    again = walk(flows, to_vip, conntrack=ct)  # established: DNATed by the plain ct(nat)
    assert again.sent(3)["ipv4_dst"] == provider and again.sent(3)["ct_state"] & CT_DNAT


def test_a_select_group_runs_one_bucket_on_a_copy() -> None:
    g = group(7, [[("output", 2)], [("output", 3)]])
    flows = {g, flow(0, 1, [("group", 7)])}
    assert walk(flows, PKT, choose=lambda _g, _h: 1).outputs == [3]
    assert walk(flows, PKT, choose=lambda _g, _h: 0).outputs == [2]
    assert walk({group(7, []), flow(0, 1, [("group", 7)])}, PKT).outputs == []
    with pytest.raises(NotModelled, match="group 8 does not exist"):
        walk({flow(0, 1, [("group", 8)])}, PKT)


def test_dec_ttl_decrements_and_drops_at_one_as_ovs_would() -> None:
    flows = {flow(0, 100, [("dec_ttl",), ("output", 2)]), flow(0, 0)}
    assert walk(flows, {**PKT, "ip_ttl": 5}).sent(2)["ip_ttl"] == 4
    assert walk(flows, PKT).sent(2)["ip_ttl"] == 63  # 64 unless the packet says
    for ttl in (1, 0):
        result = walk(flows, {**PKT, "ip_ttl": ttl})
        # OVS sends it to the controller, which does not listen: it goes nowhere.
        assert result.outputs == [] and result.dropped_in == [0]
    v6 = {**PKT, "eth_type": 0x86DD, "ipv6_hlimit": 2}
    assert walk(flows, v6).sent(2)["ipv6_hlimit"] == 1
    assert walk(flows, {**v6, "ipv6_hlimit": 1}).outputs == []
    with pytest.raises(NotModelled, match="not IP"):
        walk(flows, {**PKT, "eth_type": 0x0806})
