"""The agent's inspect API (plugin.inspect_api): a real HostDatapath on the effect fakes, a
real ClusterView on an embedded store, and a controller fake that reads back a switch."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common import keys
from common.models import Endpoint, GlobalSettings
from common.records import HostRecord, encode_config, encode_endpoint
from datapath.flows import flow
from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.local import tunnel_port_name
from datapath.portpool import PortPool
from datapath.report import flow_report
from datapath.teardown import Teardown
from datapath.veth import veth_names
from plugin.cluster import ClusterView
from plugin.inspect_api import AgentStatus, Window, create_inspect_app, parse_listen
from plugin.inspect_views import MirrorState, cluster_view
from plugin.metrics import AgentMetrics
from plugin.policy_view import Unresolved
from store.embedded import EmbeddedStore
from testbed.fakes_datapath import FakeController, FakeIptables, FakeLinks, FakeOvs
from testbed.wait import wait_for

NET = NetworkState(id="default:n1", tag=7, subnet="10.1.0.0/24", gateway="10.1.0.1")
EID = "ab" * 32
EP = EndpointState(EID, "default:n1", "02:42:0a:01:00:02", "10.1.0.2")


class ReadBackController(FakeController):
    """FakeController plus what the window reads: a switch holding ``on_switch``."""

    def __init__(self) -> None:
        super().__init__()
        self.on_switch: set[Any] | None = None  # None: no switch connected
        self.last_reconcile: Any = None

    def read_back(self) -> Any:
        if self.on_switch is None:
            return None
        return frozenset(self.pushed[-1] if self.pushed else ()), set(self.on_switch), 3

    def snapshot(self) -> dict[str, Any]:
        return {"connected": self.on_switch is not None, "generation": 3, "reconcile_count": 1}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    store.put(keys.GLOBAL, encode_config(GlobalSettings()))
    store.put(keys.host("h2"), HostRecord(host="h2", vtep_ip="192.0.2.2").encode())
    store.put(keys.host("h3"), HostRecord(host="h3", vtep_ip="192.0.2.3").encode())
    record = Endpoint(
        endpointID=EID,
        tenantName="default",
        networkName="n1",
        host="h1",
        ipAddress="10.1.0.2",
        macAddress=EP.mac,
        containerID="c0ffee" * 10,
        containerName="web",
    )
    store.put(keys.endpoint("default", "n1", EID), encode_endpoint(record))
    ctl = ReadBackController()
    agent = HostDatapath(
        HostConfig(datapath_type="netdev", tunnels=True),
        FakeOvs(),
        ctl,
        FakeIptables(),
        FakeLinks(),
    )
    agent.start()
    agent.links.create_veth(EID, EP.mac, 1450)
    agent.ovs.add_port("netplugin", veth_names(EID)[0], external_ids={"netplugin-endpoint": EID})
    status = AgentStatus()
    status.resynced(agent.resync([NET], [EP], peers={"h2": "192.0.2.2"}))
    view = ClusterView(store, lambda: None).start()
    assert view.wait_synced(5)
    wait_for(
        lambda: len(view.hosts.values()) == 2 and view.endpoints.values(),
        5,
        "the view mirrored both hosts and the endpoint",
    )
    window = Window(agent, ctl, view, "h1", "192.0.2.1", status)  # type: ignore[arg-type]
    metrics = AgentMetrics()
    yield {"agent": agent, "ctl": ctl, "view": view, "store": store, "window": window} | {
        "client": create_inspect_app(window, metrics).test_client(),
        "metrics": metrics,
    }
    view.stop()
    store.close()


def get(world: dict[str, Any], path: str, status: int = 200) -> Any:
    r = world["client"].get(path)
    assert r.status_code == status, r.get_data(as_text=True)
    return r.get_json()


def test_endpoints_show_the_switch_port_the_veths_and_the_container(
    world: dict[str, Any],
) -> None:
    (ep,) = get(world, "/inspect/endpoints")
    host_if, container_if = veth_names(EID)
    ofport = world["agent"].ovs.ports[host_if].ofport
    assert ep == {
        "endpointID": EID,
        "containerID": "c0ffee" * 10,
        "containerName": "web",
        "network": "default:n1",
        "group": "",
        "ipv4": "10.1.0.2",
        "ipv6": "",
        "mac": EP.mac,
        "ovsPort": host_if,
        "ofport": ofport,
        "hostVeth": host_if,
        "containerVeth": container_if,
        "publishedPorts": [],
    }


def test_tunnels_list_every_peer_and_whether_it_has_a_port(world: dict[str, Any]) -> None:
    t = get(world, "/inspect/tunnels")
    assert t["vtep"] == "192.0.2.1" and t["bridge"] == "netplugin" and t["vlanUplink"] is None
    by_host = {p["host"]: p for p in t["peers"]}
    assert by_host["h2"]["port"] == tunnel_port_name("192.0.2.2")
    assert by_host["h2"]["ofport"] == world["agent"].ovs.ports[tunnel_port_name("192.0.2.2")].ofport
    # h3 registered after the resync: the cluster has it, the bridge has no port for it yet.
    assert by_host["h3"] == {
        "host": "h3",
        "vtepIp": "192.0.2.3",
        "port": tunnel_port_name("192.0.2.3"),
        "ofport": None,
        "inCluster": True,
    }


def test_cluster_reports_revisions_lag_resync_and_mirrors(world: dict[str, Any]) -> None:
    c = get(world, "/inspect/cluster")
    store_rev = world["store"].revision()
    assert c["synced"] is True and c["storeRevision"] == store_rev
    assert c["revision"] == store_rev and c["lagRevisions"] == 0
    assert c["resync"]["endpoints"] == 1 and c["lastResync"] is not None
    assert c["watchRestarts"] == 0 and c["unresolvedRules"] == []
    prefixes = {m["prefix"]: m for m in c["mirrors"]}
    assert prefixes[keys.HOSTS]["keys"] == 2 and prefixes[keys.ENDPOINTS]["keys"] == 1
    # A write to a key no mirror follows moves the store, not the mirrors: lag is a bound.
    world["store"].put(keys.ROOT + "elsewhere", b"x")
    assert get(world, "/inspect/cluster")["lagRevisions"] == 1


def test_cluster_view_counts_restarts_and_lists_unresolved_rules() -> None:
    mirrors = [
        MirrorState("a/", 1, 5, True, 2, 100.0),
        MirrorState("b/", 0, 9, False, 1, None),
    ]
    u = Unresolved("default:g", "r1", "group default:x does not exist")
    c = cluster_view(mirrors, 12, None, 90.0, {"endpoints": 3}, [u], 100.0)
    assert c["revision"] == 9 and c["lagRevisions"] == 3 and c["synced"] is False
    assert c["watchRestarts"] == 3 and c["secondsSinceResync"] == 10.0
    assert c["unresolvedRules"] == [
        {"group": "default:g", "rule": "r1", "reason": "group default:x does not exist"}
    ]
    down = cluster_view(mirrors, None, "unreachable", None, None, [], 100.0)
    assert down["lagRevisions"] is None and down["storeError"] == "unreachable"
    assert down["lastResync"] is None and down["resync"] is None


def test_flow_report_counts_per_table_and_lists_the_difference_capped() -> None:
    a = flow(0, 10, [("goto", 10)], in_port=1)
    b = flow(0, 10, [("goto", 10)], in_port=2)
    b_changed = flow(0, 10, [], in_port=2)
    c = flow(60, 5, [("output", 3)], eth_dst="02:42:00:00:00:01")
    stale = flow(60, 5, [("output", 4)], eth_dst="02:42:00:00:00:09")
    r = flow_report({a, b, c}, {b_changed, stale}, cap=1)
    assert (r["expected"], r["onSwitch"], r["inSync"]) == (3, 2, False)
    assert r["tables"] == [
        {"table": 0, "name": "classify", "expected": 2, "onSwitch": 1}
        | {"missing": 1, "changed": 1, "extra": 0},
        {"table": 60, "name": "forward", "expected": 1, "onSwitch": 1}
        | {"missing": 1, "changed": 0, "extra": 1},
    ]
    assert r["missing"] == [str(a)] and r["changed"] == [str(b)] and r["extra"] == [str(stale)]
    assert flow_report({a}, {a})["inSync"] is True


def test_flows_compare_the_desired_flows_with_the_switch(world: dict[str, Any]) -> None:
    ctl = world["ctl"]
    assert get(world, "/inspect/flows")["connected"] is False
    desired = ctl.pushed[-1]
    gone = sorted(desired, key=str)[0]
    ctl.on_switch = set(desired) - {gone}
    r = get(world, "/inspect/flows?cap=5")
    assert r["connected"] is True and r["expected"] == len(desired)
    assert r["onSwitch"] == len(desired) - 1 and r["missing"] == [str(gone)]
    assert r["extra"] == [] and r["listedUpTo"] == 5
    assert get(world, "/inspect/flows?cap=x", 400)["object"] == "cap"


def test_driver_summarises_every_section(world: dict[str, Any]) -> None:
    world["ctl"].on_switch = set(world["ctl"].pushed[-1])
    d = get(world, "/inspect/driver")
    assert d["version"] and d["uptimeSeconds"] >= 0 and d["host"] == "h1"
    assert d["endpoints"] == 1 and d["networks"] == ["default:n1"] and d["peers"] == 2
    assert d["vtep"] == "192.0.2.1" and d["ready"] is True
    assert d["cluster"]["synced"] is True and d["cluster"]["unresolvedRules"] == 0
    assert d["flows"]["inSync"] is True and d["flows"]["missing"] == 0


def test_unknown_sections_and_routes_answer_in_the_error_shape(world: dict[str, Any]) -> None:
    e = get(world, "/inspect/nope", 404)
    assert set(e) == {"error", "object", "reason"} and "driver" in e["reason"]
    assert set(get(world, "/nothing", 404)) == {"error", "object", "reason"}


def test_the_tcp_listener_answers_only_gets(world: dict[str, Any]) -> None:
    client = create_inspect_app(world["window"], None, read_only=True).test_client()
    r = client.post("/inspect/driver")
    assert r.status_code == 405 and "GET only" in r.get_json()["reason"]
    assert client.get("/inspect/endpoints").status_code == 200
    assert client.get("/metrics").status_code == 404  # no metrics given to this app


def test_metrics_read_endpoints_and_peers_when_scraped(world: dict[str, Any]) -> None:
    from datapath.report import counts

    view, agent, metrics = world["view"], world["agent"], world["metrics"]
    restarts = lambda: [(m.prefix, 0) for m in view.mirrors()]  # noqa: E731
    metrics.watch_state(lambda: counts(agent), restarts, view.mirrors())
    r = world["client"].get("/metrics")
    assert r.status_code == 200 and r.content_type.startswith("text/plain")
    text = r.get_data(as_text=True)
    assert "netplugin_local_endpoints 1.0" in text and "netplugin_peers 1.0" in text
    assert f'netplugin_watch_restarts_total{{prefix="{keys.HOSTS}"}} 0.0' in text
    # Each loop's counts (a mirror's pass lasts as long as its watch: none finished yet).
    assert f'netplugin_loop_failures_total{{loop="cluster state {keys.HOSTS}"}} 0.0' in text


@pytest.mark.parametrize(
    ("value", "ok"),
    [("127.0.0.1:9090", True), ("[::1]:9090", True), ("9090", False), ("h:0", False)],
)
def test_parse_listen(value: str, ok: bool) -> None:
    if ok:
        assert parse_listen(value)[1] == 9090
    else:
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_listen(value)


def test_teardown_lists_pending_removals_and_waits_for_them(world: dict[str, Any]) -> None:
    agent, metrics = world["agent"], world["metrics"]
    gate = threading.Event()
    agent.teardown = Teardown(lambda keys: [gate.wait(5)])
    agent.teardown.submit("e1" * 32)
    want = {"pending": ["e1" * 32], "done": 0, "failed": 0, "pool": None, "costs": None}
    assert get(world, "/inspect/teardown") == want
    pool = agent.ports.pool = PortPool(agent.ovs, agent.links, "netplugin", 4, batch=3)
    assert pool.refill() == 3
    metrics.watch_state(lambda: (0, 0), lambda: [], (), agent.teardown, pool)
    text = world["client"].get("/metrics").get_data(as_text=True)
    assert "netplugin_teardown_pending 1.0" in text
    assert "netplugin_teardown_failures_total 0.0" in text
    assert "netplugin_port_pool_free 3.0" in text
    assert "netplugin_port_pool_missed_total 0.0" in text
    threading.Timer(0.05, gate.set).start()
    pool_state = {"free": 3, "size": 4, "taken": 0, "missed": 0, "reused": 0, "made": 3}
    got = get(world, "/inspect/teardown?wait=5")
    costs = got.pop("costs")  # the batch's add, measured: which pair a CNI pod gets
    assert got == {"pending": [], "done": 1, "failed": 0, "pool": pool_state}
    assert (costs["port_adds"], costs["moves"], costs["move_ms"]) == (1, 0, 20.0)
    assert costs["cni_pair"] == ("own" if costs["port_add_ms"] < 20 else "pool")
    for bad in ("-1", "61", "soon"):
        e = get(world, f"/inspect/teardown?wait={bad}", 400)
        assert e["object"] == "wait" and "0 to 60" in e["reason"]
