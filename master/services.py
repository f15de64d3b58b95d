"""Service LBs in the store: the service, its VIP (booked in its network's IPv4 pool, held
by the service) and its tag are written and deleted together, in one txn."""

from __future__ import annotations

from functools import partial
from typing import Any

from common import keys, owners
from common.models import ServiceLB
from common.records import AllocRecord, NetworkRecord, ServiceRecord, decode_endpoint
from store import KV, Compare, Delete, Op, Put

from .addresses import Claims, PoolCache
from .decisions.services import check_network, choose_service_tag, normalize_service, rebooks
from .decisions.views import service_view
from .errors import NotFound
from .networks import Networks
from .tags import Tags
from .tenants import Tenants
from .txn import HotCache, Retry, TxnStore, absent, retrying, unchanged

SERVICE_TAGS = Tags(
    "service", keys.SERVICES, keys.SERVICE_TAGS, keys.service_tag, ServiceRecord, choose_service_tag
)


class Services:
    def __init__(
        self, txn: TxnStore, hot: HotCache, pools: PoolCache, tenants: Tenants, networks: Networks
    ) -> None:
        self.txn = txn
        self.hot = hot
        self.pools = pools
        self.tenants = tenants
        self.networks = networks

    def records(self, tenant: str | None = None) -> list[ServiceRecord]:
        kvs, _ = self.txn.range(keys.services_of(tenant) if tenant else keys.SERVICES)
        return [ServiceRecord.decode(kv.value) for kv in kvs]

    def list(self, tenant: str | None = None) -> list[ServiceLB]:
        return [r.config for r in self.records(tenant)]

    def read(self, tenant: str, name: str) -> tuple[ServiceRecord, KV]:
        kv = self.txn.get(keys.service(tenant, name))
        if kv is None:
            raise NotFound(f"service {tenant}:{name}")
        return ServiceRecord.decode(kv.value), kv

    def get(self, tenant: str, name: str) -> ServiceLB:
        return self.read(tenant, name)[0].config

    def inspect(self, tenant: str, name: str) -> dict[str, Any]:
        rec, _ = self.read(tenant, name)
        eps, _ = self.txn.range(keys.endpoints_of(tenant, rec.config.networkName))
        return service_view(rec, [decode_endpoint(e.value) for e in eps])

    def put(self, service: ServiceLB) -> ServiceLB:
        s = normalize_service(service)
        return retrying(f"service {s.id}", partial(self._save, s))

    def _save(self, s: ServiceLB) -> ServiceLB:
        """One attempt: write the service, booking its VIP (and tag) if it moves or is new."""
        obj = f"service {s.id}"
        key = keys.service(s.tenantName, s.serviceName)
        tkv = self.tenants.require(s.tenantName)
        net, nkv = self.networks.read(s.tenantName, s.networkName)
        check_network(s, net.config)
        old = self.txn.get(key)
        prev = ServiceRecord.decode(old.value) if old is not None else None
        compares: list[Compare] = [unchanged(tkv), unchanged(nkv)]
        ops: list[Op] = []
        if prev is not None and not rebooks(prev.config, s, prev.vip):
            stored = s.model_copy(update={"ipAddress": s.ipAddress or prev.config.ipAddress})
            record = ServiceRecord(config=stored, vip=prev.vip, tag=prev.tag)
            if record == prev:
                return stored
            self.txn.commit([*compares, unchanged(old)], [Put(key, record.encode())])  # type: ignore[arg-type]
            return stored
        if prev is not None:  # it moves: the old VIP goes in the same txn
            compares.append(unchanged(old))  # type: ignore[arg-type]
            ops += self._release_vip(prev, compares)
            tag = prev.tag
        else:
            compares.append(absent(key))
            tag = SERVICE_TAGS.free(self.txn, s.id)
            compares.append(absent(keys.service_tag(tag)))
            ops.append(Put(keys.service_tag(tag), s.id.encode()))
        vip, claims, pool_id = self._claim_vip(obj, s, net, compares)
        ops.append(Put(keys.alloc(pool_id, vip), AllocRecord(owner=owners.service(s.id)).encode()))
        ops.append(Put(key, ServiceRecord(config=s, vip=vip, tag=tag).encode()))
        try:
            res = self.txn.txn(compares, self.txn.without_overlaps(ops))
        except BaseException:
            claims.undo()
            raise
        if not res.succeeded:
            claims.settle({pool_id: s.ipAddress})
            raise Retry
        if prev is not None:
            self._forget_vip(prev)
        return s

    def _claim_vip(
        self, obj: str, s: ServiceLB, net: NetworkRecord, compares: list[Compare]
    ) -> tuple[str, Claims, str]:
        pool_id = net.ipv4_pool
        if not pool_id:
            raise NotFound(obj, f"network {net.id} has no IPv4 pool")
        claims = Claims(self.txn, self.hot, self.pools, obj, owners.service(s.id))
        addr = claims.claim(pool_id, s.ipAddress, None, compares)
        return str(addr), claims, pool_id

    def _release_vip(self, rec: ServiceRecord, compares: list[Compare]) -> list[Op]:
        """Deleting a service's VIP booking, if it still holds it."""
        net = self.txn.get(keys.network(rec.config.tenantName, rec.config.networkName))
        pool_id = NetworkRecord.decode(net.value).ipv4_pool if net is not None else ""
        akv = self.txn.get(keys.alloc(pool_id, rec.vip)) if pool_id else None
        if akv is None or AllocRecord.decode(akv.value).owner != owners.service(rec.id):
            return []
        compares.append(unchanged(akv))
        return [Delete(akv.key)]

    def _forget_vip(self, rec: ServiceRecord) -> None:
        net = self.txn.get(keys.network(rec.config.tenantName, rec.config.networkName))
        if net is not None:
            pool_id = NetworkRecord.decode(net.value).ipv4_pool
            if pool_id:
                self.pools.forget(pool_id)

    def delete(self, tenant: str, name: str) -> None:
        def attempt() -> None:
            rec, kv = self.read(tenant, name)
            compares: list[Compare] = [unchanged(kv)]
            ops: list[Op] = [Delete(kv.key), *self._release_vip(rec, compares)]
            tkv = self.txn.get(keys.service_tag(rec.tag))
            if tkv is not None and tkv.value == rec.id.encode():
                compares.append(unchanged(tkv))
                ops.append(Delete(tkv.key))
            self.txn.commit(compares, ops)
            self._forget_vip(rec)

        retrying(f"service {tenant}:{name}", attempt)
