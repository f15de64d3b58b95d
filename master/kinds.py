"""The REST API's object kinds, declared once: URL plural, model, key shape, ClusterState calls.

routes.py registers every kind's routes from this table with one set of generic handlers, and
the OpenAPI document is generated from the same registrations. Adding a kind (policies, rules,
netprofiles, service LBs) is one entry in KINDS plus its ClusterState methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from common.models import (
    Endpoint,
    EndpointGroup,
    GlobalSettings,
    NetProfile,
    Network,
    Policy,
    Rule,
    ServiceLB,
    Tenant,
)

from .errors import BadRequest

if TYPE_CHECKING:
    from .state import ClusterState

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class PartsKey:
    """A URL key of ':'-separated parts ("TENANT:NAME"), handed to ClusterState in order.

    A one-part key is taken whole (a tenant's name, an endpoint's opaque ID) and checked by
    ClusterState. With ``default_tenant``, a key without its leading TENANT part means the
    default tenant ("net1" is "default:net1").
    """

    labels: tuple[str, ...]  # say the shape in refusals: "key must be TENANT:NAME"
    param: str = "key"  # the URL parameter's name
    default_tenant: bool = False

    @property
    def size(self) -> int:
        return len(self.labels)

    @property
    def tenant_scoped(self) -> bool:
        """Objects that live in a tenant: their list takes ?tenant=."""
        return self.size > 1 and self.labels[0] == "TENANT"

    def parse(self, noun: str, key: str) -> tuple[str, ...]:
        if self.size == 1:
            return (key,)
        parts = key.split(":")
        if self.default_tenant and len(parts) == self.size - 1:
            parts = [DEFAULT_TENANT, *parts]
        if len(parts) != self.size or not all(parts):
            raise BadRequest(f"{noun} {key}", f"key must be {':'.join(self.labels)}")
        return tuple(parts)


@dataclass(frozen=True)
class SingletonKey:
    """The key of a kind with exactly one object (globals): it must be ``name``; it has no parts."""

    name: str
    what: str  # say the kind in refusals: "the only global settings object is 'global'"
    param: str = "key"
    size = 0
    tenant_scoped = False

    def parse(self, noun: str, key: str) -> tuple[str, ...]:
        if key != self.name:
            raise BadRequest(f"{noun} {key}", f"the only {self.what} object is {self.name!r}")
        return ()


@dataclass(frozen=True)
class Op:
    """One operation of a kind: the ClusterState call that serves it and its OpenAPI summary.

    ``call`` names a ClusterState method, or is a function of (state, *args) for an answer that
    ClusterState gives only in pieces. Calls take the key parts (list: the ?tenant= filter of a
    tenant-scoped kind; put: the parsed model; rename: the key parts and the new name; patch:
    the key parts and the body's fields).
    """

    call: str | Callable[..., Any]
    summary: str


@dataclass(frozen=True)
class ObjectKind:
    """One kind of object under /api/v1/<plural>/<key>, and what its routes do.

    Routes exist for the operations declared: ``list`` GET /<plural>; ``get`` GET /<plural>/<key>;
    ``put`` POST and PUT /<plural>/<key> (create or update); ``patch`` PATCH /<plural>/<key>
    (change the fields the body gives, merged over the object inside its own txn);
    ``rename`` POST /<plural>/<key>/rename; ``delete`` DELETE /<plural>/<key>; ``inspect``
    GET /inspect/<plural>/<key>.
    """

    plural: str
    noun: str  # names one object in errors and answers: "network t1:net1"
    model: type[BaseModel]
    key: PartsKey | SingletonKey
    fields: tuple[str, ...] = ()  # the body fields the key parts fill, in key order
    list: Op | None = None
    get: Op | None = None
    put: Op | None = None
    patch: Op | None = None
    rename: Op | None = None  # body {<the last key field>: NEW_NAME}
    delete: Op | None = None
    inspect: Op | None = None
    merge: bool = False  # a put merges its body over the current object (partial updates)

    def __post_init__(self) -> None:
        if len(self.fields) != self.key.size:
            raise ValueError(f"{self.plural}: {self.key.size} key part(s) but fields {self.fields}")
        if self.merge and self.get is None:
            raise ValueError(f"{self.plural}: partial updates merge over get, which is missing")
        if self.rename is not None and not self.fields:
            raise ValueError(f"{self.plural}: rename needs a key field to take the new name")

    def name(self, parts: tuple[str, ...]) -> str:
        """The object as errors and answers name it: "network t1:net1", or "global"."""
        return f"{self.noun} {':'.join(parts)}" if parts else self.noun


def _the_global(state: ClusterState) -> list[GlobalSettings]:
    return [state.get_global()]


def _endpoint_inspect(state: ClusterState, endpoint_id: str) -> dict[str, Any]:
    # An endpoint's record is all there is of it: its config is its oper state.
    ep = state.get_endpoint(endpoint_id).dump()
    return {"Config": ep, "Oper": ep}


TENANT_NAME = PartsKey(("TENANT", "NAME"), default_tenant=True)

KINDS: tuple[ObjectKind, ...] = (
    ObjectKind(
        "tenants",
        "tenant",
        Tenant,
        PartsKey(("NAME",)),
        fields=("tenantName",),
        list=Op("list_tenants", "List tenants"),
        get=Op("get_tenant", "Get a tenant"),
        put=Op("put_tenant", "Create or update a tenant"),
        delete=Op("delete_tenant", "Delete a tenant (refused while it has children)"),
        inspect=Op("inspect_tenant", "Tenant config and oper state"),
    ),
    ObjectKind(
        "networks",
        "network",
        Network,
        TENANT_NAME,
        fields=("tenantName", "networkName"),
        list=Op("list_networks", "List networks"),
        get=Op("get_network", "Get a network (key TENANT:NAME)"),
        put=Op("put_network", "Create or update a network"),
        rename=Op("rename_network", "Rename a network without endpoints"),
        delete=Op("delete_network", "Delete a network (refused while it has endpoints)"),
        inspect=Op("inspect_network", "Network config and oper state"),
    ),
    ObjectKind(
        "endpointGroups",
        "endpoint group",
        EndpointGroup,
        TENANT_NAME,
        fields=("tenantName", "groupName"),
        list=Op("list_groups", "List endpoint groups"),
        get=Op("get_group", "Get an endpoint group"),
        put=Op("put_group", "Create or update an endpoint group"),
        patch=Op("patch_group", "Change the given fields of an endpoint group (e.g. policies)"),
        delete=Op("delete_group", "Delete an endpoint group (refused while a rule names it)"),
        inspect=Op("inspect_group", "Endpoint group config and oper state (its tag too)"),
    ),
    ObjectKind(
        "policys",  # Contiv's plural
        "policy",
        Policy,
        TENANT_NAME,
        fields=("tenantName", "policyName"),
        list=Op("list_policies", "List policies"),
        get=Op("get_policy", "Get a policy"),
        put=Op("put_policy", "Create a policy"),
        delete=Op("delete_policy", "Delete a policy and its rules (refused while attached)"),
        inspect=Op("inspect_policy", "Policy config and oper state (groups, endpoints, rules)"),
    ),
    ObjectKind(
        "rules",
        "rule",
        Rule,
        PartsKey(("TENANT", "POLICY", "RULEID"), default_tenant=True),
        fields=("tenantName", "policyName", "ruleId"),
        list=Op("list_rules", "List policy rules"),
        get=Op("get_rule", "Get a policy rule (key TENANT:POLICY:RULEID)"),
        put=Op("put_rule", "Create or update a policy rule"),
        delete=Op("delete_rule", "Delete a policy rule"),
    ),
    ObjectKind(
        "netprofiles",
        "netprofile",
        NetProfile,
        TENANT_NAME,
        fields=("tenantName", "profileName"),
        list=Op("list_netprofiles", "List netprofiles"),
        get=Op("get_netprofile", "Get a netprofile"),
        put=Op("put_netprofile", "Create or update a netprofile (bandwidth, burst, DSCP)"),
        delete=Op("delete_netprofile", "Delete a netprofile (refused while a group names it)"),
        inspect=Op("inspect_netprofile", "Netprofile config and oper state (its groups)"),
    ),
    ObjectKind(
        "serviceLBs",  # Contiv's plural
        "service",
        ServiceLB,
        TENANT_NAME,
        fields=("tenantName", "serviceName"),
        list=Op("list_services", "List service LBs"),
        get=Op("get_service", "Get a service LB"),
        put=Op("put_service", "Create or update a service LB (its VIP is booked)"),
        delete=Op("delete_service", "Delete a service LB and release its VIP"),
        inspect=Op("inspect_service", "Service LB config and oper state (VIP, providers)"),
    ),
    ObjectKind(
        "globals",
        "global",
        GlobalSettings,
        SingletonKey("global", "global settings"),
        list=Op(_the_global, "List global settings (one object)"),
        get=Op("get_global", "Get the global settings (key: global)"),
        put=Op("put_global", "Update global settings (partial updates merge)"),
        inspect=Op("inspect_global", "Global config and oper state (tags in use)"),
        merge=True,
    ),
    # Read-only here: endpoints are created and deleted through the allocation API.
    ObjectKind(
        "endpoints",
        "endpoint",
        Endpoint,
        PartsKey(("ID",), param="endpoint_id"),
        fields=("endpointID",),
        list=Op("list_endpoints", "List endpoints"),
        get=Op("get_endpoint", "Get an endpoint"),
        inspect=Op(_endpoint_inspect, "Endpoint config and oper state"),
    ),
)
