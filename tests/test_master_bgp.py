"""Bgp objects through the master's REST API (/api/v1/Bgps/<hostname>, Contiv's plural):
create, get, list, inspect, delete; refusals name the field and store nothing; no two
hosts share a router IP, under concurrency too."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from flask.testing import FlaskClient

from common import keys
from common.models import Bgp
from common.records import HostRecord
from master.errors import Conflict
from master.state import ClusterState

HOST1 = {"routerip": "50.1.1.1/24", "as": "65002", "neighbor-as": "500", "neighbor": "50.1.1.2"}


def _scan(state: ClusterState) -> dict[str, bytes]:
    return {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}


def test_create_get_list_inspect_delete(client: FlaskClient, state: ClusterState) -> None:
    r = client.post("/api/v1/Bgps/host1", json={**HOST1, "as": 65002})  # a number is an AS too
    assert r.status_code == 200, r.json
    stored = {"key": "host1", "hostname": "host1", **HOST1}
    assert r.json == stored
    assert client.get("/api/v1/Bgps/host1").json == stored
    assert client.get("/api/v1/Bgps").json == [stored]

    inspected = client.get("/api/v1/inspect/Bgps/host1").json
    assert inspected == {"Config": stored, "Oper": {"hostRegistered": False, "fwdMode": "bridge"}}
    state.store.put(keys.host("host1"), HostRecord(host="host1", vtep_ip="192.0.2.1").encode())
    assert client.put("/api/v1/globals/global", json={"fwdMode": "routing"}).status_code == 200
    oper = client.get("/api/v1/inspect/Bgps/host1").json["Oper"]
    assert oper == {"hostRegistered": True, "fwdMode": "routing"}  # no session: none reported

    changed = client.put("/api/v1/Bgps/host1", json={**HOST1, "neighbor": "50.1.1.254"})
    assert changed.status_code == 200 and changed.json["neighbor"] == "50.1.1.254"

    assert client.delete("/api/v1/Bgps/host1").json == {"deleted": "bgp host1"}
    for path in ("/api/v1/Bgps/host1", "/api/v1/inspect/Bgps/host1"):
        r = client.get(path)
        assert (r.status_code, r.json["error"]) == (404, "bgp host1: not found")
    assert client.delete("/api/v1/Bgps/host1").status_code == 404
    assert client.get("/api/v1/Bgps").json == []


@pytest.mark.parametrize(
    ("path", "body", "status", "error"),
    [
        (
            "/api/v1/Bgps/host1",
            {**HOST1, "routerip": "50.1.1.1"},
            400,
            "bgp host1: field 'routerip': '50.1.1.1' has no prefix length; give the address "
            "with its subnet's prefix length, e.g. 50.1.1.1/24",
        ),
        (
            "/api/v1/Bgps/host1",
            {**HOST1, "as": "0"},
            400,
            "bgp host1: field 'as': AS 0 is out of 1-4294967295",
        ),
        (
            "/api/v1/Bgps/host1",
            {**HOST1, "neighbor-as": 4294967296},
            400,
            "bgp host1: field 'neighbor-as': AS 4294967296 is out of 1-4294967295",
        ),
        (
            "/api/v1/Bgps/host1",
            {**HOST1, "neighbor": "50.1.1.1"},
            400,
            "bgp host1: field 'neighbor': 50.1.1.1 is this host's own router IP; give the "
            "router's address",
        ),
        (
            "/api/v1/Bgps/host1",
            {k: v for k, v in HOST1.items() if k != "neighbor"},
            400,
            "bgp host1: field 'neighbor' is required: the router's IPv4 address (e.g. 50.1.1.2)",
        ),
        (
            "/api/v1/Bgps/host1",
            {**HOST1, "as": True},
            400,
            "bgp host1: field 'as': Input should be a valid string",
        ),
        (
            "/api/v1/Bgps/host1",
            {**HOST1, "neighborAs": "500"},
            400,
            "bgp host1: field 'neighborAs': unknown field",
        ),
        (
            "/api/v1/Bgps/host1",
            {**HOST1, "hostname": "host2"},
            400,
            "bgp host1: field 'hostname' is 'host2' but the URL names 'host1'",
        ),
        (
            "/api/v1/Bgps/t1:host1",
            HOST1,
            400,
            "bgp 't1:host1': field 'hostname': invalid; use a host name: dot-separated labels "
            "of 1-63 letters, digits or '-', not starting or ending with '-' (253 characters "
            "at most)",
        ),
        (
            "/api/v1/Bgps/host2",
            {**HOST1, "routerip": "50.1.1.9/24"},
            409,
            "bgp host2: field 'routerip': 50.1.1.9 is already host host9's router IP "
            "(50.1.1.9/24); give each host its own address",
        ),
    ],
)
def test_a_refusal_names_the_field_and_stores_nothing(
    client: FlaskClient, state: ClusterState, path: str, body: Any, status: int, error: str
) -> None:
    r = client.post("/api/v1/Bgps/host9", json={**HOST1, "routerip": "50.1.1.9/24"})
    assert r.status_code == 200, r.json
    before = _scan(state)
    r = client.post(path, json=body)
    assert (r.status_code, r.json["error"]) == (status, error)
    assert _scan(state) == before


def test_a_host_keeps_its_own_router_ip_and_frees_it_when_it_goes(client: FlaskClient) -> None:
    assert client.post("/api/v1/Bgps/host1", json=HOST1).status_code == 200
    assert client.post("/api/v1/Bgps/host1", json={**HOST1, "as": "65003"}).status_code == 200
    assert client.post("/api/v1/Bgps/host2", json=HOST1).status_code == 409
    moved = {**HOST1, "routerip": "50.1.1.11/24"}
    assert client.post("/api/v1/Bgps/host1", json=moved).status_code == 200
    assert client.post("/api/v1/Bgps/host2", json=HOST1).status_code == 200  # freed by the move
    assert client.delete("/api/v1/Bgps/host1").status_code == 200
    assert client.post("/api/v1/Bgps/host3", json=moved).status_code == 200  # freed by delete
    assert [b["hostname"] for b in client.get("/api/v1/Bgps").json] == ["host2", "host3"]


def test_concurrent_hosts_never_share_a_router_ip(state: ClusterState) -> None:
    hosts = [f"host{i}" for i in range(6)]
    start = threading.Barrier(len(hosts))
    won: list[str] = []
    refused: list[str] = []

    def claim(host: str) -> None:
        start.wait()
        try:
            state.bgps.put(Bgp.model_validate({"hostname": host, **HOST1}))
            won.append(host)
        except Conflict:
            refused.append(host)

    threads = [threading.Thread(target=claim, args=(h,)) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and sorted(won + refused) == hosts
    assert [b.hostname for b in state.bgps.list()] == won


def test_the_openapi_document_says_what_a_bgp_body_takes(client: FlaskClient) -> None:
    doc = client.get("/api/v1/openapi.json").json
    put = doc["paths"]["/api/v1/Bgps/{key}"]["post"]
    assert put["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Bgp"
    }
    props = doc["components"]["schemas"]["Bgp"]["properties"]
    assert set(props) == {
        "key", "hostname", "routerip", "routeripv6", "as", "neighbor-as", "neighbor"
    }  # fmt: skip
    for field in ("as", "neighbor-as"):  # Contiv sends strings; a number is taken too
        assert props[field]["anyOf"] == [{"type": "string"}, {"type": "integer"}]
