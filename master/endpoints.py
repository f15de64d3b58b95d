"""Endpoints in the store, with their addresses: the allocation hot path.

create_endpoint costs one store round trip when nothing moved: the network, group and
pool records come from the hot cache, the address from the PoolCache, and the txn's
compares check both.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from common import keys, owners
from common.models import Endpoint, EndpointContainer, EndpointGroup, EndpointRequest
from common.records import (
    AllocRecord,
    NetworkRecord,
    decode_config,
    decode_endpoint,
    encode_endpoint,
)
from ipam import parse_address
from ipam.errors import IpamError
from store import KV, Compare, Delete, Op, Put

from .addresses import Claims, IPAddr, PoolCache
from .decisions.endpoints import (
    addresses_of,
    adoptable,
    check_reclaim,
    check_same_network,
    check_subnet,
    endpoint_obj,
    group_range,
    holds,
    new_endpoint,
    swarm_unused,
    swarm_use,
    wants,
)
from .errors import NotFound
from .txn import HotCache, Retry, TxnStore, absent, retrying, retrying_hot, unchanged


def _network(kv: KV) -> NetworkRecord:
    return NetworkRecord.decode(kv.value)


def _group(kv: KV) -> EndpointGroup:
    return decode_config(EndpointGroup, kv.value)


class Endpoints:
    def __init__(self, txn: TxnStore, hot: HotCache, pools: PoolCache) -> None:
        self.txn = txn
        self.hot = hot
        self.pools = pools

    def list(self) -> list[Endpoint]:
        kvs, _ = self.txn.range(keys.ENDPOINTS)
        return [decode_endpoint(kv.value) for kv in kvs]

    def get(self, endpoint_id: str) -> Endpoint:
        idx = self.txn.get(keys.endpoint_index(endpoint_id))
        kv = self.txn.get(idx.value.decode()) if idx else None
        if kv is None:
            raise NotFound(endpoint_obj(endpoint_id))
        return decode_endpoint(kv.value)

    def inspect(self, endpoint_id: str) -> dict[str, Any]:
        ep = self.get(endpoint_id).dump()  # an endpoint's record is all there is of it
        return {"Config": ep, "Oper": ep}

    def create(self, req: EndpointRequest) -> tuple[Endpoint, bool]:
        """Create an endpoint with its addresses; returns (endpoint, created).

        Idempotent by endpoint ID: a retried request returns the endpoint it created.
        """
        obj = endpoint_obj(req.endpointID)
        owner = owners.endpoint(req.endpointID)

        def attempt(fresh: bool) -> tuple[Endpoint, bool]:
            # The first try trusts cached records and lets the txn's compares (endpoint
            # absent, records unchanged) check them: one store round trip when nothing moved.
            # Anything else (the existing endpoint, a refusal) is decided on fresh reads.
            if fresh:
                existing = self._existing(req)
                if existing is not None:
                    return existing, False
            hit = self.hot.get(keys.network(req.tenantName, req.networkName), fresh, _network)
            if hit is None:
                raise NotFound(f"network {req.tenantName}:{req.networkName}")
            nkv, net = hit
            compares: list[Compare] = [unchanged(nkv), absent(keys.endpoint_index(req.endpointID))]
            within = None
            if req.groupName:
                ghit = self.hot.get(keys.group(req.tenantName, req.groupName), fresh, _group)
                if ghit is None:
                    raise NotFound(f"endpoint group {req.tenantName}:{req.groupName}")
                gkv, group = ghit
                within = group_range(req, group, net)
                compares.append(unchanged(gkv))
            held = AllocRecord(owner=owner, network=net.id).encode()
            claims = Claims(self.txn, self.hot, self.pools, obj, owner)
            ops: list[Op] = []
            result = {"ipAddress": "", "ipv6Address": "", "ipv4Pool": "", "ipv6Pool": ""}
            want = wants(req, net, within)
            try:
                for w in want:
                    check_subnet(req, w, net)
                    if not w.pool_id:
                        continue
                    if req.swarmTask and w.static:
                        addr = parse_address(w.static, "address")
                        ops.append(self._swarm_use(req, w.pool_id, str(addr), net, compares))
                        result[w.field] = str(addr)
                        result[w.pool_field] = w.pool_id
                        continue
                    adopted = self._adoptable(w.pool_id, w.static) if req.adoptAddress else None
                    if adopted is not None:
                        akv, prev_owner = adopted
                        addr = parse_address(w.static, "address")
                        compares.append(unchanged(akv))
                        if self.txn.get(keys.owner(prev_owner)) is not None:
                            ops.append(Delete(keys.owner(prev_owner)))
                    else:
                        addr = claims.claim(w.pool_id, w.static, w.within, compares, fresh)
                    ops.append(Put(keys.alloc(w.pool_id, str(addr)), held))
                    result[w.field] = str(addr)
                    result[w.pool_field] = w.pool_id
                ep = new_endpoint(req, result)
                ep_key = keys.endpoint(req.tenantName, req.networkName, req.endpointID)
                ops += [
                    Put(ep_key, encode_endpoint(ep)),
                    Put(keys.endpoint_index(req.endpointID), ep_key.encode()),
                ]
                res = self.txn.txn(compares, ops)
            except BaseException:
                claims.undo()
                raise
            if res.succeeded:
                return ep, True
            claims.settle({w.pool_id: w.static for w in want})
            raise Retry

        return retrying_hot(obj, attempt)

    def _swarm_use(
        self, req: EndpointRequest, pool_id: str, address: str, net: NetworkRecord,
        compares: list[Compare],
    ) -> Op:  # fmt: skip
        """The write that makes the swarm's booking of ``address`` this endpoint's to use;
        its compares (the booking, and the endpoint it named being gone) join ``compares``."""
        akv = self.txn.get(keys.alloc(pool_id, address))
        held = AllocRecord.decode(akv.value) if akv is not None else None
        used = False
        if held is not None and held.user and held.user != req.endpointID:
            used = self.txn.get(keys.endpoint_index(held.user)) is not None
            compares.append(absent(keys.endpoint_index(held.user)))
        use = swarm_use(req, address, net, held, used)
        assert akv is not None  # swarm_use refuses an address with no booking
        compares.append(unchanged(akv))
        return Put(keys.alloc(pool_id, address), use.encode())

    def _adoptable(self, pool_id: str, address: str) -> tuple[KV, str] | None:
        """The alloc record of ``address`` and its owner, if a plain address request holds
        it, so the endpoint can take it over."""
        if not address:
            return None
        try:
            canonical = str(parse_address(address, "address"))
        except IpamError:
            return None
        akv = self.txn.get(keys.alloc(pool_id, canonical))
        if akv is None:
            return None
        held = AllocRecord.decode(akv.value)
        return (akv, held.owner) if adoptable(held) else None

    def _existing(self, req: EndpointRequest) -> Endpoint | None:
        idx = self.txn.get(keys.endpoint_index(req.endpointID))
        if idx is None:
            return None
        kv = self.txn.get(idx.value.decode())
        if kv is None:
            raise Retry  # being deleted concurrently
        ep = decode_endpoint(kv.value)
        check_same_network(ep, req)
        return ep

    def set_container(self, endpoint_id: str, info: EndpointContainer) -> Endpoint:
        """Record the container an endpoint belongs to (its ID, name and labels, as its
        host's agent read them from dockerd); nothing else of the endpoint changes."""
        obj = endpoint_obj(endpoint_id)

        def attempt() -> Endpoint:
            idx = self.txn.get(keys.endpoint_index(endpoint_id))
            kv = self.txn.get(idx.value.decode()) if idx is not None else None
            if kv is None:
                raise NotFound(obj)
            ep = decode_endpoint(kv.value)
            new = ep.model_copy(update=info.model_dump())
            if new == ep:
                return ep
            self.txn.commit([unchanged(kv)], [Put(kv.key, encode_endpoint(new))])
            return new

        return retrying(obj, attempt)

    def delete(self, endpoint_id: str, gone_host: str | None = None) -> Endpoint:
        """Delete an endpoint, releasing its addresses in the same txn.

        With ``gone_host``, only while that host has no registration (keys.host): an agent
        that comes back just then keeps its endpoint (Conflict).
        """
        obj = endpoint_obj(endpoint_id)

        def attempt() -> Endpoint:
            idx = self.txn.get(keys.endpoint_index(endpoint_id))
            if idx is None:
                raise NotFound(obj)
            kv = self.txn.get(idx.value.decode())
            if kv is None:
                raise Retry
            ep = decode_endpoint(kv.value)
            ops: list[Op] = [Delete(kv.key), Delete(idx.key)]
            compares = [unchanged(kv), unchanged(idx)]
            if gone_host is not None:
                registered = ep.host == gone_host and self.txn.get(keys.host(gone_host)) is not None
                check_reclaim(ep, gone_host, registered)
                compares.append(absent(keys.host(gone_host)))
            released: list[tuple[str, IPAddr]] = []
            for pid, addr in addresses_of(ep):
                akv = self.txn.get(keys.alloc(pid, addr))
                if akv is None:
                    continue
                held = AllocRecord.decode(akv.value)
                if holds(ep, held):
                    compares.append(unchanged(akv))
                    ops.append(Delete(akv.key))
                    released.append((pid, ipaddress.ip_address(addr)))
                elif (given_back := swarm_unused(ep, held)) is not None:
                    compares.append(unchanged(akv))
                    ops.append(Put(akv.key, given_back.encode()))
            self.txn.commit(compares, ops, grouped=True)
            for pid, addr in released:
                self.pools.released(pid, addr)
            return ep

        return retrying(obj, attempt)
