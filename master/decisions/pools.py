"""Docker's pools and addresses (RequestPool, RequestAddress, ReleaseAddress) against the
cluster state: which pool a request gets, and which addresses may be handed out or freed."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common import owners
from common.models import NAME_RE, AddressRequest, EndpointGroup, PoolRequest
from common.records import AllocRecord, OwnerRecord, PoolRecord
from ipam import PoolSpec, check_ownable, next_free_pool, parse_network
from ipam.defaults import DEFAULT_V4_POOLS, DEFAULT_V6_POOLS
from ipam.errors import IpamError
from ipam.parse import parse_range

from ..errors import BadRequest, Conflict, NotFound
from .groups import pool_bounds


def pool_id_for(address_space: str, network: Any) -> str:
    """Pool ids are ``<address space>:<cidr>``; the address space is the tenant."""
    return f"{address_space}:{network}"


def pool_spec(pool_id: str, record: PoolRecord) -> PoolSpec:
    """What the allocator needs of a pool: its subnet and its sub-pool, if any."""
    network = parse_network(record.cidr, "pool")
    rng = parse_range(record.range, network, "ip-range") if record.range else None
    return PoolSpec(name=record.name or pool_id, network=network, range=rng)


def address_space(req: PoolRequest) -> str:
    return req.addressSpace or "default"


def request_obj(req: PoolRequest) -> str:
    return f"pool request in address space {address_space(req)}"


def check_pool_request(req: PoolRequest) -> None:
    """What a pool request must say before any state is read."""
    if req.subPool and not req.pool:
        raise BadRequest(request_obj(req), "a sub-pool (--ip-range) needs a pool (--subnet)")


@dataclass(frozen=True)
class PoolGrant:
    """The pool a request gets: ``record`` is the pool to create, None to share one."""

    pool_id: str
    pool: str  # the CIDR
    record: PoolRecord | None

    def to_json(self) -> dict[str, Any]:
        return {"poolID": self.pool_id, "pool": self.pool, "data": {}}


TWIN = "~"  # a second docker pool of one subnet in one space: "<space>:<cidr>~2"


def free_pool_id(plain: str, taken: Collection[str]) -> str:
    """``plain`` ("<space>:<cidr>"), or when a pool (an alias, or a network's pool Docker
    must not share) holds that id, the first free "<plain>~2", "~3", ..."""
    if plain not in taken:
        return plain
    k = 2
    while f"{plain}{TWIN}{k}" in taken:
        k += 1
    return f"{plain}{TWIN}{k}"


def plan_pool_request(
    req: PoolRequest, space: Mapping[str, PoolRecord], everywhere: Sequence[PoolRecord] = ()
) -> PoolGrant:
    """The pool for ``req``, given the pools of its address space (``space``: by pool id).

    Without a pool in the request the first free default pool is chosen, avoiding every
    pool of every space (``everywhere``): docker turns default pools into host routes. A
    pool identical to an existing one shares it (the same sub-pool, or none asked for); a
    pool overlapping another is refused. Aliases (docker pool ids standing for a network's
    pool) hold no addresses here: they are neither shared nor overlapped.

    A request without options (no --ipam-opt) never shares a network's pool: its docker
    network says which network it is for only at CreateNetwork (-o options), when its own
    pool (a twin id, see free_pool_id) is adopted by or made an alias of that network's.
    """
    obj = request_obj(req)
    try:
        if req.pool:
            # --subnet: the network Docker creates next would own it (default pools may).
            network = check_ownable(parse_network(req.pool, "pool", version=6 if req.v6 else None))
        else:
            used = [parse_network(p.cidr) for p in everywhere]
            candidate = next_free_pool(used, DEFAULT_V6_POOLS if req.v6 else DEFAULT_V4_POOLS)
            if candidate is None:
                raise Conflict(obj, "no free default pool left; pass --subnet")
            network = candidate
        rng = ""
        if req.subPool:
            sub = parse_network(req.subPool, "sub-pool", version=network.version)
            if not sub.subnet_of(network):  # type: ignore[arg-type]
                raise BadRequest(obj, f"sub-pool {sub} is not inside pool {network}")
            rng = str(sub)
    except IpamError as e:
        raise BadRequest(obj, str(e)) from None
    for pid, rec in space.items():
        if rec.alias:
            continue
        if rec.cidr == str(network):
            if rec.network and not req.options:
                continue  # a twin of its own (above)
            if rng and rec.range != rng:
                raise Conflict(obj, f"pool {network} already exists with a different sub-pool")
            return PoolGrant(pid, str(network), None)
        other = parse_network(rec.cidr)
        if other.version == network.version and other.overlaps(network):
            raise Conflict(
                obj,
                f"pool {network} overlaps pool {other} of {rec.network or 'another network'}",
            )
    pid = free_pool_id(pool_id_for(address_space(req), network), space.keys())
    record = PoolRecord(cidr=str(network), range=rng, network="", gateway="", name=pid)
    return PoolGrant(pid, str(network), record)


def resolve(pool_id: str, record: PoolRecord | None) -> str:
    """The pool id Docker's ``pool_id`` books in: the pool its alias names, or itself."""
    return record.alias if record is not None and record.alias else pool_id


