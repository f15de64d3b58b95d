"""OpenFlow flows as plain, hashable values, and the diff that reconciles a switch.

No I/O here: conversion to and from os-ken parser objects lives in datapath.ofcodec.

A Flow is canonical by construction (sorted match, normalised addresses and masks, a fixed
instruction order), so a flow read back from OVS compares equal to the flow we wrote.

Match fields use os-ken's OFPMatch names, their values made canonical by datapath.fields;
a masked field is (value, mask), a full mask is dropped (as OVS reports it): reg0..reg15
are 32-bit fields like any other. Actions:
    ("meter", meter_id)                the meter (an OpenFlow 1.5 action): always first
    ("output", port)                   ("set_field", field, value)  vlan_vid incl. 0x1000
    ("push_vlan", ethertype=0x8100)    ("pop_vlan",)
    ("move", src_field, dst_field, n_bits)   copy a whole field (copy-field, offsets 0)
    ("group", group_id)                the group's buckets act on copies of the packet
    ("dec_ttl",)                       IPv4 TTL / IPv6 hop limit - 1 (routing mode)
    ("ct", commit, zone, table|None, nested)   conntrack; table: recirculate there (any
                                       table, backwards too) with ct_state set; see _ct
    ("write_metadata", value, mask)    ("goto", table)              always last, in this order
No actions means drop; ("drop",) is accepted and dropped from the tuple.

Meters and groups. A flow names a meter (netprofiles: one per endpoint, on its classify
flow, limiting what it sends) or a group (services: one select group per service port,
whose buckets ct(commit, nat) to a provider; floods: one all group per segment, a bucket
per local endpoint, datapath.flood). They are entries like Flow: values with an
identity (("meter", id), ("group", id)), compiled beside the flows and reconciled by the
same diff: read back (meter config and group desc stats), ADD what is missing, MODIFY what
changed in place (a group keeps its established connections), DELETE what is stale. They
are written before the flows that name them and deleted after the flows that named them:
OVS refuses a flow naming a missing meter or group, and deleting a meter or group deletes
the flows that use it. An Entry is any of the three.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from datapath.fields import (
    OFPVID_PRESENT,
    REG_FIELDS,
    Match,
    canonical_match,
    canonical_value,
)

__all__ = ["OFPVID_PRESENT", "REG_FIELDS", "Match", "canonical_match", "canonical_value"]

# Every flow netplugin writes carries this cookie in its top 16 bits ("NP"), so reconcile
# reads and deletes only its own flows and leaves anything else on the bridge alone.
COOKIE = 0x4E50 << 48
COOKIE_MASK = 0xFFFF << 48

OFPP_MAX = 0xFFFFFF00  # ports above are reserved (IN_PORT, FLOOD, CONTROLLER, ...)

# The Ethernet types flows match on.
ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD
ETH_TYPE_VLAN = 0x8100

Action = tuple[Any, ...]


# Apply-actions keep their order; the meter comes first, these come last.
_TRAILING = ("write_metadata", "goto")
OFPTT_MAX = 254  # the last table id
CT_ZONE_MAX = 0xFFFF
REGISTERS = frozenset(REG_FIELDS)
CT_SET_FIELDS = frozenset({"ct_mark", "ct_label"})  # what set_field may write inside ct()
NAT_KINDS = frozenset({"src", "dst", ""})
NAT_FLAGS = frozenset({"random", "hash", "persistent"})


@dataclass(frozen=True)
class Flow:
    """One OpenFlow flow entry; (table, priority, match) is its identity on the switch."""

    table: int
    priority: int
    match: Match
    actions: tuple[Action, ...]
    cookie: int = COOKIE

    @property
    def identity(self) -> tuple[int, int, Match]:
        """What OpenFlow's strict match compares: two flows with one identity cannot coexist."""
        return (self.table, self.priority, self.match)

    def __str__(self) -> str:
        match = ",".join(f"{k}={_fmt(v)}" for k, v in self.match) or "*"
        acts = ",".join(":".join(_fmt(p) for p in a) for a in self.actions) or "drop"
        return f"table={self.table},priority={self.priority},{match} actions={acts}"


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "/".join(_fmt(v) for v in value)
    if isinstance(value, int) and value > 0xFFFF:
        return hex(value)
    return str(value)


