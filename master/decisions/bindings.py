"""Which pool a docker network's pool id stands for: one booking per address.

Docker reserves a network's pool (RequestPool, which sees only --ipam-opt options) before
the network driver learns which network it is for (CreateNetwork, which sees only -o
options). At CreateNetwork the plugin binds the pool id Docker got to the pool of the
network it made or joined (`-o tenant=T`, `-o network=N -o group=G`): a docker pool of its
own becomes an alias of that pool, and its addresses (Docker's gateway request, aux
addresses) move there. A combination that cannot be bound (the --ipam-opt options name
another tenant, network or group than the -o ones, another subnet or gateway) is refused
with what to type instead, before anything changes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from common import owners
from common.models import docker_name
from common.records import AllocRecord, PoolRecord

from ..errors import BadRequest, Conflict, NotFound
from .pools import GROUP_SEPARATOR, split_group_pool


@dataclass(frozen=True)
class Target:
    """The pool a docker network's addresses belong in: network ``network``'s pool
    ``pool_id`` (its record ``pool``), within endpoint group ``group`` ("" for none)."""

    network: str  # TENANT:NAME
    pool_id: str  # "" when the network has no subnet of the docker pool's IP version
    pool: PoolRecord | None
    group: str = ""
    joining: bool = False  # -o network=N (an existing network), not a network just made

    @property
    def tenant(self) -> str:
        return self.network.partition(":")[0]

    @property
    def name(self) -> str:
        return self.network.partition(":")[2]

    @property
    def alias(self) -> str:
        """What Docker's pool id is to stand for."""
        return f"{self.pool_id}{GROUP_SEPARATOR}{self.group}" if self.group else self.pool_id

    def options(self, flag: str) -> str:
        """The options that name this network (and group) with ``flag``: -o or --ipam-opt."""
        opts = [] if self.tenant == "default" else [f"{flag} tenant={self.tenant}"]
        if self.joining:
            opts.append(f"{flag} network={self.name}")
        if self.group:
            opts.append(f"{flag} group={self.group}")
        return " ".join(opts)


@dataclass(frozen=True)
class Binding:
    """What binding a docker pool id changes: ``alias`` is what it will stand for ("" when
    it already books where it should: nothing to change)."""

    alias: str = ""
    moved: tuple[tuple[str, AllocRecord], ...] = ()  # (address, holder) into the target pool
    dropped: tuple[str, ...] = ()  # request owners whose booking the network's own replaces


def binding_obj(pool_id: str, target: Target) -> str:
    if target.joining:
        return f"docker pool {pool_id} of network {target.network}"
    return f"docker pool {pool_id} of a new network in tenant {target.tenant}"


def _instead(target: Target) -> str:
    """What to type instead: the -o options alone, or the same ones as --ipam-opt too."""
    o, ipam = target.options("-o"), target.options("--ipam-opt")
    if not o:
        return "pass no --ipam-opt tenant/network/group (or --ipam-opt tenant=default)"
    return f"pass {o} alone, or with the same --ipam-opt ({ipam})"


def plan_binding(
    pool_id: str,
    record: PoolRecord | None,
    target: Target,
    allocs: Mapping[str, AllocRecord] | None = None,
    taken: Collection[str] = (),
) -> Binding:
    """Bind Docker's ``pool_id`` (``record``: the record of its pool, None if gone) to
    ``target``. ``allocs``: the addresses booked in the docker pool; ``taken``: those of
    them already booked in the target pool.

    A pool id no pool holds is refused: the plugin binds only the pool ids its RequestPool
    handed out moments before, in the same `docker network create` (one it did not hand
    out, after a restart, it leaves unbound), and Docker releases a pool only after
    CreateNetwork failed or the network went. Answering "bound" would hide a docker network
    whose addresses book nowhere."""
    obj = binding_obj(pool_id, target)
    if record is None:
        raise NotFound(
            obj, "not found (no RequestPool gave it, or ReleasePool took it back): nothing to bind"
        )
    if pool_id == target.alias:
        return Binding()  # the network's own pool id
    if record.alias:
        if record.alias == target.alias:
            return Binding()  # bound before (a retried CreateNetwork)
        raise Conflict(
            obj, f"it already stands for pool {record.alias} of another docker network; retry"
        )
    base, group = split_group_pool(pool_id)
    if record.network:
        _refuse_foreign(obj, base, group, record, target)
    space = pool_id.partition(":")[0]
    if space not in ("default", target.tenant):
        what = f"network {target.network}'s tenant" if target.joining else "-o's tenant"
        raise BadRequest(
            obj, f"--ipam-opt tenant={space} is not {what} ({target.tenant}): " + _instead(target)
        )
    if not target.pool_id or target.pool is None:
        raise BadRequest(
            obj,
            f"network {target.network} has no subnet of IP version of {record.cidr}; "
            "create the docker network with its subnets only",
        )
    pool = target.pool
    if record.cidr != pool.cidr:
        raise BadRequest(
            obj,
            f"network {target.network} has subnet {pool.cidr}, not {record.cidr}: "
            f"pass --subnet {pool.cidr}",
        )
    if record.range and record.range != pool.range:
        what = f"--ip-range {pool.range}" if pool.range else "no --ip-range"
        raise BadRequest(
            obj, f"network {target.network} hands out {pool.range or 'its whole subnet'}: {what}"
        )
    moved: list[tuple[str, AllocRecord]] = []
    dropped: list[str] = []
    for address, held in sorted((allocs or {}).items()):
        if held.kind == "gateway" and pool.gateway and address != pool.gateway:
            raise BadRequest(
                obj,
                f"network {target.network}'s gateway is {pool.gateway}, not {address}: "
                f"pass --gateway {pool.gateway}",
            )
        if address == pool.gateway and held.kind == "gateway" and owners.is_request(held.owner):
            dropped.append(held.owner)  # the network's gateway booking stands for it
        elif address in taken or address == pool.gateway:
            raise Conflict(
                obj,
                f"address {address} Docker booked is already in use in network "
                f"{target.network}; drop it from --aux-address",
            )
        else:
            moved.append((address, held))
    return Binding(target.alias, tuple(moved), tuple(dropped))


def _refuse_foreign(obj: str, base: str, group: str, record: PoolRecord, target: Target) -> None:
    """Docker's pool id is a network's pool (--ipam-opt network=, or --ipam-opt tenant=
    sharing it), not the one the -o options make or name."""
    if record.network == target.network and base == target.pool_id:
        if group and not target.group:
            raise BadRequest(
                obj,
                f"--ipam-opt group={group} books in endpoint group {group}, but no -o "
                f"group={group} puts the containers in it: add -o group={group}",
            )
        booked = f"endpoint group {group}" if group else "no endpoint group"
        raise BadRequest(
            obj,
            f"--ipam-opt books Docker's addresses in {booked}, -o puts the containers in "
            f"endpoint group {target.group}: " + _instead(target),
        )
    if target.joining:
        raise BadRequest(
            obj,
            f"--ipam-opt books Docker's addresses in network {record.network}'s pool ({base}), "
            f"not in network {target.network}'s: " + _instead(target),
        )
    tenant, _, name = record.network.partition(":")
    join = "-o network=" + name + ("" if tenant == "default" else f" -o tenant={tenant}")
    raise BadRequest(
        obj,
        f"--ipam-opt books Docker's addresses in network {record.network}'s pool ({base}): "
        f"to put containers in network {record.network} (docker network "
        f"{docker_name(tenant, name)}) pass {join} too; for a new network drop "
        f"--ipam-opt network={name} (--ipam-opt tenant, if any, must be -o tenant's)",
    )
