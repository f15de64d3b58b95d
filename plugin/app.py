"""The Docker remote-driver HTTP API (NetworkDriver + IpamDriver) as a Flask application factory."""

from __future__ import annotations

import time

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from common.jsonbody import READ_LIMIT, too_large

from .driver import Driver
from .ipam_routes import ipam_blueprint
from .master_client import MasterError
from .metrics import AgentMetrics
from .network_routes import network_blueprint, reply
from .options import DriverError
from .schemas import RequestError


def create_app(driver: Driver, metrics: AgentMetrics | None = None) -> Flask:
    app = Flask("netplugin")
    app.config["MAX_CONTENT_LENGTH"] = READ_LIMIT  # see common.jsonbody
    app.register_blueprint(network_blueprint(driver))
    app.register_blueprint(ipam_blueprint(driver))
    if metrics is not None:
        instrument(app, metrics)

    @app.post("/Plugin.Activate")
    def activate() -> Response:
        return reply({"Implements": ["NetworkDriver", "IpamDriver"]})

    @app.errorhandler(Exception)
    def error(e: Exception) -> Response:
        """The single error path: every failure becomes Docker's error shape. Docker writes
        the method before the message ("NetworkDriver.CreateEndpoint: ..."), so the message
        does not repeat it."""
        method = request.path.lstrip("/")
        interface = method.partition(".")[0]
        if isinstance(e, HTTPException):
            status = e.code or 500
            if status == 404:
                message = f"unknown plugin method {method!r}"
            elif status == 413:
                message = too_large()
            else:
                message = f"{request.method} {request.path}: {e.description or e.name}"
        elif isinstance(e, RequestError | DriverError | MasterError):
            status = e.status
            message = str(e)
        else:
            # A bug, not a refusal: say so, so that it is never mistaken for one.
            status = 500
            app.logger.exception("unhandled error in %s", method)
            message = f"internal error: {type(e).__name__}: {e}"
        if not 400 <= status <= 599:
            status = 500
        if status >= 500:
            app.logger.error("%s: %s", method, message)
        body = {"Err": message}
        if interface == "IpamDriver":
            body["Error"] = message  # IPAM replies are read for "Error" on 200, "Err" otherwise
        return reply(body, status)

    return app


def instrument(app: Flask, metrics: AgentMetrics) -> None:
    """Count and time every call by its Docker method (an unknown one as "unknown", so a
    caller cannot make up label values)."""

    @app.before_request
    def started() -> None:
        g.started = time.perf_counter()

    @app.after_request
    def finished(resp: Response) -> Response:
        started = g.get("started")
        if started is not None:
            method = request.path[1:] if request.url_rule is not None else "unknown"
            metrics.docker_call(method, resp.status_code < 400, time.perf_counter() - started)
        return resp
