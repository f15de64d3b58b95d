"""Canonical Flows to and from os-ken's OpenFlow 1.5 parser objects.

to_ofp_* and flow_mod build what is sent; from_ofp_flow turns what the switch reports back
into a Flow that compares equal to the one written. An action or instruction we do not
model reads back as ("unsupported", ...), so such a flow never equals a desired one and
reconcile replaces it. ct reads back whole (a register zone, nested nat and set_field
ct_mark/ct_label); only ALG, force or other nested actions are unsupported.

OpenFlow 1.5 rather than 1.3 for one reason: only 1.5's group mod carries OVS's selection
method property, which services' select groups need (datapath.flows.SELECTION); floods'
all groups need nothing but their buckets. The rest is the same but
for the meter, an apply-action in 1.5 instead of an instruction.
"""

from __future__ import annotations

import struct
from typing import Any

from os_ken.ofproto import nicira_ext
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from datapath.flows import (
    BUCKET_WEIGHT,
    Action,
    Flow,
    Group,
    Meter,
    canonical_actions,
    canonical_match,
    group,
)

_ALL_BITS = (1 << 64) - 1
_INSTRUCTIONS = ("write_metadata", "goto")


def _replace_parser(cls: type, make: Any) -> None:
    """Set ``cls.parser`` to ``make(original parser function)``, once."""
    original = cls.__dict__["parser"].__func__
    if getattr(original, "_netplugin_fixed", False):
        return
    fixed = make(original)
    fixed._netplugin_fixed = True
    cls.parser = classmethod(fixed)  # type: ignore[attr-defined]


def _bounded(original: Any) -> Any:
    """os-ken 4.2.2's OpenFlow 1.5 OFPBucket and OFPGroupDescStats parse their properties
    from ``buf[offset:offset + length]`` after advancing offset past their header, so they
    read on into the next bucket or group (a group desc reply with two buckets comes back
    garbled). Both start with their 16-bit length: handing the parser exactly its record
    makes that slice end where the record does."""

    def parse(klass: type, buf: Any, offset: int) -> Any:
        (length,) = struct.unpack_from("!H", buf, offset)
        return original(klass, buf[offset : offset + length], 0)

    return parse


def _copy_field(_original: Any) -> Any:
    """os-ken 4.2.2's OFPActionCopyField parser reads OXM ids up to its length past its
    header, so it takes the padding and the next actions for more of them (and then fails
    its own check that there are two), and it leaves ``len`` at the header's 12 bytes, so
    the actions after it are read from the wrong place. A copy-field holds exactly two ids:
    read those, and keep its length."""

    def parse(klass: type, buf: Any, offset: int) -> Any:
        type_, len_, n_bits, src_ofs, dst_ofs = struct.unpack_from(
            ofp.OFP_ACTION_COPY_FIELD_PACK_STR, buf, offset
        )
        rest = buf[offset + ofp.OFP_ACTION_COPY_FIELD_SIZE : offset + len_]
        src, rest = parser.OFPOxmId.parse(rest)
        dst, _ = parser.OFPOxmId.parse(rest)
        action = klass(n_bits, src_ofs, dst_ofs, [src, dst], type_, len_)
        action.len = len_
        return action

    return parse


_replace_parser(parser.OFPBucket, _bounded)
_replace_parser(parser.OFPGroupDescStats, _bounded)
_replace_parser(parser.OFPActionCopyField, _copy_field)
# OVS's nx_nat_flags (os-ken has no names for them).
_NAT_KINDS = {"src": 1 << 0, "dst": 1 << 1}
_NAT_FLAGS = {"persistent": 1 << 2, "hash": 1 << 3, "random": 1 << 4}


def to_ofp_match(flow: Flow) -> parser.OFPMatch:
    """The OFPMatch of a flow."""
    return parser.OFPMatch(**dict(flow.match))


