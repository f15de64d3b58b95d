"""This host's part of routing mode with BGP (issue 25): from the cluster view, its Bgp
object (keys.bgp) and the forwarding mode, the router port holding the Bgp object's router
IP (datapath.bridgeports), one BgpSession peering with the router, what it announces (each
local container's /32 on a VLAN network, and its /128 with an IPv6 router IP) and what it
reports (keys.bgp_session, under the host's lease, for `netctl bgp inspect`).

One Reconciler, poked by every change of the view. Its decisions are pure (``host_peering``,
``fabric_subnets``, ``local_routes``); the session and the datapath are its effects. A new
or changed Bgp object makes a new session (os-ken runs one core per process: the old one is
shut down first); a deleted one, or bridge mode, ends it and removes the routes it learned
and the router port. The routes a previous agent learned stay in the kernel until the new
session has been up a moment (BgpSession), and the router keeps this host's routes through
the restart (graceful restart): a restart does not cut the fabric's traffic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from common import keys
from common.loop import Reconciler
from common.models import Bgp, Endpoint
from common.records import BgpSessionRecord, NetworkRecord
from datapath.effects import RouteTable
from datapath.host import HostDatapath
from store import StoreError

from .bgp import BgpSession, Peering, SpeakerFactory, wanted_routes
from .cluster import ClusterView, datapath_endpoint
from .cluster_sync import fabric_subnets, local_network

log = logging.getLogger("netplugin")

REPORT_EVERY = 2.0  # seconds between checks of the session's state


# -- decisions -----------------------------------------------------------------------


def host_peering(fwd_mode: str, bgp: Bgp | None) -> Peering | None:
    """The peering this host wants: its Bgp object's, in routing mode only."""
    if fwd_mode != "routing" or bgp is None:
        return None
    return Peering.of(bgp)


def router_addresses(bgp: Bgp) -> tuple[str, ...]:
    """The router port's addresses: the router IP, and the IPv6 one if given."""
    return tuple(a for a in (bgp.routerip, bgp.routeripv6) if a)


def local_routes(
    fwd_mode: str,
    host: str,
    records: Iterable[NetworkRecord],
    endpoints: Iterable[Endpoint],
    peering: Peering,
) -> dict[str, str]:
    """What this host announces: its endpoints' /32s on networks routed by BGP, as the
    cluster state has them (announced once the master allocated them, withdrawn once it
    released them)."""
    networks = [local_network(r) for r in records]
    mine = [datapath_endpoint(e) for e in endpoints if e.host == host and e.ipAddress]
    return wanted_routes(fwd_mode, networks, mine, peering.router_ip, peering.next_hop6)


def session_record(session: BgpSession) -> BgpSessionRecord:
    s = session.status()
    return BgpSessionRecord(
        neighbor=s.neighbor, state=s.state, announced=s.announced, learned=s.learned
    )


# -- the loop ------------------------------------------------------------------------


class HostBgp(Reconciler):
    """Keeps this host's router port, BGP session and report in line with the view."""

    def __init__(
        self,
        view: ClusterView,
        agent: HostDatapath,
        host: str,
        report: Callable[[str, bytes | None], object],
        make_speaker: SpeakerFactory | None = None,
        route_table: RouteTable | None = None,
        **session_options: float,
    ) -> None:
        self.view = view
        self._session_options = session_options  # BgpSession's timings (tests)
        self.agent = agent
        self.host = host
        self.report = report  # (key, value or None): the registration's put_leased
        self._make_speaker = make_speaker
        self._routes = route_table
        self.session: BgpSession | None = None
        self._fabric: Any = None  # what the datapath was last told
        self._reported: bytes | None = None
        super().__init__(
            "bgp peering",
            self._pass,
            interval=REPORT_EVERY,
            expected=(StoreError, ValueError, OSError),
        )

    def stop(self) -> None:
        """End the loop and leave the session to die with the process: a speaker shut down
        sends the router a Cease, and a router drops the routes of a peer that said Cease;
        a connection that merely closes keeps them for graceful restart's time, enough for
        the next agent (the learned routes stay in the kernel too)."""
        super().stop()
        self.join(5)

    def _pass(self) -> float | None:
        if not self.agent.ready:
            return 1.0
        mode = self.view.fwd_mode()
        bgp = self.view.bgps.values().get(self.host)
        peering = host_peering(mode, bgp)
        if mode != "routing" and self.session is None and self._fabric == ((), {}):
            self._put_report(None)  # bridge mode, nothing to undo: no work per view change
            return None
        records = list(self.view.networks.values().values())
        if peering != (self.session.peering if self.session else None):
            self._end_session(forget=True)
        fabric = (
            router_addresses(bgp) if bgp is not None and peering else (),
            fabric_subnets(mode, records, self.view.tenant_tags()),
        )
        if fabric != self._fabric:
            self.agent.set_fabric(*fabric)
            self._fabric = fabric
        if peering is None:
            self._put_report(None)
            return None
        if self.session is None:
            log.info(
                "bgp: peering with %s (AS %d) as AS %d from %s",
                peering.neighbor,
                peering.neighbor_as,
                peering.local_as,
                peering.router_ip,
            )
            self.session = BgpSession(
                peering, self._speaker_factory(), self._route_table(), **self._session_options
            )
            self.session.start()
        endpoints = self.view.endpoints.values().values()
        self.session.set_wanted(local_routes(mode, self.host, records, endpoints, peering))
        self._put_report(session_record(self.session).encode())
        return None

    def _put_report(self, value: bytes | None) -> None:
        if value == self._reported:
            return
        if self.report(keys.bgp_session(self.host), value):
            self._reported = value

    def _end_session(self, forget: bool = False) -> None:
        session, self.session = self.session, None
        if session is not None:
            log.info("bgp: peering with %s ends", session.peering.neighbor)
            session.stop(forget=forget)

    def _speaker_factory(self) -> SpeakerFactory:
        if self._make_speaker is None:
            from .bgp_osken import make_speaker  # os-ken's BGP code only when peering

            self._make_speaker = make_speaker
        return self._make_speaker

    def _route_table(self) -> RouteTable:
        if self._routes is None:
            from datapath.kroutes import KernelRoutes

            self._routes = KernelRoutes()
        return self._routes
