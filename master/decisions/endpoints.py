"""Endpoints against the cluster state: where their addresses come from, and who may take
or free them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from common import owners
from common.models import Endpoint, EndpointGroup, EndpointRequest
from common.records import AllocRecord, NetworkRecord

from ..errors import BadRequest, Conflict
from .groups import pool_bounds


def endpoint_obj(endpoint_id: str) -> str:
    return f"endpoint {endpoint_id}"


def check_same_network(existing: Endpoint, req: EndpointRequest) -> None:
    """A retried request finds its endpoint; the same ID in another network is refused."""
    if (existing.tenantName, existing.networkName) != (req.tenantName, req.networkName):
        raise Conflict(
            endpoint_obj(req.endpointID),
            f"already exists in network {existing.tenantName}:{existing.networkName}",
        )


def group_range(
    req: EndpointRequest, group: EndpointGroup, net: NetworkRecord
) -> tuple[int, int] | None:
    """The addresses an endpoint of ``group`` draws from (None: the whole pool); the group
    must be on the endpoint's network."""
    if group.networkName != net.config.networkName:
        raise BadRequest(
            endpoint_obj(req.endpointID),
            f"endpoint group {group.id} belongs to network {group.networkName}, "
            f"not {net.config.networkName}",
        )
    return pool_bounds(group.ipPool) if group.ipPool else None


@dataclass(frozen=True)
class Want:
    """One address an endpoint asks for."""

    pool_id: str  # "" if the network has no subnet of this IP version
    static: str  # the address asked for, or "" for the next free one
    within: tuple[int, int] | None  # the group's ip-pool
    field: str  # "ipAddress" or "ipv6Address"

    @property
    def pool_field(self) -> str:
        return "ipv4Pool" if self.field == "ipAddress" else "ipv6Pool"


def wants(req: EndpointRequest, net: NetworkRecord, within: tuple[int, int] | None) -> list[Want]:
    """The addresses of a new endpoint, IPv4 first: one per subnet of its network."""
    return [
        Want(net.ipv4_pool, req.ipAddress, within, "ipAddress"),
        Want(net.ipv6_pool, req.ipv6Address, None, "ipv6Address"),
    ]


def check_subnet(req: EndpointRequest, want: Want, net: NetworkRecord) -> None:
    """A static address needs a subnet of its IP version."""
    if not want.pool_id and want.static:
        raise BadRequest(
            endpoint_obj(req.endpointID),
            f"{want.field} {want.static} given but network {net.id} has no such subnet",
        )


def adoptable(held: AllocRecord) -> bool:
    """An address a plain address request holds may be handed over to an endpoint (Docker
    asks for it before creating the endpoint); one an endpoint or a gateway holds may not."""
    return owners.is_request(held.owner)


def swarm_use(
    req: EndpointRequest, address: str, net: NetworkRecord, held: AllocRecord | None, used: bool
) -> AllocRecord:
    """A swarm task's endpoint uses the booking the swarm manager made for its address
    (``held``; ``used``: whether the endpoint named in it still exists): the booking
    with the endpoint as its user. No booking, or one another live endpoint uses, is
    refused."""
    obj = endpoint_obj(req.endpointID)
    if held is None or held.owner != owners.SWARM:
        holder = f"it is held by {held.owner}" if held is not None else "it is not allocated"
        raise Conflict(
            obj,
            f"address {address} of network {net.id} was not allocated by the swarm manager "
            f"({holder}): a swarm network needs netplugin as its IPAM driver too "
            "(docker network create --ipam-driver, the same plugin as -d)",
        )
    if held.user and held.user != req.endpointID and used:
        raise Conflict(obj, f"address {address} is in use by endpoint {held.user}")
    return held.model_copy(update={"user": req.endpointID, "network": net.id})


def swarm_unused(ep: Endpoint, held: AllocRecord) -> AllocRecord | None:
    """Deleting ``ep``: the swarm booking it used, given back (the manager frees it), or
    None if ``held`` is not such a booking."""
    if held.owner == owners.SWARM and held.user == ep.endpointID:
        return held.model_copy(update={"user": ""})
    return None


def new_endpoint(req: EndpointRequest, addresses: Mapping[str, str]) -> Endpoint:
    """The endpoint record, with ``addresses``: ipAddress, ipv6Address and their pools."""
    return Endpoint(
        endpointID=req.endpointID,
        tenantName=req.tenantName,
        networkName=req.networkName,
        groupName=req.groupName,
        host=req.host,
        macAddress=req.macAddress,
        containerID=req.containerID,
        containerName=req.containerName,
        labels=dict(req.labels),
        **addresses,
    )


def addresses_of(ep: Endpoint) -> list[tuple[str, str]]:
    """The (pool id, address) pairs an endpoint was given."""
    return [
        (pid, addr)
        for pid, addr in ((ep.ipv4Pool, ep.ipAddress), (ep.ipv6Pool, ep.ipv6Address))
        if pid and addr
    ]


def holds(ep: Endpoint, held: AllocRecord) -> bool:
    """Whether the endpoint still holds an address (deleting it releases only those)."""
    return held.owner == owners.endpoint(ep.endpointID)


def check_reclaim(ep: Endpoint, gone_host: str, registered: bool) -> None:
    """An endpoint is reclaimed only from the host it is on, while that host has no
    registration (an agent that came back keeps its endpoints)."""
    obj = endpoint_obj(ep.endpointID)
    if ep.host != gone_host:
        raise Conflict(obj, f"it belongs to host {ep.host!r} now, not {gone_host!r}")
    if registered:
        raise Conflict(obj, f"host {gone_host} is registered again")