def _ofp_action(action: Action) -> Any:
    kind = action[0]
    if kind == "meter":
        return parser.OFPActionMeter(action[1])
    if kind == "output":
        return parser.OFPActionOutput(action[1])
    if kind == "set_field":
        return parser.OFPActionSetField(**{action[1]: action[2]})
    if kind == "push_vlan":
        return parser.OFPActionPushVlan(action[1])
    if kind == "pop_vlan":
        return parser.OFPActionPopVlan()
    if kind == "move":
        # OVS takes Nicira's reg_move up to OpenFlow 1.4 only; 1.5 has copy-field.
        return parser.OFPActionCopyField(n_bits=action[3], oxm_ids=[action[1], action[2]])
    if kind == "group":
        return parser.OFPActionGroup(action[1])
    if kind == "dec_ttl":
        return parser.OFPActionDecNwTtl()
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
    """The OpenFlow instructions for a flow's actions (the meter is the first apply-action);
    none means drop."""
    apply = [a for a in flow.actions if a[0] not in _INSTRUCTIONS]
    instructions: list[Any] = []
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
    if isinstance(action, parser.OFPActionMeter):
        return ("meter", action.meter_id)
    if isinstance(action, parser.OFPActionOutput):
        return ("output", action.port)
    if isinstance(action, parser.OFPActionSetField):
        return ("set_field", action.key, action.value)
    if isinstance(action, parser.OFPActionPushVlan):
        return ("push_vlan", action.ethertype)
    if isinstance(action, parser.OFPActionPopVlan):
        return ("pop_vlan",)
    if (
        isinstance(action, parser.OFPActionCopyField)
        and action.src_offset == action.dst_offset == 0
    ):
        src, dst = (i.type for i in action.oxm_ids)
        return ("move", src, dst, action.n_bits)
    if isinstance(action, parser.OFPActionGroup):
        return ("group", action.group_id)
    if isinstance(action, parser.OFPActionDecNwTtl):
        return ("dec_ttl",)
    if isinstance(action, parser.NXActionCT):
        return _from_ofp_ct(action)
    return _unsupported(action)


def from_ofp_flow(table_id: int, priority: int, cookie: int, match: Any, instructions: Any) -> Flow:
    """A Flow from what the switch reports (an OFPFlowDesc's fields)."""
    actions: list[Action] = []
    for inst in instructions:
        if isinstance(inst, parser.OFPInstructionActions) and inst.type == ofp.OFPIT_APPLY_ACTIONS:
            actions.extend(_from_ofp_action(a) for a in inst.actions)
        elif isinstance(inst, parser.OFPInstructionWriteMetadata):
            actions.append(("write_metadata", inst.metadata, inst.metadata_mask))
        elif isinstance(inst, parser.OFPInstructionGotoTable):
            actions.append(("goto", inst.table_id))
        else:
            actions.append(("unsupported", type(inst).__name__, str(inst)))
    return Flow(
        table_id,
        priority,
        canonical_match(_registers(match.items())),
        canonical_actions(actions),
        cookie,
    )


_HALF = (1 << 32) - 1


def _registers(fields: Any) -> list[tuple[str, Any]]:
    """Match fields with OpenFlow 1.5's 64-bit packet registers split into the 32-bit ones
    we write: OVS reports reg(2n) and reg(2n+1) together as xreg<n> (reg(2n) in its upper
    half), with a mask covering only the halves the flow matches."""
    out: list[tuple[str, Any]] = []
    for name, value in fields:
        if not name.startswith("xreg"):
            out.append((name, value))
            continue
        n = int(name[4:])
        value, mask = value if isinstance(value, tuple) else (value, (1 << 64) - 1)
        for reg, shift in ((2 * n, 32), (2 * n + 1, 0)):
            if (mask >> shift) & _HALF:
                out.append((f"reg{reg}", ((value >> shift) & _HALF, (mask >> shift) & _HALF)))
    return out


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
    """A Meter from an OFPMeterDescStats; one netplugin would not write is unsupported."""
    bands = list(stat.bands)
    if stat.flags & ~ofp.OFPMF_STATS != _METER_FLAGS or len(bands) != 1:
        return Meter(
            stat.meter_id, 0, 0, unsupported=f"flags {stat.flags:#x}, {len(bands)} band(s)"
        )
    band = bands[0]
    if not isinstance(band, parser.OFPMeterBandDrop):
        return Meter(stat.meter_id, 0, 0, unsupported=type(band).__name__)
    return Meter(stat.meter_id, band.rate, band.burst_size)


# OVS's selection method group property (include/openflow/netronome-ext.h): an OpenFlow 1.5
# experimenter property of NTR_VENDOR_ID, exp_type NTRT_SELECTION_METHOD; after the 12-byte
# experimenter header, 4 bytes of padding, the method's name (16 bytes, NUL-terminated) and
# a 64-bit parameter. We send no fields (dp_hash takes none).
_NTR_VENDOR_ID = 0x0000154D
_NTRT_SELECTION_METHOD = 1
_SELECTION_BODY = struct.Struct("!4x16sQ")


def _selection_property(method: str, param: int) -> Any:
    body = _SELECTION_BODY.pack(method.encode(), param)
    words = [int.from_bytes(body[i : i + 4], "big") for i in range(0, len(body), 4)]
    return parser.OFPGroupPropExperimenter(
        type_=ofp.OFPGPT_EXPERIMENTER,
        experimenter=_NTR_VENDOR_ID,
        exp_type=_NTRT_SELECTION_METHOD,
        data=words,
    )


