"""The REST API's object kinds, declared once for the master and netctl: URL plural, noun,
model, key shape. The master binds each kind to its store family (master/kinds.py); netctl
calls every kind through one generic client (netctl/client.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from .models import (
    Bgp,
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

DEFAULT_TENANT = "default"

M = TypeVar("M", bound=BaseModel)


class BadKey(ValueError):
    """A URL key of the wrong shape; the message says the right one."""


@dataclass(frozen=True)
class PartsKey:
    """A URL key of ':'-separated parts ("TENANT:NAME"), handed to the family in order.

    A one-part key is taken whole (a tenant's name, an endpoint's opaque ID) and checked by
    the family. With ``default_tenant``, a key without its leading TENANT part means the
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

    def parse(self, key: str) -> tuple[str, ...]:
        if self.size == 1:
            return (key,)
        parts = key.split(":")
        if self.default_tenant and len(parts) == self.size - 1:
            parts = [DEFAULT_TENANT, *parts]
        if len(parts) != self.size or not all(parts):
            raise BadKey(f"key must be {':'.join(self.labels)}")
        return tuple(parts)

    def text(self, parts: tuple[str, ...]) -> str:
        return ":".join(parts)


@dataclass(frozen=True)
class SingletonKey:
    """The key of a kind with exactly one object (globals): it must be ``name``; it has no parts."""

    name: str
    what: str  # say the kind in refusals: "the only global settings object is 'global'"
    param: str = "key"
    size = 0
    tenant_scoped = False

    def parse(self, key: str) -> tuple[str, ...]:
        if key != self.name:
            raise BadKey(f"the only {self.what} object is {self.name!r}")
        return ()

    def text(self, parts: tuple[str, ...]) -> str:
        return self.name


@dataclass(frozen=True)
class Kind(Generic[M]):
    """One kind of object under /api/v1/<plural>/<key>."""

    plural: str
    noun: str  # names one object in errors and answers: "network t1:net1"
    model: type[M]
    key: PartsKey | SingletonKey
    fields: tuple[str, ...] = ()  # the body fields the key parts fill, in key order

    def __post_init__(self) -> None:
        if len(self.fields) != self.key.size:
            raise ValueError(f"{self.plural}: {self.key.size} key part(s) but fields {self.fields}")

    def name(self, parts: tuple[str, ...]) -> str:
        """The object as errors and answers name it: "network t1:net1", or "global"."""
        return f"{self.noun} {':'.join(parts)}" if parts else self.noun


TENANT_NAME = PartsKey(("TENANT", "NAME"), default_tenant=True)

TENANTS = Kind("tenants", "tenant", Tenant, PartsKey(("NAME",)), ("tenantName",))
NETWORKS = Kind("networks", "network", Network, TENANT_NAME, ("tenantName", "networkName"))
GROUPS = Kind(
    "endpointGroups", "endpoint group", EndpointGroup, TENANT_NAME, ("tenantName", "groupName")
)
POLICIES = Kind("policys", "policy", Policy, TENANT_NAME, ("tenantName", "policyName"))  # Contiv's
RULES = Kind(
    "rules",
    "rule",
    Rule,
    PartsKey(("TENANT", "POLICY", "RULEID"), default_tenant=True),
    ("tenantName", "policyName", "ruleId"),
)
NETPROFILES = Kind(
    "netprofiles", "netprofile", NetProfile, TENANT_NAME, ("tenantName", "profileName")
)
SERVICES = Kind(
    "serviceLBs", "service", ServiceLB, TENANT_NAME, ("tenantName", "serviceName")
)  # Contiv's plural
BGPS = Kind("Bgps", "bgp", Bgp, PartsKey(("HOSTNAME",)), ("hostname",))  # Contiv's plural
GLOBALS = Kind("globals", "global", GlobalSettings, SingletonKey("global", "global settings"))
ENDPOINTS = Kind(
    "endpoints", "endpoint", Endpoint, PartsKey(("ID",), param="endpoint_id"), ("endpointID",)
)
