"""The master's REST API (Contiv object names under /api/v1/) as a Flask application factory."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request
from pydantic import BaseModel
from werkzeug.exceptions import HTTPException

from common.models import (
    AddressRelease,
    AddressRequest,
    Endpoint,
    EndpointGroup,
    EndpointRequest,
    GlobalSettings,
    Network,
    PoolRequest,
    Tenant,
)

from . import __version__
from .election import Elector
from .errors import ApiError, BadRequest
from .forwarding import Forwarder, mark_served_by
from .service import ClusterState
from .validate import parse_body

API = "/api/v1"


@dataclass
class RouteDoc:
    path: str
    method: str
    summary: str
    body: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    many: bool = False
    tags: list[str] = field(default_factory=list)


def _json_response(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status=status, mimetype="application/json")


def _body(obj: str) -> dict[str, Any]:
    raw = request.get_data(cache=True)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(obj, f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise BadRequest(obj, "request body must be a JSON object")
    return data


def _split_key(kind: str, key: str) -> tuple[str, str]:
    """Contiv keys are "tenant:name"; a bare name means the default tenant."""
    tenant, sep, name = key.partition(":")
    if not sep:
        return "default", key
    if not tenant or not name or ":" in name:
        raise BadRequest(f"{kind} {key}", "key must be TENANT:NAME")
    return tenant, name


def _with_key(body: dict[str, Any], obj: str, **fields: str) -> dict[str, Any]:
    """Fill names from the URL key; refuse a body that names another object."""
    for name, value in fields.items():
        given = body.get(name)
        if given not in (None, "", value):
            raise BadRequest(obj, f"field {name!r} is {given!r} but the URL names {value!r}")
        body[name] = value
    return body


def create_app(
    state: ClusterState,
    config: dict[str, Any] | None = None,
    elector: Elector | None = None,
    session: Any = None,
) -> Flask:
    """The app; with an ``elector`` it forwards /api/v1/ requests to the leader when it follows.

    ``session`` (a requests.Session-like object) is what it forwards with.
    """
    app = Flask("netmaster")
    app.config.update(config or {})
    app.url_map.strict_slashes = False
    docs: list[RouteDoc] = []
    self_url = str(app.config.get("CONTROL_URL") or "")
    forward = Forwarder(elector, self_url, session) if elector is not None else None

    def route(
        path: str,
        method: str,
        summary: str,
        body: type[BaseModel] | None = None,
        response: type[BaseModel] | None = None,
        many: bool = False,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            tag = path.split("/")[3] if path.startswith(API) else "meta"
            docs.append(RouteDoc(path, method, summary, body, response, many, [tag]))
            app.add_url_rule(path, f"{method}:{path}", fn, methods=[method])
            return fn

        return deco

    @app.errorhandler(ApiError)
    def api_error(e: ApiError) -> Response:
        return _json_response(e.to_json(), e.status)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        reason = e.description or e.name
        if e.code == 404:
            reason = f"no such API route {request.method} {request.path}"
        elif e.code == 405:
            reason = f"method {request.method} is not allowed on {request.path}"
        return _json_response(
            {"error": reason, "object": request.path, "reason": reason}, e.code or 500
        )

    @app.errorhandler(Exception)
    def internal_error(e: Exception) -> Response:
        app.logger.exception("unhandled error on %s %s", request.method, request.path)
        reason = f"internal error: {type(e).__name__}: {e}"
        return _json_response({"error": reason, "object": request.path, "reason": reason}, 500)

    @app.before_request
    def to_leader() -> Response | None:
        return forward.to_leader() if forward is not None else None

    @app.after_request
    def served_by(resp: Response) -> Response:
        return mark_served_by(resp, self_url)

    @route("/version", "GET", "Version of this master")
    def version() -> Response:
        return _json_response({"version": __version__, "backend": state.backend})

    @route(f"{API}/leader", "GET", "Which master leads, this master's role and the lease TTL")
    def leader() -> Response:
        if elector is None:
            me = {"id": "", "url": self_url, "role": "standalone", "holdsLease": False}
            return _json_response({"leader": None, "self": me, "leaderTTL": None})
        return _json_response(elector.status())

    # --- tenants ---
    @route(f"{API}/tenants", "GET", "List tenants", response=Tenant, many=True)
    def list_tenants() -> Response:
        return _json_response([t.dump() for t in state.list_tenants()])

    @route(f"{API}/tenants/<key>", "GET", "Get a tenant", response=Tenant)
    def get_tenant(key: str) -> Response:
        return _json_response(state.get_tenant(key).dump())

    def put_tenant(key: str) -> Response:
        obj = f"tenant {key}"
        body = _with_key(_body(obj), obj, tenantName=key)
        return _json_response(state.put_tenant(parse_body(Tenant, body, obj)).dump())

    for m in ("POST", "PUT"):
        route(f"{API}/tenants/<key>", m, "Create or update a tenant", Tenant, Tenant)(put_tenant)

    @route(f"{API}/tenants/<key>", "DELETE", "Delete a tenant (refused while it has children)")
    def delete_tenant(key: str) -> Response:
        state.delete_tenant(key)
        return _json_response({"deleted": f"tenant {key}"})

    @route(f"{API}/inspect/tenants/<key>", "GET", "Tenant config and oper state")
    def inspect_tenant(key: str) -> Response:
        return _json_response(state.inspect_tenant(key))

    # --- networks ---
    @route(f"{API}/networks", "GET", "List networks", response=Network, many=True)
    def list_networks() -> Response:
        tenant = request.args.get("tenant") or None
        return _json_response([n.dump() for n in state.list_networks(tenant)])

    @route(f"{API}/networks/<key>", "GET", "Get a network (key TENANT:NAME)", response=Network)
    def get_network(key: str) -> Response:
        return _json_response(state.get_network(*_split_key("network", key)).dump())

    def put_network(key: str) -> Response:
        tenant, name = _split_key("network", key)
        obj = f"network {tenant}:{name}"
        body = _with_key(_body(obj), obj, tenantName=tenant, networkName=name)
        return _json_response(state.put_network(parse_body(Network, body, obj)).dump())

    for m in ("POST", "PUT"):
        route(f"{API}/networks/<key>", m, "Create or update a network", Network, Network)(
            put_network
        )

    @route(f"{API}/networks/<key>/rename", "POST", "Rename a network without endpoints")
    def rename_network(key: str) -> Response:
        tenant, name = _split_key("network", key)
        obj = f"network {tenant}:{name}"
        new_name = _body(obj).get("networkName")
        if not isinstance(new_name, str) or not new_name:
            raise BadRequest(obj, 'body must be {"networkName": NEW_NAME}')
        return _json_response(state.rename_network(tenant, name, new_name).dump())

    @route(f"{API}/networks/<key>", "DELETE", "Delete a network (refused while it has endpoints)")
    def delete_network(key: str) -> Response:
        tenant, name = _split_key("network", key)
        state.delete_network(tenant, name)
        return _json_response({"deleted": f"network {tenant}:{name}"})

    @route(f"{API}/inspect/networks/<key>", "GET", "Network config and oper state")
    def inspect_network(key: str) -> Response:
        return _json_response(state.inspect_network(*_split_key("network", key)))

    # --- endpoint groups ---
    @route(
        f"{API}/endpointGroups", "GET", "List endpoint groups", response=EndpointGroup, many=True
    )
    def list_groups() -> Response:
        tenant = request.args.get("tenant") or None
        return _json_response([g.dump() for g in state.list_groups(tenant)])

    @route(f"{API}/endpointGroups/<key>", "GET", "Get an endpoint group", response=EndpointGroup)
    def get_group(key: str) -> Response:
        return _json_response(state.get_group(*_split_key("endpoint group", key)).dump())

    def put_group(key: str) -> Response:
        tenant, name = _split_key("endpoint group", key)
        obj = f"endpoint group {tenant}:{name}"
        body = _with_key(_body(obj), obj, tenantName=tenant, groupName=name)
        return _json_response(state.put_group(parse_body(EndpointGroup, body, obj)).dump())

    for m in ("POST", "PUT"):
        route(
            f"{API}/endpointGroups/<key>",
            m,
            "Create or update an endpoint group",
            EndpointGroup,
            EndpointGroup,
        )(put_group)

    @route(f"{API}/endpointGroups/<key>", "DELETE", "Delete an endpoint group")
    def delete_group(key: str) -> Response:
        tenant, name = _split_key("endpoint group", key)
        state.delete_group(tenant, name)
        return _json_response({"deleted": f"endpoint group {tenant}:{name}"})

    @route(f"{API}/inspect/endpointGroups/<key>", "GET", "Endpoint group config and oper state")
    def inspect_group(key: str) -> Response:
        return _json_response(state.inspect_group(*_split_key("endpoint group", key)))

    # --- global settings ---
    @route(
        f"{API}/globals",
        "GET",
        "List global settings (one object)",
        response=GlobalSettings,
        many=True,
    )
    def list_globals() -> Response:
        return _json_response([state.get_global().dump()])

    @route(
        f"{API}/globals/<key>",
        "GET",
        "Get the global settings (key: global)",
        response=GlobalSettings,
    )
    def get_global(key: str) -> Response:
        _only_global(key)
        return _json_response(state.get_global().dump())

    def put_global(key: str) -> Response:
        _only_global(key)
        body = _body("global")
        body.setdefault("name", "global")
        merged = {**state.get_global().dump(), **body}
        merged.pop("key", None)
        return _json_response(state.put_global(parse_body(GlobalSettings, merged, "global")).dump())

    for m in ("POST", "PUT"):
        route(
            f"{API}/globals/<key>",
            m,
            "Update global settings (partial updates merge)",
            GlobalSettings,
            GlobalSettings,
        )(put_global)

    @route(f"{API}/inspect/globals/<key>", "GET", "Global config and oper state (tags in use)")
    def inspect_global(key: str) -> Response:
        _only_global(key)
        return _json_response(state.inspect_global())

    # --- endpoints (read-only) ---
    @route(f"{API}/endpoints", "GET", "List endpoints", response=Endpoint, many=True)
    def list_endpoints() -> Response:
        return _json_response([e.dump() for e in state.list_endpoints()])

    @route(f"{API}/endpoints/<endpoint_id>", "GET", "Get an endpoint", response=Endpoint)
    def get_endpoint(endpoint_id: str) -> Response:
        return _json_response(state.get_endpoint(endpoint_id).dump())

    @route(f"{API}/inspect/endpoints/<endpoint_id>", "GET", "Endpoint config and oper state")
    def inspect_endpoint(endpoint_id: str) -> Response:
        ep = state.get_endpoint(endpoint_id).dump()
        return _json_response({"Config": ep, "Oper": ep})

    # --- allocation API for plugins ---
    @route(
        f"{API}/alloc/endpoints",
        "POST",
        "Create an endpoint and allocate its addresses (idempotent by endpointID)",
        EndpointRequest,
        Endpoint,
    )
    def alloc_endpoint() -> Response:
        body = _body("endpoint")
        req = parse_body(EndpointRequest, body, f"endpoint {body.get('endpointID', '')}".strip())
        ep, created = state.create_endpoint(req)
        return _json_response(ep.dump(), 201 if created else 200)

    @route(
        f"{API}/alloc/endpoints/<endpoint_id>",
        "DELETE",
        "Delete an endpoint and release its addresses",
        response=Endpoint,
    )
    def free_endpoint(endpoint_id: str) -> Response:
        return _json_response(state.delete_endpoint(endpoint_id).dump())

    @route(
        f"{API}/alloc/pools", "POST", "Reserve an address pool (Docker RequestPool)", PoolRequest
    )
    def alloc_pool() -> Response:
        return _json_response(
            state.request_pool(parse_body(PoolRequest, _body("pool"), "pool request"))
        )

    @route(
        f"{API}/alloc/pools/<path:pool_id>",
        "DELETE",
        "Release an address pool (Docker ReleasePool)",
    )
    def free_pool(pool_id: str) -> Response:
        state.release_pool(pool_id)
        return _json_response({"released": pool_id})

    @route(
        f"{API}/alloc/addresses",
        "POST",
        "Allocate an address (idempotent by owner)",
        AddressRequest,
    )
    def alloc_address() -> Response:
        req = parse_body(AddressRequest, _body("address request"), "address request")
        return _json_response({"address": state.request_address(req)})

    @route(f"{API}/alloc/addresses/release", "POST", "Release an address", AddressRelease)
    def free_address() -> Response:
        req = parse_body(AddressRelease, _body("address release"), "address release")
        return _json_response({"released": state.release_address(req)})

    @route(f"{API}/openapi.json", "GET", "This API's OpenAPI 3.1 document")
    def openapi() -> Response:
        return _json_response(openapi_document(docs))

    return app


def _only_global(key: str) -> None:
    if key != "global":
        raise BadRequest(f"global {key}", "the only global settings object is 'global'")


def openapi_document(docs: list[RouteDoc]) -> dict[str, Any]:
    """Build the OpenAPI document from the same route table the app serves."""
    schemas: dict[str, Any] = {
        "Error": {
            "type": "object",
            "required": ["error", "object", "reason"],
            "properties": {k: {"type": "string"} for k in ("error", "object", "reason")},
        }
    }
    paths: dict[str, Any] = {}

    def ref(model: type[BaseModel]) -> dict[str, str]:
        if model.__name__ not in schemas:
            schema = model.model_json_schema(
                by_alias=True, ref_template="#/components/schemas/{model}"
            )
            for name, sub in schema.pop("$defs", {}).items():
                schemas.setdefault(name, sub)
            schemas[model.__name__] = schema
        return {"$ref": f"#/components/schemas/{model.__name__}"}

    for d in docs:
        path = d.path.replace("<path:", "{").replace("<", "{").replace(">", "}")
        params = [
            {"name": p.strip("{}"), "in": "path", "required": True, "schema": {"type": "string"}}
            for p in path.split("/")
            if p.startswith("{")
        ]
        op: dict[str, Any] = {
            "summary": d.summary,
            "tags": d.tags,
            "operationId": d.method.lower() + "_" + re.sub(r"[^A-Za-z0-9]+", "_", path).strip("_"),
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": {}}}},
                "4XX": {
                    "description": "Refused: names the object and the reason; nothing changed",
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                    },
                },
            },
        }
        if d.response is not None:
            schema: dict[str, Any] = ref(d.response)
            if d.many:
                schema = {"type": "array", "items": schema}
            op["responses"]["200"]["content"]["application/json"]["schema"] = schema
        if params:
            op["parameters"] = params
        if d.body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": ref(d.body)}},
            }
        paths.setdefault(path, {})[d.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "netplugin master API", "version": "v1"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
