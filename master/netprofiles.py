"""Netprofiles in the store. A group names one (EndpointGroup.netProfile); one in use cannot
go: its delete compares the tenant's groups, so a group naming it meanwhile fails one side."""

from __future__ import annotations

from typing import Any

from common import keys
from common.models import EndpointGroup, NetProfile
from common.records import decode_config, encode_config
from store import KV, Delete, Put

from .decisions.netprofiles import check_deletable, normalize_profile, using
from .decisions.views import netprofile_view
from .errors import NotFound
from .groups import Groups
from .tenants import Tenants
from .txn import TxnStore, absent, retrying, unchanged, untouched_since


class NetProfiles:
    def __init__(self, txn: TxnStore, tenants: Tenants, groups: Groups) -> None:
        self.txn = txn
        self.tenants = tenants
        self.groups = groups

    def list(self, tenant: str | None = None) -> list[NetProfile]:
        kvs, _ = self.txn.range(keys.netprofiles_of(tenant) if tenant else keys.NETPROFILES)
        return [decode_config(NetProfile, kv.value) for kv in kvs]

    def read(self, tenant: str, name: str) -> tuple[NetProfile, KV]:
        kv = self.txn.get(keys.netprofile(tenant, name))
        if kv is None:
            raise NotFound(f"netprofile {tenant}:{name}")
        return decode_config(NetProfile, kv.value), kv

    def get(self, tenant: str, name: str) -> NetProfile:
        return self.read(tenant, name)[0]

    def inspect(self, tenant: str, name: str) -> dict[str, Any]:
        profile = self.get(tenant, name)
        tenant_groups = self.groups.list(tenant)
        names = using(name, tenant_groups)
        members = [
            ep for g in tenant_groups if g.groupName in names for ep in self.groups.members(g)[0]
        ]
        return netprofile_view(profile, names, members)

    def put(self, profile: NetProfile) -> NetProfile:
        p = normalize_profile(profile)
        key = keys.netprofile(p.tenantName, p.profileName)
        value = encode_config(p)

        def attempt() -> NetProfile:
            tkv = self.tenants.require(p.tenantName)
            old = self.txn.get(key)
            if old is not None and old.value == value:
                return p
            self.txn.commit(
                [unchanged(tkv), unchanged(old) if old else absent(key)], [Put(key, value)]
            )
            return p

        return retrying(f"netprofile {p.id}", attempt)

    def delete(self, tenant: str, name: str) -> None:
        def attempt() -> None:
            p, kv = self.read(tenant, name)
            groups, grev = self.txn.range(keys.groups_of(tenant))
            check_deletable(
                p.id, using(name, (decode_config(EndpointGroup, g.value) for g in groups))
            )
            # No group named it since the read: the txn compares the tenant's groups.
            self.txn.commit(
                [unchanged(kv), untouched_since(keys.groups_of(tenant), grev)], [Delete(kv.key)]
            )

        retrying(f"netprofile {tenant}:{name}", attempt)
