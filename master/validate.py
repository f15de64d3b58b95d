"""The control plane's rules shared by every kind: names and request bodies. Each kind's own
rules are its normalize_* in decisions/<kind>.py.

Pure functions: each raises BadRequest naming the object and the reason, or returns the
checked value.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from common.models import NAME_RE, NAME_RULE

from .errors import BadRequest

M = TypeVar("M", bound=BaseModel)


def check_name(kind: str, value: str) -> str:
    if not NAME_RE.match(value or ""):
        raise BadRequest(f"{kind} {value!r}", f"invalid name; use {NAME_RULE}")
    return value


def parse_body(model: type[M], body: Any, obj: str) -> M:
    """Validate a JSON body into ``model``; a failure names ``obj`` and each bad field."""
    if not isinstance(body, dict):
        raise BadRequest(obj, "request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = ".".join(str(p) for p in err["loc"]) or "body"
            msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"field {field!r}: {msg}")
        raise BadRequest(obj, "; ".join(problems)) from None