def _selection_of(properties: Any) -> tuple[str, int] | str:
    """The selection method a group desc's properties name (("", 0): none), or why it is
    not one we understand."""
    found: tuple[str, int] = ("", 0)
    for prop in properties:
        if not isinstance(prop, parser.OFPGroupPropExperimenter) or (
            prop.experimenter,
            prop.exp_type,
        ) != (_NTR_VENDOR_ID, _NTRT_SELECTION_METHOD):
            return f"property {type(prop).__name__}"
        body = b"".join(int(w).to_bytes(4, "big") for w in prop.data)
        if len(body) != _SELECTION_BODY.size:
            return f"selection method with {len(body) - _SELECTION_BODY.size} bytes of fields"
        name, param = _SELECTION_BODY.unpack(body)
        found = (name.rstrip(b"\0").decode(errors="replace"), param)
    return found


_GROUP_TYPES = {"select": ofp.OFPGT_SELECT, "all": ofp.OFPGT_ALL}


def _bucket_ids(g: Group) -> list[int]:
    """Bucket ids: an all group's bucket that is one output or one group is known by that
    port or group (stable as its neighbours come and go, so a bucket could be inserted or
    removed by id), any other bucket by its position."""
    if g.kind == "all" and all(len(b) == 1 and b[0][0] in ("output", "group") for b in g.buckets):
        ids = [b[0][1] for b in g.buckets]
        if len(set(ids)) == len(ids) and max(ids, default=0) <= ofp.OFPG_BUCKET_MAX:
            return ids
    return list(range(len(g.buckets)))


def group_mod(datapath: Any, g: Group, command: int = ofp.OFPGC_ADD) -> parser.OFPGroupMod:
    """An OFPGroupMod that adds, modifies or (OFPGC_DELETE) deletes group ``g``: a select
    group's buckets carry equal weights and the group its selection method; an all
    group's carry nothing but their actions."""
    kind = _GROUP_TYPES[g.kind]
    if command == ofp.OFPGC_DELETE:
        return parser.OFPGroupMod(datapath, command, kind, g.id)
    weight = [parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT, weight=BUCKET_WEIGHT)]
    buckets = [
        parser.OFPBucket(
            bucket_id=bucket_id,
            actions=[_ofp_action(a) for a in bucket],
            properties=weight if g.kind == "select" else [],
        )
        for bucket_id, bucket in zip(_bucket_ids(g), g.buckets, strict=True)
    ]
    method, param = g.selection
    properties = [_selection_property(method, param)] if method and g.kind == "select" else []
    return parser.OFPGroupMod(datapath, command, kind, g.id, buckets=buckets, properties=properties)


def _weight(bucket: Any) -> int | None:
    weights = [
        p.weight for p in bucket.properties if isinstance(p, parser.OFPGroupBucketPropWeight)
    ]
    return weights[0] if len(weights) == 1 else None


def from_ofp_group(stat: Any) -> Group:
    """A Group from an OFPGroupDescStats; one netplugin would not write is unsupported."""
    if stat.type == ofp.OFPGT_ALL:
        return _from_ofp_all_group(stat)
    if stat.type != ofp.OFPGT_SELECT:
        return Group(stat.group_id, (), unsupported=f"type {stat.type}")
    selection = _selection_of(stat.properties)
    if isinstance(selection, str):
        return Group(stat.group_id, (), unsupported=selection)
    buckets = []
    for b in stat.buckets:
        if _weight(b) != BUCKET_WEIGHT:
            return Group(stat.group_id, (), unsupported=f"bucket weight {_weight(b)}")
        buckets.append(canonical_actions(_from_ofp_action(a) for a in b.actions))
    return Group(stat.group_id, tuple(buckets), selection=selection)


def _from_ofp_all_group(stat: Any) -> Group:
    """An all group as group() builds it (buckets sorted); with properties, or buckets
    carrying any, it is unsupported."""
    odd = [type(p).__name__ for p in stat.properties]
    odd += [type(p).__name__ for b in stat.buckets for p in b.properties]
    if odd:
        return Group(stat.group_id, (), unsupported=f"all group with {', '.join(odd)}")
    try:
        return group(
            stat.group_id,
            (canonical_actions(_from_ofp_action(a) for a in b.actions) for b in stat.buckets),
            "all",
        )
    except ValueError as e:
        return Group(stat.group_id, (), unsupported=str(e))
