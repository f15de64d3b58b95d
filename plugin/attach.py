"""Attaching an endpoint to this host's switch and detaching it, for the Docker driver
(CreateEndpoint, DeleteEndpoint) and the CNI service (ADD, DEL) alike.

Attach: the port is made while the master books the endpoint (both mostly wait on a socket;
the MAC is final already). When the request names its addresses (Docker's RequestAddress
came first) the flows go out meanwhile too, and the wait for the switch to confirm them
(an OpenFlow round trip of ~12 ms at 1,000 ports) overlaps the master's; otherwise, or if
the master booked other addresses, they go out once it has answered. A failure undoes
exactly what was done, the port and its flows first (a plug that failed removed its own),
then the booking: no address, OVS port, veth, flow or store key is left. A master's refusal
changed nothing, so frees nothing; a master that did not answer may have booked, so the
endpoint is freed all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from common.client import MasterError
from common.models import Endpoint, EndpointRequest, Network, group_id
from datapath.ports import PublishedPort
from datapath.veth import Into

log = logging.getLogger(__name__)


class Datapath(Protocol):
    """This host's datapath as the driver and the CNI service see it
    (plugin.daemon.AgentDatapath)."""

    def create_endpoint_port(
        self,
        endpoint_id: str,
        network: Network,
        mac: str,
        ipv4: str,
        ipv6: str,
        mtu: int,
        group: str = "",
        into: Into | None = None,
    ) -> str:
        """Create (or find) the endpoint's port; returns the host-side container ifname
        ("" if it is in ``into``, a CNI pod's namespace: made there, or moved there now).
        ``group`` is TENANT:GROUP of its endpoint group ("" outside one)."""
        ...

    def plug(
        self, endpoint_id: str, network: Network, mac: str, mtu: int, into: Into | None = None
    ) -> str:
        """The endpoint's port without its flows, made while the master books it (flows
        follow in create_endpoint_port); the container-side ifname, or "" if the container
        end was made in ``into`` (its namespace, under its name there)."""
        ...

    def delete_endpoint_port(self, endpoint_id: str) -> None:
        """Remove the endpoint's flows; its port and veth follow in the background."""
        ...

    def settle(self, endpoint_id: str) -> None:
        """Wait until the deleted endpoint's port and veth are gone."""
        ...

    def has_endpoint(self, endpoint_id: str) -> bool: ...

    def remove_network(self, network_id: str) -> None:
        """Drop the network's host-side state (gateway port, NAT); network_id is TENANT:NAME."""
        ...

    def endpoint_oper(self, endpoint_id: str) -> dict[str, Any]: ...

    def publish(self, endpoint_id: str, ports: list[PublishedPort]) -> list[PublishedPort]:
        """Make exactly these published ports lead to the endpoint (empty: none), choosing
        the host port where a binding leaves it open (0, or a range); the bindings made.
        A port that is taken is refused (DriverError naming it), and nothing changes."""
        ...

    def published_ports(self, endpoint_id: str) -> list[PublishedPort]:
        """The endpoint's published ports, with the host ports they got."""
        ...


class Master(Protocol):
    def create_endpoint(self, request: EndpointRequest) -> Endpoint: ...

    def delete_endpoint(self, endpoint_id: str) -> Endpoint: ...


class DatapathFailure(Exception):
    """The datapath could not plug a booked endpoint (undone): the host failed, not the
    request."""


# Ports made (and removed) while the master books (or frees) their endpoint, for every
# caller in the process.
PLUGGING = ThreadPoolExecutor(max_workers=8, thread_name_prefix="plug")


def attach(
    master: Master,
    datapath: Datapath,
    request: EndpointRequest,
    net: Network,
    mtu: int,
    into: Into | None = None,
    on_booked: Callable[[Endpoint], object] | None = None,
) -> tuple[Endpoint, str]:
    """Book ``request`` and plug it into ``net``: (the booked endpoint, the container-side
    ifname here, or "" if it was made in ``into``, which a request with addresses does not
    use). Raises the master's MasterError, or DatapathFailure; either way nothing is left.
    ``on_booked`` hears of the booking as soon as the master answers, while the port and its
    flows are still being made (an answer that attach then undoes included).
    """
    eid, mac = request.endpointID, request.macAddress
    group = group_id(request.tenantName, request.groupName)
    asked = (request.ipAddress, request.ipv6Address)
    if any(asked):
        plugging = PLUGGING.submit(
            datapath.create_endpoint_port, eid, net, mac, *asked, mtu, group=group
        )
    else:
        plugging = PLUGGING.submit(datapath.plug, eid, net, mac, mtu, into)
    try:
        ep = master.create_endpoint(request)
    except BaseException as e:
        plugged = plugging.exception() is None  # made (or failed) before it is removed
        refused = isinstance(e, MasterError) and e.status < 500
        _undo(master, datapath, eid, unplug=plugged, free=not refused)
        raise
    try:
        if on_booked is not None:
            on_booked(ep)
        ifname = plugging.result()
        booked = (ep.ipAddress or request.ipAddress, ep.ipv6Address or request.ipv6Address)
        if booked != asked:  # the flows wait for the addresses the master chose
            ifname = datapath.create_endpoint_port(
                eid, net, mac, *booked, mtu, group=group, into=into
            )
    except Exception as failure:
        log.exception("endpoint %s: datapath port failed; undoing it", eid[:12])
        _undo(master, datapath, eid, unplug=plugging.exception() is None, free=True)
        raise DatapathFailure(str(failure)) from failure
    return ep, ifname


def detach(
    master: Master,
    datapath: Datapath,
    endpoint_id: str,
    first: Callable[[], object] | None = None,
) -> None:
    """Remove the endpoint's port and free its booking, both at once (each is idempotent:
    if either fails, a retry finishes the other); raises what failed (a 404 is done). The
    port's removal waits for ``first`` (the container's end leaving its namespace: a pool
    port whose end is home serves again)."""

    def unplug() -> None:
        if first is not None:
            first()
        datapath.delete_endpoint_port(endpoint_id)

    unplugging = PLUGGING.submit(unplug)
    try:
        master.delete_endpoint(endpoint_id)
    except MasterError as e:
        if e.status != 404:
            unplugging.exception()  # the port is gone (or failed) before we answer
            raise
    unplugging.result()


def _undo(master: Master, datapath: Datapath, endpoint_id: str, unplug: bool, free: bool) -> None:
    """A failed attach's rollback (a plug that failed removed what it made itself): logs what
    it cannot undo, so the caller's error stands."""
    try:
        if unplug:
            datapath.delete_endpoint_port(endpoint_id)
            datapath.settle(endpoint_id)  # a refused call answers with nothing left
    except Exception:
        log.exception("endpoint %s: removing its port failed", endpoint_id[:12])
    try:
        if free:
            master.delete_endpoint(endpoint_id)
    except MasterError as e:
        if e.status != 404:
            log.error("endpoint %s: could not free it on the master: %s", endpoint_id[:12], e)
