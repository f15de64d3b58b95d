"""Networks in the store: each with its tag key, its pools and its gateway addresses."""

from __future__ import annotations

from typing import Any

from common import keys, owners
from common.models import EndpointGroup, Network, Rule
from common.records import (
    AllocRecord,
    GroupRecord,
    HostRecord,
    NetworkRecord,
    PoolRecord,
    ServiceRecord,
    decode_config,
    decode_endpoint,
)
from store import KV, Compare, Delete, Op, Put

from .addresses import PoolCache
from .decisions import groups as group_rules
from .decisions.networks import (
    addressing,
    carried_groups,
    check_clear_of_hosts,
    check_deletable,
    check_name_free,
    check_readdress,
    check_rename,
    check_unnamed,
    normalize_network,
    plan_network,
    renamed,
    renamed_pool,
)
from .decisions.policies import naming_network
from .decisions.pools import pool_spec
from .decisions.services import check_no_services
from .decisions.services import naming_network as naming_services
from .decisions.views import network_view, pool_view
from .errors import NotFound
from .pools import release_addresses
from .settings import Settings, tag_use
from .tenants import Tenants
from .txn import (
    TxnStore,
    absent,
    none_under,
    pool_id,
    retrying,
    unchanged,
    untouched_since,
)
from .validate import check_name


def teardown(txn: TxnStore, rec: NetworkRecord) -> tuple[list[Op], list[Compare]]:
    """Deleting a network's tag, pools (with the docker pool ids standing for them) and
    their addresses (with the owner records of the requests holding some), and the
    compares that nothing was allocated or bound meanwhile."""
    ops: list[Op] = [Delete(keys.tag(rec.encap, rec.pkt_tag))]
    compares: list[Compare] = []
    for pid in rec.pools:
        owned, guard = release_addresses(txn, pid)
        ops += [Delete(keys.pool(pid)), *owned]
        compares.append(guard)
        if (pkv := txn.get(keys.pool(pid))) is not None:
            compares.append(unchanged(pkv))
            ops += [Delete(keys.pool(a)) for a in PoolRecord.decode(pkv.value).aliases]
    return ops, compares