def canonical_actions(actions: Iterable[Action]) -> tuple[Action, ...]:
    """Validate actions; put the meter first and write_metadata and goto last, as the switch
    reports them."""
    meter: list[Action] = []
    apply: list[Action] = []
    trailing: dict[str, Action] = {}
    for action in actions:
        kind = action[0]
        if kind == "drop":
            continue
        if kind == "meter":
            if meter:
                raise ValueError("meter given twice in one flow")
            meter.append(("meter", _entry_id("meter", action[1])))
            continue
        if kind == "output":
            port = int(action[1])
            if port <= 0:
                raise ValueError(f"output to port {port}: OpenFlow ports start at 1")
            apply.append(("output", port))
        elif kind == "set_field":
            apply.append(("set_field", action[1], canonical_value(action[1], action[2])))
        elif kind == "push_vlan":
            apply.append(("push_vlan", int(action[1]) if len(action) > 1 else 0x8100))
        elif kind == "pop_vlan":
            apply.append(("pop_vlan",))
        elif kind == "move":
            # OVS reports the fields by their NXM names ("eth_src_nxm"): same field.
            src, dst = (str(f).removesuffix("_nxm") for f in action[1:3])
            apply.append(("move", src, dst, int(action[3])))
        elif kind == "group":
            apply.append(("group", _entry_id("group", action[1])))
        elif kind == "ct":
            apply.append(_ct(action))
        elif kind in _TRAILING:
            if kind in trailing:
                raise ValueError(f"{kind} given twice in one flow")
            if kind == "write_metadata":
                value, mask = int(action[1]), int(action[2])
                trailing[kind] = ("write_metadata", value & mask, mask)
            else:
                trailing[kind] = ("goto", int(action[1]))
        else:
            # Kept, so a flow read back with an instruction we do not model never equals
            # a desired flow: reconcile then replaces it.
            apply.append(tuple(action))
    return (*meter, *apply, *(trailing[k] for k in _TRAILING if k in trailing))


_ID_RANGES = {"meter": (1, 0xFFFF_0000), "group": (0, 0xFFFF_FF00)}  # OFPM_MAX, OFPG_MAX


def _entry_id(kind: str, value: Any) -> int:
    number = int(value)
    low, high = _ID_RANGES[kind]
    if not low <= number <= high:
        raise ValueError(f"{kind} id {number} is out of {low}-{high}")
    return number


def _ct(action: Action) -> Action:
    """("ct", commit, zone, table, nested); a 4-tuple without nested is widened.

    zone: an int 0-65535, or ("reg", "regN", ofs, 16) for a zone loaded from bits
    ofs..ofs+15 of a register (OVS takes exactly 16 bits). nested: the actions ct() runs on
    the connection, in order: ("set_field", "ct_mark" | "ct_label", value) and at most one
    ("nat", kind, addr_lo, addr_hi, port_lo, port_hi, flags). A range's high end equal to
    its low end is None, as is an absent one. Anything but a plain ("nat", "") needs commit
    (OVS refuses it otherwise), and a nat needs the flow to match its IP version's eth_type
    (checked by flow()).
    """
    if len(action) not in (4, 5):
        raise ValueError(f"{action!r}: ct is (ct, commit, zone, table, nested)")
    commit, zone, table = bool(action[1]), _ct_zone(action[2]), action[3]
    if table is not None:
        table = int(table)
        if not 0 <= table <= OFPTT_MAX:
            raise ValueError(f"ct recirculation to table {table}: tables are 0-{OFPTT_MAX}")
    nested = tuple(_ct_nested(a) for a in (action[4] if len(action) == 5 else ()))
    if sum(a[0] == "nat" for a in nested) > 1:
        raise ValueError(f"{action!r}: one nat per ct")
    if not commit and any(a != ("nat", "", None, None, None, None, ()) for a in nested):
        raise ValueError(f"{action!r}: ct with set_field or nat arguments needs commit")
    return ("ct", commit, zone, table, nested)


def _ct_zone(zone: Any) -> int | tuple[str, str, int, int]:
    if isinstance(zone, tuple):
        if len(zone) != 4 or zone[0] != "reg" or zone[1] not in REGISTERS:
            raise ValueError(f"ct zone {zone!r}: expected an int or ('reg', 'regN', ofs, nbits)")
        ofs, nbits = int(zone[2]), int(zone[3])
        if nbits != 16 or not 0 <= ofs <= 16:  # OVS takes exactly 16 bits
            raise ValueError(f"ct zone {zone!r}: 16 bits of a register (ofs 0-16, nbits 16)")
        return ("reg", zone[1], ofs, nbits)
    if not 0 <= int(zone) <= CT_ZONE_MAX:
        raise ValueError(f"ct zone {zone} is out of 0-{CT_ZONE_MAX}")
    return int(zone)


def _ct_nested(action: Action) -> Action:
    kind = action[0]
    if kind == "set_field" and len(action) == 3 and action[1] in CT_SET_FIELDS:
        if isinstance(action[2], tuple):
            raise ValueError(f"{action!r}: ct sets the whole {action[1]} (no mask)")
        return ("set_field", action[1], canonical_value(action[1], action[2]))
    if kind == "nat" and len(action) == 7:
        return _nat(action)
    raise ValueError(f"{action!r}: ct() may only set_field ct_mark/ct_label and nat")


