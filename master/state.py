"""ClusterState: the store families, built once over one store and composed in the order
they refer to each other. The REST routes reach each family through the kinds table
(kinds.py); the allocation routes call the endpoints and pools families directly. Every
read-modify-write in a family is one compare-and-swap transaction (txn.py), so a refused
request changes nothing.
"""

from __future__ import annotations

from typing import Any

from store import Store

from .addresses import PoolCache
from .bgps import Bgps
from .endpoints import Endpoints
from .groupcommit import GroupCommit
from .groups import Groups
from .netprofiles import NetProfiles
from .networks import Networks
from .policies import Policies
from .pools import Pools
from .rules import Rules
from .services import Services
from .settings import Settings
from .tenants import Tenants
from .txn import HotCache, TxnStore


class ClusterState:
    def __init__(self, store: Store, backend: str = "embedded", group_commit: bool = True) -> None:
        self.store = store
        self.backend = backend
        self.pool_cache = PoolCache(store)
        # Allocations and releases of concurrent requests share commits (groupcommit.py).
        self.group = GroupCommit(store) if group_commit else None
        txn = TxnStore(store, self.group)
        hot = HotCache(txn)
        self.settings = Settings(txn, backend)
        self.tenants = Tenants(txn)
        self.networks = Networks(txn, self.tenants, self.settings, self.pool_cache)
        self.groups = Groups(txn, self.tenants, self.networks)
        self.policies = Policies(txn, self.tenants, self.groups)
        self.rules = Rules(txn)
        self.netprofiles = NetProfiles(txn, self.tenants, self.groups)
        self.services = Services(txn, hot, self.pool_cache, self.tenants, self.networks)
        self.endpoints = Endpoints(txn, hot, self.pool_cache)
        self.bgps = Bgps(txn, self.settings)
        self.pools = Pools(txn, hot, self.pool_cache)

    def commit_stats(self) -> dict[str, Any]:
        """The group commit's batches in this process (empty when it is off)."""
        return self.group.stats() if self.group is not None else {}

    def ensure_defaults(self) -> None:
        """Create the default tenant and the global settings if they are missing, and give
        a tag to each tenant and group stored before they had tags."""
        self.settings.ensure_defaults()
        self.tenants.ensure_default()
        self.tenants.tag_untagged()
        self.groups.tag_untagged()
