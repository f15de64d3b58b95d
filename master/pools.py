"""Docker's pools and addresses in the store (RequestPool, RequestAddress and their
releases): plain address requests, idempotent by owner. A pool id naming an endpoint group
("<pool id>@<group>", a group's docker network) books in its network's pool, within the
group's ip-pool. A pool id Docker got before its network said which network it is for
(`-o tenant=T`, `-o network=N`) is bound to that network's pool at CreateNetwork
(bind_pool): an alias of it from then on, resolved by every request and release."""

from __future__ import annotations

from typing import Any

from common import keys, owners
from common.models import (
    AddressRelease,
    AddressRequest,
    EndpointGroup,
    PoolBinding,
    PoolRequest,
)
from common.records import AllocRecord, NetworkRecord, OwnerRecord, PoolRecord, decode_config
from ipam import parse_address, parse_network
from ipam.errors import IpamError
from store import KV, Compare, Delete, Op, Put

from .addresses import Claims, IPAddr, PoolCache, pool_record
from .decisions.bindings import Target, plan_binding
from .decisions.pools import (
    address_obj,
    address_space,
    check_pool_request,
    check_swarm_request,
    granted_before,
    group_pool_range,
    network_gateway,
    plan_pool_request,
    pool_network,
    pool_spec,
    request_obj,
    request_owners,
    should_release,
    split_group_pool,
    swarm_rebooked,
    swarm_release,
)
from .errors import BadRequest, NotFound
from .txn import (
    HotCache,
    Retry,
    TxnStore,
    absent,
    retrying,
    retrying_hot,
    unchanged,
    untouched_since,
)
from .txn import pool_id as pool_id_of


def _group(kv: KV) -> EndpointGroup:
    """How the hot cache parses a group key (as master.endpoints does: one entry per key)."""
    return decode_config(EndpointGroup, kv.value)


def release_addresses(txn: TxnStore, pool_id: str) -> tuple[list[Op], Compare]:
    """Deleting every address of a pool with the owner records of the requests holding
    them; the compare fails the txn if an address was taken meanwhile."""
    kvs, rev = txn.range(keys.allocs_of(pool_id))
    holders = request_owners([AllocRecord.decode(kv.value) for kv in kvs])
    ops: list[Op] = [Delete(keys.allocs_of(pool_id), prefix=True)]
    ops += [Delete(keys.owner(o)) for o in holders]
    return ops, untouched_since(keys.allocs_of(pool_id), rev)


