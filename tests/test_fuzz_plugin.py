"""Property-based fuzzing of the plugin's Docker API (fuzz_plugin.py): a bounded,
deterministic run with the regressions it found as explicit examples; `make fuzz` runs the
long one (bench/fuzz.py). Also the request limits, and checks that the properties bite."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from common.jsonbody import MAX_BODY_BYTES
from plugin.options import PORTMAP
from testbed.fuzz_plugin import (
    BODIES,
    EID,
    NID,
    POOL,
    Call,
    Stack,
    plugin_stack,
    problems,
    run_scenario,
    scenarios,
    seed,
)
from testbed.fuzz_tally import CHANGED, CRASH, LEAK, SHAPE, STRAY, Tally

BOUNDED = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def call(method: str, body: Any) -> list[Call]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return [Call(method, raw, body if isinstance(body, dict) else None)]


ids = {"NetworkID": NID, "EndpointID": EID}


@BOUNDED
@given(scenarios())
# Regressions. An ID was pasted into the master's URL: "#", "?" and "/.." cut it short, so
# these deleted, or read, the endpoint EID; "%2F" read the endpoint list (a 502).
@example(call("NetworkDriver.DeleteEndpoint", {"NetworkID": NID, "EndpointID": f"{EID}#x"}))
@example(call("NetworkDriver.DeleteEndpoint", {"NetworkID": NID, "EndpointID": f"x/../{EID}"}))
@example(call("NetworkDriver.Join", {"NetworkID": NID, "EndpointID": f"{EID}?x"}))
@example(call("NetworkDriver.Join", {"NetworkID": NID, "EndpointID": "%2F"}))
@example(call("IpamDriver.ReleasePool", {"PoolID": f"{POOL}?x"}))
# A bad interface address or MAC was a 500 (an exception in mac_for, or in the datapath).
@example(call("NetworkDriver.CreateEndpoint", {**ids, "Interface": {"Address": "10.5.0.300/24"}}))
@example(call("NetworkDriver.CreateEndpoint", {**ids, "Interface": {"AddressIPv6": "::1::/64"}}))
@example(
    call(
        "NetworkDriver.CreateEndpoint",
        {"NetworkID": NID, "EndpointID": "e2" * 32, "Interface": {"MacAddress": "zz"}},
    )
)
# A portmap that is not Docker's list of port objects was a 500 (AttributeError, TypeError).
@example(call("NetworkDriver.ProgramExternalConnectivity", {**ids, "Options": {PORTMAP: "x"}}))
@example(call("NetworkDriver.ProgramExternalConnectivity", {**ids, "Options": {PORTMAP: [1.5]}}))
@example(
    call(
        "NetworkDriver.ProgramExternalConnectivity",
        {**ids, "Options": {PORTMAP: [{"Proto": 6, "Port": 80, "HostPort": "x"}]}},
    )
)
# Deep bodies were a 500 (RecursionError).
@example(call("IpamDriver.RequestAddress", b"[" * 100_000))
def test_no_docker_call_crashes_the_plugin_or_leaks_when_refused(calls: list[Call]) -> None:
    tally = Tally()
    run_scenario(calls, tally)
    assert tally.clean, "\n".join(map(str, tally.examples))


def test_every_docker_method_is_fuzzed(tmp_path: Path) -> None:
    with plugin_stack(tmp_path) as s:
        served = {r.rule.lstrip("/") for r in s.client.application.url_map.iter_rules()}
    assert served - {"static/<path:filename>"} == set(BODIES)


# --- the properties bite: what a broken answer looks like to them ---

BEFORE = ((1, {"k": b"v"}), ([], [], {}, None, ({}, {})))
LEAKED = ((1, {"k": b"v"}), (["vport"], [], {}, None, ({}, {})))
CHANGED_STORE = ((2, {"k": b"w"}), BEFORE[1])
REFUSAL = b'{"Err": "CreateEndpoint: no"}'
DELETE = Call("NetworkDriver.DeleteEndpoint", b"{}", {"NetworkID": NID, "EndpointID": "x"})


@pytest.mark.parametrize(
    ("call_", "status", "data", "after", "expected"),
    [
        (call("NetworkDriver.CreateEndpoint", {})[0], 400, REFUSAL, BEFORE, set()),
        (call("NetworkDriver.CreateEndpoint", {})[0], 200, b"{}", CHANGED_STORE, set()),
        (call("NetworkDriver.CreateEndpoint", {})[0], 500, REFUSAL, BEFORE, {CRASH}),
        (
            call("NetworkDriver.Join", {})[0],
            400,
            b'{"Err": "Join: internal error: KeyError: 1"}',
            BEFORE,
            {CRASH},
        ),
        (call("NetworkDriver.CreateEndpoint", {})[0], 400, b'{"Error": "x"}', BEFORE, {SHAPE}),
        (call("IpamDriver.RequestPool", {})[0], 400, b'{"Err": "x"}', BEFORE, {SHAPE}),
        (
            call("IpamDriver.RequestPool", {})[0],
            409,
            b'{"Err": "x", "Error": "y"}',
            BEFORE,
            {SHAPE},
        ),
        (call("IpamDriver.RequestPool", {})[0], 409, b'{"Err": "x", "Error": "x"}', BEFORE, set()),
        (call("NetworkDriver.CreateEndpoint", {})[0], 409, REFUSAL, LEAKED, {LEAK}),
        (call("NetworkDriver.CreateEndpoint", {})[0], 409, REFUSAL, CHANGED_STORE, {CHANGED}),
        (call("NetworkDriver.Join", {})[0], 200, b"{}", CHANGED_STORE, {STRAY}),  # reads only
        (DELETE, 200, b"{}", CHANGED_STORE, {STRAY}),  # deleted what it did not name
    ],
)
def test_broken_answers_are_caught(
    call_: Call, status: int, data: bytes, after: Any, expected: set[str]
) -> None:
    found = problems(call_, status, data, BEFORE, after, known={NID, EID, POOL})
    assert {p.kind for p in found} == expected


# --- the limits, and the fixes, one by one ---


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with plugin_stack(tmp_path) as s:
        seed(s)
        yield s


def test_a_body_over_the_limit_is_413_in_docker_shape(stack: Stack) -> None:
    too_big = b"{}" + b" " * (MAX_BODY_BYTES - 1)
    message = f"request body is larger than {MAX_BODY_BYTES} bytes"
    for extra in (0, 10):
        r = stack.call("IpamDriver.RequestPool", raw=too_big + b" " * extra)
        assert (r.status_code, r.get_json()) == (413, {"Err": message, "Error": message})
    r = stack.client.post(
        "/NetworkDriver.CreateNetwork",
        input_stream=io.BytesIO(too_big + b" " * MAX_BODY_BYTES),
        environ_overrides={"wsgi.input_terminated": True, "HTTP_TRANSFER_ENCODING": "chunked"},
    )
    message = f"request body is larger than {MAX_BODY_BYTES} bytes"
    assert (r.status_code, r.get_json()) == (413, {"Err": message})


def test_odd_ids_name_nothing(stack: Stack) -> None:
    before = stack.master.snapshot()
    for eid in (f"{EID}#x", f"{EID}?x", f"x/../{EID}", f"../../networks/default:{NID[:12]}"):
        r = stack.call("NetworkDriver.DeleteEndpoint", {"NetworkID": NID, "EndpointID": eid})
        assert r.status_code == 200, r.get_json()  # already gone, as far as the master knows
        r = stack.call("NetworkDriver.Join", {"NetworkID": NID, "EndpointID": eid})
        assert r.status_code == 404, r.get_json()
    assert stack.master.snapshot() == before
    r = stack.call("NetworkDriver.Join", {"NetworkID": NID, "EndpointID": ""})
    assert r.status_code == 400 and "EndpointID" in r.get_json()["Err"]


@pytest.mark.parametrize(
    ("interface", "words"),
    [
        ({"Address": "10.5.0.300/24"}, "'10.5.0.300' is not an IPv4 address"),
        ({"AddressIPv6": "fd00::1::/64"}, "'fd00::1::' is not an IPv6 address"),
        ({"MacAddress": "zz"}, "must be a MAC address"),
        ({"MacAddress": "03:42:0a:05:00:63"}, "multicast"),
    ],
)
def test_a_bad_interface_is_refused_before_anything_is_made(
    stack: Stack, interface: dict[str, str], words: str
) -> None:
    before = stack.master.snapshot(), stack.datapath()
    body = {"NetworkID": NID, "EndpointID": "e2" * 32, "Interface": interface}
    r = stack.call("NetworkDriver.CreateEndpoint", body)
    assert r.status_code == 400 and words in r.get_json()["Err"], r.get_json()
    assert (stack.master.snapshot(), stack.datapath()) == before


@pytest.mark.parametrize(
    ("portmap", "words"),
    [
        ("x", "must be a list, not str"),
        ([1.5], "entry must be an object"),
        ([{"Proto": [6], "Port": 80, "HostPort": 8080}], "protocol [6] is not supported"),
        ([{"Proto": 6, "Port": 80, "HostPort": "x"}], "HostPort 'x' is not a port number"),
        ([{"Proto": 6, "Port": 80, "HostPort": 70000}], "HostPort 70000 is not a port number"),
        ([{"Proto": 6, "HostPort": 8080}], "without its container port"),
        ([{"Proto": 6, "Port": 80, "HostPort": 8080, "HostIP": "1.2.3.4 -j ACCEPT"}], "HostIP"),
        ([{"Proto": 6, "Port": 80, "HostPort": 8080, "HostIP": "fd00::1"}], "IPv6 host"),
    ],
)
def test_a_bad_portmap_is_refused(stack: Stack, portmap: Any, words: str) -> None:
    before = stack.datapath()
    r = stack.call(
        "NetworkDriver.ProgramExternalConnectivity", {**ids, "Options": {PORTMAP: portmap}}
    )
    assert r.status_code == 400 and words in r.get_json()["Err"], r.get_json()
    assert stack.datapath() == before


def test_a_good_portmap_is_published(stack: Stack) -> None:
    portmap = [{"Proto": 17, "Port": "53", "HostPort": 5353, "HostIP": "::"}]
    r = stack.call(
        "NetworkDriver.ProgramExternalConnectivity", {**ids, "Options": {PORTMAP: portmap}}
    )
    assert r.status_code == 200, r.get_json()
    assert any("5353" in rule for rules in stack.iptables.chains.values() for rule in rules)
