"""Policy rules in the store. A rule is written only while its policy and every group and
network it names exist: the txn compares each of them, so a delete racing it fails one side."""

from __future__ import annotations

from common import keys
from common.models import Rule
from common.records import decode_config, encode_config
from store import KV, Compare, Delete, Put

from .decisions.policies import check_rule_refs
from .decisions.rules import normalize_rule
from .errors import NotFound
from .txn import TxnStore, absent, retrying, unchanged


class Rules:
    def __init__(self, txn: TxnStore) -> None:
        self.txn = txn

    def list(self, tenant: str | None = None) -> list[Rule]:
        kvs, _ = self.txn.range(keys.rules_of_tenant(tenant) if tenant else keys.RULES)
        return [decode_config(Rule, kv.value) for kv in kvs]

    def read(self, tenant: str, policy: str, rule_id: str) -> tuple[Rule, KV]:
        kv = self.txn.get(keys.rule(tenant, policy, rule_id))
        if kv is None:
            raise NotFound(f"rule {tenant}:{policy}:{rule_id}")
        return decode_config(Rule, kv.value), kv

    def get(self, tenant: str, policy: str, rule_id: str) -> Rule:
        return self.read(tenant, policy, rule_id)[0]

    def put(self, rule: Rule) -> Rule:
        r = normalize_rule(rule)
        t = r.tenantName
        key = keys.rule(t, r.policyName, r.ruleId)
        value = encode_config(r)

        def attempt() -> Rule:
            pkv = self.txn.get(keys.policy(t, r.policyName))
            if pkv is None:
                raise NotFound(f"rule {r.id}", f"policy {r.policy_id} not found; create it first")
            compares: list[Compare] = [unchanged(pkv)]
            groups: set[str] = set()
            networks: set[str] = set()
            for name, key_of, found in (
                (r.fromEndpointGroup, keys.group, groups),
                (r.toEndpointGroup, keys.group, groups),
                (r.fromNetwork, keys.network, networks),
                (r.toNetwork, keys.network, networks),
            ):
                kv = self.txn.get(key_of(t, name)) if name else None
                if kv is not None:
                    found.add(name)
                    compares.append(unchanged(kv))
            check_rule_refs(r, groups, networks)
            old = self.txn.get(key)
            if old is not None and old.value == value:
                return r
            compares.append(unchanged(old) if old else absent(key))
            self.txn.commit(compares, [Put(key, value)])
            return r

        return retrying(f"rule {r.id}", attempt)

    def delete(self, tenant: str, policy: str, rule_id: str) -> None:
        def attempt() -> None:
            _, kv = self.read(tenant, policy, rule_id)
            self.txn.commit([unchanged(kv)], [Delete(kv.key)])

        retrying(f"rule {tenant}:{policy}:{rule_id}", attempt)