def _nat(action: Action) -> Action:
    _, kind, addr_lo, addr_hi, port_lo, port_hi, flags = action
    if kind not in NAT_KINDS:
        raise ValueError(f"{action!r}: nat kind is 'src', 'dst' or '' (un-NAT)")
    lo = None if addr_lo is None else ipaddress.ip_address(str(addr_lo))
    hi = None if addr_hi is None else ipaddress.ip_address(str(addr_hi))
    plo = None if port_lo is None else int(port_lo)
    phi = None if port_hi is None else int(port_hi)
    if isinstance(flags, str):
        raise ValueError(f"{action!r}: nat flags are a tuple of names")
    flagset = tuple(sorted(set(flags)))
    if not set(flagset) <= NAT_FLAGS or {"random", "hash"} <= set(flagset):
        raise ValueError(f"{action!r}: nat flags are random or hash, and persistent")
    if not kind and (flagset or any(v is not None for v in (lo, hi, plo, phi))):
        raise ValueError(f"{action!r}: a plain nat (un-NAT) takes no addresses, ports or flags")
    if kind and lo is None:
        raise ValueError(f"{action!r}: nat({kind}=...) needs an address")
    if hi is not None and (lo is None or hi.version != lo.version or hi < lo):
        raise ValueError(f"{action!r}: nat address range {addr_lo}-{addr_hi}")
    for port in (plo, phi):
        if port is not None and not 1 <= port <= 0xFFFF:
            raise ValueError(f"{action!r}: nat port {port} is out of 1-65535")
    if phi is not None and (plo is None or phi < plo):
        raise ValueError(f"{action!r}: nat port range {port_lo}-{port_hi}")
    return (
        "nat",
        kind,
        None if lo is None else str(lo),
        None if hi is None or hi == lo else str(hi),
        plo,
        None if phi is None or phi == plo else phi,
        flagset,
    )


_ETH_TYPE_OF_IP = {4: ETH_TYPE_IPV4, 6: ETH_TYPE_IPV6}


def _check_nat_family(ct: Action, eth_type: Any) -> None:
    """OVS refuses a nat unless the flow matches IP, of the version of its addresses."""
    for nested in ct[4]:
        if nested[0] != "nat":
            continue
        wanted = set(_ETH_TYPE_OF_IP.values())
        if nested[2] is not None:
            wanted = {_ETH_TYPE_OF_IP[ipaddress.ip_address(nested[2]).version]}
        if eth_type not in wanted:
            need = " or ".join(f"{t:#06x}" for t in sorted(wanted))
            raise ValueError(f"{nested!r} needs a match on eth_type {need}")


def flow(
    table: int,
    priority: int,
    actions: Iterable[Action] = (),
    *,
    cookie: int = COOKIE,
    **match: Any,
) -> Flow:
    """Build a canonical Flow: flow(4, 100, [("output", 3)], metadata=(5, 0xFF), eth_dst=mac)."""
    acts = canonical_actions(actions)
    for action in acts:
        if action[0] == "goto" and action[1] <= table:
            raise ValueError(f"table {table}: goto {action[1]} must go forward")
        if action[0] == "ct":
            _check_nat_family(action, match.get("eth_type"))
    if not 0 <= priority <= 0xFFFF:
        raise ValueError(f"priority {priority} is out of range 0-65535")
    return Flow(table, priority, canonical_match(match), acts, cookie)


@dataclass(frozen=True)
class Meter:
    """An OpenFlow meter with one drop band: packets above ``rate_kbps`` (kbit/s), after a
    burst of ``burst_kbit``, are dropped. ``unsupported``: a meter read back that netplugin
    would not write (never equal to a desired one, so reconcile rewrites it)."""

    id: int
    rate_kbps: int
    burst_kbit: int
    unsupported: str = ""

    @property
    def identity(self) -> tuple[str, int]:
        return ("meter", self.id)

    def __str__(self) -> str:
        extra = f" ({self.unsupported})" if self.unsupported else ""
        return (
            f"meter={self.id},kbps,burst,band=type=drop,rate={self.rate_kbps},"
            f"burst_size={self.burst_kbit}{extra}"
        )


def meter(meter_id: int, rate_kbps: int, burst_kbit: int) -> Meter:
    """A canonical Meter; refuses what a meter band cannot hold (32-bit rate and burst)."""
    mid = _entry_id("meter", meter_id)
    for what, value in (("rate", rate_kbps), ("burst", burst_kbit)):
        if not 1 <= int(value) <= 0xFFFF_FFFF:
            raise ValueError(f"meter {mid}: {what} {value} is out of 1-{0xFFFF_FFFF}")
    return Meter(mid, int(rate_kbps), int(burst_kbit))


