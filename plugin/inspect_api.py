"""The operator's window into an agent: a small REST API of GETs, JSON out (Contiv's
netplugin served the same on :9090), and the agent's Prometheus metrics.

    GET /inspect/driver     a summary of everything below, the version and the uptime
    GET /inspect/endpoints  this host's endpoints: addresses, MAC, switch port, veths
    GET /inspect/tunnels    this host's VTEP, its peers' tunnel ports, the VLAN uplink
    GET /inspect/cluster    the mirror of the cluster store: revision, lag, resync, watches
    GET /inspect/flows      expected flows vs the switch's, per table, and the difference
    GET /inspect/teardown   deleted endpoints whose port is still being handled; the port pool
                            (?wait=SECONDS: once they are, or that long)
    GET /metrics            Prometheus text format (plugin.metrics)

Served on a unix socket (mode 0600: root's) and, with --api-listen, on TCP too; the TCP
listener refuses anything but GET. The handlers take the agent's lock only to copy its
state, the mirrors' locks only to copy theirs; the store and the switch are read outside
every lock.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException
from werkzeug.serving import ThreadedWSGIServer, make_server

from datapath.host import HostDatapath
from datapath.ofapp import FlowController
from datapath.ofwire import ReconcileError
from datapath.report import DEFAULT_CAP, flow_report, snapshot
from store import StoreError

from .cluster import ClusterView, peers
from .inspect_views import (
    MirrorState,
    cluster_view,
    driver_view,
    endpoints_view,
    tunnels_view,
)
from .metrics import CONTENT_TYPE, AgentMetrics
from .policy_view import group_states
from .server import json_errors

log = logging.getLogger("netplugin")

READS = frozenset({"GET", "HEAD"})


def _version() -> str:
    try:
        return version("netplugin")
    except PackageNotFoundError:  # a source tree without an install
        return "0.1.0"


@dataclass
class AgentStatus:
    """What the daemon tells the window as it goes: when it started and last resynced."""

    started: float = field(default_factory=time.time)
    started_mono: float = field(default_factory=time.monotonic)
    last_resync: float | None = None
    resync_result: dict[str, int] | None = None

    def resynced(self, result: dict[str, int]) -> None:
        self.resync_result, self.last_resync = dict(result), time.time()


@dataclass
class Window:
    """Where the answers come from: the agent's parts."""

    agent: HostDatapath
    controller: FlowController
    view: ClusterView
    host: str
    vtep_ip: str = ""
    status: AgentStatus = field(default_factory=AgentStatus)
    clock: Callable[[], float] = time.time

    # --- the sections ---

    def endpoints(self) -> list[dict[str, Any]]:
        records = {e.endpointID: e for e in self.view.endpoints.values().values()}
        return endpoints_view(snapshot(self.agent), records)

    def _peers(self) -> dict[str, str]:
        v = self.view
        return peers(self.host, v.hosts.values(), v.vteps.values(), v.endpoints.values().values())

    def tunnels(self) -> dict[str, Any]:
        return tunnels_view(snapshot(self.agent), self.vtep_ip, self._peers())

    def mirrors(self) -> list[MirrorState]:
        return [
            MirrorState(
                m.prefix, len(m.values()), m.revision, m.synced.is_set(), m.restarts, m.last_read
            )
            for m in self.view.mirrors()
        ]

    def cluster(self) -> dict[str, Any]:
        mirrors = self.mirrors()  # first: the store's revision is then at least theirs
        store_revision: int | None = None
        store_error: str | None = None
        try:
            store_revision = self.view.store.revision()
        except StoreError as e:
            store_error = str(e)
        v = self.view
        _, unresolved = group_states(
            v.groups.values().values(), v.rules.values().values(), v.networks.values().values()
        )
        return cluster_view(
            mirrors,
            store_revision,
            store_error,
            self.status.last_resync,
            self.status.resync_result,
            unresolved,
            self.clock(),
        )

    def flows(self, cap: int = DEFAULT_CAP) -> dict[str, Any]:
        """The controller's desired flows (the agent's model, as sent) against a read-back
        of the switch; ``settled`` is false while a change was on its way during the read
        (its flows may show as missing or extra for that moment)."""
        try:
            found = self.controller.read_back()
        except ReconcileError as e:
            return {"connected": True, "error": str(e)}
        if found is None:
            return {"connected": False, "error": "no switch is connected to the controller"}
        desired, actual, generation = found
        last = self.controller.last_reconcile
        done = last.generation if last is not None else 0
        now = self.controller.snapshot()["generation"]
        return {
            "connected": True,
            "generation": generation,
            "reconciledGeneration": done,
            "settled": done >= generation == now,
            **flow_report(desired, actual, cap),
        }

    def teardown(self, wait: float = 0.0) -> dict[str, Any]:
        """The ports and veths of deleted endpoints not handled yet (after waiting up to
        ``wait`` seconds for them), the removals done and failed since start, and the port
        pool's state (None without one)."""
        t, pool = self.agent.teardown, self.agent.ports.pool
        if wait > 0:
            t.settle(wait)
        state = pool.state() if pool is not None else None
        costs = pool.costs.state() if pool is not None else None  # which pair a CNI pod gets
        return {
            "pending": t.pending(),
            "done": t.done,
            "failed": t.failed,
            "pool": state,
            "costs": costs,
        }

    def driver(self) -> dict[str, Any]:
        return driver_view(
            version=_version(),
            uptime=time.monotonic() - self.status.started_mono,
            host=self.host,
            snap=snapshot(self.agent),
            switch=self.controller.snapshot(),
            tunnels=self.tunnels(),
            cluster=self.cluster(),
            flows=self.flows(cap=0),
        )


