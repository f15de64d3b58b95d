"""Default address pools for networks created without a subnet, and the search for a free one.

IPv4 defaults live in the top of 10.0.0.0/8, carved into /24s:

- 10.200.0.0/13 (10.200.0.0 - 10.207.255.255): 2048 /24 networks
- 10.208.0.0/12 (10.208.0.0 - 10.223.255.255): 4096 /24 networks

They avoid Docker's own defaults (the bridge pools 172.17.0.0/16 - 172.31.0.0/16 and
192.168.0.0/16 in /20s, and swarm's 10.0.0.0/8 /24s, which are handed out from 10.0.0.0
upwards), the low 10.x ranges cloud VPCs and corporate LANs tend to use, and 100.64.0.0/10
(carrier-grade NAT).  IPv6 defaults are /64s from a fixed ULA /48 whose global ID spells
"netpl" in hex; a /64 is the smallest subnet SLAAC and most IPv6 tooling accept.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from ipaddress import IPv4Network, IPv6Network, ip_network

from ipam.errors import InvalidCidr
from ipam.parse import Network, parse_network

DEFAULT_V4_POOLS: list[tuple[str, int]] = [
    ("10.200.0.0/13", 24),
    ("10.208.0.0/12", 24),
]

DEFAULT_V6_POOLS: list[tuple[str, int]] = [
    ("fd6e:6574:706c::/48", 64),
]

PoolBases = Iterable[tuple[str | Network, int]]


def overlaps(a: Network, b: Network) -> bool:
    """Whether two networks share any address (always False across IP versions)."""
    return (
        a.version == b.version
        and int(a.network_address) <= int(b.broadcast_address)
        and int(b.network_address) <= int(a.broadcast_address)
    )


def first_overlap(network: Network, others: Iterable[Network]) -> Network | None:
    """The first network in others that overlaps network, or None."""
    for other in others:
        if overlaps(network, other):
            return other
    return None


def _as_network(value: str | Network) -> Network:
    """Coerce a used entry (network or CIDR string, host bits tolerated) to a network."""
    if isinstance(value, IPv4Network | IPv6Network):
        return value
    return ip_network(value, strict=False)


def _merged(used: Iterable[str | Network], version: int) -> tuple[list[int], list[int]]:
    """Used networks of one version as sorted, merged (starts, ends) integer lists."""
    spans = sorted(
        (int(n.network_address), int(n.broadcast_address))
        for n in map(_as_network, used)
        if n.version == version
    )
    starts: list[int] = []
    ends: list[int] = []
    for lo, hi in spans:
        if ends and lo <= ends[-1] + 1:
            ends[-1] = max(ends[-1], hi)
        else:
            starts.append(lo)
            ends.append(hi)
    return starts, ends


def next_free_pool(
    used: Iterable[str | Network], pools: PoolBases = DEFAULT_V4_POOLS
) -> Network | None:
    """The first candidate subnet, in pool order, that overlaps no network in used.

    Cost is O(u log u) for u used networks, independent of how many candidates there are:
    the scan jumps past each used span arithmetically instead of stepping through subnets.
    """
    used = list(used)
    merged: dict[int, tuple[list[int], list[int]]] = {}
    for base_value, prefixlen in pools:
        base = parse_network(base_value, "address pool")
        if not base.prefixlen <= prefixlen <= base.max_prefixlen:
            raise InvalidCidr(
                "address pool",
                str(base),
                f"subnet size /{prefixlen} must be between /{base.prefixlen} "
                f"and /{base.max_prefixlen}",
            )
        if base.version not in merged:
            merged[base.version] = _merged(used, base.version)
        starts, ends = merged[base.version]
        size = 1 << (base.max_prefixlen - prefixlen)
        cand = int(base.network_address)
        last = int(base.broadcast_address)
        net_cls = IPv4Network if base.version == 4 else IPv6Network
        while cand <= last:
            i = bisect_left(ends, cand)
            if i == len(ends) or starts[i] > cand + size - 1:
                return net_cls((cand, prefixlen))
            # The base is aligned to a multiple of size, so aligning absolutely stays in step.
            cand = (ends[i] // size + 1) * size
    return None
