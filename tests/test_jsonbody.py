"""The request body limits (common.jsonbody): the nesting scan and the decoder."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.jsonbody import (
    MAX_BODY_BYTES,
    MAX_DEPTH,
    BodyError,
    decode_body,
    decode_object,
    nesting_depth,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=20,
)


def depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"1", 0),
        (b'"[[["', 0),
        (b"[]", 1),
        (b"[[1], [2, [3]]]", 3),
        (b'{"a": {"b": []}}', 3),
        (b'["\\"[", [[]]]', 3),  # an escaped quote does not end the string
        (b'["\\\\", [[]]]', 3),  # an escaped backslash does not escape the quote after it
        (b'"\\\\\\"[["', 0),
        (b"[[[[", 4),  # unterminated: as deep as a parser would go
        (b'[["unterminated [[[[', 2),
        (b"]]]][[", 0),  # a parser stops at the first ]
    ],
)
def test_nesting_depth(text: bytes, expected: int) -> None:
    assert nesting_depth(text) == expected


@settings(max_examples=300, derandomize=True, database=None)
@given(json_values, st.booleans())
def test_nesting_depth_is_the_depth_of_any_json(value: Any, ascii_only: bool) -> None:
    assert nesting_depth(json.dumps(value, ensure_ascii=ascii_only).encode()) == depth(value)


@settings(max_examples=300, derandomize=True, database=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_body_decodes_or_is_refused_with_a_status(raw: bytes) -> None:
    try:
        decode_body(raw)
    except BodyError as e:
        assert e.status == 400 and e.reason


def test_empty_and_blank_bodies_are_empty_objects() -> None:
    assert decode_body(b"") == {} and decode_body(b" \n\t") == {}


def test_the_depth_limit_is_checked_before_parsing() -> None:
    nested: Any = decode_body(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    assert depth(nested) == MAX_DEPTH
    for body in (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), b"[" * 100_000):
        with pytest.raises(BodyError, match=f"nests {MAX_DEPTH + 1}|nests 100000") as e:
            decode_body(body)
        assert e.value.status == 400


def test_an_oversized_body_is_413() -> None:
    with pytest.raises(BodyError) as e:
        decode_body(b" " * (MAX_BODY_BYTES + 1))
    assert e.value.status == 413 and str(MAX_BODY_BYTES) in e.value.reason
    assert decode_body(b" " * (MAX_BODY_BYTES - 2) + b"{}") == {}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"a": NaN}', "NaN is not a JSON value"),
        (b"[Infinity]", "Infinity is not a JSON value"),
        (b"[-Infinity]", "-Infinity is not a JSON value"),
        (b"[1e400]", "out of range"),
        (b"1" * 5000, "not valid JSON"),  # over Python's limit on digits
        (b'{"a": "\xff"}', "not UTF-8"),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8"),
        (b"\xef\xbb\xbf{}", "not valid JSON"),
        (b'{"a": "\\ud800"}', "not valid Unicode"),
        (b'{"\\udfff": 1}', "not valid Unicode"),
        (b"{", "not valid JSON"),
        (b"{} x", "not valid JSON"),
    ],
)
def test_malformed_bodies_are_refused(body: bytes, reason: str) -> None:
    with pytest.raises(BodyError, match=reason) as e:
        decode_body(body)
    assert e.value.status == 400


def test_what_json_allows_is_kept() -> None:
    assert decode_body(b'{"a": 1, "a": 2}') == {"a": 2}  # the last of duplicate keys
    assert decode_body('{"a": "\\ud83d\\ude42 é"}'.encode()) == {"a": "🙂 é"}
    assert decode_body(b"[1.5e300, -0, 12345678901234567890]") == [
        1.5e300,
        0,
        12345678901234567890,
    ]
    assert decode_body(b'"a string"') == "a string"


def test_decode_object_refuses_other_json_values() -> None:
    assert decode_object(b'{"a": 1}') == {"a": 1}
    assert decode_object(b"") == {}
    for raw in (b"[1]", b'"x"', b"3", b"null"):
        with pytest.raises(BodyError, match="must be a JSON object") as e:
            decode_object(raw)
        assert e.value.status == 400
