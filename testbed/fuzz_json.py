"""Hypothesis strategies for hostile request bodies, shared by the master's and the plugin's
fuzz tests (fuzz_master.py, fuzz_plugin.py): odd strings, arbitrary JSON, and the ways a body
goes wrong on the wire (truncated, deeply nested, not UTF-8, NaN, huge numbers, oversized).

Huge values are drawn as a size and built from it, so they cost hypothesis nothing.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from common.jsonbody import MAX_BODY_BYTES, MAX_DEPTH

ODD_TEXT = [
    "",
    " ",
    "-",
    ".",
    "..",
    ":",
    "::",
    "a:b:c",
    ":x",
    "x:",
    "/",
    "../..",
    "../../networks/default:net1",
    "a/b",
    "%2F",
    "%",
    "?x=1",
    "#frag",
    "\x00",
    "a\x00b",
    "\n",
    "\t",
    "é",
    "名前",
    "🙂",
    "\u202e",
    "\ufeff",
    "a" * 64,
    "a" * 65,
    "null",
    "true",
    "0",
    "-1",
    "1e400",
    "NaN",
    "default",
    "global",
    "<script>",
    "'; DROP TABLE kv; --",
]


def huge_text(lo: int = 1_000, hi: int = 200_000) -> st.SearchStrategy[str]:
    return st.builds(lambda n, c: c * n, st.integers(lo, hi), st.sampled_from("xé🙂:/"))


odd_text = st.sampled_from(ODD_TEXT)
any_text = st.one_of(odd_text, st.text(max_size=24), huge_text())

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 2**31, 2**63, 10**30, 10**4000]),
    st.floats(allow_nan=False, allow_infinity=False),
    odd_text,
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


def _dumps(value: Any, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode()


def _nested(depth: int, opener: str, inner: bytes) -> bytes:
    key = b'{"a":' if opener == "{" else b"["
    closer = b"}" if opener == "{" else b"]"
    return key * depth + inner + closer * depth


# Sizes, depths and cut points: around the nesting limit, and far beyond it.
DEPTHS = st.sampled_from(
    [1, 7, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 100, 999, 1_000, 5_000, 100_000]
)

# The ways a body can go wrong, each given the JSON value it would otherwise have carried.
_BROKEN = [
    lambda v, n: _dumps(v, True)[: n % (len(_dumps(v, True)) or 1)],  # truncated
    lambda v, n: _dumps(v, True) + b"garbage",  # trailing text
    lambda v, n: b'{"a": NaN}',
    lambda v, n: b"[Infinity, -Infinity]",
    lambda v, n: b'{"pktTag": 1e400}',
    lambda v, n: b"1" * (n + 4000),  # over Python's int-from-text limit
    lambda v, n: b'{"x": "\xff\xfe"}',  # not UTF-8
    lambda v, n: _dumps(v, True).decode().encode("utf-16"),
    lambda v, n: b"\xef\xbb\xbf" + _dumps(v, True),  # a UTF-8 BOM
    lambda v, n: b'{"tenantName": "\\ud800", "networkName": "\\udfff"}',  # lone surrogates
    lambda v, n: b'{"a": 1, "a": 2}',  # duplicate keys (the last wins)
    lambda v, n: b" " * (MAX_BODY_BYTES + 1),  # over the size limit
    lambda v, n: b'{"a": "' + b"x" * MAX_BODY_BYTES + b'"}',
    lambda v, n: b"\x00" * (n % 64),
]


@st.composite
def broken_body(draw: st.DrawFn, value: st.SearchStrategy[Any] = json_values) -> bytes:
    how = draw(st.sampled_from(_BROKEN))
    return bytes(how(draw(value), draw(DEPTHS)))


@st.composite
def deep_body(draw: st.DrawFn, value: st.SearchStrategy[Any] = json_values) -> bytes:
    """Nested arrays or objects, around the nesting limit or far beyond it."""
    n = draw(DEPTHS)
    return draw(
        st.sampled_from(
            [
                _nested(n, "[", _dumps(draw(value), True)),
                _nested(n, "{", b"1"),
                b"[" * n,  # and unterminated
                b'{"a": "' + b"[" * n + b'"}',  # brackets in a string do not count
                b'[{"a": "\\"}' * n,  # an escaped backslash ends before the quote
            ]
        )
    )


def encode(value: Any) -> st.SearchStrategy[bytes]:
    """``value`` as JSON, ASCII-escaped or not."""
    return st.booleans().map(lambda ascii_only: _dumps(value, ascii_only))


@st.composite
def body(draw: st.DrawFn, objects: st.SearchStrategy[Any]) -> bytes:
    """A request body: mostly ``objects`` (valid-ish bodies) encoded, else arbitrary JSON,
    a broken or deeply nested body, raw bytes or nothing."""
    kind = draw(st.sampled_from(BODY_KINDS))
    if kind == "object":
        return draw(objects.flatmap(encode))
    if kind == "json":
        return draw(json_values.flatmap(encode))
    if kind == "broken":
        return draw(broken_body(objects))
    if kind == "deep":
        return draw(deep_body(objects))
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    return b""


BODY_KINDS = ["object"] * 5 + ["json", "broken", "broken", "deep", "deep", "bytes", "empty"]


content_types = st.sampled_from(
    [
        None,
        None,
        "application/json",
        "application/json; charset=utf-16",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/octet-stream",
        "application/vnd.docker.plugins.v1.2+json",
    ]
)


def mix(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Each (weight, strategy) drawn in proportion to its weight. (st.one_of draws its
    distinct branches alike: repeating a branch does not weigh it.)"""
    picks = [i for i, (weight, _) in enumerate(choices) for _ in range(weight)]
    return st.sampled_from(picks).flatmap(lambda i: choices[i][1])


def chance(k: int, n: int) -> st.SearchStrategy[bool]:
    """True k times in n."""
    return st.sampled_from([True] * k + [False] * (n - k))


def weighted(right: st.SearchStrategy[Any], wrong: st.SearchStrategy[Any]) -> st.SearchStrategy:
    """Mostly ``right`` (so that some requests are accepted and change state), else ``wrong``."""
    return mix((4, right), (1, wrong))


junk = mix((1, st.none()), (2, json_values), (1, odd_text))


@st.composite
def record(
    draw: st.DrawFn,
    required: dict[str, st.SearchStrategy[Any]],
    optional: dict[str, st.SearchStrategy[Any]] | None = None,
) -> dict[str, Any]:
    """A JSON object with these fields, drawn in one of three ways: every required field
    and some optional ones with their (right-ish) values, as a client that knows the API
    sends them; the same with one field dropped or made junk; or with any field junk."""
    optional = optional or {}
    out = {name: draw(value) for name, value in required.items()}
    out |= {name: draw(value) for name, value in optional.items() if draw(chance(1, 3))}
    names = sorted({*required, *optional})
    how = draw(st.sampled_from(["valid", "valid", "one off", "one off", "any"]))
    if how == "one off" and names:
        spoilt = [draw(st.sampled_from(names))]
    elif how == "any":
        spoilt = [name for name in names if draw(chance(1, 3))]
    else:
        spoilt = []
    for name in spoilt:
        if draw(chance(1, 4)):
            out.pop(name, None)
        else:
            out[name] = draw(junk)
    return out
