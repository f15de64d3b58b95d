"""The master's Prometheus metrics (GET /metrics; README "Monitoring").

gunicorn serves the API from several worker processes, so the metrics use prometheus_client's
multiprocess mode: netmaster makes a private, empty directory at start
(``prepare_multiprocess_dir``, before any worker exists), every worker writes its samples
there, and /metrics (in whichever worker answers) adds them all up: the numbers are the
master's, not one worker's. The arbiter removes the live gauges of a worker that exited
(``worker_exited``) and the directory when it stops.

prometheus_client picks its storage (memory or that directory) when it is first imported,
so nothing in netmaster imports it before ``prepare_multiprocess_dir`` has run: the metrics
are made on first use, in the worker. Without the directory (tests, an app made in process)
they live in this process's memory.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, g, request

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# REST calls take from under a millisecond (a cached GET) to seconds (a store failover).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
UNMATCHED = "<unmatched>"  # the route label of a request no route matches


class MasterMetrics:
    """The metrics, made in the process that uses them."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()  # in memory mode; multiprocess collects files
        r = self.registry
        self.requests = Counter(
            "netmaster_http_requests_total",
            "REST requests, by method, route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.seconds = Histogram(
            "netmaster_http_request_duration_seconds",
            "Time to answer a REST request, by method and route template",
            ["method", "route"],
            registry=r,
            buckets=BUCKETS,
        )
        self.allocations = Counter(
            "netmaster_allocations_total",
            "Endpoints and addresses allocated and released through the allocation API",
            ["kind", "op"],
            registry=r,
        )
        self.txn_retries = Counter(
            "netmaster_store_txn_retries_total",
            "Store transactions decided again because the state moved under them",
            registry=r,
        )
        self.txn_conflicts = Counter(
            "netmaster_store_txn_conflicts_total",
            "Requests refused (409) after too many concurrent updates of what they change",
            registry=r,
        )
        self.leader = Gauge(
            "netmaster_leader",
            "1 while this master leads, else 0",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.leader_changes = Counter(
            "netmaster_leader_changes_total",
            "Times this master took the leader lease (acquired) or stopped holding it (lost)",
            ["change"],
            registry=r,
        )


_lock = threading.Lock()
_metrics: MasterMetrics | None = None


def metrics() -> MasterMetrics:
    """This process's metrics, made on first use."""
    global _metrics
    m = _metrics
    if m is None:
        with _lock:
            if _metrics is None:
                _metrics = MasterMetrics()
            m = _metrics
    return m


# --- the hooks the rest of the master calls ---


def txn_retried() -> None:
    metrics().txn_retries.inc()


def txn_conflict() -> None:
    metrics().txn_conflicts.inc()


def allocation(kind: str, op: str) -> None:
    """``kind`` endpoint | address, ``op`` allocate | release."""
    metrics().allocations.labels(kind, op).inc()


def leading(now: bool) -> None:
    metrics().leader.set(1 if now else 0)


def leader_change(change: str) -> None:
    """``change`` acquired | lost."""
    metrics().leader_changes.labels(change).inc()


def exposition() -> bytes:
    """Every worker's samples added up (multiprocess mode), or this process's."""
    from prometheus_client import CollectorRegistry, generate_latest

    m = metrics()
    path = os.environ.get(MULTIPROC_ENV)
    if not path:
        return generate_latest(m.registry)
    from prometheus_client.multiprocess import MultiProcessCollector

    registry: CollectorRegistry = CollectorRegistry()
    MultiProcessCollector(registry, path=path)
    return generate_latest(registry)


def content_type() -> str:
    from prometheus_client import CONTENT_TYPE_LATEST

    return str(CONTENT_TYPE_LATEST)


def instrument(app: Flask) -> None:
    """Count and time every request by method, route template (never the raw URL) and
    status. Install it before any other before_request hook (auth, forwarding), so the
    requests those answer are counted too."""

    @app.before_request
    def started() -> None:
        g.metrics_started = time.perf_counter()

    @app.after_request
    def finished(resp: Response) -> Response:
        started = g.get("metrics_started")
        if started is not None:
            rule = request.url_rule.rule if request.url_rule is not None else UNMATCHED
            m = metrics()
            m.requests.labels(request.method, rule, str(resp.status_code)).inc()
            m.seconds.labels(request.method, rule).observe(time.perf_counter() - started)
        return resp


def metrics_response() -> Response:
    return Response(exposition(), content_type=content_type())


# --- the arbiter's part (master/cli.py) ---


def prepare_multiprocess_dir() -> str:
    """Make a private, empty directory for the workers' samples and name it in the
    environment the workers inherit; removed when netmaster exits. Call before gunicorn
    forks and before anything imports prometheus_client."""
    path = tempfile.mkdtemp(prefix="netmaster-metrics-")  # mode 0700, new: nothing stale
    os.environ[MULTIPROC_ENV] = path
    arbiter = os.getpid()

    def remove() -> None:
        if os.getpid() == arbiter:  # not in a worker that exits (it inherited the hook)
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return path


def worker_exited(server: Any, worker: Any) -> None:
    """gunicorn's child_exit (in the arbiter): drop the exited worker's live gauges."""
    path = os.environ.get(MULTIPROC_ENV)
    if path:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid, path)