def _json(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload, indent=1), status=status, mimetype="application/json")


def _bounded(
    name: str, kind: Callable[[str], float], default: float, high: float, unit: str
) -> tuple[float, Response | None]:
    """The request's query argument ``name`` (0 to ``high``), or the 400 that names it."""
    try:
        value = kind(request.args.get(name, str(default)))
    except ValueError:
        value = -1
    if 0 <= value <= high:
        return value, None
    reason = f"{name} must be a number of {unit} from 0 to {high:g}"
    return value, _json({"error": reason, "object": name, "reason": reason}, 400)


def create_inspect_app(
    window: Window, metrics: AgentMetrics | None = None, read_only: bool = False
) -> Flask:
    """The window's app; ``read_only`` (the TCP listener) answers only GETs."""
    app = Flask("netplugin-inspect")
    sections: dict[str, Callable[[], Any]] = {
        "driver": window.driver,
        "endpoints": window.endpoints,
        "tunnels": window.tunnels,
        "cluster": window.cluster,
    }

    @app.before_request
    def only_reads() -> Response | None:
        if read_only and request.method not in READS:
            reason = f"method {request.method} is not allowed on the TCP listener (GET only)"
            return _json({"error": reason, "object": request.path, "reason": reason}, 405)
        return None

    @app.get("/inspect/<section>")
    def inspect(section: str) -> Response:
        if section == "flows":
            cap, refused = _bounded("cap", int, DEFAULT_CAP, 10_000, "flows")
            return refused or _json(window.flows(int(cap)))
        if section == "teardown":
            wait, refused = _bounded("wait", float, 0, 60, "seconds")
            return refused or _json(window.teardown(wait))
        if section not in sections:
            known = ", ".join([*sections, "flows", "teardown"])
            reason = f"no section {section!r}; the sections are {known}"
            return _json({"error": reason, "object": request.path, "reason": reason}, 404)
        return _json(sections[section]())

    @app.get("/inspect")
    def index() -> Response:
        return _json({"sections": [*sections, "flows", "teardown"], "metrics": "/metrics"})

    @app.get("/metrics")
    def prometheus() -> Response:
        if metrics is None:
            reason = "this agent has no metrics"
            return _json({"error": reason, "object": "/metrics", "reason": reason}, 404)
        return Response(metrics.exposition(), mimetype=None, content_type=CONTENT_TYPE)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        reason = e.description or e.name
        if e.code == 404:
            reason = f"no such route {request.method} {request.path}"
        elif e.code == 405:
            reason = f"method {request.method} is not allowed on {request.path}"
        return _json({"error": reason, "object": request.path, "reason": reason}, e.code or 500)

    @app.errorhandler(Exception)
    def internal(e: Exception) -> Response:
        log.exception("inspect %s failed", request.path)
        reason = f"internal error: {type(e).__name__}: {e}"
        return _json({"error": reason, "object": request.path, "reason": reason}, 500)

    return app


def parse_listen(value: str) -> tuple[str, int]:
    """--api-listen HOST:PORT ([v6]:PORT too); ValueError names what is wrong."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host, int(port)


def parse_error(reason: str) -> dict[str, Any]:
    """The window's error shape, for a request its server could not parse."""
    return {"error": f"request: {reason}", "object": "request", "reason": reason}


def serve_tcp(listen: str, app: Any) -> ThreadedWSGIServer:
    """The read-only TCP listener, serving from a thread of its own."""
    host, port = parse_listen(listen)
    server = make_server(host, port, app, threaded=True, request_handler=json_errors(parse_error))
    threading.Thread(target=server.serve_forever, name="inspect-tcp", daemon=True).start()
    return server
