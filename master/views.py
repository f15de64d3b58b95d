"""The inspect views: each reads what it shows, then builds it with decisions/views.py."""

from __future__ import annotations

from typing import Any

from common import keys
from common.records import PoolRecord, decode_endpoint
from store import KV

from .decisions.netprofiles import using
from .decisions.policies import attached
from .decisions.pools import pool_spec
from .decisions.views import (
    global_view,
    group_view,
    netprofile_view,
    network_view,
    policy_view,
    pool_view,
    service_view,
    tenant_view,
)
from .groups import Groups
from .netprofiles import NetProfiles
from .networks import Networks
from .policies import Policies
from .rules import Rules
from .services import Services
from .settings import Settings
from .tenants import Tenants
from .txn import TxnStore, tail


def _address(kv: KV, pool_id: str) -> str:
    return kv.key[len(keys.allocs_of(pool_id)) :]


class Views:
    def __init__(
        self,
        txn: TxnStore,
        backend: str,
        settings: Settings,
        tenants: Tenants,
        networks: Networks,
        groups: Groups,
        policies: Policies,
        rules: Rules,
        netprofiles: NetProfiles,
        services: Services,
    ) -> None:
        self.txn = txn
        self.backend = backend
        self.settings = settings
        self.tenants = tenants
        self.networks = networks
        self.groups = groups
        self.policies = policies
        self.rules = rules
        self.netprofiles = netprofiles
        self.services = services

    def inspect_global(self) -> dict[str, Any]:
        settings = self.settings.get()
        tags = self.settings.tags()
        nets, _ = self.txn.range(keys.NETWORKS)
        return global_view(settings, self.backend, len(nets), tags)

    def inspect_tenant(self, name: str) -> dict[str, Any]:
        tenant = self.tenants.get(name)
        nets, _ = self.txn.range(keys.networks_of(name))
        groups, _ = self.txn.range(keys.groups_of(name))
        eps, _ = self.txn.range(keys.ENDPOINTS + name + "/")
        return tenant_view(tenant, [tail(k) for k in nets], [tail(k) for k in groups], len(eps))

    def inspect_network(self, tenant: str, name: str) -> dict[str, Any]:
        rec, _ = self.networks.read(tenant, name)
        eps, _ = self.txn.range(keys.endpoints_of(tenant, name))
        pools = []
        for version, pid in ((4, rec.ipv4_pool), (6, rec.ipv6_pool)):
            pkv = self.txn.get(keys.pool(pid)) if pid else None
            if pkv is None:
                continue
            spec = pool_spec(pid, PoolRecord.decode(pkv.value))
            allocs, _ = self.txn.range(keys.allocs_of(pid))
            pools.append(pool_view(version, spec.network, (_address(a, pid) for a in allocs)))
        endpoints = [decode_endpoint(e.value) for e in eps]
        return network_view(rec, endpoints, pools)

    def inspect_group(self, tenant: str, name: str) -> dict[str, Any]:
        rec, _ = self.groups.record(tenant, name)
        members, _ = self.groups.members(rec.config)
        return group_view(rec.config, members, rec.tag)

    def inspect_policy(self, tenant: str, name: str) -> dict[str, Any]:
        policy = self.policies.get(tenant, name)
        tenant_groups = self.groups.list(tenant)
        names = attached(name, tenant_groups)
        groups = [g for g in tenant_groups if g.groupName in names]
        members = [ep for g in groups for ep in self.groups.members(g)[0]]
        rules = self.rules.of_policy(tenant, name)
        return policy_view(policy, names, members, rules)

    def inspect_netprofile(self, tenant: str, name: str) -> dict[str, Any]:
        profile = self.netprofiles.get(tenant, name)
        tenant_groups = self.groups.list(tenant)
        names = using(name, tenant_groups)
        members = [
            ep for g in tenant_groups if g.groupName in names for ep in self.groups.members(g)[0]
        ]
        return netprofile_view(profile, names, members)

    def inspect_service(self, tenant: str, name: str) -> dict[str, Any]:
        rec, _ = self.services.read(tenant, name)
        eps, _ = self.txn.range(keys.endpoints_of(tenant, rec.config.networkName))
        return service_view(rec, [decode_endpoint(e.value) for e in eps])
