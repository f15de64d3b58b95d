"""Endpoint groups in the store: each with its tag key (keys.group_tag), allocated when the
group is made and freed when it goes."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import Endpoint, EndpointGroup, Rule
from common.records import GroupRecord, decode_config, decode_endpoint
from store import KV, Compare, Delete, Op, Put

from .decisions.groups import (
    check_change,
    check_deletable,
    check_name_free,
    check_policies_exist,
    check_pool_overlap,
    check_unreferenced,
    choose_group_tag,
    members,
    moves,
    normalize_group,
)
from .decisions.netprofiles import check_profile_exists
from .decisions.policies import naming_group
from .decisions.views import group_view
from .errors import NotFound
from .networks import Networks
from .tags import Tags
from .tenants import Tenants
from .txn import TxnStore, absent, retrying, unchanged, untouched_since
from .validate import check_name, parse_body

GROUP_TAGS = Tags(
    "endpoint group", keys.GROUPS, keys.GROUP_TAGS, keys.group_tag, GroupRecord, choose_group_tag
)


class Groups:
    def __init__(self, txn: TxnStore, tenants: Tenants, networks: Networks) -> None:
        self.txn = txn
        self.tenants = tenants
        self.networks = networks

    def list(self, tenant: str | None = None) -> list[EndpointGroup]:
        kvs, _ = self.txn.range(keys.groups_of(tenant) if tenant else keys.GROUPS)
        return [decode_config(EndpointGroup, kv.value) for kv in kvs]

    def record(self, tenant: str, name: str) -> tuple[GroupRecord, KV]:
        kv = self.txn.get(keys.group(tenant, name))
        if kv is None:
            raise NotFound(f"endpoint group {tenant}:{name}")
        return GroupRecord.decode(kv.value), kv

    def read(self, tenant: str, name: str) -> tuple[EndpointGroup, KV]:
        rec, kv = self.record(tenant, name)
        return rec.config, kv

    def get(self, tenant: str, name: str) -> EndpointGroup:
        return self.read(tenant, name)[0]

    def members(self, group: EndpointGroup) -> tuple[list[Endpoint], int]:
        """The group's endpoints, and the revision they were read at."""
        eps, rev = self.txn.range(keys.endpoints_of(group.tenantName, group.networkName))
        return members(group, (decode_endpoint(e.value) for e in eps)), rev

    def inspect(self, tenant: str, name: str) -> dict[str, Any]:
        rec, _ = self.record(tenant, name)
        return group_view(rec.config, self.members(rec.config)[0], rec.tag)

    def put(self, group: EndpointGroup) -> EndpointGroup:
        check_name("endpoint group", group.groupName)
        key = keys.group(group.tenantName, group.groupName)
        return retrying(f"endpoint group {group.id}", lambda: self._save(group, self.txn.get(key)))

    def patch(self, tenant: str, name: str, fields: dict[str, Any]) -> EndpointGroup:
        """Change the given fields of a group, merged over the group this txn compares: two
        patches of different fields both hold."""
        obj = f"endpoint group {tenant}:{name}"

        def attempt() -> EndpointGroup:
            old, kv = self.read(tenant, name)
            merged = {**old.dump(), **fields, "tenantName": tenant, "groupName": name}
            merged.pop("key", None)
            return self._save(parse_body(EndpointGroup, merged, obj), kv)

        return retrying(obj, attempt)

    def _save(self, group: EndpointGroup, old: KV | None) -> EndpointGroup:
        """One attempt at writing ``group`` over ``old`` (its stored entry, None: a new one)."""
        key = keys.group(group.tenantName, group.groupName)
        tkv = self.tenants.require(group.tenantName)
        net, nkv = self.networks.read(group.tenantName, group.networkName)
        g = normalize_group(group, net.config)
        compares: list[Compare] = [unchanged(tkv), unchanged(nkv)]
        ops: list[Op] = []
        if old is not None:
            prev = GroupRecord.decode(old.value)
            if prev.config == g and prev.tag:
                return g
            if moves(prev.config, g):
                eps, erev = self.members(prev.config)
                check_change(prev.config, g, len(eps))
                # The guard holds in the txn too: no endpoint joined since it was read.
                endpoints = keys.endpoints_of(prev.config.tenantName, prev.config.networkName)
                compares.append(untouched_since(endpoints, erev))
            compares.append(unchanged(old))
            tag = prev.tag
        else:
            clash = keys.network(g.tenantName, g.groupName)
            check_name_free(g, self.txn.get(clash) is not None)
            compares.append(absent(key))
            compares.append(absent(clash))
            tag = 0
        if not tag:  # a new group, or one stored before groups had tags
            tag = GROUP_TAGS.free(self.txn, g.id)
            compares.append(absent(keys.group_tag(tag)))
            ops.append(Put(keys.group_tag(tag), g.id.encode()))
        policies: set[str] = set()
        for p in g.policies:
            pkv = self.txn.get(keys.policy(g.tenantName, p))
            if pkv is not None:
                policies.add(p)
                compares.append(unchanged(pkv))
        check_policies_exist(g, policies)
        if g.netProfile:
            prkv = self.txn.get(keys.netprofile(g.tenantName, g.netProfile))
            check_profile_exists(g, prkv is not None)
            if prkv is not None:
                compares.append(unchanged(prkv))
        others, rev = self.txn.range(keys.groups_of(g.tenantName))
        check_pool_overlap(g, (decode_config(EndpointGroup, kv.value) for kv in others))
        compares.append(untouched_since(keys.groups_of(g.tenantName), rev))
        self.txn.commit(compares, [*ops, Put(key, GroupRecord(config=g, tag=tag).encode())])
        return g

    def tag_untagged(self) -> int:
        """Tag the groups stored before groups had tags (at master start)."""
        return GROUP_TAGS.backfill(self.txn)

    def delete(self, tenant: str, name: str) -> None:
        def attempt() -> None:
            rec, kv = self.record(tenant, name)
            g = rec.config
            eps, erev = self.members(g)
            check_deletable(g.id, len(eps))
            rules = keys.rules_of_tenant(tenant)
            rkvs, rrev = self.txn.range(rules)
            check_unreferenced(
                g.id, naming_group(name, (decode_config(Rule, r.value) for r in rkvs))
            )
            endpoints = keys.endpoints_of(tenant, g.networkName)
            ops: list[Op] = [Delete(kv.key)]
            if rec.tag:
                ops.append(Delete(keys.group_tag(rec.tag)))
            self.txn.commit(
                [unchanged(kv), untouched_since(endpoints, erev), untouched_since(rules, rrev)],
                ops,
            )

        retrying(f"endpoint group {tenant}:{name}", attempt)
