"""A segment's flood: one OpenFlow all group per segment, a bucket per local endpoint.

The flood flows (datapath.pipeline's, and routing mode's in datapath.routing) name the
segment's group instead of listing its endpoints, so an endpoint that comes or goes
changes its own flows and this one group, never the flood flows. OVS runs every bucket of
an all group on a copy of the packet and skips a bucket's output to the packet's in_port
("skipping output to input port"), so a flood never returns to its sender; actions after
the group act on the packet as it was before it.

    segment 5000, endpoints on ofports 1, 2, 7, gateway on 10, one other host (tunnel 50):
      group_id=0x80001388,type=all,bucket=output:1,bucket=output:2,bucket=output:7
      forward metadata=5000/origin local    -> group:0x80001388,output:10,set tunnel_id,output:50
      forward metadata=5000/origin gateway  -> group:0x80001388
      forward metadata=5000/origin remote   -> group:0x80001388

The gateway is no bucket: it talks only to this host's endpoints, so what comes from
other hosts must not reach it.

Ids: 0x8000_0000 | segment. Service groups are tag * 16 + index <= 0x7FFF_FFFF and
segments are below 2^26, so a flood group never meets a service's, and needs no allocator.

Size: one group mod is one OpenFlow message, at most 65,535 bytes; an all group's output
bucket takes 24. A segment with more than FLOOD_BUCKETS local endpoints is split by ofport
range into child groups (part 1, 2, ... at 0x8000_0000 | part << 26 | segment), each of
at most FLOOD_BUCKETS outputs, and its group chains to them (a bucket of group:child). A
port stays in its child as others come and go, so a change still rewrites one child.
"""

from __future__ import annotations

from collections.abc import Iterable

from datapath.flows import Action, Group, group

FLOOD_GROUP_BASE = 0x8000_0000
SEGMENT_LIMIT = 1 << 26  # every segment is below (VRF segments are 2^25 | tag)
# Outputs per group: 2,200 * 24 B + the 24 B header = 52,824 B, under the 65,535 B of one
# message with room to spare; OVS's ofports (16 bits, at most 0xFEFF) then need at most
# 30 child groups, whose part numbers fit the 5 bits between segment and base.
FLOOD_BUCKETS = 2_200
_PART_BITS = 26
_MAX_PART = 30  # 0x8000_0000 | 30 << 26 | (2^26 - 1) stays under OFPG_MAX


def flood_group_id(segment: int, part: int = 0) -> int:
    """The id of a segment's flood group (part 0) or of its child group ``part``."""
    if not 0 <= segment < SEGMENT_LIMIT:
        raise ValueError(f"segment {segment:#x} is out of 0-{SEGMENT_LIMIT - 1:#x}")
    if not 0 <= part <= _MAX_PART:
        raise ValueError(f"segment {segment:#x}: flood group part {part} is out of 0-{_MAX_PART}")
    return FLOOD_GROUP_BASE | part << _PART_BITS | segment


def flood_action(segment: int) -> Action:
    """The action that floods a packet to the segment's local endpoints."""
    return ("group", flood_group_id(segment))


def flood_groups(segment: int, ports: Iterable[int]) -> list[Group]:
    """The segment's flood group, and its child groups if its endpoints' ofports
    (``ports``) are more than one group mod can hold. Made even with no ports: an all
    group without buckets drops, and the flood flows then need not change."""
    outputs = sorted(set(ports))
    if len(outputs) <= FLOOD_BUCKETS:
        return [group(flood_group_id(segment), ([("output", p)] for p in outputs), "all")]
    parts: dict[int, list[int]] = {}
    for p in outputs:
        parts.setdefault(1 + p // FLOOD_BUCKETS, []).append(p)
    too_high = [p for part, ps in parts.items() if part > _MAX_PART for p in ps]
    if too_high:
        raise ValueError(
            f"segment {segment:#x}: ofport {too_high[0]} is above the "
            f"{_MAX_PART * FLOOD_BUCKETS - 1} a flood group can split (OVS's are 16 bits)"
        )
    children = [
        group(flood_group_id(segment, part), ([("output", p)] for p in ps), "all")
        for part, ps in sorted(parts.items())
    ]
    parent = group(flood_group_id(segment), ([("group", c.id)] for c in children), "all")
    return [parent, *children]
