"""The REST API's OpenAPI 3.1 document, built from the routes the app registered."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

API = "/api/v1"


@dataclass
class RouteDoc:
    path: str  # a Flask rule: "/api/v1/networks/<key>"
    method: str
    summary: str
    body: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    many: bool = False
    tags: list[str] = field(default_factory=list)


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
