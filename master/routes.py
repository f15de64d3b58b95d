"""Flask routes for the REST API: a registrar that documents each route, the request-body
helpers, and the generic handlers that serve every object kind declared in kinds.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from flask import Flask, Response, request
from pydantic import BaseModel

from common.jsonbody import BodyError, decode_object

from .errors import ApiError, BadRequest
from .kinds import KINDS, ObjectKind, Op
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


def register_kinds(api: Api, state: ClusterState, kinds: Iterable[ObjectKind] = KINDS) -> None:
    for kind in kinds:
        register_kind(api, state, kind)


def register_kind(api: Api, state: ClusterState, kind: ObjectKind) -> None:
    """Routes for the operations ``kind`` declares, in the order the OpenAPI document lists them."""
    param = kind.key.param
    every, one = f"{API}/{kind.plural}", f"{API}/{kind.plural}/<{param}>"

    def call(op: Op, *args: Any) -> Any:
        fn = getattr(state, op.call) if isinstance(op.call, str) else partial(op.call, state)
        return fn(*args)

    def key_parts(url: dict[str, str]) -> tuple[str, ...]:
        return kind.key.parse(kind.noun, url[param])

    if (list_op := kind.list) is not None:

        def list_objects() -> Response:
            args = (request.args.get("tenant") or None,) if kind.key.tenant_scoped else ()
            return json_response([o.dump() for o in call(list_op, *args)])

        api.route(every, "GET", list_op.summary, response=kind.model, many=True)(list_objects)

    if (get_op := kind.get) is not None:

        def get_object(**url: str) -> Response:
            return json_response(call(get_op, *key_parts(url)).dump())

        api.route(one, "GET", get_op.summary, response=kind.model)(get_object)

    if (put_op := kind.put) is not None:
        merge_over = kind.get if kind.merge else None  # ObjectKind: merge needs a get

        def put_object(**url: str) -> Response:
            parts = key_parts(url)
            obj = kind.name(parts)
            body = with_key(read_body(obj), obj, **dict(zip(kind.fields, parts, strict=True)))
            if merge_over is not None:
                body = {**call(merge_over, *parts).dump(), **body}
                body.pop("key", None)
            return json_response(call(put_op, parse_body(kind.model, body, obj)).dump())

        for method in ("POST", "PUT"):
            api.route(one, method, put_op.summary, kind.model, kind.model)(put_object)

    if (patch_op := kind.patch) is not None:

        def patch_object(**url: str) -> Response:
            parts = key_parts(url)
            obj = kind.name(parts)
            body = with_key(read_body(obj), obj, **dict(zip(kind.fields, parts, strict=True)))
            return json_response(call(patch_op, *parts, body).dump())

        api.route(one, "PATCH", patch_op.summary, kind.model, kind.model)(patch_object)

    if (rename_op := kind.rename) is not None:
        field = kind.fields[-1]

        def rename_object(**url: str) -> Response:
            parts = key_parts(url)
            obj = kind.name(parts)
            new_name = read_body(obj).get(field)
            if not isinstance(new_name, str) or not new_name:
                raise BadRequest(obj, f'body must be {{"{field}": NEW_NAME}}')
            return json_response(call(rename_op, *parts, new_name).dump())

        api.route(f"{one}/rename", "POST", rename_op.summary)(rename_object)

    if (delete_op := kind.delete) is not None:

        def delete_object(**url: str) -> Response:
            parts = key_parts(url)
            call(delete_op, *parts)
            return json_response({"deleted": kind.name(parts)})

        api.route(one, "DELETE", delete_op.summary)(delete_object)

    if (inspect_op := kind.inspect) is not None:

        def inspect_object(**url: str) -> Response:
            return json_response(call(inspect_op, *key_parts(url)))

        api.route(f"{API}/inspect/{kind.plural}/<{param}>", "GET", inspect_op.summary)(
            inspect_object
        )
