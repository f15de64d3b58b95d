"""Flask routes for the REST API: a registrar that documents each route, the request-body
helpers, and the generic handlers that serve every row of the kinds table (kinds.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, Response, request
from pydantic import BaseModel

from common.jsonbody import BodyError, decode_object

from .errors import ApiError, BadRequest
from .kinds import KINDS, Row
from .openapi import API, RouteDoc
from .state import ClusterState
from .validate import parse_body

View = Callable[..., Response]


class Api:
    """Registers the app's routes and keeps each one's documentation for openapi.json."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.docs: list[RouteDoc] = []

    def route(
        self,
        path: str,
        method: str,
        summary: str,
        body: type[BaseModel] | None = None,
        response: type[BaseModel] | None = None,
        many: bool = False,
    ) -> Callable[[View], View]:
        def deco(fn: View) -> View:
            tag = path.split("/")[3] if path.startswith(API) else "meta"
            self.docs.append(RouteDoc(path, method, summary, body, response, many, [tag]))
            self.app.add_url_rule(path, f"{method}:{path}", fn, methods=[method])
            return fn

        return deco


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status=status, mimetype="application/json")


def read_body(obj: str) -> dict[str, Any]:
    """The request's JSON object (an empty body is {}); anything else is refused naming ``obj``,
    with 413 for a body over the size limit (common.jsonbody)."""
    try:
        return decode_object(request.get_data(cache=True))
    except BodyError as e:
        raise ApiError(obj, e.reason, e.status) from None


def with_key(body: dict[str, Any], obj: str, **fields: str) -> dict[str, Any]:
    """Fill names from the URL key; refuse a body that names another object."""
    for name, value in fields.items():
        given = body.get(name)
        if given not in (None, "", value):
            raise BadRequest(obj, f"field {name!r} is {given!r} but the URL names {value!r}")
        body[name] = value
    return body


def register_kinds(api: Api, state: ClusterState, kinds: Iterable[Row] = KINDS) -> None:
    for row in kinds:
        register_kind(api, state, row)


def register_kind(api: Api, state: ClusterState, row: Row) -> None:
    """Routes for the operations ``row`` declares, in the order the OpenAPI document lists them;
    each calls a bound method of the row's family."""
    kind, family = row.kind, row.family(state)
    param = kind.key.param
    every, one = f"{API}/{kind.plural}", f"{API}/{kind.plural}/<{param}>"

    def key_parts(url: dict[str, str]) -> tuple[str, ...]:
        return row.parse(url[param])

    def keyed_body(parts: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
        obj = kind.name(parts)
        return obj, with_key(read_body(obj), obj, **dict(zip(kind.fields, parts, strict=True)))

    if row.list is not None:

        def list_objects() -> Response:
            args = (request.args.get("tenant") or None,) if kind.key.tenant_scoped else ()
            return json_response([o.dump() for o in family.list(*args)])

        api.route(every, "GET", row.list, response=kind.model, many=True)(list_objects)

    if row.get is not None:

        def get_object(**url: str) -> Response:
            return json_response(family.get(*key_parts(url)).dump())

        api.route(one, "GET", row.get, response=kind.model)(get_object)

    if row.put is not None:

        def put_object(**url: str) -> Response:
            parts = key_parts(url)
            obj, body = keyed_body(parts)
            if row.merge:
                body = {**family.get(*parts).dump(), **body}
                body.pop("key", None)
            return json_response(family.put(parse_body(kind.model, body, obj)).dump())

        for method in ("POST", "PUT"):
            api.route(one, method, row.put, kind.model, kind.model)(put_object)

    if row.patch is not None:

        def patch_object(**url: str) -> Response:
            parts = key_parts(url)
            return json_response(family.patch(*parts, keyed_body(parts)[1]).dump())

        api.route(one, "PATCH", row.patch, kind.model, kind.model)(patch_object)

    if row.rename is not None:
        field = kind.fields[-1]

        def rename_object(**url: str) -> Response:
            parts = key_parts(url)
            obj = kind.name(parts)
            new_name = read_body(obj).get(field)
            if not isinstance(new_name, str) or not new_name:
                raise BadRequest(obj, f'body must be {{"{field}": NEW_NAME}}')
            return json_response(family.rename(*parts, new_name).dump())

        api.route(f"{one}/rename", "POST", row.rename)(rename_object)

    if row.delete is not None:

        def delete_object(**url: str) -> Response:
            parts = key_parts(url)
            family.delete(*parts)
            return json_response({"deleted": kind.name(parts)})

        api.route(one, "DELETE", row.delete)(delete_object)

    if row.inspect is not None:

        def inspect_object(**url: str) -> Response:
            return json_response(family.inspect(*key_parts(url)))

        api.route(f"{API}/inspect/{kind.plural}/<{param}>", "GET", row.inspect)(inspect_object)
