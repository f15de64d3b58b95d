"""The master's REST API (Contiv object names under /api/v1/) as a Flask application factory.

The per-object routes come from the table in kinds.py (handlers in routes.py); leader
forwarding is in forwarding.py. This module wires them up with the error handlers, the
allocation API for plugins and the meta routes.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from common.jsonbody import READ_LIMIT, too_large
from common.kinds import NETWORKS
from common.models import (
    AddressRelease,
    AddressRequest,
    Endpoint,
    EndpointContainer,
    EndpointRequest,
    PoolBinding,
    PoolRequest,
)
from common.records import NetworkRecord

from . import __version__
from .auth import TokenTable, install
from .election import Elector
from .errors import ApiError
from .forwarding import Forwarder, mark_served_by
from .kinds import parse_key
from .metrics import allocation, instrument, metrics_response
from .openapi import API, openapi_document
from .routes import Api, json_response, read_body, register_kinds
from .state import ClusterState
from .validate import parse_body


def create_app(
    state: ClusterState,
    config: dict[str, Any] | None = None,
    elector: Elector | None = None,
    session: Any = None,
    tokens: TokenTable | None = None,
) -> Flask:
    """The app; with an ``elector`` it forwards /api/v1/ requests to the leader when it follows.

    ``session`` (a requests.Session-like object) is what it forwards with. With ``tokens``
    every request but the public ones needs a bearer token of a role allowed the route
    (auth.py); without, anyone who reaches the app may call anything.
    """
    app = Flask("netmaster")
    app.config["MAX_CONTENT_LENGTH"] = READ_LIMIT  # see common.jsonbody
    app.config.update(config or {})
    app.url_map.strict_slashes = False
    api = Api(app)
    route = api.route
    self_url = str(app.config.get("CONTROL_URL") or "")
    forward = Forwarder(elector, self_url, session) if elector is not None else None

    @app.errorhandler(ApiError)
    def api_error(e: ApiError) -> Response:
        return json_response(e.to_json(), e.status)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        reason = e.description or e.name
        if e.code == 404:
            reason = f"no such API route {request.method} {request.path}"
        elif e.code == 405:
            reason = f"method {request.method} is not allowed on {request.path}"
        elif e.code == 413:
            reason = too_large()
        return json_response(
            {"error": reason, "object": request.path, "reason": reason}, e.code or 500
        )

    @app.errorhandler(Exception)
    def internal_error(e: Exception) -> Response:
        app.logger.exception("unhandled error on %s %s", request.method, request.path)
        reason = f"internal error: {type(e).__name__}: {e}"
        return json_response({"error": reason, "object": request.path, "reason": reason}, 500)

    instrument(app)  # first: the requests the hooks below answer are counted too
    if tokens is not None:
        install(app, tokens)  # a follower forwards only what the caller may do

    @app.before_request
    def to_leader() -> Response | None:
        return forward.to_leader() if forward is not None else None

    @app.after_request
    def served_by(resp: Response) -> Response:
        return mark_served_by(resp, self_url)

    @route("/version", "GET", "Version of this master")
    def version() -> Response:
        return json_response({"version": __version__, "backend": state.backend})

    @route(f"{API}/leader", "GET", "Which master leads, this master's role and the lease TTL")
    def leader() -> Response:
        if elector is None:
            me = {"id": "", "url": self_url, "role": "standalone", "holdsLease": False}
            return json_response({"leader": None, "self": me, "leaderTTL": None})
        return json_response(elector.status())

    # Not under /api/v1/: a follower answers for itself, it does not forward this.
    @route("/stats/commits", "GET", "The group commit's batches in the worker that answers")
    def commit_stats() -> Response:
        stats = state.commit_stats()
        return json_response({"worker": os.getpid(), "groupCommit": bool(stats), **stats})

    # Not under /api/v1/ either; a reader's token, like every other GET (auth.py).
    @route("/metrics", "GET", "Prometheus metrics of this master (all of its workers)")
    def prometheus() -> Response:
        return metrics_response()

    # Tenants, networks, endpoint groups, globals and endpoints: one table (kinds.KINDS).
    register_kinds(api, state)

    # --- allocation API for plugins ---
    @route(
        f"{API}/alloc/endpoints",
        "POST",
        "Create an endpoint and allocate its addresses (idempotent by endpointID)",
        EndpointRequest,
        Endpoint,
    )
    def alloc_endpoint() -> Response:
        body = read_body("endpoint")
        req = parse_body(EndpointRequest, body, f"endpoint {body.get('endpointID', '')}".strip())
        ep, created = state.endpoints.create(req)
        if created:
            allocation("endpoint", "allocate")
        return json_response(ep.dump(), 201 if created else 200)

    @route(
        f"{API}/alloc/endpoints/<endpoint_id>",
        "DELETE",
        "Delete an endpoint and release its addresses",
        response=Endpoint,
    )
    def free_endpoint(endpoint_id: str) -> Response:
        ep = state.endpoints.delete(endpoint_id)
        allocation("endpoint", "release")
        return json_response(ep.dump())

    @route(
        f"{API}/alloc/endpoints/<endpoint_id>/container",
        "PUT",
        "Record the container an endpoint belongs to: its ID, name and labels",
        EndpointContainer,
        Endpoint,
    )
    def endpoint_container(endpoint_id: str) -> Response:
        obj = f"endpoint {endpoint_id}"
        info = parse_body(EndpointContainer, read_body(obj), obj)
        return json_response(state.endpoints.set_container(endpoint_id, info).dump())

    @route(
        f"{API}/alloc/networks/<key>",
        "GET",
        "A network as agents plug into it: its config, with the tag and pools the master chose",
        response=NetworkRecord,
    )
    def network_record(key: str) -> Response:
        record, _ = state.networks.read(*parse_key(NETWORKS, key))
        return json_response(record.model_dump(by_alias=True, mode="json"))

    @route(
        f"{API}/alloc/pools", "POST", "Reserve an address pool (Docker RequestPool)", PoolRequest
    )
    def alloc_pool() -> Response:
        return json_response(
            state.pools.request_pool(parse_body(PoolRequest, read_body("pool"), "pool request"))
        )

    @route(
        f"{API}/alloc/pool-bindings",
        "POST",
        "Bind a docker network's pool id to its network's pool (Docker CreateNetwork)",
        PoolBinding,
    )
    def bind_pool() -> Response:
        req = parse_body(PoolBinding, read_body("pool binding"), "pool binding")
        return json_response({"poolID": req.poolID, "bookedIn": state.pools.bind_pool(req)})

    @route(
        f"{API}/alloc/pools/<path:pool_id>",
        "DELETE",
        "Release an address pool (Docker ReleasePool)",
    )
    def free_pool(pool_id: str) -> Response:
        state.pools.release_pool(pool_id)
        return json_response({"released": pool_id})

    @route(
        f"{API}/alloc/addresses",
        "POST",
        "Allocate an address (idempotent by owner)",
        AddressRequest,
    )
    def alloc_address() -> Response:
        req = parse_body(AddressRequest, read_body("address request"), "address request")
        address = state.pools.request_address(req)
        allocation("address", "allocate")
        return json_response({"address": address})

    @route(f"{API}/alloc/addresses/release", "POST", "Release an address", AddressRelease)
    def free_address() -> Response:
        req = parse_body(AddressRelease, read_body("address release"), "address release")
        released = state.pools.release_address(req)
        if released:
            allocation("address", "release")
        return json_response({"released": released})

    @route(f"{API}/openapi.json", "GET", "This API's OpenAPI 3.1 document")
    def openapi() -> Response:
        return json_response(openapi_document(api.docs))

    return app
