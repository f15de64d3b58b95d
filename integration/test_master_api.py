"""The master's REST API against a real gunicorn netmaster, on the embedded store and on etcd."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from common import keys
from common.models import EndpointGroup
from common.records import GroupRecord, encode_config
from master.decisions.consistency import check_state
from store import open_store
from testbed.master import VENV_BIN, MasterProcess


@pytest.fixture
def master(backend: str, tmp_path: Path) -> Iterator[MasterProcess]:
    m = MasterProcess(tmp_path / "master", etcd_endpoints=backend).start()
    yield m
    m.stop()


def ok(resp: requests.Response) -> dict:
    assert resp.status_code < 300, resp.text
    return resp.json()


def refused(resp: requests.Response, status: int, *words: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) >= {"error", "object", "reason"}
    for w in words:
        assert w in body["error"], body
    return body["error"]


def snapshot(m: MasterProcess) -> dict:
    return {
        "tenants": ok(m.api("GET", "tenants")),
        "networks": ok(m.api("GET", "networks")),
        "groups": ok(m.api("GET", "endpointGroups")),
        "endpoints": ok(m.api("GET", "endpoints")),
        "global": ok(m.api("GET", "inspect/globals/global")),
    }


def create_net(m: MasterProcess, name: str, tenant: str = "default", **fields: object) -> dict:
    body = {"subnet": "10.1.0.0/24", **fields}
    return ok(m.api("POST", f"networks/{tenant}:{name}", json=body))


def endpoint(m: MasterProcess, eid: str, network: str, **fields: object) -> requests.Response:
    body = {"endpointID": eid, "networkName": network, "host": "h1", **fields}
    return m.api("POST", "alloc/endpoints", json=body)


def test_lifecycle(master: MasterProcess) -> None:
    m = master
    assert [t["tenantName"] for t in ok(m.api("GET", "tenants"))] == ["default"]
    ok(m.api("POST", "tenants/blue", json={"tenantName": "blue"}))
    net = create_net(m, "web", "blue", encap="vlan", pktTag=100, subnet="10.9.0.0/24")
    assert net["key"] == "blue:web" and net["gateway"] == "10.9.0.1"
    dual = create_net(
        m, "dual", subnet="10.2.0.0/24", gateway="10.2.0.254", ipv6Subnet="fd00:2::/64"
    )
    assert dual["ipv6Gateway"] == "fd00:2::1"
    assert ok(m.api("GET", "networks/blue:web"))["pktTag"] == 100

    insp = ok(m.api("GET", "inspect/networks/blue:web"))
    assert insp["Oper"]["pktTag"] == 100
    assert insp["Oper"]["allocatedAddresses"] == ["10.9.0.1"]
    assert insp["Oper"]["dockerName"] == "web/blue"

    ok(m.api("POST", "policys/blue:p1", json={}))
    ok(m.api("POST", "netprofiles/blue:gold", json={"bandwidth": "100mbps", "DSCP": 10}))
    ok(
        m.api(
            "POST",
            "endpointGroups/blue:front",
            json={
                "networkName": "web",
                "ipPool": "10.9.0.100-10.9.0.102",
                "policies": ["p1"],
                "netProfile": "gold",
            },
        )
    )
    g = ok(m.api("GET", "endpointGroups/blue:front"))
    assert g["policies"] == ["p1"] and g["netProfile"] == "gold"

    e1 = ok(endpoint(m, "ep1", "web", tenantName="blue"))
    assert e1["ipAddress"] == "10.9.0.2"
    e2 = ok(endpoint(m, "ep2", "web", tenantName="blue", groupName="front"))
    assert e2["ipAddress"] == "10.9.0.100"
    e3 = ok(endpoint(m, "ep3", "web", tenantName="blue", ipAddress="10.9.0.50"))
    assert e3["ipAddress"] == "10.9.0.50"
    e4 = ok(endpoint(m, "ep4", "dual"))
    assert e4["ipAddress"] == "10.2.0.1" and e4["ipv6Address"] == "fd00:2::2"

    assert ok(m.api("GET", "inspect/endpoints/ep2"))["Oper"]["groupName"] == "front"
    assert ok(m.api("GET", "inspect/endpointGroups/blue:front"))["Oper"]["numEndpoints"] == 1
    insp = ok(m.api("GET", "inspect/networks/blue:web"))
    assert insp["Oper"]["numEndpoints"] == 3
    assert insp["Oper"]["allocatedAddresses"] == ["10.9.0.1", "10.9.0.2", "10.9.0.50", "10.9.0.100"]
    tenant = ok(m.api("GET", "inspect/tenants/blue"))
    assert tenant["Oper"]["numNetworks"] == 1 and tenant["Oper"]["numEndpoints"] == 3
    glob = ok(m.api("GET", "inspect/globals/global"))
    assert glob["Oper"]["vlansInUse"] == "100" and glob["Oper"]["vxlansInUse"] == "1"

    for eid in ("ep1", "ep2", "ep3", "ep4"):
        ok(m.api("DELETE", f"alloc/endpoints/{eid}"))
    refused(m.api("GET", "endpoints/ep1"), 404, "endpoint ep1")
    ok(m.api("DELETE", "endpointGroups/blue:front"))
    ok(m.api("DELETE", "policys/blue:p1"))
    ok(m.api("DELETE", "netprofiles/blue:gold"))
    ok(m.api("DELETE", "networks/blue:web"))
    ok(m.api("DELETE", "networks/default:dual"))
    ok(m.api("DELETE", "tenants/blue"))
    assert ok(m.api("GET", "networks")) == []
    assert ok(m.api("GET", "inspect/globals/global"))["Oper"]["vlansInUse"] == ""


def test_guards_refuse_and_change_nothing(master: MasterProcess) -> None:
    m = master
    ok(m.api("POST", "tenants/t1", json={}))
    create_net(m, "n1", "t1", encap="vlan", pktTag=10)
    ok(
        m.api(
            "POST",
            "endpointGroups/t1:g1",
            json={"networkName": "n1", "ipPool": "10.1.0.10-10.1.0.20"},
        )
    )
    ok(endpoint(m, "e1", "n1", tenantName="t1", host="host-a", groupName="g1"))
    before = snapshot(m)

    cases = [
        (m.api("DELETE", "tenants/t1"), 409, ["tenant t1", "network t1:n1"]),
        (m.api("DELETE", "networks/t1:n1"), 409, ["network t1:n1", "endpoint", "host-a"]),
        (m.api("DELETE", "endpointGroups/t1:g1"), 409, ["endpoint group t1:g1", "endpoint"]),
        (m.api("DELETE", "tenants/default"), 409, ["default tenant"]),
        (
            m.api("POST", "networks/t1:n2", json={"subnet": "10.1.0.128/25"}),
            409,
            ["overlaps", "t1:n1"],
        ),
        (
            m.api(
                "POST",
                "networks/default:n2",
                json={"subnet": "10.7.0.0/24", "encap": "vlan", "pktTag": 10},
            ),
            409,
            ["pkt-tag 10", "t1:n1"],
        ),
        (
            m.api(
                "POST",
                "networks/t1:n3",
                json={"subnet": "10.3.0.0/24", "encap": "vlan", "pktTag": 5000},
            ),
            400,
            ["pkt-tag 5000"],
        ),
        (
            m.api("POST", "networks/t1:n3", json={"subnet": "10.3.0.0/33"}),
            400,
            ["network t1:n3", "10.3.0.0/33"],
        ),
        (m.api("POST", "networks/t1:n3", json={"subnet": "10.3.0.5/24"}), 400, ["10.3.0.5/24"]),
        (
            m.api("POST", "networks/t1:n3", json={"subnet": "10.3.0.0/24", "gateway": "10.4.0.1"}),
            400,
            ["gateway 10.4.0.1"],
        ),
        (
            m.api("POST", "networks/t1:n3", json={"subnet": "10.3.0.0/24", "encap": "gre"}),
            400,
            ["encap"],
        ),
        (
            m.api("POST", "networks/t1:n3", json={"subnet": "10.3.0.0/24", "subent": "x"}),
            400,
            ["subent"],
        ),
        (
            m.api("POST", "networks/t1:n3", data=b"{not json"),
            400,
            ["network t1:n3", "not valid JSON"],
        ),
        (
            m.api("POST", "networks/nosuch:n3", json={"subnet": "10.3.0.0/24"}),
            404,
            ["tenant nosuch"],
        ),
        (
            m.api("POST", "networks/t1:bad name", json={"subnet": "10.3.0.0/24"}),
            400,
            ["invalid name"],
        ),
        (
            m.api(
                "POST",
                "networks/t1:n1",
                json={"subnet": "10.1.0.0/24", "pktTag": 11, "encap": "vlan"},
            ),
            409,
            ["cannot change", "1 endpoint"],
        ),
        (
            m.api(
                "POST",
                "endpointGroups/t1:g2",
                json={"networkName": "n1", "ipPool": "10.1.0.15-10.1.0.30"},
            ),
            409,
            ["overlaps", "t1:g1"],
        ),
        (
            m.api(
                "POST",
                "endpointGroups/t1:g2",
                json={"networkName": "n1", "ipPool": "10.2.0.1-10.2.0.3"},
            ),
            400,
            ["endpoint group t1:g2", "10.2.0.1"],
        ),
        (m.api("POST", "endpointGroups/t1:g2", json={"networkName": "zz"}), 404, ["network t1:zz"]),
        (m.api("POST", "globals/global", json={"vlans": "1-9"}), 409, ["vlan tag 10", "t1:n1"]),
        (m.api("POST", "globals/global", json={"vlans": "9-1"}), 400, ["vlans"]),
        (m.api("POST", "globals/global", json={"fwdMode": "routing"}), 409, ["fwd-mode", "t1:n1"]),
        (m.api("POST", "globals/global", json={"arpMode": "bogus"}), 400, ["arpMode"]),
        (endpoint(m, "e9", "n2", tenantName="t1"), 404, ["network t1:n2"]),
        (
            endpoint(m, "e2", "n1", tenantName="t1", ipAddress="10.1.0.10"),
            409,
            ["10.1.0.10", "ep:e1"],
        ),
        (
            endpoint(m, "e2", "n1", tenantName="t1", ipAddress="10.1.0.1"),
            409,
            ["10.1.0.1", "gateway"],
        ),
        (
            endpoint(m, "e2", "n1", tenantName="t1", ipAddress="10.5.0.1"),
            400,
            ["endpoint e2", "10.5.0.1"],
        ),
        (
            endpoint(m, "e2", "n1", tenantName="t1", groupName="nogroup"),
            404,
            ["endpoint group t1:nogroup"],
        ),
        (endpoint(m, "e/2", "n1", tenantName="t1"), 400, ["endpointID"]),
        (m.api("DELETE", "alloc/endpoints/zzz"), 404, ["endpoint zzz"]),
        (m.api("GET", "networks/t1:nope"), 404, ["network t1:nope"]),
        (m.api("GET", "nosuchroute"), 404, ["no such API route"]),
    ]
    for resp, status, words in cases:
        refused(resp, status, *words)
    assert snapshot(m) == before

    # Once the blockers are gone the same requests succeed.
    ok(m.api("DELETE", "alloc/endpoints/e1"))
    ok(m.api("POST", "globals/global", json={"vlans": "1-100"}))
    ok(m.api("DELETE", "endpointGroups/t1:g1"))
    ok(m.api("DELETE", "networks/t1:n1"))
    ok(m.api("POST", "globals/global", json={"fwdMode": "routing"}))
    ok(m.api("DELETE", "tenants/t1"))


def test_auto_tags_and_range_exhaustion(master: MasterProcess) -> None:
    m = master
    ok(m.api("POST", "globals/global", json={"vxlans": "5000-5001"}))
    assert ok(m.api("GET", "inspect/globals/global"))["Config"]["vxlans"] == "5000-5001"
    create_net(m, "a", subnet="10.10.0.0/24")
    create_net(m, "b", subnet="10.11.0.0/24")
    tags = [ok(m.api("GET", f"inspect/networks/default:{n}"))["Oper"]["pktTag"] for n in "ab"]
    assert sorted(tags) == [5000, 5001]
    refused(
        m.api("POST", "networks/default:c", json={"subnet": "10.12.0.0/24"}),
        409,
        "no free vxlan tag",
    )
    ok(m.api("DELETE", "networks/default:a"))
    create_net(m, "c", subnet="10.12.0.0/24")


def test_idempotent_endpoint_and_exhaustion_and_reuse(master: MasterProcess) -> None:
    m = master
    create_net(m, "small", subnet="10.20.0.0/29")  # usable .1-.6, .1 is the gateway
    first = endpoint(m, "x1", "small")
    assert first.status_code == 201
    again = endpoint(m, "x1", "small")
    assert again.status_code == 200 and again.json()["ipAddress"] == first.json()["ipAddress"]
    got = {ok(endpoint(m, f"x{i}", "small"))["ipAddress"] for i in range(2, 6)}
    assert got == {"10.20.0.3", "10.20.0.4", "10.20.0.5", "10.20.0.6"}
    refused(endpoint(m, "x6", "small"), 409, "default:small", "no free address")
    refused(m.api("GET", "endpoints/x6"), 404)
    freed = ok(m.api("DELETE", "alloc/endpoints/x3"))["ipAddress"]
    assert ok(endpoint(m, "x6", "small"))["ipAddress"] == freed
    refused(endpoint(m, "x6", "other"), 409, "already exists in network default:small")


def test_docker_pool_and_address_api(master: MasterProcess) -> None:
    m = master
    p1 = ok(m.api("POST", "alloc/pools", json={}))
    p2 = ok(m.api("POST", "alloc/pools", json={}))
    assert p1["pool"] != p2["pool"]  # docker re-asks while a pool overlaps host routes
    assert not ipaddress.ip_network(p1["pool"]).overlaps(ipaddress.ip_network(p2["pool"]))
    v6 = ok(m.api("POST", "alloc/pools", json={"v6": True}))
    assert ipaddress.ip_network(v6["pool"]).version == 6
    refused(m.api("POST", "alloc/pools", json={"subPool": "10.0.0.0/24"}), 400, "sub-pool")
    sp = ok(m.api("POST", "alloc/pools", json={"pool": "10.30.0.0/16", "subPool": "10.30.5.0/24"}))
    gw = ok(
        m.api(
            "POST",
            "alloc/addresses",
            json={"poolID": sp["poolID"], "owner": "gw1", "kind": "gateway"},
        )
    )
    assert gw["address"] == "10.30.5.0/16"  # inside a /16, .0 of the range is a host
    a = ok(m.api("POST", "alloc/addresses", json={"poolID": sp["poolID"], "owner": "r1"}))
    assert a["address"] == "10.30.5.1/16"
    assert ok(m.api("POST", "alloc/addresses", json={"poolID": sp["poolID"], "owner": "r1"})) == a
    st = ok(
        m.api(
            "POST",
            "alloc/addresses",
            json={"poolID": sp["poolID"], "owner": "r2", "address": "10.30.9.9"},
        )
    )
    assert st["address"] == "10.30.9.9/16"
    refused(
        m.api(
            "POST",
            "alloc/addresses",
            json={"poolID": sp["poolID"], "owner": "r3", "address": "10.30.9.9"},
        ),
        409,
        "10.30.9.9",
    )
    refused(
        m.api("POST", "alloc/addresses", json={"poolID": "default:10.99.0.0/24", "owner": "r4"}),
        404,
        "pool default:10.99.0.0/24",
    )
    assert ok(
        m.api(
            "POST", "alloc/addresses/release", json={"poolID": sp["poolID"], "address": "10.30.5.1"}
        )
    )["released"]
    ok(m.api("DELETE", f"alloc/pools/{sp['poolID']}"))
    refused(m.api("DELETE", f"alloc/pools/{sp['poolID']}"), 404, "pool")


def test_concurrent_endpoints_two_masters(backend: str, tmp_path: Path) -> None:
    """64 concurrent creates through two master processes on one store: distinct addresses."""
    m1 = MasterProcess(tmp_path / "m", etcd_endpoints=backend).start()
    m2 = MasterProcess(tmp_path / "m", etcd_endpoints=backend).start()
    try:
        create_net(m1, "busy", subnet="10.40.0.0/24")

        def make(i: int) -> str:
            m = (m1, m2)[i % 2]
            return ok(endpoint(m, f"c{i}", "busy"))["ipAddress"]

        with ThreadPoolExecutor(64) as pool:
            addrs = list(pool.map(make, range(64)))
        assert len(set(addrs)) == 64
        insp = ok(m2.api("GET", "inspect/networks/default:busy"))["Oper"]
        assert insp["numEndpoints"] == 64 and insp["allocatedAddressesCount"] == 65
        with ThreadPoolExecutor(32) as pool:
            list(
                pool.map(
                    lambda i: ok((m1, m2)[i % 2].api("DELETE", f"alloc/endpoints/c{i}")), range(64)
                )
            )
        assert (
            ok(m1.api("GET", "inspect/networks/default:busy"))["Oper"]["allocatedAddressesCount"]
            == 1
        )
    finally:
        m1.stop()
        m2.stop()


def test_restart_keeps_allocations(backend: str, tmp_path: Path) -> None:
    m = MasterProcess(tmp_path / "m", etcd_endpoints=backend).start()
    try:
        create_net(m, "keep", subnet="10.50.0.0/24")
        before = {ok(endpoint(m, f"k{i}", "keep"))["ipAddress"] for i in range(5)}
        m.stop(signal.SIGKILL)
        m.start()
        after = {e["ipAddress"] for e in ok(m.api("GET", "endpoints"))}
        assert after == before
        new = ok(endpoint(m, "k5", "keep"))["ipAddress"]
        assert new not in before
    finally:
        m.stop()


def netctl(m: MasterProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """The netctl command line against ``m``; any NETCTL_/NETMASTER settings of ours left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NETCTL_", "NETMASTER"))}
    return subprocess.run(
        [str(VENV_BIN / "netctl"), "--netmaster", m.url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_policies_and_rules_through_netctl(backend: str, tmp_path: Path) -> None:
    """netctl's policy verbs against a real netmaster; then a group stored by an earlier
    master (no tag) gets one when the master restarts, and the store holds together."""
    m = MasterProcess(tmp_path / "m", etcd_endpoints=backend).start()
    try:

        def run(*args: str) -> str:
            res = netctl(m, *args)
            assert (res.returncode, res.stderr) == (0, ""), args
            return res.stdout

        def refused(*args: str) -> str:
            res = netctl(m, *args)
            assert (res.returncode, res.stdout) == (1, ""), args
            return res.stderr

        run("tenant", "create", "blue")
        run("net", "create", "-t", "blue", "-s", "10.60.0.0/24", "net1")
        run("group", "create", "-t", "blue", "net1", "app")
        run("group", "create", "-t", "blue", "net1", "web")
        run("policy", "create", "-t", "blue", "web-in")
        run("policy", "rule-add", "-t", "blue", "-l", "tcp", "-j", "deny", "web-in", "1")
        run("policy", "rule-add", "-t", "blue", "-p", "10", "-g", "app", "-l", "tcp", "-P", "80",
            "web-in", "2")  # fmt: skip
        run("group", "update", "-t", "blue", "-p", "web-in", "web")
        rules = json.loads(run("policy", "rule-ls", "-t", "blue", "web-in", "--json"))
        assert [(r["ruleId"], r["priority"], r["action"]) for r in rules] == [
            ("1", 1, "deny"),
            ("2", 10, "allow"),
        ]
        oper = json.loads(run("policy", "inspect", "-t", "blue", "web-in"))["Oper"]
        assert (oper["endpointGroups"], oper["numRules"]) == (["web"], 2)
        tags = {g: ok(m.api("GET", f"inspect/endpointGroups/blue:{g}"))["Oper"]["groupTag"]
                for g in ("app", "web")}  # fmt: skip
        assert tags == {"app": 1, "web": 2}

        assert "it is attached to endpoint group(s) web" in refused(
            "policy", "rm", "-t", "blue", "web-in"
        )
        assert "it is named by rule(s) blue:web-in:2" in refused("group", "rm", "-t", "blue", "app")
        assert "field 'port': a port needs protocol tcp or udp" in refused(
            "policy", "rule-add", "-t", "blue", "-P", "22", "web-in", "3"
        )
        assert "tenant blue: it still has" in refused("tenant", "rm", "blue")

        # A group as a master before group tags wrote it, while the master is down.
        m.stop()
        store = open_store(backend.split(",") if backend else None, str(m.data_dir))
        try:
            legacy = EndpointGroup(tenantName="blue", groupName="old", networkName="net1")
            store.put(keys.group("blue", "old"), encode_config(legacy))
        finally:
            store.close()
        m.start()
        assert ok(m.api("GET", "inspect/endpointGroups/blue:old"))["Oper"]["groupTag"] == 3
        assert ok(m.api("GET", "inspect/endpointGroups/blue:web"))["Oper"]["groupTag"] == 2

        run("group", "update", "-t", "blue", "--no-policy", "web")
        run("policy", "rm", "-t", "blue", "web-in")  # and its rules
        assert json.loads(run("policy", "ls", "-a", "--json")) == []
        assert ok(m.api("GET", "rules")) == []
        run("group", "rm", "-t", "blue", "app")
    finally:
        m.stop()
    store = open_store(backend.split(",") if backend else None, str(m.data_dir))
    try:
        scan = {kv.key: kv.value for kv in store.range(keys.ROOT).kvs}
    finally:
        store.close()
    assert GroupRecord.decode(scan[keys.group("blue", "old")]).tag == 3
    assert keys.group_tag(1) not in scan  # app's tag went with it
    assert [str(p) for p in check_state(scan)] == []


def test_openapi_and_version(master: MasterProcess) -> None:
    doc = requests.get(master.url + "/api/v1/openapi.json", timeout=5).json()
    assert doc["openapi"].startswith("3.")
    for path in (
        "/api/v1/networks/{key}",
        "/api/v1/alloc/endpoints",
        "/api/v1/inspect/globals/{key}",
        "/api/v1/policys/{key}",
        "/api/v1/rules/{key}",
    ):
        assert path in doc["paths"], path
    assert {"Network", "Policy", "Rule"} <= set(doc["components"]["schemas"])
    assert "patch" in doc["paths"]["/api/v1/endpointGroups/{key}"]
    assert requests.get(master.url + "/version", timeout=5).json()["version"]
    json.dumps(doc)


def test_etcd_outage_gives_clear_error_and_recovers(etcd_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    etcd = etcd_factory()
    m = MasterProcess(tmp_path / "m", etcd_endpoints=etcd.endpoint).start()
    try:
        create_net(m, "before", subnet="10.70.0.0/24")
        etcd.stop()
        refused(
            m.api("POST", "networks/default:during", json={"subnet": "10.71.0.0/24"}),
            503,
            "cluster store",
        )
        refused(endpoint(m, "o1", "before"), 503, "cluster store")
        refused(m.api("GET", "networks"), 503, "cluster store")
        etcd.start()
        names = [n["networkName"] for n in ok(m.api("GET", "networks"))]
        assert names == ["before"]  # the refused create left nothing behind
        assert ok(endpoint(m, "o1", "before"))["ipAddress"] == "10.70.0.2"
        create_net(m, "after", subnet="10.72.0.0/24")
    finally:
        m.stop()
