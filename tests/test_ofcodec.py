"""Flows to and from os-ken's OpenFlow 1.3 messages, through the wire format."""

from __future__ import annotations

from datapath_states import cluster, world
from os_ken.ofproto import ofproto_parser, ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofp_parser

from datapath.flows import COOKIE, Flow, flow
from datapath.ofcodec import flow_mod, from_ofp_flow
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


def test_every_compiled_flow_survives_the_wire() -> None:
    extra = {
        flow(0, 7, [("push_vlan", 0x8100), ("set_field", "vlan_vid", 0x1005), ("output", 4)]),
        flow(0, 6, [("pop_vlan",), ("set_field", "tunnel_id", 50), ("output", 4)], vlan_vid=0x1005),
        flow(0, 5, eth_dst=("01:00:00:00:00:00", "01:00:00:00:00:00")),
    }
    for f in (
        compile_flows(world()) | compile_flows(cluster()) | compile_flows(cluster("flood")) | extra
    ):
        assert _over_the_wire(f) == f


def test_a_move_read_back_by_its_nxm_names_is_the_same_flow() -> None:
    wanted = flow(2, 100, [("move", "eth_src", "eth_dst", 48), ("output", 0xFFFFFFF8)])
    inst = ofp_parser.OFPInstructionActions(
        ofp.OFPIT_APPLY_ACTIONS,
        [
            ofp_parser.NXActionRegMove(src_field="eth_src_nxm", dst_field="eth_dst_nxm", n_bits=48),
            ofp_parser.OFPActionOutput(0xFFFFFFF8),
        ],
    )
    assert from_ofp_flow(2, 100, COOKIE, ofp_parser.OFPMatch(), [inst]) == wanted


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
        flow(30, 100, [("ct", False, 9, 40)], eth_type=0x0800),
        flow(50, 10, [("ct", True, 9, None), ("goto", 60)], ct_state=ct_new, ct_zone=9),
    ):
        assert _over_the_wire(f) == f


def test_conntrack_beyond_the_model_never_equals_a_desired_flow() -> None:
    """A ct with NAT (or a register zone) reads back as unsupported: reconcile replaces it
    rather than taking it for a flow it wrote."""
    nat = ofp_parser.NXActionCT(
        flags=1,
        zone_src="",
        zone_ofs_nbits=9,
        recirc_table=50,
        alg=0,
        actions=[ofp_parser.NXActionNAT(flags=0)],
    )
    inst = ofp_parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [nat])
    back = from_ofp_flow(40, 100, COOKIE, ofp_parser.OFPMatch(), [inst])
    assert back.actions[0][0] == "unsupported"
    assert back != flow(40, 100, [("ct", True, 9, 50)])
