"""Which container each of this host's endpoints belongs to: its ID, name and labels, read
from dockerd and told to the master (service selectors match the labels; inspect shows the
container). Docker's driver calls never say: the endpoint is made before the container's
labels or name reach the driver, so the agent asks dockerd once the container starts.

``reports`` is pure: from dockerd's container list (GET /containers/json, which carries each
container's endpoints, labels and names in one call) and the endpoints that still lack their
container, what to tell the master. ContainerReporter is thin: it wakes on dockerd's
container start and network connect events and on changes of the cluster's endpoints,
lists the containers only while an endpoint of this host lacks its container, and retries
what did not take.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from common.loop import Reconciler
from common.models import Endpoint, EndpointContainer

log = logging.getLogger(__name__)

RETRY = 0.5  # seconds between tries while an endpoint's container is not listed yet
GIVE_UP = 60.0  # an endpoint pending this long waits for dockerd's next event to be tried
WAKING = {("container", "start"), ("network", "connect")}  # dockerd's events that retry all


def reports(
    pending: Mapping[str, Endpoint], containers: Iterable[Mapping[str, Any]]
) -> dict[str, EndpointContainer]:
    """endpoint id -> what to record for it, for the ``pending`` endpoints some container
    of dockerd's list (its /containers/json entries) has."""
    out: dict[str, EndpointContainer] = {}
    for c in containers:
        networks = (c.get("NetworkSettings") or {}).get("Networks") or {}
        for net in networks.values():
            eid = (net or {}).get("EndpointID") or ""
            if eid not in pending:
                continue
            names = c.get("Names") or []
            info = EndpointContainer(
                containerID=str(c.get("Id") or ""),
                containerName=str(names[0]).lstrip("/") if names else "",
                labels={str(k): str(v) for k, v in (c.get("Labels") or {}).items()},
            )
            ep = pending[eid]
            if (ep.containerID, ep.containerName, ep.labels) != (
                info.containerID,
                info.containerName,
                info.labels,
            ):
                out[eid] = info
    return out


class ContainerReporter(Reconciler):
    """Keeps the master told of the containers of this host's endpoints."""

    def __init__(
        self,
        host: str,
        endpoints: Callable[[], Mapping[str, Endpoint]],
        containers: Callable[[], list[dict[str, Any]]],
        report: Callable[[str, EndpointContainer], object],
    ) -> None:
        self.host = host
        self.endpoints = endpoints  # the cluster's endpoints (the agent's mirror)
        self.containers = containers  # dockerd's GET /containers/json?all=1
        self.report = report  # the master's PUT alloc/endpoints/ID/container
        self._told: dict[str, EndpointContainer] = {}  # what we told the master last
        self._since: dict[str, float] = {}  # endpoint -> when it was first seen pending
        self._reset = False
        super().__init__(
            "container reporter",
            lambda: RETRY if self.pass_once() else None,
            expected=(Exception,),  # dockerd away: its containers cannot be listed
        )

    def on_event(self, event: Mapping[str, Any] | None) -> None:
        """One of dockerd's events (plugin.docker_events); None: its stream restarted."""
        if event is None or (event.get("Type"), event.get("Action")) in WAKING:
            self.retry_all()

    def retry_all(self) -> None:
        """Try every pending endpoint again, those given up on too (a docker event: a
        container started or joined a network, or the stream came back)."""
        self._reset = True  # the reporting thread clears _since, as it reads it
        self.poke()

    def pending(self) -> dict[str, Endpoint]:
        """This host's endpoints that lack their container (and were not told already)."""
        now = time.monotonic()
        if self._reset:
            self._reset = False
            self._since.clear()
        out = {}
        for e in self.endpoints().values():
            if e.host != self.host or e.containerID:
                self._told.pop(e.endpointID, None)
                continue
            first = self._since.setdefault(e.endpointID, now)
            if now - first < GIVE_UP:
                out[e.endpointID] = e
        known = self.endpoints()
        for gone in [k for k in self._since if k not in known]:
            del self._since[gone]
        return out

    def pass_once(self) -> int:
        """One pass: list dockerd's containers if an endpoint needs it, report; returns how
        many endpoints are still pending."""
        pending = self.pending()
        if not pending:
            return 0
        for eid, info in reports(pending, self.containers()).items():
            if self._told.get(eid) == info:
                continue
            try:
                self.report(eid, info)
                self._told[eid] = info
                log.info(
                    "endpoint %s: container %s (%s), %d label(s)",
                    eid[:12],
                    info.containerName,
                    info.containerID[:12],
                    len(info.labels),
                )
            except Exception as e:
                log.warning("endpoint %s: cannot record its container: %s", eid[:12], e)
        return len([e for e in pending if e not in self._told])
