"""The kinds table: each kind of common/kinds.py bound to its store family, with the
operations its routes serve and their OpenAPI summaries.

routes.py registers every row with one set of generic handlers, which call the family's
bound methods; the OpenAPI document is generated from the same registrations. Adding a kind
is its model, decisions and family, one row here, and netctl's verbs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from common.kinds import (
    BGPS,
    ENDPOINTS,
    GLOBALS,
    GROUPS,
    NETPROFILES,
    NETWORKS,
    POLICIES,
    RULES,
    SERVICES,
    TENANTS,
    BadKey,
    Kind,
)

from .errors import BadRequest

if TYPE_CHECKING:
    from .state import ClusterState


class Family(Protocol):
    """A store family as the routes call it, each call with the key's parts in order: list
    (the ?tenant= filter of a tenant-scoped kind), get, put (the parsed model), delete; patch
    (the body's fields), rename (the new name) and inspect where its row declares them."""

    list: Callable[..., Sequence[BaseModel]]
    get: Callable[..., BaseModel]
    put: Callable[[Any], BaseModel]
    patch: Callable[..., BaseModel]
    rename: Callable[..., BaseModel]
    delete: Callable[..., object]
    inspect: Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Row:
    """One kind under /api/v1/<plural>/<key>: its family, and a route for each operation
    given a summary: ``list`` GET /<plural>; ``get`` GET /<plural>/<key>; ``put`` POST and PUT
    /<plural>/<key> (create or update); ``patch`` PATCH /<plural>/<key> (change the fields the
    body gives, merged over the object inside its own txn); ``rename`` POST
    /<plural>/<key>/rename; ``delete`` DELETE /<plural>/<key>; ``inspect``
    GET /inspect/<plural>/<key>.
    """

    kind: Kind[Any]
    family: Callable[[ClusterState], Family]
    list: str | None = None
    get: str | None = None
    put: str | None = None
    patch: str | None = None
    rename: str | None = None  # body {<the last key field>: NEW_NAME}
    delete: str | None = None
    inspect: str | None = None
    merge: bool = False  # a put merges its body over the current object (partial updates)

    def __post_init__(self) -> None:
        plural = self.kind.plural
        if self.merge and self.get is None:
            raise ValueError(f"{plural}: partial updates merge over get, which is missing")
        if self.rename is not None and not self.kind.fields:
            raise ValueError(f"{plural}: rename needs a key field to take the new name")

    def parse(self, key: str) -> tuple[str, ...]:
        return parse_key(self.kind, key)


def parse_key(kind: Kind[Any], key: str) -> tuple[str, ...]:
    """A URL key's parts; a key of the wrong shape is refused naming it."""
    try:
        return kind.key.parse(key)
    except BadKey as e:
        raise BadRequest(f"{kind.noun} {key}", str(e)) from None


KINDS: tuple[Row, ...] = (
    Row(
        TENANTS,
        lambda s: s.tenants,
        list="List tenants",
        get="Get a tenant",
        put="Create or update a tenant",
        delete="Delete a tenant (refused while it has children)",
        inspect="Tenant config and oper state",
    ),
    Row(
        NETWORKS,
        lambda s: s.networks,
        list="List networks",
        get="Get a network (key TENANT:NAME)",
        put="Create or update a network",
        rename="Rename a network without endpoints",
        delete="Delete a network (refused while it has endpoints)",
        inspect="Network config and oper state",
    ),
    Row(
        GROUPS,
        lambda s: s.groups,
        list="List endpoint groups",
        get="Get an endpoint group",
        put="Create or update an endpoint group",
        patch="Change the given fields of an endpoint group (e.g. policies)",
        delete="Delete an endpoint group (refused while a rule names it)",
        inspect="Endpoint group config and oper state (its tag too)",
    ),
    Row(
        POLICIES,
        lambda s: s.policies,
        list="List policies",
        get="Get a policy",
        put="Create a policy",
        delete="Delete a policy and its rules (refused while attached)",
        inspect="Policy config and oper state (groups, endpoints, rules)",
    ),
    Row(
        RULES,
        lambda s: s.rules,
        list="List policy rules",
        get="Get a policy rule (key TENANT:POLICY:RULEID)",
        put="Create or update a policy rule",
        delete="Delete a policy rule",
    ),
    Row(
        NETPROFILES,
        lambda s: s.netprofiles,
        list="List netprofiles",
        get="Get a netprofile",
        put="Create or update a netprofile (bandwidth, burst, DSCP)",
        delete="Delete a netprofile (refused while a group names it)",
        inspect="Netprofile config and oper state (its groups)",
    ),
    Row(
        SERVICES,
        lambda s: s.services,
        list="List service LBs",
        get="Get a service LB",
        put="Create or update a service LB (its VIP is booked)",
        delete="Delete a service LB and release its VIP",
        inspect="Service LB config and oper state (VIP, providers)",
    ),
    Row(
        BGPS,
        lambda s: s.bgps,
        list="List Bgp objects (each host's peering with its router)",
        get="Get a host's Bgp object (key: the hostname)",
        put="Create or update a host's Bgp object "
        "(routerip, routeripv6, as, neighbor-as, neighbor)",
        delete="Delete a host's Bgp object",
        inspect="Bgp config and oper state (host registration, forwarding mode)",
    ),
    Row(
        GLOBALS,
        lambda s: s.settings,
        list="List global settings (one object)",
        get="Get the global settings (key: global)",
        put="Update global settings (partial updates merge)",
        inspect="Global config and oper state (tags in use)",
        merge=True,
    ),
    # Read-only here: endpoints are created and deleted through the allocation API.
    Row(
        ENDPOINTS,
        lambda s: s.endpoints,
        list="List endpoints",
        get="Get an endpoint",
        inspect="Endpoint config and oper state",
    ),
)
