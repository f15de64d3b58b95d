"""Canonical Flows to and from os-ken's OpenFlow 1.3 parser objects.

to_ofp_* and flow_mod build what is sent; from_ofp_flow turns what the switch reports back
into a Flow that compares equal to the one written. An action or instruction we do not
model reads back as ("unsupported", ...), so such a flow never equals a desired one and
reconcile replaces it. ct reads back whole (a register zone, nested nat and set_field
ct_mark/ct_label); only ALG, force or other nested actions are unsupported.
"""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import nicira_ext
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from datapath.flows import (
    BUCKET_WEIGHT,
    Action,
    Flow,
    Group,
    Meter,
    canonical_actions,
    canonical_match,
)

_ALL_BITS = (1 << 64) - 1
_INSTRUCTIONS = ("meter", "write_metadata", "goto")
# OVS's nx_nat_flags (os-ken has no names for them).
_NAT_KINDS = {"src": 1 << 0, "dst": 1 << 1}
_NAT_FLAGS = {"persistent": 1 << 2, "hash": 1 << 3, "random": 1 << 4}


def to_ofp_match(flow: Flow) -> parser.OFPMatch:
    """The OFPMatch of a flow."""
    return parser.OFPMatch(**dict(flow.match))


def _ofp_action(action: Action) -> Any:
    kind = action[0]
    if kind == "output":
        return parser.OFPActionOutput(action[1])
    if kind == "set_field":
        return parser.OFPActionSetField(**{action[1]: action[2]})
    if kind == "push_vlan":
        return parser.OFPActionPushVlan(action[1])
    if kind == "pop_vlan":
        return parser.OFPActionPopVlan()
    if kind == "move":
        return parser.NXActionRegMove(src_field=action[1], dst_field=action[2], n_bits=action[3])
    if kind == "group":
        return parser.OFPActionGroup(action[1])
    if kind == "ct":
        return _ofp_ct(action)
    raise ValueError(f"action {action!r} cannot be sent to a switch")


def _ofp_ct(action: Action) -> Any:
    _, commit, zone, table, nested = action
    if isinstance(zone, tuple):
        _, reg, ofs, nbits = zone
        zone_src, zone_ofs_nbits = reg, nicira_ext.ofs_nbits(ofs, ofs + nbits - 1)
    else:
        zone_src, zone_ofs_nbits = "", zone
    return parser.NXActionCT(
        flags=nicira_ext.NX_CT_F_COMMIT if commit else 0,
        zone_src=zone_src,
        zone_ofs_nbits=zone_ofs_nbits,
        recirc_table=nicira_ext.NX_CT_RECIRC_NONE if table is None else table,
        alg=0,
        actions=[_ofp_nat(a) if a[0] == "nat" else _ofp_action(a) for a in nested],
    )


class _PaddedNAT(parser.NXActionNAT):
    """os-ken 4.2.2's NXActionNAT writes its length rounded up to 8 bytes but not the
    padding; NXActionCT appends its next nested action right after, so a nat followed by
    set_field ct_mark reaches the switch garbled. This one writes the padding too."""

    def serialize_body(self) -> bytearray:
        data = super().serialize_body()
        header = ofp.OFP_ACTION_EXPERIMENTER_HEADER_SIZE + 2  # + the Nicira subtype
        return data + bytes(-(header + len(data)) % 8)


def _ofp_nat(action: Action) -> Any:
    _, kind, addr_lo, addr_hi, port_lo, port_hi, flags = action
    bits = _NAT_KINDS.get(kind, 0) | sum(_NAT_FLAGS[f] for f in flags)
    v6 = addr_lo is not None and ":" in addr_lo
    lo_hi = ("" if addr_lo is None else addr_lo, "" if addr_hi is None else addr_hi)
    return _PaddedNAT(
        flags=bits,
        range_ipv4_min="" if v6 else lo_hi[0],
        range_ipv4_max="" if v6 else lo_hi[1],
        range_ipv6_min=lo_hi[0] if v6 else "",
        range_ipv6_max=lo_hi[1] if v6 else "",
        range_proto_min=port_lo,
        range_proto_max=port_hi,
    )


