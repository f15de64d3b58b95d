"""Endpoint groups against the cluster state: their ip-pools, members, policies, tags, and
when they may change."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Sequence

from common.models import NAME_RE, NAME_RULE, Endpoint, EndpointGroup, Network, docker_name
from ipam import parse_network, parse_range
from ipam.errors import IpamError

from ..errors import BadRequest, Conflict, NotFound
from ..validate import check_name

# Group tags are 1..2**31-1: the datapath keeps bit 31 of the tag register for "local".
MAX_GROUP_TAG = 2**31 - 1


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


def check_policies_exist(group: EndpointGroup, known: Collection[str]) -> None:
    """Every policy a group attaches exists (``known``: those of its tenant that do)."""
    for p in group.policies:
        if p not in known:
            raise NotFound(
                f"endpoint group {group.id}",
                f"policy {group.tenantName}:{p} not found; create it first",
            )


def check_unreferenced(group_id: str, rules: Sequence[str]) -> None:
    """A group goes only once no rule names it (``rules``: the ids of those that do)."""
    if rules:
        raise Conflict(
            f"endpoint group {group_id}",
            f"it is named by rule(s) {', '.join(rules)}; remove the rule(s) first",
        )


def check_name_free(group: EndpointGroup, network_exists: bool) -> None:
    """A group may not take the name of a network of its tenant: in docker, both would be
    the same network."""
    if network_exists:
        raise Conflict(
            f"endpoint group {group.id}",
            f"network {group.id} has the name {group.groupName} (both would be docker network "
            f"{docker_name(group.tenantName, group.groupName)}); choose another name",
        )


def choose_group_tag(group_id: str, used: Collection[int]) -> int:
    """The first free group tag for group ``group_id`` (``used``: the tags groups hold)."""
    tag = next(t for t in range(1, len(used) + 2) if t not in used)
    if tag > MAX_GROUP_TAG:
        raise Conflict(f"endpoint group {group_id}", f"no free group tag left (1-{MAX_GROUP_TAG})")
    return tag


def normalize_group(g: EndpointGroup, net: Network) -> EndpointGroup:
    """Validate ``g`` against its network: the ip-pool must lie inside the network's subnet.
    Its policies are names, each once (the first mention keeps its place)."""
    obj = f"endpoint group {g.id}"
    check_name("endpoint group", g.groupName)
    for p in g.policies:
        if not NAME_RE.match(p):
            raise BadRequest(obj, f"field 'policies': {p!r} is not a policy name; use {NAME_RULE}")
    if len(set(g.policies)) != len(g.policies):
        g = g.model_copy(update={"policies": list(dict.fromkeys(g.policies))})
    if not g.ipPool:
        return g
    if not net.subnet:
        raise BadRequest(obj, f"ip-pool given but network {net.id} has no IPv4 subnet")
    try:
        lo, hi = parse_range(g.ipPool, parse_network(net.subnet, "subnet"), "ip-pool")
    except IpamError as e:
        raise BadRequest(obj, str(e)) from None
    return g.model_copy(update={"ipPool": f"{ipaddress.ip_address(lo)}-{ipaddress.ip_address(hi)}"})
