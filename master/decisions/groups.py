"""Endpoint groups against the cluster state: their ip-pools, members, and when they may
change."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from common.models import Endpoint, EndpointGroup

from ..errors import Conflict


def pool_bounds(ip_pool: str) -> tuple[int, int]:
    """The addresses of a normalised ip-pool ("lo-hi"), as integers."""
    lo, hi = ip_pool.split("-")
    return int(ipaddress.ip_address(lo)), int(ipaddress.ip_address(hi))


def members(group: EndpointGroup, endpoints: Iterable[Endpoint]) -> list[Endpoint]:
    """The endpoints of ``group`` among ``endpoints`` (those of its network)."""
    return [e for e in endpoints if e.groupName == group.groupName]


def moves(old: EndpointGroup, new: EndpointGroup) -> bool:
    """Whether ``new`` changes where the group's members are: its network or its ip-pool."""
    return (old.networkName, old.ipPool) != (new.networkName, new.ipPool)


def check_change(old: EndpointGroup, new: EndpointGroup, members: int) -> None:
    """A group's network and ip-pool stay while it has members (its other fields may change)."""
    if moves(old, new) and members:
        raise Conflict(
            f"endpoint group {new.id}",
            f"network and ip-pool cannot change while {members} endpoint(s) are in the group",
        )


def check_pool_overlap(group: EndpointGroup, others: Iterable[EndpointGroup]) -> None:
    """Groups of one network draw from disjoint ip-pools (``others``: the tenant's groups)."""
    if not group.ipPool:
        return
    mine = pool_bounds(group.ipPool)
    for o in others:
        if o.groupName == group.groupName or o.networkName != group.networkName or not o.ipPool:
            continue
        theirs = pool_bounds(o.ipPool)
        if mine[0] <= theirs[1] and theirs[0] <= mine[1]:
            raise Conflict(
                f"endpoint group {group.id}",
                f"ip-pool {group.ipPool} overlaps {o.ipPool} of group {o.id}",
            )


def check_deletable(group_id: str, members: int) -> None:
    if members:
        raise Conflict(
            f"endpoint group {group_id}", f"it still has {members} endpoint(s); remove them first"
        )


def using(network: str, groups: Iterable[EndpointGroup]) -> list[str]:
    """The names of the groups (of one tenant) on network ``network`` (its name)."""
    return [g.groupName for g in groups if g.networkName == network]
