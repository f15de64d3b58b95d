"""Flows to and from os-ken's OpenFlow 1.5 messages, through the wire format."""

from __future__ import annotations

from typing import Any

import pytest
from datapath_states import cluster, world
from os_ken.ofproto import ofproto_parser, ofproto_protocol
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as ofp_parser
from routing_states import state as routing_state

from datapath.flows import COOKIE, Entry, Flow, Group, flow
from datapath.ofcodec import flow_mod, from_ofp_flow, from_ofp_group, group_mod, to_ofp_instructions
from datapath.pipeline import compile_flows

F3 = flow(1, 10, [("output", 1)], eth_dst="02:00:00:00:00:01")


def _over_the_wire(f: Flow) -> Flow:
    """Serialise f's flow-mod to bytes, parse it back, and read it as the switch reports it."""
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    mod = flow_mod(dp, f)
    mod.set_xid(1)
    mod.serialize()
    wire = ofproto_parser.msg(dp, ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, len(mod.buf), 1, mod.buf)
    return from_ofp_flow(wire.table_id, wire.priority, wire.cookie, wire.match, wire.instructions)


def _entry_over_the_wire(e: Entry) -> Entry:
    """A flow as _over_the_wire, a group through its group mod's bytes."""
    if isinstance(e, Flow):
        return _over_the_wire(e)
    assert isinstance(e, Group)
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    mod = group_mod(dp, e)
    mod.set_xid(1)
    mod.serialize()
    wire = ofproto_parser.msg(dp, ofp.OFP_VERSION, ofp.OFPT_GROUP_MOD, len(mod.buf), 1, mod.buf)
    return from_ofp_group(wire)


def test_every_compiled_flow_survives_the_wire() -> None:
    extra = {
        flow(0, 7, [("push_vlan", 0x8100), ("set_field", "vlan_vid", 0x1005), ("output", 4)]),
        flow(0, 6, [("pop_vlan",), ("set_field", "tunnel_id", 50), ("output", 4)], vlan_vid=0x1005),
        flow(0, 5, eth_dst=("01:00:00:00:00:00", "01:00:00:00:00:00")),
    }
    for f in (
        compile_flows(world()) | compile_flows(cluster()) | compile_flows(cluster("flood")) | extra
    ):
        assert _entry_over_the_wire(f) == f
    assert any(isinstance(g, Group) and g.kind == "all" for g in compile_flows(cluster()))


def test_routing_modes_flows_survive_the_wire() -> None:
    """dec_ttl (the route table's) included."""
    for f in compile_flows(routing_state()):
        assert _entry_over_the_wire(f) == f
    assert _over_the_wire(flow(25, 300, [("dec_ttl",), ("goto", 30)])).actions[0] == ("dec_ttl",)


def test_a_move_is_a_copy_field_and_reads_back_by_its_nxm_names_too() -> None:
    wanted = flow(2, 100, [("move", "eth_src", "eth_dst", 48), ("output", 0xFFFFFFF8)])
    sent = to_ofp_instructions(wanted)[0].actions[0]
    # OVS refuses Nicira's reg_move in OpenFlow 1.5 (OFPBAC_BAD_EXP_TYPE).
    assert isinstance(sent, ofp_parser.OFPActionCopyField)
    inst = ofp_parser.OFPInstructionActions(
        ofp.OFPIT_APPLY_ACTIONS,
        [
            ofp_parser.OFPActionCopyField(n_bits=48, oxm_ids=["eth_src_nxm", "eth_dst_nxm"]),
            ofp_parser.OFPActionOutput(0xFFFFFFF8),
        ],
    )
    assert from_ofp_flow(2, 100, COOKIE, ofp_parser.OFPMatch(), [inst]) == wanted
    assert _over_the_wire(wanted) == wanted


