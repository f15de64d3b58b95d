"""Meters and select groups as entries beside the flows: canonical values, their codec, and
FlowController's reconcile and deltas against a fake switch that keeps them as OVS does
(written before the flows naming them, MODIFY in place, deleted after those flows)."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from os_ken.ofproto import ofproto_parser, ofproto_protocol
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from datapath.flows import FlowDiff, Group, Meter, flow, group, meter
from datapath.ofapp import FlowController
from datapath.ofcodec import from_ofp_group, from_ofp_meter, group_mod, meter_mod
from datapath.tables import CLASSIFY, INGRESS, PIPELINE, POLICY, SERVICE
from testbed.fakeswitch import FakeSwitch, reconcile

NAT = ("nat", "dst", "10.1.0.5", None, 8080, None, ())
BUCKET = [("set_field", "eth_dst", "02:42:0a:01:00:05"), ("ct", True, 7, POLICY.id, (NAT,))]
M1 = meter(3, 10_000, 3_000)
G1 = group(16, [BUCKET])
METERED = flow(CLASSIFY.id, 100, [("meter", 3), ("goto", INGRESS.id)], in_port=3)
GROUPED = flow(SERVICE.id, 100, [("group", 16)], eth_type=0x0800, ipv4_dst="10.1.0.100")
DESIRED = {M1, G1, METERED, GROUPED}


def kinds(switch: FakeSwitch) -> list[tuple[str, int]]:
    """What each message sent did: ("flow"|"meter"|"group", command)."""
    out = []
    for m in switch.flow_mods:
        kind = "meter" if isinstance(m, parser.OFPMeterMod) else (
            "group" if isinstance(m, parser.OFPGroupMod) else "flow"
        )  # fmt: skip
        out.append((kind, m.command))
    return out


def test_values_are_canonical_and_refuse_what_a_switch_cannot_hold() -> None:
    assert group(16, [BUCKET]) == G1 and G1.identity == ("group", 16)
    assert M1.identity == ("meter", 3)
    assert "rate=10000" in str(M1) and "bucket=" in str(G1)
    with pytest.raises(ValueError, match="a bucket cannot goto"):
        group(1, [[("goto", 3)]])
    with pytest.raises(ValueError, match="rate 0 is out of"):
        meter(1, 0, 10)
    with pytest.raises(ValueError, match="meter id 0 is out of"):
        meter(0, 10, 10)
    PIPELINE.check_all(DESIRED)
    with pytest.raises(ValueError, match="ct recirculation to 60 is not declared"):
        PIPELINE.check_all([group(2, [[("ct", True, 7, 60, ())]])])


def test_codec_round_trips_and_marks_what_netplugin_would_not_write() -> None:
    assert from_ofp_meter(meter_mod(None, M1)) == M1
    assert from_ofp_group(group_mod(None, G1)) == G1
    pkts = parser.OFPMeterDescStats(flags=ofp.OFPMF_PKTPS | ofp.OFPMF_BURST, meter_id=3, bands=[])
    assert from_ofp_meter(pkts).unsupported
    indirect = parser.OFPGroupDescStats(type_=ofp.OFPGT_INDIRECT, group_id=16, buckets=[])
    assert from_ofp_group(indirect).unsupported and from_ofp_group(indirect) != G1
    # An all group (a segment's flood) reads back as one: no longer "unsupported".
    empty_all = parser.OFPGroupDescStats(type_=ofp.OFPGT_ALL, group_id=16, buckets=[])
    assert from_ofp_group(empty_all) == group(16, [], "all") != G1
    flood = group(0x8000_0005, [[("output", 9)], [("output", 2)], [("output", 10)]], "all")
    assert [b[0][1] for b in flood.buckets] == [2, 9, 10]  # sorted as numbers
    assert from_ofp_group(group_mod(None, flood)) == flood
    assert [b.bucket_id for b in group_mod(None, flood).buckets] == [2, 9, 10]
    assert not any(b.properties for b in group_mod(None, flood).buckets)
    assert (group_mod(None, flood).type, group_mod(None, flood).properties) == (ofp.OFPGT_ALL, [])
    assert str(flood) == (
        "group_id=2147483653,type=all,bucket=output:2,bucket=output:9,bucket=output:10"
    )
    # An all group with what only select groups carry is not one netplugin writes.
    weighted = group_mod(None, G1)
    odd = parser.OFPGroupDescStats(
        type_=ofp.OFPGT_ALL, group_id=16, buckets=weighted.buckets, properties=[]
    )
    assert "OFPGroupBucketPropWeight" in from_ofp_group(odd).unsupported
    with pytest.raises(ValueError, match="kind 'indirect' is not select or all"):
        group(1, [], "indirect")


def _group_desc_reply(*groups: Group) -> list[Group]:
    """The groups as OVS reports them: one OpenFlow 1.5 group desc reply on the wire (each
    entry's buckets and properties are encoded as in a group mod), parsed by os-ken."""
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    body = b""
    for g in groups:
        mod = group_mod(dp, g)
        mod.set_xid(1)
        mod.serialize()
        rest = bytes(mod.buf[ofp.OFP_GROUP_MOD_SIZE :])
        body += struct.pack("!HBxIH6x", 16 + len(rest), mod.type, g.id, mod.bucket_array_len)
        body += rest
    head = struct.pack("!BBHIHH4x", ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, 16 + len(body), 7,
                       ofp.OFPMP_GROUP_DESC, 0)  # fmt: skip
    msg = ofproto_parser.msg(dp, ofp.OFP_VERSION, ofp.OFPT_MULTIPART_REPLY, 16 + len(body), 7,
                             head + body)  # fmt: skip
    return [from_ofp_group(stat) for stat in msg.body]


def test_groups_with_several_buckets_survive_the_wire_with_their_selection_method() -> None:
    two = group(17, [BUCKET, [("set_field", "eth_dst", "02:42:0a:01:00:06"), BUCKET[1]]])
    assert two.selection == ("dp_hash", 0) and "selection_method=dp_hash" in str(two)
    assert _group_desc_reply(G1, two, G1) == [G1, two, G1]
    legacy = replace(two, selection=("", 0))  # written by OpenFlow 1.3: OVS's default hash
    assert _group_desc_reply(legacy) == [legacy] and legacy != two


def test_a_group_with_another_selection_method_is_modified_in_place() -> None:
    legacy = replace(G1, selection=("", 0))
    switch = FakeSwitch(FlowController(), {M1, legacy, METERED, GROUPED})
    stats = reconcile(switch, DESIRED)
    assert switch.flows == DESIRED
    assert (stats.replaced, stats.deleted) == (1, 0)
    assert kinds(switch) == [("group", ofp.OFPGC_MODIFY)]


def test_reconcile_writes_entries_before_the_flows_naming_them_then_sends_nothing() -> None:
    switch = FakeSwitch(FlowController())
    first = reconcile(switch, DESIRED)
    assert switch.flows == DESIRED
    assert first.added == 4
    assert kinds(switch) == [
        ("meter", ofp.OFPMC_ADD),
        ("group", ofp.OFPGC_ADD),
        ("flow", ofp.OFPFC_ADD),
        ("flow", ofp.OFPFC_ADD),
    ]
    again = reconcile(switch, DESIRED)
    assert (again.added, again.deleted) == (0, 0) and switch.flow_mods == []


def test_a_changed_entry_is_modified_in_place_and_a_stale_one_goes_last() -> None:
    stale = Meter(9, 5, 5)
    odd = Group(16, (), unsupported="type 0")
    switch = FakeSwitch(FlowController(), {M1, odd, METERED, GROUPED, stale})
    new_meter = meter(3, 20_000, 6_000)
    stats = reconcile(switch, {new_meter, G1, METERED, GROUPED})
    assert switch.flows == {new_meter, G1, METERED, GROUPED}
    assert (stats.added, stats.replaced, stats.deleted) == (2, 2, 1)
    assert kinds(switch) == [
        ("meter", ofp.OFPMC_MODIFY),
        ("group", ofp.OFPGC_MODIFY),
        ("meter", ofp.OFPMC_DELETE),
    ]


def test_deltas_modify_what_the_switch_holds_and_delete_entries_after_their_flows() -> None:
    ctl = FlowController()
    switch = FakeSwitch(ctl)
    ctl.switch_connected(switch)
    ctl._run_once()  # nothing desired yet: untouched
    generation = ctl.set_desired(DESIRED)
    ctl._run_once()
    assert ctl.wait_reconciled(generation, timeout=0) is not None
    assert switch.flows == DESIRED
    moved = group(16, [BUCKET, [("set_field", "eth_dst", "02:42:0a:01:00:06"), BUCKET[1]]])
    switch.flow_mods.clear()
    generation = ctl.apply(FlowDiff(frozenset({moved}), frozenset()))
    ctl._run_once()
    stats = ctl.wait_reconciled(generation, timeout=0)
    assert stats is not None and not stats.full and not stats.errors
    assert kinds(switch) == [("group", ofp.OFPGC_MODIFY)]
    assert moved in switch.flows
    switch.flow_mods.clear()
    generation = ctl.apply(FlowDiff(frozenset(), frozenset({moved, GROUPED})))
    ctl._run_once()
    assert ctl.wait_reconciled(generation, timeout=0) is not None
    assert kinds(switch) == [("flow", ofp.OFPFC_DELETE_STRICT), ("group", ofp.OFPGC_DELETE)]
    assert switch.flows == {M1, METERED}
