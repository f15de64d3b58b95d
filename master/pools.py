"""Docker's pools and addresses in the store (RequestPool, RequestAddress and their
releases): plain address requests, idempotent by owner. A pool id naming an endpoint group
("<pool id>@<group>", a group's docker network) books in its network's pool, within the
group's ip-pool."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import AddressRelease, AddressRequest, EndpointGroup, PoolRequest
from common.records import AllocRecord, OwnerRecord, PoolRecord, decode_config
from ipam import parse_address
from ipam.errors import IpamError
from store import KV, Compare, Delete, Op, Put

from .addresses import Claims, PoolCache, pool_record
from .decisions.pools import (
    address_obj,
    address_space,
    check_pool_request,
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
                [PoolRecord.decode(kv.value) for kv in kvs],
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
            if PoolRecord.decode(pkv.value).network:
                return  # owned by a network: released when the network is deleted
            owned, guard = release_addresses(self.txn, pool_id)
            self.txn.commit([unchanged(pkv), guard], [Delete(pkv.key), *owned])
            self.pools.forget(pool_id)

        retrying(obj, attempt)

    def request_address(self, req: AddressRequest) -> str:
        """Allocate one address; returns it as CIDR. Idempotent by ``owner``.

        Like create_endpoint, one store round trip when nothing moved: the first try
        trusts the cached pool record and lets the txn's compares (owner absent, pool
        unchanged) check it; a retry reads afresh, the owner's record first.
        """
        obj = address_obj(req)
        pool_id, group = split_group_pool(req.poolID)
        req = req.model_copy(update={"poolID": pool_id})  # what is booked: the network's pool

        def attempt(fresh: bool) -> str:
            okv = self.txn.get(keys.owner(req.owner)) if fresh else None
            hit = self.hot.get(keys.pool(pool_id), fresh, pool_record)
            if hit is None:
                raise NotFound(f"pool {pool_id}")
            pool = hit[1]
            prefixlen = pool_spec(pool_id, pool).network.prefixlen
            if okv is not None:
                return granted_before(req, OwnerRecord.decode(okv.value), prefixlen)
            if (gateway := network_gateway(req, pool, prefixlen)) is not None:
                if not fresh:
                    raise Retry  # answered without a txn: only on fresh reads
                return gateway
            compares: list[Compare] = [absent(keys.owner(req.owner))]
            within = None
            if group and req.kind != "gateway":  # the gateway is the network's, in no group
                tenant, network = pool_network(obj, req.poolID, pool, group)
                ghit = self.hot.get(keys.group(tenant, group), fresh, _group)
                within = group_pool_range(
                    obj, tenant, network, group, ghit[1] if ghit else None, pool
                )
                if ghit is not None:
                    compares.append(unchanged(ghit[0]))
            claims = Claims(self.txn, self.hot, self.pools, obj, req.owner)
            try:
                addr = claims.claim(pool_id, req.address, within, compares, fresh)
                ops: list[Op] = [
                    Put(keys.alloc(pool_id, str(addr)), AllocRecord(req.owner, req.kind).encode()),
                    Put(keys.owner(req.owner), OwnerRecord(pool_id, str(addr)).encode()),
                ]
                res = self.txn.txn(compares, ops)
            except BaseException:
                claims.undo()
                raise
            if res.succeeded:
                return f"{addr}/{prefixlen}"
            claims.settle({pool_id: req.address})
            raise Retry

        return retrying_hot(obj, attempt)

    def release_address(self, req: AddressRelease) -> bool:
        obj = f"address {req.address} in pool {req.poolID}"
        req = req.model_copy(update={"poolID": split_group_pool(req.poolID)[0]})
        try:
            addr = parse_address(req.address, "address")
        except IpamError as e:
            raise BadRequest(obj, str(e)) from None

        def attempt() -> bool:
            akv = self.txn.get(keys.alloc(req.poolID, str(addr)))
            if akv is None:
                return False
            held = AllocRecord.decode(akv.value)
            if not should_release(obj, held):
                return False
            ops: list[Op] = [Delete(akv.key)]
            if self.txn.get(keys.owner(held.owner)) is not None:
                ops.append(Delete(keys.owner(held.owner)))
            self.txn.commit([unchanged(akv)], ops, grouped=True)
            self.pools.released(req.poolID, addr)
            return True

        return retrying(obj, attempt)