class Networks:
    def __init__(
        self, txn: TxnStore, tenants: Tenants, settings: Settings, pools: PoolCache
    ) -> None:
        self.txn = txn
        self.tenants = tenants
        self.settings = settings
        self.pools = pools

    def list(self, tenant: str | None = None) -> list[Network]:
        kvs, _ = self.txn.range(keys.networks_of(tenant) if tenant else keys.NETWORKS)
        return [NetworkRecord.decode(kv.value).config for kv in kvs]

    def read(self, tenant: str, name: str) -> tuple[NetworkRecord, KV]:
        kv = self.txn.get(keys.network(tenant, name))
        if kv is None:
            raise NotFound(f"network {tenant}:{name}")
        return NetworkRecord.decode(kv.value), kv

    def get(self, tenant: str, name: str) -> Network:
        return self.read(tenant, name)[0].config

    def inspect(self, tenant: str, name: str) -> dict[str, Any]:
        rec, _ = self.read(tenant, name)
        eps, _ = self.txn.range(keys.endpoints_of(tenant, name))
        pools = []
        for version, pid in ((4, rec.ipv4_pool), (6, rec.ipv6_pool)):
            pkv = self.txn.get(keys.pool(pid)) if pid else None
            if pkv is None:
                continue
            spec = pool_spec(pid, PoolRecord.decode(pkv.value))
            allocs, _ = self.txn.range(keys.allocs_of(pid))
            addresses = (a.key[len(keys.allocs_of(pid)) :] for a in allocs)
            pools.append(pool_view(version, spec.network, addresses))
        return network_view(rec, [decode_endpoint(e.value) for e in eps], pools)

    def put(self, net: Network) -> Network:
        net = normalize_network(net)
        key = keys.network(net.tenantName, net.networkName)

        def attempt() -> Network:
            tkv = self.tenants.require(net.tenantName)
            g, gkv = self.settings.read()
            compares: list[Compare] = [unchanged(tkv), unchanged(gkv)]
            ops: list[Op] = []
            old_kv = self.txn.get(key)
            old = NetworkRecord.decode(old_kv.value) if old_kv else None
            if old_kv is not None and old is not None:
                if old.config == net:
                    return net
                compares.append(unchanged(old_kv))
                if addressing(old.config) == addressing(net):
                    ops.append(Put(key, old.with_config(net).encode()))
                    self.txn.commit(compares, ops)
                    return net
                endpoints = keys.endpoints_of(net.tenantName, net.networkName)
                check_readdress(net, len(self.txn.range(endpoints)[0]))
                compares.append(none_under(endpoints))
                torn, guards = teardown(self.txn, old)
                ops += torn
                compares += guards
            else:
                clash = keys.group(net.tenantName, net.networkName)
                taken = self.txn.get(clash) is not None
                check_name_free(net.id, net.tenantName, net.networkName, taken)
                compares += [absent(key), absent(clash)]
            hosts, registered = self._hosts()
            check_clear_of_hosts(net, hosts)
            compares += registered

            tags = {
                u.tag: u.network for u in map(tag_use, self.txn.range(keys.tags_of(net.encap))[0])
            }
            space = keys.POOLS + net.tenantName + ":"
            pool_kvs, prev = self.txn.range(space)
            by_id = {pool_id(kv): kv for kv in pool_kvs}
            pools = {pid: PoolRecord.decode(kv.value) for pid, kv in by_id.items()}
            plan = plan_network(net, g, tags, pools, old)

            record = plan.record
            if plan.new_tag:
                compares.append(absent(keys.tag(record.encap, record.pkt_tag)))
            ops.append(Put(keys.tag(record.encap, record.pkt_tag), net.id.encode()))
            compares += [unchanged(by_id[pid]) for pid in plan.adopted]
            for pid, pool in plan.pools.values():
                ops.append(Put(keys.pool(pid), pool.encode()))
                if pool.gateway:
                    gateway = AllocRecord(owner=owners.NETWORK_GATEWAY).encode()
                    ops.append(Put(keys.alloc(pid, pool.gateway), gateway))
                    if pid in plan.adopted:
                        self._take_gateway(pid, pool.gateway, compares, ops)
            compares.append(untouched_since(space, prev))
            ops.append(Put(key, record.encode()))
            self.txn.commit(compares, self.txn.without_overlaps(ops))
            for pid in plan.stale:
                self.pools.forget(pid)
            return net

        return retrying(f"network {net.id}", attempt)

    def _hosts(self) -> tuple[list[HostRecord], list[Compare]]:
        """The hosts' registrations (live ones, and the VTEPs kept after one lapses), and
        the compares that none was written since they were read."""
        records: list[HostRecord] = []
        compares: list[Compare] = []
        for prefix in (keys.HOSTS, keys.VTEPS):
            kvs, rev = self.txn.range(prefix)
            for kv in kvs:
                try:
                    records.append(HostRecord.decode(kv.value))
                except (ValueError, TypeError):
                    continue  # an agent's record we cannot read names no address
            compares.append(untouched_since(prefix, rev))
        return records, compares

    def _take_gateway(self, pid: str, address: str, compares: list[Compare], ops: list[Op]) -> None:
        """The network takes its gateway address over from the request that held it in the
        pool it adopts (Docker's gateway request): that request's owner record goes."""
        akv = self.txn.get(keys.alloc(pid, address))
        if akv is None:
            return
        holder = AllocRecord.decode(akv.value).owner
        if owners.is_request(holder):
            compares.append(unchanged(akv))
            ops.append(Delete(keys.owner(holder)))

    def rename(self, tenant: str, name: str, new_name: str) -> Network:
        """Rename a network that has no endpoints yet (docker names arrive after creation).
        Its endpoint groups follow it in the same txn, which compares that no group of the
        tenant was written since they were read (one made on the old name meanwhile)."""
        check_name("network", new_name)

        def attempt() -> Network:
            rec, kv = self.read(tenant, name)
            if new_name == name:
                return rec.config
            new_key = keys.network(tenant, new_name)
            endpoints = keys.endpoints_of(tenant, name)
            taken = self.txn.get(new_key) is not None
            count = len(self.txn.range(endpoints)[0]) if not taken else 0
            check_rename(rec.id, f"{tenant}:{new_name}", taken, count)
            new = renamed(rec, new_name)
            clash = keys.group(tenant, new_name)
            check_name_free(rec.id, tenant, new_name, self.txn.get(clash) is not None)
            naming, rules = self._naming(tenant, name)
            check_unnamed(rec.id, naming)
            services, on_it = self._services(tenant, name)
            check_no_services(rec.id, services, "renamed")
            gkvs, grev = self.txn.range(keys.groups_of(tenant))
            groups = carried_groups((GroupRecord.decode(g.value) for g in gkvs), name, new_name)
            compares = [
                unchanged(kv),
                absent(new_key),
                none_under(endpoints),
                absent(clash),
                rules,
                on_it,
                untouched_since(keys.groups_of(tenant), grev),
            ]
            ops: list[Op] = [
                Delete(kv.key),
                Put(new_key, new.encode()),
                Put(keys.tag(new.encap, new.pkt_tag), new.id.encode()),
                *(Put(keys.group(tenant, g.config.groupName), g.encode()) for g in groups),
            ]
            for pid in rec.pools:
                pkv = self.txn.get(keys.pool(pid))
                if pkv is not None:
                    compares.append(unchanged(pkv))
                    ops.append(
                        Put(pkv.key, renamed_pool(PoolRecord.decode(pkv.value), new).encode())
                    )
            self.txn.commit(compares, ops)
            return new.config

        return retrying(f"network {tenant}:{name}", attempt)

    def _naming(self, tenant: str, name: str) -> tuple[list[str], Compare]:
        """The ids of the rules that name network ``name``, and the compare that no rule was
        written since they were read."""
        kvs, rev = self.txn.range(keys.rules_of_tenant(tenant))
        rules = (decode_config(Rule, kv.value) for kv in kvs)
        return naming_network(name, rules), untouched_since(keys.rules_of_tenant(tenant), rev)

    def _services(self, tenant: str, name: str) -> tuple[list[str], Compare]:
        """The ids of the service LBs on network ``name``, and the compare that no service
        was written since they were read."""
        kvs, rev = self.txn.range(keys.services_of(tenant))
        services = (ServiceRecord.decode(kv.value).config for kv in kvs)
        return naming_services(name, services), untouched_since(keys.services_of(tenant), rev)

    def delete(self, tenant: str, name: str) -> None:
        def attempt() -> None:
            rec, kv = self.read(tenant, name)
            services, on_it = self._services(tenant, name)
            check_no_services(rec.id, services, "deleted")
            endpoints = keys.endpoints_of(tenant, name)
            eps, _ = self.txn.range(endpoints)
            gkvs, grev = self.txn.range(keys.groups_of(tenant))
            groups = [decode_config(EndpointGroup, g.value) for g in gkvs]
            naming, rules = self._naming(tenant, name)
            check_deletable(
                rec.id,
                [decode_endpoint(e.value).host for e in eps],
                group_rules.using(name, groups),
                naming,
            )
            compares = [
                unchanged(kv),
                none_under(endpoints),
                untouched_since(keys.groups_of(tenant), grev),
                rules,
                on_it,
            ]
            torn, guards = teardown(self.txn, rec)
            self.txn.commit([*compares, *guards], [Delete(kv.key), *torn])
            for pid in rec.pools:
                self.pools.forget(pid)

        retrying(f"network {tenant}:{name}", attempt)
