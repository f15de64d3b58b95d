"""The plugin's master client: retries, the leader lookup, and the deadline (a fake session)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from common import keys
from common.models import Endpoint, EndpointRequest
from plugin.master_client import MasterClient, MasterError, leader_url_from_store
from store.embedded import EmbeddedStore

Behaviour = Callable[[str, str, Any], requests.Response]


def answer(status: int, body: Any) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    resp._content = json.dumps(body).encode()
    resp.headers["Content-Type"] = "application/json"
    return resp


def refused(method: str, url: str, body: Any) -> requests.Response:
    raise requests.ConnectionError(f"connection refused: {url}")


class FakeSession:
    """Answers by master URL: each master has a list of behaviours, the last one repeats."""

    def __init__(self, masters: dict[str, list[Behaviour]]) -> None:
        self.masters = masters
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, url: str, json: Any = None, timeout: Any = None) -> Any:
        self.calls.append((method, url))
        base = next(b for b in self.masters if url.startswith(b + "/"))
        script = self.masters[base]
        step = script.pop(0) if len(script) > 1 else script[0]
        return step(method, url, json)

    def hosts(self) -> list[str]:
        return [url.split("/api/")[0] for _, url in self.calls]


def ok(body: Any = None) -> Behaviour:
    """A success; by default the answer to the calls these tests make (a list of networks)."""
    return lambda m, u, b: answer(200, body if body is not None else [])


def status(code: int, error: str = "") -> Behaviour:
    return lambda m, u, b: answer(
        code, {"error": error or f"HTTP {code}", "object": "", "reason": ""}
    )


class Leader:
    """A leader lookup whose answer the test changes; counts lookups."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self.lookups = 0

    def __call__(self) -> str | None:
        self.lookups += 1
        return self.url


def test_without_leader_the_old_quick_failure() -> None:
    session = FakeSession({"http://m": [refused]})
    client = MasterClient("http://m", retries=3, backoff=0, session=session)  # type: ignore[arg-type]
    with pytest.raises(MasterError) as info:
        client.list_networks()
    assert info.value.status == 503
    assert info.value.message.startswith("netmaster at http://m is unreachable: ")
    assert len(session.calls) == 3


def test_leader_is_preferred_to_base_url_and_cached() -> None:
    session = FakeSession({"http://base": [ok()], "http://lead": [ok()]})
    leader = Leader("http://lead/")
    client = MasterClient("http://base", session=session, leader=leader)  # type: ignore[arg-type]
    client.list_networks()
    client.list_networks()
    assert session.hosts() == ["http://lead", "http://lead"]
    assert leader.lookups == 1  # looked up again only after a failure


def test_no_leader_known_uses_base_url() -> None:
    session = FakeSession({"http://base": [ok()]})
    client = MasterClient("http://base", session=session, leader=Leader(None))  # type: ignore[arg-type]
    client.list_networks()

    def broken() -> str | None:
        raise RuntimeError("store exploded")

    client2 = MasterClient("http://base", session=session, leader=broken)  # type: ignore[arg-type]
    client2.list_networks()
    assert session.hosts() == ["http://base", "http://base"]


def test_failover_switches_to_the_new_leader() -> None:
    leader = Leader("http://old")

    def old_dies(method: str, url: str, body: Any) -> requests.Response:
        leader.url = "http://new"  # meanwhile a new leader took over
        return refused(method, url, body)

    created = {"endpointID": "e1", "tenantName": "default", "networkName": "n"}
    session = FakeSession({"http://old": [old_dies], "http://new": [ok(created)]})
    client = MasterClient("http://base", backoff=0.01, session=session, leader=leader)  # type: ignore[arg-type]
    request = EndpointRequest(endpointID="e1", networkName="n")
    assert client.create_endpoint(request) == Endpoint.model_validate(created)
    assert session.hosts() == ["http://old", "http://new"]
    assert session.calls[-1] == ("POST", "http://new/api/v1/alloc/endpoints")


def test_503_from_a_follower_looks_the_leader_up_again() -> None:
    leader = Leader("http://follower")
    session = FakeSession(
        {
            "http://follower": [status(503, "netmaster leader http://x: unreachable; retry")],
            "http://lead": [ok()],
        }
    )

    def look() -> str | None:
        url = leader()
        leader.url = "http://lead"
        return url

    client = MasterClient("http://base", backoff=0.01, session=session, leader=look)  # type: ignore[arg-type]
    client.list_networks()
    assert session.hosts() == ["http://follower", "http://lead"]


def test_retries_through_a_long_outage_within_the_deadline() -> None:
    session = FakeSession({"http://lead": [refused] * 6 + [ok()]})
    client = MasterClient(
        "http://base",
        backoff=0.01,
        session=session,  # type: ignore[arg-type]
        leader=Leader("http://lead"),
        deadline=30,
    )
    client.list_networks()
    assert len(session.calls) == 7