# A select group's selection method (OVS's OpenFlow 1.5 group property) and its parameter:
# dp_hash with algorithm 0 hashes the 5-tuple, UDP ports included, in the datapath. OVS's
# default leaves UDP ports out on netdev (docs/DESIGN.md, "Which provider").
SELECTION: tuple[str, int] = ("dp_hash", 0)


GroupKind = str  # "select" (a service's load balancer) or "all" (a segment's flood)
GROUP_KINDS = frozenset({"select", "all"})


@dataclass(frozen=True)
class Group:
    """An OpenFlow 1.5 group. ``kind`` "select": each new flow of packets takes one bucket
    (equal weights, picked by ``selection``); "all": every bucket acts on its own copy of
    the packet (an output to the packet's in_port is skipped), and its buckets are kept
    sorted. A bucket's apply-actions act on the packet. ``unsupported`` as for Meter."""

    id: int
    buckets: tuple[tuple[Action, ...], ...]
    unsupported: str = ""
    selection: tuple[str, int] = SELECTION
    kind: GroupKind = "select"

    @property
    def identity(self) -> tuple[str, int]:
        return ("group", self.id)

    def __str__(self) -> str:
        buckets = ",".join(
            "bucket=" + (",".join(":".join(_fmt(p) for p in a) for a in b) or "drop")
            for b in self.buckets
        )
        extra = f" ({self.unsupported})" if self.unsupported else ""
        if self.kind != "select":
            return f"group_id={self.id},type={self.kind},{buckets}{extra}"
        method = f"selection_method={self.selection[0]}," if self.selection[0] else ""
        return f"group_id={self.id},type=select,{method}{buckets}{extra}"


BUCKET_WEIGHT = 100  # every select bucket's: providers share a service evenly


def _bucket_key(bucket: tuple[Action, ...]) -> tuple[Any, ...]:
    """Orders buckets by their actions, numbers as numbers (output:2 before output:10)."""
    return tuple(
        tuple((0, p, "") if isinstance(p, int) else (1, 0, repr(p)) for p in a) for a in bucket
    )


def group(group_id: int, buckets: Iterable[Iterable[Action]], kind: GroupKind = "select") -> Group:
    """A canonical Group (select unless ``kind`` says "all"); a bucket holds apply-actions
    only (no meter, goto or write_metadata: those are instructions of flows). An all
    group's buckets are sorted: their order means nothing, and so one membership is one
    value."""
    gid = _entry_id("group", group_id)
    if kind not in GROUP_KINDS:
        raise ValueError(f"group {gid}: kind {kind!r} is not select or all")
    out = []
    for b in buckets:
        actions = canonical_actions(b)
        bad = [a[0] for a in actions if a[0] in ("meter", *_TRAILING)]
        if bad:
            raise ValueError(f"group {gid}: a bucket cannot {', '.join(bad)}")
        out.append(actions)
    if kind == "all":
        out.sort(key=_bucket_key)
        return Group(gid, tuple(out), selection=("", 0), kind="all")
    return Group(gid, tuple(out))


Entry = Flow | Meter | Group


class FlowDiff(NamedTuple):
    """What to send so that the switch holds exactly the desired entries (flows, meters and
    groups)."""

    to_add: frozenset[Entry]
    to_delete: frozenset[Entry]


Identity = tuple[Any, ...]  # (table, priority, match) of a flow, ("meter"|"group", id)


def index_by_identity(flows: Iterable[Entry]) -> dict[Identity, Entry]:
    """Entries by identity; two different entries with one identity are a bug upstream."""
    index: dict[Identity, Entry] = {}
    for f in flows:
        other = index.setdefault(f.identity, f)
        if other != f:
            raise ValueError(f"two flows with one identity:\n  {other}\n  {f}")
    return index


def diff(desired: Iterable[Entry], actual: Iterable[Entry]) -> FlowDiff:
    """Flows to add (missing or changed) and to delete (identity no longer desired).

    A changed flow appears only in to_add: an OpenFlow ADD over the same identity replaces
    it in place, whereas delete-then-add would drop packets in between. So to_delete holds
    only identities the desired set no longer has, and a strict delete of them is safe to
    send before or after the adds.
    """
    want = index_by_identity(desired)
    # The switch cannot hold two flows with one identity, so no check is needed here.
    have = {f.identity: f for f in actual}
    to_add = frozenset(f for ident, f in want.items() if have.get(ident) != f)
    to_delete = frozenset(f for ident, f in have.items() if ident not in want)
    return FlowDiff(to_add, to_delete)


def replaced(flow_diff: FlowDiff, actual: Iterable[Entry]) -> frozenset[Entry]:
    """The entries of to_add that overwrite an existing one of the same identity."""
    have = {f.identity for f in actual}
    return frozenset(f for f in flow_diff.to_add if f.identity in have)
