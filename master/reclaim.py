"""Reclaim the endpoints of hosts that are gone: run by the leader only.

A live agent keeps its registration keys.host(name) attached to its own lease. When an
endpoint's host has had no registration for longer than the grace period, measured by this
leader since it first saw it missing, the endpoint is deleted and its addresses return to
the pools. A new leader starts its clocks afresh, so a failover only ever delays a reclaim.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from common import keys
from common.loop import Reconciler
from common.models import Endpoint
from store import StoreError

from .errors import ApiError, NotFound
from .state import ClusterState

log = logging.getLogger("netmaster.reclaim")

# The default grace: an agent restart or upgrade must never lose allocations.
DEFAULT_GRACE = 1800.0


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    due: list[Endpoint]  # endpoints to reclaim now
    missing_since: dict[str, float] = field(default_factory=dict)  # the clocks to keep


def plan_reclaim(
    registered: Iterable[str],
    endpoints: Iterable[Endpoint],
    missing_since: Mapping[str, float],
    now: float,
    grace: float,
) -> ReclaimPlan:
    """Which endpoints to reclaim, and the new per-host clocks.

    A host's clock starts when it is first seen missing while it has endpoints, and is
    dropped as soon as it is registered again or has no endpoint left. Endpoints with no
    host are never reclaimed; nor is anything when ``grace <= 0`` (reclaim is disabled).
    """
    live = set(registered)
    clocks: dict[str, float] = {}
    due: list[Endpoint] = []
    for ep in endpoints:
        if not ep.host or ep.host in live:
            continue
        since = clocks.setdefault(ep.host, missing_since.get(ep.host, now))
        if grace > 0 and now - since >= grace:
            due.append(ep)
    return ReclaimPlan(due, clocks)


def default_interval(grace: float) -> float:
    """How often the leader looks: a few seconds, sooner for a short grace."""
    return min(5.0, max(0.5, grace / 4))


class Reclaimer:
    """Each tick, if this process holds the leader lease: plan, then reclaim what is due."""

    def __init__(
        self,
        state: ClusterState,
        leadership: Callable[[], tuple[bool, int]],
        grace: float,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.leadership = leadership
        self.grace = grace
        self.interval = interval or default_interval(grace)
        self._clock = clock
        self._missing: dict[str, float] = {}
        self._term: int | None = None
        self._no_hosts_logged = False
        self._loop = Reconciler("netmaster-reclaim", self._pass, interval=self.interval)

    def tick(self) -> list[Endpoint]:
        """One pass; returns the endpoints reclaimed."""
        holder, term = self.leadership()
        if not holder or term != self._term:
            self._missing = {}  # a new tenure starts its clocks afresh
            self._term = term if holder else None
        if not holder or self.grace <= 0:
            return []
        try:
            # Endpoints first: a host seen registered in the later read was alive after them.
            endpoints = self.state.endpoints.list()
            hosts = [kv.key[len(keys.HOSTS) :] for kv in self.state.store.range(keys.HOSTS).kvs]
        except (ApiError, StoreError) as e:
            log.debug("reclaim: cannot read the cluster state: %s", e)
            return []
        if not hosts:
            # No agent registers at all (single host, or agents of an older version): an
            # empty list says nothing about any host being gone.
            if not self._no_hosts_logged:
                log.info("reclaim: no host is registered; nothing is reclaimed until one is")
                self._no_hosts_logged = True
            self._missing = {}
            return []
        self._no_hosts_logged = False
        now = self._clock()
        plan = plan_reclaim(hosts, endpoints, self._missing, now, self.grace)
        self._missing = plan.missing_since
        done = []
        for ep in plan.due:
            if self.leadership() != (True, term):
                break
            try:
                self.state.endpoints.delete(ep.endpointID, ep.host)
            except NotFound:
                continue  # deleted meanwhile
            except ApiError as e:
                log.info("reclaim: endpoint %s of host %s kept: %s", ep.endpointID, ep.host, e)
                continue
            addresses = ", ".join(a for a in (ep.ipAddress, ep.ipv6Address) if a) or "none"
            log.warning(
                "reclaimed endpoint %s (network %s:%s) of host %s, gone for %.0fs: "
                "released addresses %s",
                ep.endpointID,
                ep.tenantName,
                ep.networkName,
                ep.host,
                now - plan.missing_since[ep.host],
                addresses,
            )
            done.append(ep)
        return done

    def _pass(self) -> None:
        self.tick()

    def start(self) -> None:
        """Tick every ``interval`` in a thread of its own (never, with a grace of 0)."""
        if self.grace > 0:
            self._loop.start()

    def request_stop(self) -> None:
        self._loop.stop()

    def stop(self, timeout: float = 10.0) -> None:
        self._loop.stop()
        self._loop.join(timeout)