def to_ofp_instructions(flow: Flow) -> list[Any]:
    """The OpenFlow 1.3 instructions for a flow's actions; none means drop."""
    apply = [a for a in flow.actions if a[0] not in _INSTRUCTIONS]
    instructions: list[Any] = [
        parser.OFPInstructionMeter(a[1], ofp.OFPIT_METER) for a in flow.actions if a[0] == "meter"
    ]
    if apply:
        actions = [_ofp_action(a) for a in apply]
        instructions.append(parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions))
    for action in flow.actions:
        if action[0] == "write_metadata":
            instructions.append(parser.OFPInstructionWriteMetadata(action[1], action[2]))
        elif action[0] == "goto":
            instructions.append(parser.OFPInstructionGotoTable(action[1]))
    return instructions


def flow_mod(datapath: Any, flow: Flow, command: int = ofp.OFPFC_ADD) -> parser.OFPFlowMod:
    """An OFPFlowMod that adds (or, with OFPFC_DELETE_STRICT, deletes) exactly this flow."""
    delete = command in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT)
    return parser.OFPFlowMod(
        datapath,
        cookie=flow.cookie,
        cookie_mask=_ALL_BITS if delete else 0,
        table_id=flow.table,
        command=command,
        priority=flow.priority,
        # os-ken defaults these to 0, which for a delete would mean "only flows that
        # output to port 0", i.e. none.
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=to_ofp_match(flow),
        instructions=[] if delete else to_ofp_instructions(flow),
    )


def _from_ofp_ct(action: Any) -> Action:
    """The canonical ct of an NXActionCT; ALG, force or anything else we do not write
    nested in it is unsupported (reconcile then replaces the flow)."""
    if action.alg or action.flags & ~nicira_ext.NX_CT_F_COMMIT:
        return _unsupported(action)
    if action.zone_src:
        ofs, nbits = action.zone_ofs_nbits >> 6, (action.zone_ofs_nbits & 0x3F) + 1
        zone: Any = ("reg", action.zone_src, ofs, nbits)
    else:
        zone = action.zone_ofs_nbits
    nested = []
    for a in action.actions:
        if isinstance(a, parser.NXActionNAT):
            nested.append(_from_ofp_nat(a))
        elif isinstance(a, parser.OFPActionSetField):
            nested.append(("set_field", a.key, a.value))
        else:
            return _unsupported(action)
    table = None if action.recirc_table == nicira_ext.NX_CT_RECIRC_NONE else action.recirc_table
    commit = bool(action.flags & nicira_ext.NX_CT_F_COMMIT)
    try:
        return canonical_actions([("ct", commit, zone, table, tuple(nested))])[0]
    except ValueError:
        return _unsupported(action)


def _from_ofp_nat(action: Any) -> Action:
    kinds = [k for k, bit in _NAT_KINDS.items() if action.flags & bit]
    flags = tuple(f for f, bit in _NAT_FLAGS.items() if action.flags & bit)
    lo = action.range_ipv4_min or action.range_ipv6_min or None
    hi = action.range_ipv4_max or action.range_ipv6_max or None
    if len(kinds) > 1 or action.flags & ~(3 | sum(_NAT_FLAGS.values())):
        kinds = ["?"]  # refused by canonical_actions: the ct reads back unsupported
    kind = kinds[0] if kinds else ""
    return ("nat", kind, lo, hi, action.range_proto_min, action.range_proto_max, flags)


def _unsupported(action: Any) -> Action:
    return ("unsupported", type(action).__name__, str(action))


