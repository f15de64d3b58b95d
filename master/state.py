"""ClusterState: the control plane's one entry point, composed of one part per family.

Every method delegates: the work is in the family modules (see master/__init__.py for the
layout). Every read-modify-write there is one compare-and-swap transaction (master/txn.py),
so a refused request changes nothing.
"""

from __future__ import annotations

from typing import Any

from common.models import (
    AddressRelease,
    AddressRequest,
    Endpoint,
    EndpointContainer,
    EndpointGroup,
    EndpointRequest,
    GlobalSettings,
    NetProfile,
    Network,
    Policy,
    PoolBinding,
    PoolRequest,
    Rule,
    ServiceLB,
    Tenant,
)
from store import Store

from .addresses import PoolCache
from .decisions.pools import pool_id_for
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

__all__ = ["ClusterState", "pool_id_for"]


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
        self.rules = Rules(txn, self.policies)
        self.netprofiles = NetProfiles(txn, self.tenants, self.groups)
        self.services = Services(txn, hot, self.pool_cache, self.tenants, self.networks)
        self.endpoints = Endpoints(txn, hot, self.pool_cache)
        self.pools = Pools(txn, hot, self.pool_cache)

    def commit_stats(self) -> dict[str, Any]:
        """The group commit's batches in this process (empty when it is off)."""
        return self.group.stats() if self.group is not None else {}

    def ensure_defaults(self) -> None:
        """Create the default tenant and the global settings if they are missing, and give
        a tag to each group stored before groups had tags."""
        self.settings.ensure_defaults()
        self.groups.tag_untagged()

    # --- global settings ---

    def get_global(self) -> GlobalSettings:
        return self.settings.get()

    def put_global(self, new: GlobalSettings) -> GlobalSettings:
        return self.settings.put(new)

    def inspect_global(self) -> dict[str, Any]:
        return self.settings.inspect()

    # --- tenants ---

    def list_tenants(self) -> list[Tenant]:
        return self.tenants.list()

    def get_tenant(self, name: str) -> Tenant:
        return self.tenants.get(name)

    def put_tenant(self, tenant: Tenant) -> Tenant:
        return self.tenants.put(tenant)

    def delete_tenant(self, name: str) -> None:
        self.tenants.delete(name)

    def inspect_tenant(self, name: str) -> dict[str, Any]:
        return self.tenants.inspect(name)

    # --- networks ---

    def list_networks(self, tenant: str | None = None) -> list[Network]:
        return self.networks.list(tenant)

    def get_network(self, tenant: str, name: str) -> Network:
        return self.networks.get(tenant, name)

    def put_network(self, net: Network) -> Network:
        return self.networks.put(net)

    def rename_network(self, tenant: str, name: str, new_name: str) -> Network:
        """Rename a network that has no endpoints yet (docker names arrive after creation)."""
        return self.networks.rename(tenant, name, new_name)

    def delete_network(self, tenant: str, name: str) -> None:
        self.networks.delete(tenant, name)

    def inspect_network(self, tenant: str, name: str) -> dict[str, Any]:
        return self.networks.inspect(tenant, name)

    # --- endpoint groups ---

    def list_groups(self, tenant: str | None = None) -> list[EndpointGroup]:
        return self.groups.list(tenant)

    def get_group(self, tenant: str, name: str) -> EndpointGroup:
        return self.groups.get(tenant, name)

    def put_group(self, group: EndpointGroup) -> EndpointGroup:
        return self.groups.put(group)

    def patch_group(self, tenant: str, name: str, fields: dict[str, Any]) -> EndpointGroup:
        """Change the given fields of a group, merged inside the group's own txn."""
        return self.groups.patch(tenant, name, fields)

    def delete_group(self, tenant: str, name: str) -> None:
        self.groups.delete(tenant, name)

    def inspect_group(self, tenant: str, name: str) -> dict[str, Any]:
        return self.groups.inspect(tenant, name)

    # --- policies and their rules ---

    def list_policies(self, tenant: str | None = None) -> list[Policy]:
        return self.policies.list(tenant)

    def get_policy(self, tenant: str, name: str) -> Policy:
        return self.policies.get(tenant, name)

    def put_policy(self, policy: Policy) -> Policy:
        return self.policies.put(policy)

    def delete_policy(self, tenant: str, name: str) -> None:
        """Delete a policy no group attaches, with its rules."""
        self.policies.delete(tenant, name)

    def inspect_policy(self, tenant: str, name: str) -> dict[str, Any]:
        return self.policies.inspect(tenant, name)

    def list_rules(self, tenant: str | None = None) -> list[Rule]:
        return self.rules.list(tenant)

    def get_rule(self, tenant: str, policy: str, rule_id: str) -> Rule:
        return self.rules.get(tenant, policy, rule_id)

    def put_rule(self, rule: Rule) -> Rule:
        return self.rules.put(rule)

    def delete_rule(self, tenant: str, policy: str, rule_id: str) -> None:
        self.rules.delete(tenant, policy, rule_id)

    # --- netprofiles ---

    def list_netprofiles(self, tenant: str | None = None) -> list[NetProfile]:
        return self.netprofiles.list(tenant)

    def get_netprofile(self, tenant: str, name: str) -> NetProfile:
        return self.netprofiles.get(tenant, name)

    def put_netprofile(self, profile: NetProfile) -> NetProfile:
        return self.netprofiles.put(profile)

    def delete_netprofile(self, tenant: str, name: str) -> None:
        """Delete a netprofile no group names."""
        self.netprofiles.delete(tenant, name)

    def inspect_netprofile(self, tenant: str, name: str) -> dict[str, Any]:
        return self.netprofiles.inspect(tenant, name)

    # --- service LBs ---

    def list_services(self, tenant: str | None = None) -> list[ServiceLB]:
        return self.services.list(tenant)

    def get_service(self, tenant: str, name: str) -> ServiceLB:
        return self.services.get(tenant, name)

    def put_service(self, service: ServiceLB) -> ServiceLB:
        """Create or update a service, booking its VIP in its network's pool."""
        return self.services.put(service)

    def delete_service(self, tenant: str, name: str) -> None:
        """Delete a service and release its VIP."""
        self.services.delete(tenant, name)

    def inspect_service(self, tenant: str, name: str) -> dict[str, Any]:
        return self.services.inspect(tenant, name)

    # --- endpoints (allocation API) ---

    def list_endpoints(self) -> list[Endpoint]:
        return self.endpoints.list()

    def get_endpoint(self, endpoint_id: str) -> Endpoint:
        return self.endpoints.get(endpoint_id)

    def create_endpoint(self, req: EndpointRequest) -> tuple[Endpoint, bool]:
        """Create an endpoint with its addresses; returns (endpoint, created).

        Idempotent by endpoint ID: a retried request returns the endpoint it created.
        """
        return self.endpoints.create(req)

    def set_endpoint_container(self, endpoint_id: str, info: EndpointContainer) -> Endpoint:
        """Record the container (ID, name, labels) an endpoint belongs to."""
        return self.endpoints.set_container(endpoint_id, info)

    def delete_endpoint(self, endpoint_id: str) -> Endpoint:
        return self.endpoints.delete(endpoint_id)

    def reclaim_endpoint(self, endpoint_id: str, gone_host: str) -> Endpoint:
        """Delete an endpoint of a host that is gone, releasing its addresses.

        The same txn checks that the host has still no registration (keys.host), so an
        agent that comes back just then keeps its endpoint (Conflict).
        """
        return self.endpoints.delete(endpoint_id, gone_host)

    # --- Docker's pools and addresses (IPAM: RequestPool / RequestAddress) ---

    def request_pool(self, req: PoolRequest) -> dict[str, Any]:
        """Reserve a pool in an address space (a tenant); an existing identical pool is shared."""
        return self.pools.request_pool(req)

    def release_pool(self, pool_id: str) -> None:
        self.pools.release_pool(pool_id)

    def bind_pool(self, req: PoolBinding) -> str:
        """Bind a docker network's pool id to its network's pool; what it stands for."""
        return self.pools.bind_pool(req)

    def request_address(self, req: AddressRequest) -> str:
        """Allocate one address; returns it as CIDR. Idempotent by ``owner``."""
        return self.pools.request_address(req)

    def release_address(self, req: AddressRelease) -> bool:
        return self.pools.release_address(req)