def test_strict_delete_matches_any_output_and_the_exact_cookie() -> None:
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    mod = flow_mod(dp, F3, ofp.OFPFC_DELETE_STRICT)
    assert (mod.out_port, mod.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
    assert (mod.cookie, mod.cookie_mask) == (F3.cookie, (1 << 64) - 1)
    assert mod.instructions == []


def test_meters_groups_and_conntrack_survive_the_wire() -> None:
    ct_new = (0x21, 0x21)  # +trk+new
    for f in (
        flow(0, 100, [("meter", 7), ("write_metadata", 5, 0xFF), ("goto", 10)], in_port=3),
        flow(40, 200, [("group", 12)], ct_state=ct_new, eth_type=0x0800, ipv4_dst="10.9.0.1"),
        flow(30, 100, [("ct", False, 9, 40, ())], eth_type=0x0800),
        flow(50, 10, [("ct", True, 9, None), ("goto", 60)], ct_state=ct_new, ct_zone=9),
    ):
        assert _over_the_wire(f) == f


REG6_ZONE = ("reg", "reg6", 0, 16)
UNNAT = ("nat", "", None, None, None, None, ())
CT_FORMS = (
    ("ct", False, 9, 40, ()),
    ("ct", True, 0xFFFF, None, ()),
    ("ct", False, REG6_ZONE, 40, ()),
    ("ct", True, ("reg", "reg0", 16, 16), None, ()),
    ("ct", True, ("reg", "reg15", 3, 16), 0, ()),
    ("ct", False, 9, 40, (UNNAT,)),
    ("ct", True, REG6_ZONE, 50, (("set_field", "ct_mark", 0xFFFFFFFF),)),
    ("ct", True, 9, None, (("set_field", "ct_label", (1 << 127) | 5),)),
    ("ct", True, 9, 50, (("nat", "dst", "10.77.0.3", None, 8080, None, ()),)),
    ("ct", True, 9, 50, (("nat", "src", "10.77.0.3", "10.77.0.9", None, None, ("random",)),)),
    # A nat before another nested action: os-ken alone would garble it (ofcodec._PaddedNAT).
    (
        "ct",
        True,
        9,
        50,
        (("nat", "dst", "10.77.0.3", None, None, None, ()), ("set_field", "ct_mark", 3)),
    ),
    (
        "ct",
        True,
        REG6_ZONE,
        None,
        (
            ("set_field", "ct_mark", 1),
            ("nat", "src", "fd00::1", "fd00::ff", 1024, 2048, ("hash", "persistent")),
            ("set_field", "ct_label", 2),
        ),
    ),
)


@pytest.mark.parametrize("ct", CT_FORMS, ids=str)
def test_every_ct_form_survives_the_wire(ct: tuple[object, ...]) -> None:
    v6 = any(a[0] == "nat" and a[2] and ":" in a[2] for a in ct[4])  # type: ignore[index]
    eth_type = 0x86DD if v6 else 0x0800
    f = flow(30, 100, [("set_field", "reg6", 5), ct, ("goto", 40)], eth_type=eth_type)
    back = _over_the_wire(f)
    assert back == f and back.actions[1] == ct


def test_registers_and_conntrack_matches_survive_the_wire() -> None:
    for match in (
        {"reg5": 7},
        {"reg5": (1 << 31, 1 << 31), "reg6": (0x1234, 0xFFFF)},
        {"reg15": 0xFFFFFFFF, "conj_id": 3},
        {"ct_state": (0x22, 0x22), "ct_zone": 9, "ct_mark": (1, 1)},
        {"ct_label": (1 << 100, 1 << 100)},
        {"ct_label": 1 << 127},
    ):
        f = flow(50, 100, [("set_field", "reg0", 0xFFFFFFFF), ("output", 2)], **match)
        assert _over_the_wire(f) == f


def _ct_as_read(**fields: Any) -> Flow:
    ct = ofp_parser.NXActionCT(
        **{
            "flags": 1,
            "zone_src": "",
            "zone_ofs_nbits": 9,
            "recirc_table": 50,
            "alg": 0,
            "actions": [],
            **fields,
        }
    )
    inst = ofp_parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [ct])
    return from_ofp_flow(40, 100, COOKIE, ofp_parser.OFPMatch(), [inst])


def test_a_register_zone_and_nested_actions_read_back_as_written() -> None:
    back = _ct_as_read(
        zone_src="reg6",
        zone_ofs_nbits=15,  # bits 0..15
        actions=[
            ofp_parser.NXActionNAT(flags=2, range_ipv4_min="10.1.0.3", range_ipv4_max="10.1.0.3"),
            ofp_parser.OFPActionSetField(ct_mark=4),
        ],
    )
    nat = ("nat", "dst", "10.1.0.3", None, None, None, ())  # a range of one is its low end
    assert back.actions == (("ct", True, REG6_ZONE, 50, (nat, ("set_field", "ct_mark", 4))),)


@pytest.mark.parametrize(
    "fields",
    [
        {"alg": 21},  # ftp
        {"flags": 3},  # commit, force
        {"actions": [ofp_parser.OFPActionOutput(1)]},
        {"actions": [ofp_parser.OFPActionSetField(reg5=1)]},
        {"actions": [ofp_parser.NXActionNAT(flags=3, range_ipv4_min="10.1.0.3")]},  # src+dst
        {"actions": [ofp_parser.NXActionNAT(flags=0x20)]},  # an unknown flag
        {"zone_src": "reg6", "zone_ofs_nbits": 31},  # 32 bits of zone
    ],
)
def test_conntrack_beyond_the_model_never_equals_a_desired_flow(fields: dict[str, Any]) -> None:
    """ALG, force or anything else nested reads back as unsupported: reconcile replaces it
    rather than taking it for a flow it wrote."""
    back = _ct_as_read(**fields)
    assert back.actions[0][0] == "unsupported"
    assert back != flow(40, 100, [("ct", True, 9, 50)])


def test_registers_reported_as_openflow_15_xregs_read_back_as_written() -> None:
    """OVS reports reg(2n) and reg(2n+1) together as xreg<n> in OpenFlow 1.5."""
    wanted = flow(20, 90, [("output", 2)], reg5=0x80000005, reg6=(0x80000000, 0x80000000), reg15=7)
    match = ofp_parser.OFPMatch(
        xreg2=(0x80000005, 0xFFFFFFFF),
        xreg3=(0x8000000000000000, 0x8000000000000000),
        xreg7=(7, 0xFFFFFFFF),
    )
    actions = ofp_parser.OFPInstructionActions(
        ofp.OFPIT_APPLY_ACTIONS, [ofp_parser.OFPActionOutput(2)]
    )
    assert from_ofp_flow(20, 90, COOKIE, match, [actions]) == wanted
    both = ofp_parser.OFPMatch(xreg0=(5 << 32) | 6)  # a full 64-bit match: reg0 and reg1
    assert from_ofp_flow(20, 90, COOKIE, both, [actions]) == flow(
        20, 90, [("output", 2)], reg0=5, reg1=6
    )
