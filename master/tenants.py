"""Tenants in the store."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import Tenant
from common.records import decode_config, encode_config
from store import KV, Delete, Put

from .decisions.tenants import check_deletable, check_no_children
from .decisions.views import tenant_view
from .errors import NotFound
from .txn import TxnStore, absent, network_id, none_under, retrying, tail, unchanged
from .validate import check_name


class Tenants:
    def __init__(self, txn: TxnStore) -> None:
        self.txn = txn

    def list(self) -> list[Tenant]:
        kvs, _ = self.txn.range(keys.TENANTS)
        return [decode_config(Tenant, kv.value) for kv in kvs]

    def get(self, name: str) -> Tenant:
        kv = self.txn.get(keys.tenant(name))
        if kv is None:
            raise NotFound(f"tenant {name}")
        return decode_config(Tenant, kv.value)

    def inspect(self, name: str) -> dict[str, Any]:
        tenant = self.get(name)
        nets, _ = self.txn.range(keys.networks_of(name))
        groups, _ = self.txn.range(keys.groups_of(name))
        eps, _ = self.txn.range(keys.ENDPOINTS + name + "/")
        return tenant_view(tenant, [tail(k) for k in nets], [tail(k) for k in groups], len(eps))

    def require(self, name: str) -> KV:
        """The tenant's entry, for an object created in it to compare."""
        kv = self.txn.get(keys.tenant(name))
        if kv is None:
            raise NotFound(f"tenant {name}", "not found; create it first")
        return kv

    def put(self, tenant: Tenant) -> Tenant:
        check_name("tenant", tenant.tenantName)
        key = keys.tenant(tenant.tenantName)

        def attempt() -> Tenant:
            kv = self.txn.get(key)
            value = encode_config(tenant)
            if kv is None or kv.value != value:
                self.txn.commit([unchanged(kv) if kv else absent(key)], [Put(key, value)])
            return tenant

        return retrying(f"tenant {tenant.tenantName}", attempt)

    def delete(self, name: str) -> None:
        check_deletable(name)

        def attempt() -> None:
            kv = self.txn.get(keys.tenant(name))
            if kv is None:
                raise NotFound(f"tenant {name}")
            nets, _ = self.txn.range(keys.networks_of(name))
            groups, _ = self.txn.range(keys.groups_of(name))
            policies, _ = self.txn.range(keys.policies_of(name))
            profiles, _ = self.txn.range(keys.netprofiles_of(name))
            services, _ = self.txn.range(keys.services_of(name))
            check_no_children(
                name,
                [network_id(k) for k in nets],
                [tail(k) for k in groups],
                [tail(k) for k in policies],
                [tail(k) for k in profiles],
                [tail(k) for k in services],
            )
            self.txn.commit(
                [
                    unchanged(kv),
                    none_under(keys.networks_of(name)),
                    none_under(keys.groups_of(name)),
                    none_under(keys.policies_of(name)),  # and so no rules either
                    none_under(keys.netprofiles_of(name)),
                    none_under(keys.services_of(name)),
                ],
                [Delete(keys.tenant(name))],
            )

        retrying(f"tenant {name}", attempt)
