"""The agent's Prometheus metrics (GET /metrics on its inspect API; README "Monitoring").

One registry per agent (not the process-wide default), so tests make as many as they like.
The Docker calls pay one counter increment and one histogram observation each, with no lock
held across I/O; everything that can be read from the agent's state when scraped (peers,
local endpoints, watch restarts) is read then, at no cost to the hot path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.loop import Reconciler
from datapath.ofstate import ReconcileStats
from datapath.portpool import PortPool
from datapath.teardown import Teardown

CONTENT_TYPE = CONTENT_TYPE_LATEST  # what generate_latest writes
# Docker calls take from well under a millisecond (Activate) to seconds (a CreateEndpoint
# waiting for the master and for its flows on the switch).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _StateCollector(Collector):
    """Gauges and counters read from the agent's state at scrape time."""

    def __init__(self) -> None:
        self.counts: Callable[[], tuple[int, int]] | None = None  # (endpoints, peers)
        self.restarts: Callable[[], Iterable[tuple[str, int]]] | None = None  # (prefix, n)
        self.loops: Iterable[Reconciler] = ()
        self.teardown: Teardown | None = None
        self.pool: PortPool | None = None

    def collect(self) -> Iterator[Metric]:
        if self.counts is not None:
            endpoints, peers = self.counts()
            yield GaugeMetricFamily(
                "netplugin_local_endpoints", "Endpoints on this host's bridge", value=endpoints
            )
            yield GaugeMetricFamily(
                "netplugin_peers", "Other hosts this host has a VXLAN tunnel to", value=peers
            )
        if self.restarts is not None:
            family = CounterMetricFamily(
                "netplugin_watch_restarts",
                "Times a mirror of the cluster store read its prefix again after its watch "
                "ended (compacted history, the store unreachable)",
                labels=["prefix"],
            )
            for prefix, n in self.restarts():
                family.add_metric([prefix], n)
            yield family
        if self.teardown is not None:
            yield GaugeMetricFamily(
                "netplugin_teardown_pending",
                "Deleted endpoints whose switch port and veth are still being removed",
                value=len(self.teardown.pending()),
            )
            yield CounterMetricFamily(
                "netplugin_teardown_failures",
                "Removals of a deleted endpoint's port and veth that failed (the audit or the "
                "next start removes what they left)",
                value=self.teardown.failed,
            )
        if self.pool is not None:
            pool = self.pool.state()
            yield GaugeMetricFamily(
                "netplugin_port_pool_free",
                "Switch ports plugged ahead of demand, ready for new endpoints",
                value=pool["free"],
            )
            yield CounterMetricFamily(
                "netplugin_port_pool_missed",
                "New endpoints that found the port pool empty (they waited for a batch of "
                "ports to be made)",
                value=pool["missed"],
            )
            yield CounterMetricFamily(
                "netplugin_port_pool_reused",
                "Deleted endpoints' ports given back to the pool",
                value=pool["reused"],
            )
        passes = CounterMetricFamily(
            "netplugin_loop_passes", "Passes a background loop finished", labels=["loop"]
        )
        failures = CounterMetricFamily(
            "netplugin_loop_failures", "Passes of a background loop that failed", labels=["loop"]
        )
        for loop in self.loops:
            passes.add_metric([loop.name], loop.passes)
            failures.add_metric([loop.name], loop.failures)
        yield from (passes, failures) if self.loops else ()


class AgentMetrics:
    """The agent's metrics and the hooks that feed them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.docker_requests = Counter(
            "netplugin_docker_requests_total",
            "Docker plugin API calls, by method and outcome (ok: a 2xx answer)",
            ["method", "outcome"],
            registry=r,
        )
        self.docker_seconds = Histogram(
            "netplugin_docker_request_duration_seconds",
            "Time to answer a Docker plugin API call",
            ["method", "outcome"],
            registry=r,
            buckets=BUCKETS,
        )
        self.reconciles = Counter(
            "netplugin_reconciles_total",
            "Flow reconciles: full (the switch read back and diffed) or delta (flow-mods only)",
            ["kind"],
            registry=r,
        )
        self.flows_changed = Counter(
            "netplugin_flows_changed_total",
            "Flow-mods the reconciles sent: added (replaced ones included), replaced, deleted",
            ["op"],
            registry=r,
        )
        self.audits = Counter(
            "netplugin_audits_total", "Audits of the switch's flows and iptables", registry=r
        )
        self.audit_repairs = Counter(
            "netplugin_audit_repairs_total",
            "Flows an audit found missing, changed or extra on the switch and rewrote",
            registry=r,
        )
        self._docker: dict[tuple[str, bool], tuple[Any, Any]] = {}  # the labelled children
        self._state = _StateCollector()
        r.register(self._state)
        self._lock = threading.Lock()
        self._audit_generation: int | None = None  # the audit's reconcile, until it is done

    # --- hooks ---

    def docker_call(self, method: str, ok: bool, seconds: float) -> None:
        children = self._docker.get((method, ok))
        if children is None:  # once per method and outcome: labels() takes a lock
            outcome = "ok" if ok else "error"
            children = self._docker[(method, ok)] = (
                self.docker_requests.labels(method, outcome),
                self.docker_seconds.labels(method, outcome),
            )
        children[0].inc()
        children[1].observe(seconds)

    def audit_started(self, generation: int | None) -> None:
        """An audit asked for the full reconcile of ``generation`` (None: the agent was not
        ready, nothing was audited)."""
        if generation is None:
            return
        self.audits.inc()
        with self._lock:
            self._audit_generation = generation

    def reconciled(self, stats: ReconcileStats) -> None:
        """FlowController.on_reconcile: one job done."""
        self.reconciles.labels("full" if stats.full else "delta").inc()
        self.flows_changed.labels("added").inc(stats.added)
        self.flows_changed.labels("replaced").inc(stats.replaced)
        self.flows_changed.labels("deleted").inc(stats.deleted)
        if not stats.full:
            return
        with self._lock:
            audit = self._audit_generation
            if audit is None or stats.generation < audit:
                return
            self._audit_generation = None
        self.audit_repairs.inc(stats.added + stats.deleted)

    def watch_state(
        self,
        counts: Callable[[], tuple[int, int]],
        restarts: Callable[[], Iterable[tuple[str, int]]],
        loops: Iterable[Reconciler] = (),
        teardown: Teardown | None = None,
        pool: PortPool | None = None,
    ) -> None:
        """Read (local endpoints, peers), each mirror's watch restarts, each loop's passes
        and failures, the teardowns pending and failed, and the port pool when scraped."""
        self._state.counts = counts
        self._state.restarts = restarts
        self._state.loops = loops
        self._state.teardown = teardown
        self._state.pool = pool

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)
