"""Policies in the store. Deleting a policy deletes its rules with it (one txn)."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import EndpointGroup, Policy, Rule
from common.records import decode_config, encode_config
from store import KV, Delete, Put

from .decisions.policies import attached, check_deletable
from .decisions.views import policy_view
from .errors import NotFound
from .groups import Groups
from .tenants import Tenants
from .txn import TxnStore, absent, retrying, unchanged, untouched_since
from .validate import check_name


class Policies:
    def __init__(self, txn: TxnStore, tenants: Tenants, groups: Groups) -> None:
        self.txn = txn
        self.tenants = tenants
        self.groups = groups

    def list(self, tenant: str | None = None) -> list[Policy]:
        kvs, _ = self.txn.range(keys.policies_of(tenant) if tenant else keys.POLICIES)
        return [decode_config(Policy, kv.value) for kv in kvs]

    def read(self, tenant: str, name: str) -> tuple[Policy, KV]:
        kv = self.txn.get(keys.policy(tenant, name))
        if kv is None:
            raise NotFound(f"policy {tenant}:{name}")
        return decode_config(Policy, kv.value), kv

    def get(self, tenant: str, name: str) -> Policy:
        return self.read(tenant, name)[0]

    def inspect(self, tenant: str, name: str) -> dict[str, Any]:
        policy = self.get(tenant, name)
        tenant_groups = self.groups.list(tenant)
        names = attached(name, tenant_groups)
        groups = [g for g in tenant_groups if g.groupName in names]
        members = [ep for g in groups for ep in self.groups.members(g)[0]]
        rules, _ = self.txn.range(keys.rules_of(tenant, name))
        return policy_view(policy, names, members, [decode_config(Rule, r.value) for r in rules])

    def put(self, policy: Policy) -> Policy:
        check_name("tenant", policy.tenantName)
        check_name("policy", policy.policyName)
        key = keys.policy(policy.tenantName, policy.policyName)
        value = encode_config(policy)

        def attempt() -> Policy:
            tkv = self.tenants.require(policy.tenantName)
            old = self.txn.get(key)
            if old is not None and old.value == value:
                return policy
            self.txn.commit(
                [unchanged(tkv), unchanged(old) if old else absent(key)], [Put(key, value)]
            )
            return policy

        return retrying(f"policy {policy.id}", attempt)

    def delete(self, tenant: str, name: str) -> None:
        def attempt() -> None:
            p, kv = self.read(tenant, name)
            groups, grev = self.txn.range(keys.groups_of(tenant))
            check_deletable(
                p.id, attached(name, (decode_config(EndpointGroup, g.value) for g in groups))
            )
            # No group attached it since the read; its rules go with it, also one added since.
            self.txn.commit(
                [unchanged(kv), untouched_since(keys.groups_of(tenant), grev)],
                [Delete(kv.key), Delete(keys.rules_of(tenant, name), prefix=True)],
            )

        retrying(f"policy {tenant}:{name}", attempt)
