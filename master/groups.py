"""Endpoint groups in the store."""

from __future__ import annotations

from common import keys
from common.models import Endpoint, EndpointGroup
from common.records import decode_config, decode_endpoint, encode_config
from store import KV, Delete, Put

from .decisions.groups import (
    check_change,
    check_deletable,
    check_pool_overlap,
    members,
    moves,
)
from .errors import NotFound
from .networks import Networks
from .tenants import Tenants
from .txn import TxnStore, absent, retrying, unchanged, untouched_since
from .validate import check_name, normalize_group


class Groups:
    def __init__(self, txn: TxnStore, tenants: Tenants, networks: Networks) -> None:
        self.txn = txn
        self.tenants = tenants
        self.networks = networks

    def list(self, tenant: str | None = None) -> list[EndpointGroup]:
        kvs, _ = self.txn.range(keys.groups_of(tenant) if tenant else keys.GROUPS)
        return [decode_config(EndpointGroup, kv.value) for kv in kvs]

    def read(self, tenant: str, name: str) -> tuple[EndpointGroup, KV]:
        kv = self.txn.get(keys.group(tenant, name))
        if kv is None:
            raise NotFound(f"endpoint group {tenant}:{name}")
        return decode_config(EndpointGroup, kv.value), kv

    def get(self, tenant: str, name: str) -> EndpointGroup:
        return self.read(tenant, name)[0]

    def members(self, group: EndpointGroup) -> tuple[list[Endpoint], int]:
        """The group's endpoints, and the revision they were read at."""
        eps, rev = self.txn.range(keys.endpoints_of(group.tenantName, group.networkName))
        return members(group, (decode_endpoint(e.value) for e in eps)), rev

    def put(self, group: EndpointGroup) -> EndpointGroup:
        check_name("endpoint group", group.groupName)
        key = keys.group(group.tenantName, group.groupName)

        def attempt() -> EndpointGroup:
            tkv = self.tenants.require(group.tenantName)
            net, nkv = self.networks.read(group.tenantName, group.networkName)
            g = normalize_group(group, net.config)
            compares = [unchanged(tkv), unchanged(nkv)]
            old = self.txn.get(key)
            if old is not None:
                prev = decode_config(EndpointGroup, old.value)
                if prev == g:
                    return g
                if moves(prev, g):
                    eps, erev = self.members(prev)
                    check_change(prev, g, len(eps))
                    # The guard holds in the txn too: no endpoint joined since it was read.
                    endpoints = keys.endpoints_of(prev.tenantName, prev.networkName)
                    compares.append(untouched_since(endpoints, erev))
                compares.append(unchanged(old))
            else:
                compares.append(absent(key))
            others, rev = self.txn.range(keys.groups_of(g.tenantName))
            check_pool_overlap(g, (decode_config(EndpointGroup, kv.value) for kv in others))
            compares.append(untouched_since(keys.groups_of(g.tenantName), rev))
            self.txn.commit(compares, [Put(key, encode_config(g))])
            return g

        return retrying(f"endpoint group {group.id}", attempt)

    def delete(self, tenant: str, name: str) -> None:
        def attempt() -> None:
            g, kv = self.read(tenant, name)
            eps, erev = self.members(g)
            check_deletable(g.id, len(eps))
            endpoints = keys.endpoints_of(tenant, g.networkName)
            self.txn.commit([unchanged(kv), untouched_since(endpoints, erev)], [Delete(kv.key)])

        retrying(f"endpoint group {tenant}:{name}", attempt)
