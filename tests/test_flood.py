"""A segment's flood group (datapath.flood): its ids, its split into child groups when one
group mod cannot hold its endpoints, the order those are written in, and where a flood
goes through it."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from datapath_states import BROADCAST, E1, E2, GW_A_PORT, NET_A, TUN_H2, VNI_A, cluster, ipv4
from os_ken.ofproto import ofproto_protocol
from os_ken.ofproto import ofproto_v1_5 as ofp

from datapath.flood import (
    FLOOD_BUCKETS,
    FLOOD_PARTS,
    FLOOD_SPLIT,
    SEGMENT_LIMIT,
    flood_action,
    flood_group_id,
    flood_groups,
)
from datapath.flows import FlowDiff, Group, flow, group
from datapath.local import VLAN_SEGMENT_BASE, vrf_segment
from datapath.ofcodec import group_mod
from datapath.pipeline import (
    FORWARD,
    FROM_REMOTE,
    PIPELINE,
    PRIO_FLOOD,
    SEGMENT_AND_ORIGIN,
    EndpointState,
    compile_flows,
)
from datapath.services import MAX_TAG, PORTS_PER_SERVICE
from datapath.tables import write_plan
from testbed.fakeoftable import walk

MAX_MESSAGE = 65_535  # an OpenFlow message's length is 16 bits


def _encoded(g: Group) -> int:
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    mod = group_mod(dp, g, ofp.OFPGC_MODIFY)
    mod.set_xid(1)
    mod.serialize()
    return len(mod.buf)


def test_flood_group_ids_never_meet_a_services_and_stay_valid_group_ids() -> None:
    highest_service = MAX_TAG * PORTS_PER_SERVICE + PORTS_PER_SERVICE - 1
    segments = (0, VNI_A, (1 << 24) - 1, VLAN_SEGMENT_BASE | 4095, vrf_segment(0x3FFF))
    for segment in (*segments, SEGMENT_LIMIT - 1):
        for part in (0, 1, 30):
            gid = flood_group_id(segment, part)
            assert highest_service < gid <= 0xFFFF_FF00  # OFPG_MAX
            assert gid & (SEGMENT_LIMIT - 1) == segment
    assert len({flood_group_id(s, p) for s in segments for p in range(31)}) == 31 * len(segments)
    with pytest.raises(ValueError, match="segment 0x4000000 is out of"):
        flood_group_id(SEGMENT_LIMIT)
    with pytest.raises(ValueError, match="part 31 is out of 0-30"):
        flood_group_id(5, 31)


def test_a_segment_has_one_all_group_of_its_endpoints_even_with_none() -> None:
    (empty,) = flood_groups(VNI_A, [])
    assert (empty.id, empty.kind, empty.buckets) == (flood_group_id(VNI_A), "all", ())
    (g,) = flood_groups(VNI_A, [10, 2, 7, 2])
    assert g.buckets == ((("output", 2),), (("output", 7),), (("output", 10),))
    assert g == group(
        flood_group_id(VNI_A), [[("output", 7)], [("output", 2)], [("output", 10)]], "all"
    )


def test_the_flood_flows_name_the_group_and_do_not_change_with_the_endpoints() -> None:
    def floods(*extra: EndpointState) -> set[object]:
        state = cluster()
        state.endpoints = [*state.endpoints, *extra]
        return {f for f in compile_flows(state) if getattr(f, "priority", None) == PRIO_FLOOD}

    more = EndpointState("ep9", NET_A, "02:00:00:00:00:09", "10.1.0.9", ofport=9)
    assert floods() == floods(more)
    local = flow(
        FORWARD.id,
        PRIO_FLOOD,
        [
            flood_action(VNI_A),
            ("output", GW_A_PORT),
            ("set_field", "tunnel_id", VNI_A),
            ("output", TUN_H2),
        ],
        metadata=(VNI_A, SEGMENT_AND_ORIGIN),
    )
    remote = flow(
        FORWARD.id,
        PRIO_FLOOD,
        [flood_action(VNI_A)],
        metadata=(VNI_A | FROM_REMOTE, SEGMENT_AND_ORIGIN),
    )
    assert {local, remote} <= floods()
    PIPELINE.check(local)


def test_a_flood_reaches_every_other_port_and_the_packets_after_the_group_are_unchanged() -> None:
    flows = compile_flows(cluster())
    result = walk(flows, ipv4(E1, BROADCAST, "10.1.0.255"))
    assert E1.ofport not in result.ports  # OVS skips a bucket's output to the in_port
    assert {E2.ofport, GW_A_PORT, TUN_H2} <= result.ports
    # The tunnel's copy carries the VNI; the group's copies and the gateway's do not.
    assert result.sent(TUN_H2)["tunnel_id"] == VNI_A
    assert result.sent(E2.ofport)["tunnel_id"] == result.sent(GW_A_PORT)["tunnel_id"] == 0


def test_an_all_group_runs_every_bucket_on_its_own_copy() -> None:
    g = group(
        7, [[("set_field", "eth_dst", "02:00:00:00:00:aa"), ("output", 2)], [("output", 3)]], "all"
    )
    f = flow(0, 1, [("group", 7), ("output", 4)])
    result = walk({g, f}, {"in_port": 1, "eth_dst": BROADCAST})
    assert result.ports == {2, 3, 4} and result.outputs[-1] == 4
    assert result.sent(2)["eth_dst"] == "02:00:00:00:00:aa"
    assert result.sent(3)["eth_dst"] == result.sent(4)["eth_dst"] == BROADCAST
    assert walk({g, f}, {"in_port": 3}).ports == {2, 4}


def test_five_thousand_endpoints_split_into_groups_that_each_fit_one_message() -> None:
    ports = range(1, 5_001)
    groups = flood_groups(VNI_A, ports)
    parent, children = groups[0], groups[1:]
    assert parent.id == flood_group_id(VNI_A) and len(children) == FLOOD_PARTS
    assert parent.buckets == tuple((("group", c.id),) for c in children)
    assert sorted(b[0][1] for c in children for b in c.buckets) == list(ports)
    assert all(len(c.buckets) <= 167 for c in children)  # about 5,000 / 30: cheap to modify
    sizes = [_encoded(g) for g in groups]
    assert max(sizes) < MAX_MESSAGE
    with pytest.raises(struct.error):  # one group of them all: its length does not fit
        _encoded(group(1, ([("output", p)] for p in ports), "all"))
    # Through the chain, a broadcast reaches every other endpoint once.
    floods = [*groups, flow(0, 1, [flood_action(VNI_A)])]
    result = walk(floods, {"in_port": 4_321, "eth_dst": BROADCAST})
    assert sorted(result.outputs) == [p for p in ports if p != 4_321]


def test_one_more_endpoint_of_a_split_segment_changes_one_child_group() -> None:
    for n in (FLOOD_SPLIT + 1, 1_000, 5_000):
        before = set(flood_groups(VNI_A, range(1, n + 1)))
        after = set(flood_groups(VNI_A, [*range(1, n + 1), 65_000]))  # ofports go that high
        (changed,) = after - before
        assert len(before - after) == 1 and len(changed.buckets) <= n // FLOOD_PARTS + 2
    # A segment splits only past FLOOD_SPLIT endpoints: small ones keep one group.
    assert len(flood_groups(VNI_A, range(1, FLOOD_SPLIT + 1))) == 1
    crowded = [FLOOD_PARTS * k for k in range(1, FLOOD_BUCKETS + 2)]  # one remainder
    with pytest.raises(ValueError, match=f"{FLOOD_BUCKETS + 1} of its {FLOOD_BUCKETS + 1} "):
        flood_groups(VNI_A, crowded)


def test_child_groups_are_written_before_and_deleted_after_the_group_naming_them() -> None:
    groups = flood_groups(VNI_A, range(1, 5_001))
    parent = groups[0]
    plan = write_plan(FlowDiff(frozenset(groups), frozenset()), PIPELINE)
    assert plan.entries[-1] == parent and set(plan.entries) == set(groups)
    gone = write_plan(FlowDiff(frozenset(), frozenset(groups)), PIPELINE)
    assert gone.delete_entries[0] == parent and set(gone.delete_entries) == set(groups)
    # Back under the limit: the children go after the group stops naming them.
    (single,) = flood_groups(VNI_A, range(1, 11))
    shrink = write_plan(FlowDiff(frozenset({single}), frozenset(groups[1:])), PIPELINE)
    assert shrink.entries == (single,) and set(shrink.delete_entries) == set(groups[1:])
    assert replace(single, buckets=()) == flood_groups(VNI_A, [])[0]