# --- the pool of an endpoint group's docker network ---

GROUP_SEPARATOR = "@"  # the plugin's pool id for a group: "<network's pool id>@<group>"


def split_group_pool(pool_id: str) -> tuple[str, str]:
    """(the pool, the endpoint group) a pool id Docker holds stands for.

    A docker network of an endpoint group holds its network's pool id with the group's name
    after an "@": Docker asks for an address before the endpoint exists and with options
    that do not name the group, so the group's ip-pool can only come from the pool id. A
    plain pool id ("<address space>:<cidr>") ends in a prefix length, never in a name, so
    it is returned as it is with no group.
    """
    pool, sep, group = pool_id.rpartition(GROUP_SEPARATOR)
    if sep and pool and NAME_RE.match(group):
        return pool, group
    return pool_id, ""


def pool_network(obj: str, pool_id: str, pool: PoolRecord, group: str) -> tuple[str, str]:
    """(tenant, network name) of the network owning ``pool``, in which ``group`` is."""
    tenant, sep, network = pool.network.partition(":")
    if not sep:
        raise BadRequest(obj, f"pool {pool_id} is no network's, so not endpoint group {group}'s")
    return tenant, network


def group_pool_range(
    obj: str, tenant: str, network: str, name: str, group: EndpointGroup | None, pool: PoolRecord
) -> tuple[int, int] | None:
    """The addresses a request in endpoint group ``name``'s pool draws from: the group's
    ip-pool (None: the whole pool). The group must exist, on the pool's network."""
    if group is None:
        raise NotFound(f"endpoint group {tenant}:{name}")
    if group.networkName != network:
        raise BadRequest(
            obj,
            f"endpoint group {group.id} belongs to network {group.networkName}, not {network}",
        )
    if not group.ipPool:
        return None
    first = ipaddress.ip_address(group.ipPool.split("-", 1)[0])
    if first.version != parse_network(pool.cidr).version:
        return None  # an IPv4 ip-pool says nothing about the network's IPv6 pool
    return pool_bounds(group.ipPool)


# --- addresses ---


def address_obj(req: AddressRequest) -> str:
    return f"address request in pool {req.poolID}"


def granted_before(req: AddressRequest, held: OwnerRecord, prefixlen: int) -> str:
    """A retried request gets what its owner already holds: in the same pool only."""
    if held.pool != req.poolID:
        raise Conflict(
            address_obj(req), f"owner {req.owner} already holds an address in pool {held.pool}"
        )
    return f"{held.address}/{prefixlen}"


def network_gateway(req: AddressRequest, pool: PoolRecord, prefixlen: int) -> str | None:
    """A gateway request for the network's own gateway gets it, without a new allocation:
    every host's docker network of a cluster network asks for it."""
    if req.kind == "gateway" and pool.gateway and req.address in ("", pool.gateway):
        return f"{pool.gateway}/{prefixlen}"
    return None


def check_swarm_request(req: AddressRequest) -> None:
    """The swarm allocator's requests, and only they, are held by common.owners.SWARM."""
    if (req.kind == "swarm") != (req.owner == owners.SWARM):
        raise BadRequest(
            address_obj(req), f"kind {req.kind!r} and owner {req.owner!r} do not go together"
        )


def swarm_rebooked(obj: str, address: str, held: AllocRecord | None) -> bool:
    """The swarm allocator asks for an address it names (a new leader replays each one,
    and `--ip` on an attachable network names one): True if the swarm holds it already
    (the same booking answers), False if it is free (booked now). An address anything
    else holds is refused."""
    if held is None:
        return False
    if held.owner == owners.SWARM:
        return True
    raise Conflict(obj, f"address {address} is already in use (by {held.owner})")


def swarm_release(held: AllocRecord) -> AllocRecord | None:
    """What the swarm allocator's ReleaseAddress leaves of its booking: nothing, unless a
    task's endpoint still uses it (its node has not deleted it yet); then that endpoint
    holds the address from now on, and deleting it frees the address."""
    if not held.user:
        return None
    return AllocRecord(owner=owners.endpoint(held.user), network=held.network)


def should_release(obj: str, held: AllocRecord) -> bool:
    """Whether ReleaseAddress frees an allocated address.

    An endpoint's address goes with its endpoint (refused here); the network's gateway
    lives as long as the network (kept, and reported as not released).
    """
    if (endpoint := owners.endpoint_of(held.owner)) is not None:
        raise Conflict(obj, f"it belongs to endpoint {endpoint}; delete the endpoint")
    return held.owner != owners.NETWORK_GATEWAY


def request_owners(allocs: Sequence[AllocRecord]) -> list[str]:
    """The plain requests among the holders of a pool's addresses: deleting the pool's
    addresses must delete their owner records too, or a retried request by the same owner
    would be given back an address that is no longer booked (and so given twice)."""
    return sorted({a.owner for a in allocs if owners.is_request(a.owner)})