def _from_ofp_action(action: Any) -> Action:
    if isinstance(action, parser.OFPActionOutput):
        return ("output", action.port)
    if isinstance(action, parser.OFPActionSetField):
        return ("set_field", action.key, action.value)
    if isinstance(action, parser.OFPActionPushVlan):
        return ("push_vlan", action.ethertype)
    if isinstance(action, parser.OFPActionPopVlan):
        return ("pop_vlan",)
    if isinstance(action, parser.NXActionRegMove) and action.src_ofs == action.dst_ofs == 0:
        return ("move", action.src_field, action.dst_field, action.n_bits)
    if isinstance(action, parser.OFPActionGroup):
        return ("group", action.group_id)
    if isinstance(action, parser.NXActionCT):
        return _from_ofp_ct(action)
    return _unsupported(action)


def from_ofp_flow(table_id: int, priority: int, cookie: int, match: Any, instructions: Any) -> Flow:
    """A Flow from what the switch reports (an OFPFlowStats' fields)."""
    actions: list[Action] = []
    for inst in instructions:
        if isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            actions.extend(_from_ofp_action(a) for a in inst.actions)
        elif isinstance(inst, parser.OFPInstructionMeter):
            actions.append(("meter", inst.meter_id))
        elif isinstance(inst, parser.OFPInstructionWriteMetadata):
            actions.append(("write_metadata", inst.metadata, inst.metadata_mask))
        elif isinstance(inst, parser.OFPInstructionGotoTable):
            actions.append(("goto", inst.table_id))
        else:
            actions.append(("unsupported", type(inst).__name__, str(inst)))
    return Flow(
        table_id, priority, canonical_match(match.items()), canonical_actions(actions), cookie
    )


# --- meters and groups ---

_METER_FLAGS = ofp.OFPMF_KBPS | ofp.OFPMF_BURST


def meter_mod(datapath: Any, m: Meter, command: int = ofp.OFPMC_ADD) -> parser.OFPMeterMod:
    """An OFPMeterMod that adds, modifies or (OFPMC_DELETE) deletes meter ``m``."""
    bands = (
        []
        if command == ofp.OFPMC_DELETE
        else [parser.OFPMeterBandDrop(rate=m.rate_kbps, burst_size=m.burst_kbit)]
    )
    return parser.OFPMeterMod(
        datapath, command=command, flags=_METER_FLAGS, meter_id=m.id, bands=bands
    )


def from_ofp_meter(stat: Any) -> Meter:
    """A Meter from an OFPMeterConfigStats; one netplugin would not write is unsupported."""
    bands = list(stat.bands)
    if stat.flags & ~ofp.OFPMF_STATS != _METER_FLAGS or len(bands) != 1:
        return Meter(
            stat.meter_id, 0, 0, unsupported=f"flags {stat.flags:#x}, {len(bands)} band(s)"
        )
    band = bands[0]
    if not isinstance(band, parser.OFPMeterBandDrop):
        return Meter(stat.meter_id, 0, 0, unsupported=type(band).__name__)
    return Meter(stat.meter_id, band.rate, band.burst_size)


def group_mod(datapath: Any, g: Group, command: int = ofp.OFPGC_ADD) -> parser.OFPGroupMod:
    """An OFPGroupMod that adds, modifies or (OFPGC_DELETE) deletes select group ``g``."""
    buckets = (
        []
        if command == ofp.OFPGC_DELETE
        else [
            parser.OFPBucket(
                weight=BUCKET_WEIGHT,
                watch_port=ofp.OFPP_ANY,
                watch_group=ofp.OFPG_ANY,
                actions=[_ofp_action(a) for a in bucket],
            )
            for bucket in g.buckets
        ]
    )
    return parser.OFPGroupMod(datapath, command, ofp.OFPGT_SELECT, g.id, buckets)


def from_ofp_group(stat: Any) -> Group:
    """A Group from an OFPGroupDescStats; one netplugin would not write is unsupported."""
    if stat.type != ofp.OFPGT_SELECT:
        return Group(stat.group_id, (), unsupported=f"type {stat.type}")
    buckets = []
    for b in stat.buckets:
        if b.weight != BUCKET_WEIGHT:
            return Group(stat.group_id, (), unsupported=f"bucket weight {b.weight}")
        buckets.append(canonical_actions(_from_ofp_action(a) for a in b.actions))
    return Group(stat.group_id, tuple(buckets))