class Pools:
    def __init__(self, txn: TxnStore, hot: HotCache, pools: PoolCache) -> None:
        self.txn = txn
        self.hot = hot
        self.pools = pools

    def request_pool(self, req: PoolRequest) -> dict[str, Any]:
        """Reserve a pool in an address space (a tenant); an existing identical pool is shared."""
        check_pool_request(req)
        space = keys.POOLS + address_space(req) + ":"

        def attempt() -> dict[str, Any]:
            kvs, rev = self.txn.range(space)
            # Only a default pool (no --subnet) must avoid the pools of every space.
            everywhere = self.txn.range(keys.POOLS)[0] if not req.pool else []
            grant = plan_pool_request(
                req,
                {pool_id_of(kv): PoolRecord.decode(kv.value) for kv in kvs},
                [PoolRecord.decode(kv.value) for kv in everywhere],
            )
            if grant.record is not None:
                key = keys.pool(grant.pool_id)
                self.txn.commit(
                    [absent(key), untouched_since(space, rev)], [Put(key, grant.record.encode())]
                )
            return grant.to_json()

        return retrying(request_obj(req), attempt)

    def release_pool(self, pool_id: str) -> None:
        if split_group_pool(pool_id)[1]:
            return  # an endpoint group's docker network let go of its network's pool
        obj = f"pool {pool_id}"

        def attempt() -> None:
            pkv = self.txn.get(keys.pool(pool_id))
            if pkv is None:
                raise NotFound(obj)
            pool = PoolRecord.decode(pkv.value)
            if pool.alias:
                self._drop_alias(pkv, pool.alias)
                return
            if pool.network:
                return  # owned by a network: released when the network is deleted
            owned, guard = release_addresses(self.txn, pool_id)
            self.txn.commit([unchanged(pkv), guard], [Delete(pkv.key), *owned])
            self.pools.forget(pool_id)

        retrying(obj, attempt)

    def _drop_alias(self, akv: KV, alias: str) -> None:
        """Docker let go of a pool id standing for a network's pool: the alias goes, from
        that pool's list too (the pool and its addresses are the network's)."""
        target = keys.pool(split_group_pool(alias)[0])
        tkv = self.txn.get(target)
        compares: list[Compare] = [unchanged(akv)]
        ops: list[Op] = [Delete(akv.key)]
        if tkv is None:
            compares.append(absent(target))
        else:
            compares.append(unchanged(tkv))
            pool = PoolRecord.decode(tkv.value)
            left = tuple(a for a in pool.aliases if a != pool_id_of(akv))
            ops.append(Put(target, pool.model_copy(update={"aliases": left}).encode()))
        self.txn.commit(compares, ops)

    def bind_pool(self, req: PoolBinding) -> str:
        """Make Docker's pool id ``req.poolID`` book in network TENANT:NETWORK's pool (within
        endpoint group ``req.groupName``'s ip-pool): one txn turns a docker pool of its own
        into an alias of that pool and moves its addresses there. A pool id that books there
        already is left as it is, one no pool holds is a 404; what the pool id stands for is
        returned."""
        tenant, network, group = req.tenantName, req.networkName, req.groupName
        obj = f"docker pool {req.poolID} of network {tenant}:{network}"

        def attempt() -> str:
            nkv = self.txn.get(keys.network(tenant, network))
            if nkv is None:
                raise NotFound(f"network {tenant}:{network}")
            rec = NetworkRecord.decode(nkv.value)
            pkv = self.txn.get(keys.pool(split_group_pool(req.poolID)[0]))
            docker = PoolRecord.decode(pkv.value) if pkv is not None else None
            version = parse_network(docker.cidr).version if docker is not None else 4
            qid = rec.pool(version)
            qkv = self.txn.get(keys.pool(qid)) if qid else None
            pool = PoolRecord.decode(qkv.value) if qkv is not None else None
            compares: list[Compare] = [unchanged(nkv)]
            if group:
                gkv = self.txn.get(keys.group(tenant, group))
                found = _group(gkv) if gkv else None
                group_pool_range(obj, tenant, network, group, found, pool or PoolRecord(cidr=""))
                if gkv is not None:
                    compares.append(unchanged(gkv))
            joining = rec.config.dockerNetworkID != req.dockerNetworkID
            target = Target(rec.id, qid if pool else "", pool, group, joining)
            if pkv is None or docker is None or qkv is None or pool is None:
                plan_binding(req.poolID, docker, target)  # refuses, or nothing to do
                return req.poolID
            kvs, rev = self.txn.range(keys.allocs_of(req.poolID))
            allocs = {k.key.rpartition("/")[2]: AllocRecord.decode(k.value) for k in kvs}
            taken = [a for a in allocs if self.txn.get(keys.alloc(qid, a)) is not None]
            plan = plan_binding(req.poolID, docker, target, allocs, taken)
            if not plan.alias:
                return target.alias if docker.alias else req.poolID
            compares += [
                unchanged(pkv),
                unchanged(qkv),
                untouched_since(keys.allocs_of(req.poolID), rev),
                *(absent(keys.alloc(qid, a)) for a, _ in plan.moved),
            ]
            alias = PoolRecord(cidr=docker.cidr, alias=plan.alias, name=req.poolID)
            aliased = pool.model_copy(update={"aliases": (*pool.aliases, req.poolID)})
            ops: list[Op] = [
                Delete(keys.allocs_of(req.poolID), prefix=True),
                Put(pkv.key, alias.encode()),
                Put(qkv.key, aliased.encode()),
                *(Delete(keys.owner(o)) for o in plan.dropped),
            ]
            for address, held in plan.moved:
                ops.append(Put(keys.alloc(qid, address), held.encode()))
                if owners.is_request(held.owner):
                    owned = OwnerRecord(pool=qid, address=address)
                    ops.append(Put(keys.owner(held.owner), owned.encode()))
            self.txn.commit(compares, ops)
            self.pools.forget(req.poolID)
            self.pools.forget(qid)
            return plan.alias

        return retrying(obj, attempt)

    def request_address(self, req: AddressRequest) -> str:
        """Allocate one address; returns it as CIDR. Idempotent by ``owner``.

        Like create_endpoint, one store round trip when nothing moved: the first try
        trusts the cached pool record and lets the txn's compares (owner absent, pool
        unchanged) check it; a retry reads afresh, the owner's record first. A pool id that
        is an alias books in the pool it stands for (the alias unchanged, compared too).
        """
        obj = address_obj(req)
        check_swarm_request(req)
        # The swarm's bookings share one owner and have no owner record: a request naming
        # its address finds its booking by the address.
        swarm = req.kind == "swarm"
        static = str(self._parsed(obj, req.address)) if swarm and req.address else ""

        def attempt(fresh: bool) -> str:
            okv = self.txn.get(keys.owner(req.owner)) if fresh and not swarm else None
            pool_id, group = split_group_pool(req.poolID)
            hit = self.hot.get(keys.pool(pool_id), fresh, pool_record)
            compares: list[Compare] = [] if swarm else [absent(keys.owner(req.owner))]
            if hit is not None and hit[1].alias and not group:
                compares.append(unchanged(hit[0]))
                pool_id, group = split_group_pool(hit[1].alias)
                hit = self.hot.get(keys.pool(pool_id), fresh, pool_record)
            if hit is None:
                raise NotFound(f"pool {pool_id}")
            booked = req.model_copy(update={"poolID": pool_id})  # booked in the network's pool
            pool = hit[1]
            prefixlen = pool_spec(pool_id, pool).network.prefixlen
            if okv is not None:
                return granted_before(booked, OwnerRecord.decode(okv.value), prefixlen)
            if static:
                akv = self.txn.get(keys.alloc(pool_id, static))
                if swarm_rebooked(obj, static, AllocRecord.decode(akv.value) if akv else None):
                    return f"{static}/{prefixlen}"
            if (gateway := network_gateway(booked, pool, prefixlen)) is not None:
                if not fresh:
                    raise Retry  # answered without a txn: only on fresh reads
                return gateway
            within = None
            if group and req.kind != "gateway":  # the gateway is the network's, in no group
                tenant, network = pool_network(obj, pool_id, pool, group)
                ghit = self.hot.get(keys.group(tenant, group), fresh, _group)
                within = group_pool_range(
                    obj, tenant, network, group, ghit[1] if ghit else None, pool
                )
                if ghit is not None:
                    compares.append(unchanged(ghit[0]))
            claims = Claims(self.txn, self.hot, self.pools, obj, req.owner)
            try:
                addr = claims.claim(pool_id, req.address, within, compares, fresh)
                held = AllocRecord(owner=req.owner, kind="" if swarm else req.kind)
                owned = OwnerRecord(pool=pool_id, address=str(addr))
                ops: list[Op] = [Put(keys.alloc(pool_id, str(addr)), held.encode())]
                if not swarm:
                    ops.append(Put(keys.owner(req.owner), owned.encode()))
                res = self.txn.txn(compares, ops)
            except BaseException:
                claims.undo()
                raise
            if res.succeeded:
                return f"{addr}/{prefixlen}"
            claims.settle({pool_id: req.address})
            raise Retry

        return retrying_hot(obj, attempt)

    @staticmethod
    def _parsed(obj: str, address: str) -> IPAddr:
        try:
            return parse_address(address, "address")
        except IpamError as e:
            raise BadRequest(obj, str(e)) from None

    def release_address(self, req: AddressRelease) -> bool:
        obj = f"address {req.address} in pool {req.poolID}"
        addr = self._parsed(obj, req.address)

        def attempt() -> bool:
            pool_id, group = split_group_pool(req.poolID)
            guard: list[Compare] = []
            if not group and (pkv := self.txn.get(keys.pool(pool_id))) is not None:
                alias = PoolRecord.decode(pkv.value).alias
                if alias:  # the address is booked in the pool the alias stands for
                    pool_id = split_group_pool(alias)[0]
                    guard.append(unchanged(pkv))
            akv = self.txn.get(keys.alloc(pool_id, str(addr)))
            if akv is None:
                return False
            held = AllocRecord.decode(akv.value)
            if not should_release(obj, held):
                return False
            if held.owner == owners.SWARM and (kept := swarm_release(held)) is not None:
                self.txn.commit([unchanged(akv), *guard], [Put(akv.key, kept.encode())])
                return True  # the swarm let go; the task's endpoint holds it until deleted
            ops: list[Op] = [Delete(akv.key)]
            if held.owner != owners.SWARM and self.txn.get(keys.owner(held.owner)) is not None:
                ops.append(Delete(keys.owner(held.owner)))
            self.txn.commit([unchanged(akv), *guard], ops, grouped=True)
            self.pools.released(pool_id, addr)
            return True

        return retrying(obj, attempt)