def test_deadline_ends_with_the_last_error() -> None:
    session = FakeSession({"http://lead": [refused]})
    client = MasterClient(
        "http://base",
        backoff=0.01,
        session=session,  # type: ignore[arg-type]
        leader=Leader("http://lead"),
        deadline=0.3,
    )
    t0 = time.monotonic()
    with pytest.raises(MasterError) as info:
        client.list_networks()
    assert time.monotonic() - t0 < 5  # generous: bounded by the deadline, not by attempts
    assert info.value.message.startswith("netmaster at http://lead is unreachable: ")
    assert len(session.calls) > 3  # kept trying until the deadline


def test_refusals_are_not_retried() -> None:
    session = FakeSession({"http://lead": [status(409, "network default:n: in use")]})
    client = MasterClient("http://base", session=session, leader=Leader("http://lead"))  # type: ignore[arg-type]
    with pytest.raises(MasterError) as info:
        client.delete_network("default", "n")
    assert (info.value.status, info.value.message) == (409, "network default:n: in use")
    assert len(session.calls) == 1


def test_internal_errors_keep_the_attempt_limit() -> None:
    session = FakeSession({"http://lead": [status(500, "internal error: boom")]})
    client = MasterClient(
        "http://base",
        retries=2,
        backoff=0.01,
        session=session,  # type: ignore[arg-type]
        leader=Leader("http://lead"),
    )
    with pytest.raises(MasterError, match="boom"):
        client.list_networks()
    assert len(session.calls) == 2


def test_leader_url_from_store(tmp_path: Path) -> None:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    try:
        current = leader_url_from_store(store)
        assert current() is None
        lease = store.lease_grant(30)
        record = {"id": "m1", "url": "http://10.0.0.1:9999", "since": "now"}
        store.put(keys.LEADER, json.dumps(record).encode(), lease=lease.id)
        assert current() == "http://10.0.0.1:9999"
        store.lease_revoke(lease.id)
        assert current() is None
        store.close()
        assert current() is None  # a store error means "not known", never an exception
    finally:
        store.close()


def test_a_refusal_carries_the_masters_object_and_reason() -> None:
    body = {"error": "network default:n: not found", "object": "network default:n", "reason": "x"}
    session = FakeSession({"http://m": [lambda m, u, b: answer(404, body)]})
    client = MasterClient("http://m", session=session)  # type: ignore[arg-type]
    with pytest.raises(MasterError) as info:
        client.get_network("default", "n")
    e = info.value
    assert (e.status, e.message, e.obj, e.reason) == (404, body["error"], body["object"], "x")


def test_an_answer_that_is_not_what_the_api_promises_is_a_502() -> None:
    session = FakeSession({"http://m": [ok({"networkName": 7})]})
    client = MasterClient("http://m", session=session)  # type: ignore[arg-type]
    with pytest.raises(MasterError) as info:
        client.get_network("default", "n")
    assert info.value.status == 502
    assert info.value.message.startswith("network default:n: netmaster's answer is not")
    assert len(session.calls) == 1  # a wrong answer is not retried


def test_a_host_port_netmaster_url_is_accepted() -> None:
    session = FakeSession({"http://m:9999": [ok()]})
    MasterClient("m:9999/", session=session).list_networks()  # type: ignore[arg-type]
    assert session.calls == [("GET", "http://m:9999/api/v1/networks")]


def test_ids_reach_the_master_as_one_path_segment() -> None:
    """Docker's IDs are escaped: "?", "#", "/" and ".." cannot make a call name another
    object (an ID "x#y" once deleted the endpoint "x")."""
    session = FakeSession({"http://m:1": [ok({})]})
    client = MasterClient("http://m:1", retries=1, session=session)  # type: ignore[arg-type]
    for call in (client.delete_endpoint, client.get_endpoint):
        with pytest.raises(MasterError):  # {} is not an endpoint: only the URL matters here
            call("e1#x/../y?z")
    client.release_pool("default:10.5.0.0/24")
    with pytest.raises(MasterError):
        client.get_network("a/b", "../c")
    assert [url.removeprefix("http://m:1/api/v1") for _, url in session.calls] == [
        "/alloc/endpoints/e1%23x%2F..%2Fy%3Fz",
        "/endpoints/e1%23x%2F..%2Fy%3Fz",
        "/alloc/pools/default%3A10.5.0.0%2F24",
        "/networks/a%2Fb:..%2Fc",
    ]


def test_a_master_older_than_the_agent_is_named_as_such() -> None:
    """A 404 for the route itself (an older master) is not "no such network"."""
    no_route = {"error": "no such API route GET /x", "object": "/x", "reason": "no such"}
    session = FakeSession({"http://m": [lambda m, u, b: answer(404, no_route)]})
    client = MasterClient("http://m", session=session)  # type: ignore[arg-type]
    with pytest.raises(MasterError) as info:
        client.network_record("default", "n")
    assert info.value.status == 502 and "older than this agent" in info.value.message
    no_network = {"error": "network default:n: not found", "object": "network default:n"}
    session = FakeSession({"http://m": [lambda m, u, b: answer(404, {**no_network, "reason": ""})]})
    client = MasterClient("http://m", session=session)  # type: ignore[arg-type]
    with pytest.raises(MasterError) as info:
        client.network_record("default", "n")
    assert info.value.status == 404
