"""Master HA against real parts: several gunicorn netmasters on one real etcd (or one
embedded store file), leader election, forwarding, failover under load, and reclaim."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from common import keys
from common.models import EndpointRequest
from plugin.master_client import MasterClient, MasterError, leader_url_from_store
from store import Store, open_store
from testbed.etcd import EtcdServer
from testbed.master import MasterProcess
from testbed.wait import wait_for

SERVED_BY = "X-Netmaster-Served-By"
FORWARDED_BY = "X-Netmaster-Forwarded-By"


def leader_status(m: MasterProcess) -> dict[str, Any] | None:
    try:
        r = requests.get(m.url + "/api/v1/leader", timeout=2)
    except requests.RequestException:
        return None
    return r.json() if r.ok else None


def agreed_leader(ms: list[MasterProcess]) -> MasterProcess | None:
    """The leader, once every master names it and it alone says it leads."""
    statuses = [leader_status(m) for m in ms]
    if any(s is None or s["leader"] is None for s in statuses):
        return None
    urls = {s["leader"]["url"] for s in statuses}  # type: ignore[index]
    leaders = [m for m, s in zip(ms, statuses, strict=True) if s["self"]["role"] == "leader"]  # type: ignore[index]
    if len(urls) != 1 or len(leaders) != 1 or leaders[0].url != urls.pop():
        return None
    return leaders[0]


@pytest.fixture
def etcd(etcd_server: EtcdServer) -> EtcdServer:
    etcd_server.wipe()
    return etcd_server


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., list[MasterProcess]]]:
    """Start masters (stopped by PID at the end, whatever happened)."""
    started: list[MasterProcess] = []

    def run(
        n: int, etcd_endpoint: str = "", shared_dir: bool = False, **flags: Any
    ) -> list[MasterProcess]:
        extra: list[str] = []
        for name, value in flags.items():
            extra += [f"--{name.replace('_', '-')}", str(value)]
        ms = []
        for _ in range(n):
            data = tmp_path / ("shared" if shared_dir else f"m{len(started)}")
            m = MasterProcess(data, etcd_endpoints=etcd_endpoint, extra=extra)
            started.append(m)
            ms.append(m.start())
        return ms

    yield run
    for m in started:
        m.stop()


@pytest.fixture
def store(etcd: EtcdServer, tmp_path: Path) -> Iterator[Store]:
    s = open_store([etcd.endpoint], str(tmp_path))
    yield s
    s.close()


def ok(r: requests.Response) -> Any:
    assert r.status_code < 300, r.text
    return r.json()


def test_one_leader_and_followers_forward(
    etcd: EtcdServer, start: Callable[..., list[MasterProcess]]
) -> None:
    ms = start(2, etcd.endpoint, leader_ttl=3)
    ms += start(1, etcd.endpoint, leader_ttl=3, workers=2)
    leader = wait_for(
        lambda: agreed_leader(ms), 10, "one leader that all masters name", interval=0.05
    )
    followers = [m for m in ms if m is not leader]
    status = leader_status(followers[0])
    assert status is not None and status["leaderTTL"] == 3
    assert status["self"] == {**status["self"], "role": "follower", "url": followers[0].url}

    r = followers[0].api("POST", "networks/default:ha", json={"subnet": "10.44.0.0/24"})
    assert ok(r)["gateway"] == "10.44.0.1"
    assert r.headers[SERVED_BY] == leader.url and r.headers[FORWARDED_BY] == followers[0].url
    # Every worker of every master agrees: requests anywhere are served by the leader.
    for m in ms:
        for i in range(6):
            r = m.api(
                "POST",
                "alloc/endpoints",
                json={"endpointID": f"{m.port}-{i}", "networkName": "ha", "host": "h1"},
            )
            assert ok(r)["ipAddress"] and r.headers[SERVED_BY] == leader.url
            assert (FORWARDED_BY in r.headers) == (m is not leader)
    # Refusals pass through unchanged.
    r = followers[1].api("DELETE", "networks/default:ha")
    assert r.status_code == 409 and set(r.json()) == {"error", "object", "reason"}
    assert "h1" in r.json()["error"] and r.headers[SERVED_BY] == leader.url
    # /version and /api/v1/leader are the follower's own.
    r = requests.get(followers[1].url + "/version", timeout=5)
    assert r.ok and r.headers[SERVED_BY] == followers[1].url
    r = requests.get(followers[1].url + "/api/v1/leader", timeout=5)
    assert r.headers[SERVED_BY] == followers[1].url and r.json()["self"]["role"] == "follower"


def test_kill_leader_under_allocation(
    etcd: EtcdServer, start: Callable[..., list[MasterProcess]], store: Store
) -> None:
    ttl = 3
    ms = start(3, etcd.endpoint, leader_ttl=ttl)
    leader = wait_for(lambda: agreed_leader(ms), 10, "a leader", interval=0.05)
    survivors = [m for m in ms if m is not leader]
    ok(survivors[0].api("POST", "networks/default:ha", json={"subnet": "10.45.0.0/22"}))

    acked: dict[str, str] = {}
    errors: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def allocate(n: int) -> None:
        client = MasterClient(survivors[n % 2].url, timeout=5, leader=leader_url_from_store(store))
        i = 0
        while not stop.is_set():
            eid = f"c{n}-{i}"
            try:
                ep = client.create_endpoint(
                    EndpointRequest(endpointID=eid, networkName="ha", host="h1")
                )
            except MasterError as e:
                with lock:
                    errors.append(f"{eid}: {e}")
                return
            with lock:
                acked[eid] = ep.ipAddress
            i += 1

    clients = [threading.Thread(target=allocate, args=(n,)) for n in range(4)]
    for t in clients:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 40, 30, "allocations under way", interval=0.05)
        killed_at = time.monotonic()
        leader.kill_all()
        new = wait_for(
            lambda: agreed_leader(survivors) or None, ttl + 2 + 1, "a new leader", interval=0.05
        )
        failover = time.monotonic() - killed_at
        assert failover <= ttl + 2, f"failover took {failover:.1f}s"
        before = len(acked)
        wait_for(lambda: len(acked) >= before + 40, 30, "allocations again", interval=0.05)
    finally:
        stop.set()
        for t in clients:
            t.join(60)
    assert new is not leader
    assert errors == [], errors  # in-flight requests were retried, none failed

    # Every acknowledged allocation exists with its address; no address is held twice.
    eps = {e["endpointID"]: e for e in ok(new.api("GET", "endpoints"))}
    for eid, ip in acked.items():
        assert eps[eid]["ipAddress"] == ip, eid
    ips = [e["ipAddress"] for e in eps.values()]
    assert len(ips) == len(set(ips))
    # The pool holds exactly the endpoints' addresses and the gateway: nothing leaked.
    pool = next(iter(eps.values()))["ipv4Pool"]
    owners = {
        kv.key.rsplit("/", 1)[1]: json.loads(kv.value)["owner"]
        for kv in store.range(keys.allocs_of(pool)).kvs
    }
    expected = {e["ipAddress"]: f"ep:{eid}" for eid, e in eps.items()} | {"10.45.0.1": "gateway"}
    assert owners == expected


def test_graceful_stop_hands_over_at_once(
    etcd: EtcdServer, start: Callable[..., list[MasterProcess]]
) -> None:
    ttl = 20  # a handover that waited for the lease to expire would take 13 s or more
    ms = start(2, etcd.endpoint, leader_ttl=ttl, workers=2)
    leader = wait_for(lambda: agreed_leader(ms), 10, "a leader", interval=0.05)
    other = next(m for m in ms if m is not leader)
    stopped_at = time.monotonic()
    leader.stop()  # SIGTERM
    wait_for(lambda: agreed_leader([other]), ttl / 2, "the other master leads", interval=0.05)
    assert time.monotonic() - stopped_at < ttl / 2
    r = other.api("POST", "tenants/t1", json={})
    assert ok(r) and r.headers[SERVED_BY] == other.url


def test_reclaim_endpoints_of_a_gone_host(
    etcd: EtcdServer, start: Callable[..., list[MasterProcess]], store: Store
) -> None:
    ms = start(2, etcd.endpoint, leader_ttl=3, host_reclaim_grace=2)
    leader = wait_for(lambda: agreed_leader(ms), 10, "a leader", interval=0.05)
    follower = next(m for m in ms if m is not leader)
    alive = store.lease_grant(10, keepalive=True)
    gone = store.lease_grant(60)
    for host, lease in (("alive", alive), ("gone", gone)):
        store.put(keys.host(host), json.dumps({"host": host, "vtepIP": ""}).encode(), lease.id)
    ok(follower.api("POST", "networks/default:rc", json={"subnet": "10.46.0.0/24"}))
    addrs: dict[str, str] = {}
    for host in ("alive", "gone"):
        for i in range(3):
            body = {"endpointID": f"{host}{i}", "networkName": "rc", "host": host}
            addrs[f"{host}{i}"] = ok(follower.api("POST", "alloc/endpoints", json=body))[
                "ipAddress"
            ]
    ok(follower.api("POST", "alloc/endpoints", json={"endpointID": "nohost", "networkName": "rc"}))
    try:
        store.lease_revoke(gone.id)  # the host's agent is gone

        def remaining() -> set[str] | None:
            left = {e["endpointID"] for e in ok(follower.api("GET", "endpoints"))}
            return left if not left & {"gone0", "gone1", "gone2"} else None

        # Grace 2 s, a pass every 0.5 s: 30 s is a generous bound.
        assert wait_for(remaining, 30, "the gone host's endpoints reclaimed", interval=0.05) == {
            "alive0",
            "alive1",
            "alive2",
            "nohost",
        }
        oper = ok(follower.api("GET", "inspect/networks/default:rc"))["Oper"]
        held = set(oper["allocatedAddresses"])
        for i in range(3):
            assert addrs[f"gone{i}"] not in held  # back in the pool
            assert addrs[f"alive{i}"] in held
        # A freed address can be handed out again.
        body = {"endpointID": "again", "networkName": "rc", "host": "alive",
                "ipAddress": addrs["gone0"]}  # fmt: skip
        assert ok(follower.api("POST", "alloc/endpoints", json=body))["ipAddress"] == addrs["gone0"]
        log = leader.log.read_text()
        assert "reclaimed endpoint gone0" in log and "of host gone" in log
        assert addrs["gone0"] in log
        reclaims = [line for line in log.splitlines() if "reclaimed endpoint" in line]
        assert len(reclaims) == 3 and not any("alive" in line for line in reclaims)
    finally:
        alive.revoke()


def test_election_on_a_shared_embedded_store(start: Callable[..., list[MasterProcess]]) -> None:
    ttl = 3
    ms = start(2, shared_dir=True, leader_ttl=ttl)
    leader = wait_for(lambda: agreed_leader(ms), 10, "one leader", interval=0.05)
    follower = next(m for m in ms if m is not leader)
    r = follower.api("POST", "networks/default:emb", json={"subnet": "10.47.0.0/24"})
    assert ok(r) and r.headers[SERVED_BY] == leader.url
    assert r.headers[FORWARDED_BY] == follower.url
    killed_at = time.monotonic()
    leader.kill_all()
    wait_for(lambda: agreed_leader([follower]), ttl + 2 + 1, "the follower leads", interval=0.05)
    assert time.monotonic() - killed_at <= ttl + 2
    r = follower.api("POST", "alloc/endpoints", json={"endpointID": "e1", "networkName": "emb"})
    assert ok(r)["ipAddress"] == "10.47.0.2" and r.headers[SERVED_BY] == follower.url
