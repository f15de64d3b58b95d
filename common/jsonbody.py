"""The limits on a JSON request body, shared by the master's REST API and the plugin's Docker
API: what a body may be, checked before the JSON parser can overflow the stack or fill memory.

Pure: ``decode_body`` returns the parsed value or raises BodyError with the reason and the
HTTP status the refusal gets (400 for a malformed body, 413 for an oversized one).
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

MAX_BODY_BYTES = 1024 * 1024  # the largest body either app accepts
# What the apps let Flask read (MAX_CONTENT_LENGTH): one byte more than a body may have.
# Flask answers 413 to a Content-Length over it, but cuts a chunked body at it silently;
# decode_body then sees the extra byte and refuses the body as too large.
READ_LIMIT = MAX_BODY_BYTES + 1
MAX_DEPTH = 32  # arrays and objects nested deeper are refused; our bodies nest 4 levels at most

# A JSON string, escapes included; one left open runs to the end of the text.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class BodyError(ValueError):
    """A request body refused before or while parsing it; ``status`` is the HTTP status."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def nesting_depth(text: bytes) -> int:
    """How deeply arrays and objects nest in the JSON ``text`` (0 for a scalar).

    Brackets inside strings do not count. For text that is not JSON the count is an upper
    bound on how deep a parser goes before it stops at the first error, so it is safe to
    check before parsing. Runs at C speed: strings are cut out by a regular expression, the
    brackets kept, and their running sum taken.
    """
    brackets = _STRING.sub(b"", text).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets), initial=0))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _bad_string(value: Any) -> str | None:
    """The first string (key or value) in ``value`` that is not valid Unicode, e.g. a lone
    surrogate escape like "\\ud800", which no store or UTF-8 encoder accepts."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return None
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, list):
        for item in value:
            bad = _bad_string(item)
            if bad is not None:
                return bad
    return None


def too_large(max_bytes: int = MAX_BODY_BYTES) -> str:
    """Why a body is refused with 413 (also what the apps say when Flask refuses it)."""
    return f"request body is larger than {max_bytes} bytes"


def decode_object(raw: bytes) -> dict[str, Any]:
    """decode_body for an API that takes a JSON object: any other JSON value is refused."""
    value = decode_body(raw)
    if not isinstance(value, dict):
        raise BodyError("request body must be a JSON object")
    return value


def decode_body(raw: bytes, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """The JSON value of a request body (an empty or blank body is {}).

    Refused (BodyError): a body over ``max_bytes`` (413); text that is not UTF-8, not JSON,
    nested deeper than ``max_depth``, with NaN/Infinity or a number out of a float's range,
    or with a string that is not valid Unicode (400). Duplicate keys are JSON: the last wins.
    """
    if len(raw) > max_bytes:
        raise BodyError(too_large(max_bytes), 413)
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BodyError(f"request body is not UTF-8: {e}") from None
    depth = nesting_depth(raw)
    if depth > max_depth:
        raise BodyError(f"request body nests {depth} levels deep; at most {max_depth} are allowed")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except ValueError as e:  # json.JSONDecodeError, and int() of a number over 4300 digits
        raise BodyError(f"request body is not valid JSON: {e}") from None
    bad = _bad_string(value)
    if bad is not None:
        raise BodyError(f"request body holds a string that is not valid Unicode: {bad[:40]!r}")
    return value
