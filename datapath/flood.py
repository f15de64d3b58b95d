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

Size: ovs-vswitchd checks an OpenFlow 1.5 group's bucket ids pairwise, so a group mod
costs it O(buckets²) (2.5 ms at 1,000 buckets against 0.12 ms at 10-100; research note,
section 4), and one group mod is one message of at most 65,535 bytes (an output bucket
takes 24). So a segment with more than FLOOD_SPLIT local endpoints spreads them over up to
FLOOD_PARTS child groups by ofport modulo FLOOD_PARTS (part 1 + ofport % FLOOD_PARTS at
0x8000_0000 | part << 26 | segment), and its group chains to them (a bucket of
group:child). A port stays in its child as others come and go, so a change rewrites one
child of about N / FLOOD_PARTS buckets: 34 at 1,000 endpoints, 167 at 5,000.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from datapath.flows import Action, Group, group

FLOOD_GROUP_BASE = 0x8000_0000
SEGMENT_LIMIT = 1 << 26  # every segment is below (VRF segments are 2^25 | tag)
# Outputs per group: 2,200 * 24 B + the 24 B header = 52,824 B, under the 65,535 B of one
# message with room to spare.
FLOOD_BUCKETS = 2_200
FLOOD_SPLIT = 128  # more local endpoints than this: child groups
_PART_BITS = 26
# Children 1..30: their part numbers fit the 5 bits between segment and base, and
# 0x8000_0000 | 30 << 26 | (2^26 - 1) stays under OFPG_MAX.
FLOOD_PARTS = 30


def flood_group_id(segment: int, part: int = 0) -> int:
    """The id of a segment's flood group (part 0) or of its child group ``part``."""
    if not 0 <= segment < SEGMENT_LIMIT:
        raise ValueError(f"segment {segment:#x} is out of 0-{SEGMENT_LIMIT - 1:#x}")
    if not 0 <= part <= FLOOD_PARTS:
        raise ValueError(f"segment {segment:#x}: flood group part {part} is out of 0-{FLOOD_PARTS}")
    return FLOOD_GROUP_BASE | part << _PART_BITS | segment


def flood_action(segment: int) -> Action:
    """The action that floods a packet to the segment's local endpoints."""
    return ("group", flood_group_id(segment))


def flood_groups(segment: int, ports: Iterable[int]) -> list[Group]:
    """The segment's flood group, and its child groups if its endpoints' ofports
    (``ports``) are more than FLOOD_SPLIT. Made even with no ports: an all group without
    buckets drops, and the flood flows then need not change."""
    outputs = sorted(set(ports))
    if len(outputs) <= FLOOD_SPLIT:
        return [_outputs_group(flood_group_id(segment), tuple(outputs))]
    parts: dict[int, list[int]] = {}
    for p in outputs:
        parts.setdefault(1 + p % FLOOD_PARTS, []).append(p)
    full = [(part, len(ps)) for part, ps in parts.items() if len(ps) > FLOOD_BUCKETS]
    if full:
        raise ValueError(
            f"segment {segment:#x}: {full[0][1]} of its {len(outputs)} endpoints' ofports "
            f"leave the same remainder by {FLOOD_PARTS}, more than one flood group holds "
            f"({FLOOD_BUCKETS})"
        )
    children = [
        _outputs_group(flood_group_id(segment, part), tuple(ps))
        for part, ps in sorted(parts.items())
    ]
    parent = group(flood_group_id(segment), ([("group", c.id)] for c in children), "all")
    return [parent, *children]


@functools.lru_cache(maxsize=8192)
def _outputs_group(group_id: int, outputs: tuple[int, ...]) -> Group:
    """An all group with a bucket per output port (sorted, distinct). Cached: an endpoint's
    change recompiles its segment's flood, and only one child's ports changed."""
    return group(group_id, ([("output", p)] for p in outputs), "all")
