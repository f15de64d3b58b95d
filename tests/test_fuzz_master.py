"""Property-based fuzzing of the master's REST API (fuzz_master.py): a bounded, deterministic
run with the regressions it found as explicit examples; `make fuzz` runs the long one
(bench/fuzz.py). Also the request limits themselves, and checks that the properties bite."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings

from common.jsonbody import MAX_BODY_BYTES, MAX_DEPTH
from testbed.fuzz_master import (
    EID,
    POOL,
    Request,
    openapi_doc,
    problems,
    routes,
    run_scenario,
    scenarios,
)
from testbed.fuzz_tally import CHANGED, CRASH, SHAPE, Tally
from testbed.real_master import RealMaster, real_master

DOC = openapi_doc()
BOUNDED = settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def post(path: str, body: bytes, content_type: str | None = None) -> list[Request]:
    return [Request("POST", path, body=body, content_type=content_type)]


@BOUNDED
@given(scenarios(DOC))
# Regressions: each was a 500 (RecursionError) before bodies had a nesting limit.
@example(post("/api/v1/tenants/t2", b"[" * 100_000))
@example(post("/api/v1/alloc/endpoints", b'{"a":' * 5_000 + b"1" + b"}" * 5_000))
@example(post("/api/v1/networks/default:n9", b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)))
# ... and what must be refused, not stored: NaN, lone surrogates, oversized bodies.
@example(post("/api/v1/alloc/pools", b'{"pool": "10.3.0.0/24", "options": {"x": NaN}}'))
@example(post("/api/v1/tenants/t3", b'{"defaultNetwork": "\\ud800"}', "text/plain"))
@example(post("/api/v1/alloc/addresses", b'{"poolID": "%s", "owner": "\\udfff"}' % POOL.encode()))
@example(post("/api/v1/tenants/t4", b'{"defaultNetwork": "' + b"x" * MAX_BODY_BYTES + b'"}'))
@example([Request("DELETE", f"/api/v1/alloc/endpoints/{EID}", body=b"[" * 5_000)])
def test_no_request_crashes_the_master_or_changes_state_when_refused(reqs: list[Request]) -> None:
    tally = Tally()
    run_scenario(reqs, tally)
    assert tally.clean, "\n".join(map(str, tally.examples))


def test_the_document_drives_every_route() -> None:
    """The fuzzer draws from every operation the master documents, the allocation API too."""
    operations = {(p, m) for p, ops in DOC["paths"].items() for m in ops}
    assert ("/api/v1/alloc/endpoints", "post") in operations
    assert ("/api/v1/alloc/pools/{pool_id}", "delete") in operations
    assert {(p, m.lower()) for p, m, _ in routes(DOC)} == operations


# --- the properties bite: what a broken answer looks like to them ---

REQ = Request("POST", "/api/v1/tenants/t1", body=b"{}")
ERROR = b'{"error": "tenant t1: no", "object": "tenant t1", "reason": "no"}'


def kinds(found: list) -> set[str]:
    return {p.kind for p in found}


def test_a_clean_refusal_breaks_nothing() -> None:
    assert problems(REQ, 400, ERROR, (1, {"k": b"v"}), (1, {"k": b"v"})) == []
    assert problems(REQ, 200, b"{}", (1, {}), (2, {"k": b"v"})) == []  # accepted: may change


@pytest.mark.parametrize(
    ("status", "data", "after", "expected"),
    [
        (500, ERROR, (1, {}), {CRASH}),
        (400, b"<html>bad</html>", (1, {}), {SHAPE}),
        (400, b'{"error": "x"}', (1, {}), {SHAPE}),
        (404, b'{"error": "", "object": "", "reason": ""}', (1, {}), {SHAPE}),
        (409, ERROR, (1, {"k": b"v"}), {CHANGED}),
        (409, ERROR, (2, {}), {CHANGED}),  # a write of nothing still bumps the revision
    ],
)
def test_broken_answers_are_caught(status: int, data: bytes, after: tuple, expected: set) -> None:
    assert kinds(problems(REQ, status, data, (1, {}), after)) == expected


# --- the limits, chunked bodies included ---


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RealMaster]:
    with real_master(tmp_path) as m:
        yield m


CHUNKED = {"wsgi.input_terminated": True, "HTTP_TRANSFER_ENCODING": "chunked"}
TOO_BIG = b"{}" + b" " * (MAX_BODY_BYTES - 1)  # one byte over
LIMIT_ERROR = {
    "error": f"tenant t5: request body is larger than {MAX_BODY_BYTES} bytes",
    "object": "tenant t5",
    "reason": f"request body is larger than {MAX_BODY_BYTES} bytes",
}


def test_a_body_over_the_limit_is_413_with_or_without_a_length(master: RealMaster) -> None:
    client, before = master.app.test_client(), master.snapshot()
    r = client.post("/api/v1/tenants/t5", data=TOO_BIG + b" " * 10)
    assert r.status_code == 413
    assert r.get_json()["reason"] == f"request body is larger than {MAX_BODY_BYTES} bytes"
    r = client.post("/api/v1/tenants/t5", data=TOO_BIG)  # one byte over: read, then refused
    assert (r.status_code, r.get_json()) == (413, LIMIT_ERROR)
    for size in (len(TOO_BIG), 10 * MAX_BODY_BYTES):  # chunked: Flask cuts, we refuse
        body = TOO_BIG + b" " * (size - len(TOO_BIG))
        r = client.post(
            "/api/v1/tenants/t5", input_stream=io.BytesIO(body), environ_overrides=CHUNKED
        )
        assert (r.status_code, r.get_json()) == (413, LIMIT_ERROR)
    assert master.snapshot() == before
    fits = b"{}" + b" " * (MAX_BODY_BYTES - 2)
    r = client.post("/api/v1/tenants/t5", input_stream=io.BytesIO(fits), environ_overrides=CHUNKED)
    assert r.status_code == 200, r.get_json()


def test_a_deep_body_is_400_naming_the_object(master: RealMaster) -> None:
    r = master.app.test_client().post("/api/v1/networks/default:n1", data=b"[" * 100_000)
    assert r.status_code == 400
    assert r.get_json() == {
        "error": f"network default:n1: request body nests 100000 levels deep; "
        f"at most {MAX_DEPTH} are allowed",
        "object": "network default:n1",
        "reason": f"request body nests 100000 levels deep; at most {MAX_DEPTH} are allowed",
    }
