"""Tenants in the store: each with its tag key (keys.tenant_tag), allocated when the tenant
is made (in its create txn) and freed when it goes."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import Tenant
from common.records import TenantRecord
from store import KV, Compare, Delete, Op, Put

from .decisions.tenants import (
    DEFAULT,
    MAX_TENANT_TAG,
    check_deletable,
    check_no_children,
    choose_tenant_tag,
)
from .decisions.views import tenant_view
from .errors import NotFound
from .tags import Tags
from .txn import TxnStore, absent, network_id, none_under, retrying, tail, unchanged
from .validate import check_name


class Tenants:
    def __init__(self, txn: TxnStore, max_tag: int = MAX_TENANT_TAG) -> None:
        self.txn = txn
        self.max_tag = max_tag
        self.tags = Tags(
            "tenant",
            keys.TENANTS,
            keys.TENANT_TAGS,
            keys.tenant_tag,
            TenantRecord,
            lambda name, used: choose_tenant_tag(name, used, self.max_tag),
        )

    def records(self) -> list[TenantRecord]:
        kvs, _ = self.txn.range(keys.TENANTS)
        return [TenantRecord.decode(kv.value) for kv in kvs]

    def list(self) -> list[Tenant]:
        return [rec.config for rec in self.records()]

    def record(self, name: str) -> tuple[TenantRecord, KV]:
        kv = self.txn.get(keys.tenant(name))
        if kv is None:
            raise NotFound(f"tenant {name}")
        return TenantRecord.decode(kv.value), kv

    def get(self, name: str) -> Tenant:
        return self.record(name)[0].config

    def inspect(self, name: str) -> dict[str, Any]:
        rec, _ = self.record(name)
        nets, _ = self.txn.range(keys.networks_of(name))
        groups, _ = self.txn.range(keys.groups_of(name))
        eps, _ = self.txn.range(keys.ENDPOINTS + name + "/")
        return tenant_view(
            rec.config, [tail(k) for k in nets], [tail(k) for k in groups], len(eps), rec.tag
        )

    def require(self, name: str) -> KV:
        """The tenant's entry, for an object created in it to compare."""
        kv = self.txn.get(keys.tenant(name))
        if kv is None:
            raise NotFound(f"tenant {name}", "not found; create it first")
        return kv

    def put(self, tenant: Tenant) -> Tenant:
        """Create a tenant (with a tag, in the same txn) or update one (it keeps its tag)."""
        check_name("tenant", tenant.tenantName)
        key = keys.tenant(tenant.tenantName)

        def attempt() -> Tenant:
            kv = self.txn.get(key)
            compares: list[Compare] = [unchanged(kv) if kv else absent(key)]
            ops: list[Op] = []
            tag = TenantRecord.decode(kv.value).tag if kv else 0
            if not tag:  # a new tenant, or one stored before tenants had tags
                tag = self.tags.free(self.txn, tenant.tenantName)
                compares.append(absent(keys.tenant_tag(tag)))
                ops.append(Put(keys.tenant_tag(tag), tenant.tenantName.encode()))
            value = TenantRecord(config=tenant, tag=tag).encode()
            if kv is None or kv.value != value:
                self.txn.commit(compares, [*ops, Put(key, value)])
            return tenant

        return retrying(f"tenant {tenant.tenantName}", attempt)

    def ensure_default(self) -> None:
        """Create the default tenant (with its tag) if it is missing."""
        if self.txn.get(keys.tenant(DEFAULT)) is None:
            self.put(Tenant(tenantName=DEFAULT))

    def tag_untagged(self) -> int:
        """Tag the tenants stored before tenants had tags (at master start)."""
        return self.tags.backfill(self.txn)

    def delete(self, name: str) -> None:
        check_deletable(name)

        def attempt() -> None:
            rec, kv = self.record(name)
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
            ops: list[Op] = [Delete(kv.key)]
            if rec.tag:
                ops.append(Delete(keys.tenant_tag(rec.tag)))
            self.txn.commit(
                [
                    unchanged(kv),
                    none_under(keys.networks_of(name)),
                    none_under(keys.groups_of(name)),
                    none_under(keys.policies_of(name)),  # and so no rules either
                    none_under(keys.netprofiles_of(name)),
                    none_under(keys.services_of(name)),
                ],
                ops,
            )

        retrying(f"tenant {name}", attempt)
