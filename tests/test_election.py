"""Leader election: the pure decisions, the elector on a real embedded store, and forwarding."""

from __future__ import annotations

import json
import random
import socket
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask

from common import keys
from common.records import LeaderRecord, parse_leader
from master.app import create_app
from master.cli import control_url, unreachable_host
from master.election import (
    CANDIDATE,
    FORWARDED_BY,
    SERVED_BY,
    Elector,
    View,
    decide,
    forward_target,
)
from master.state import ClusterState
from store import KV, Lease, Store, StoreUnavailable
from store.embedded import EmbeddedStore

A = LeaderRecord(id="a", url="http://a:9999", since="t", lease=11, mod_revision=5)


# --- pure decisions ---


def test_decide_no_leader_acquires() -> None:
    assert decide(None, "a", None) == decide(None, "a", None)
    d = decide(None, "a", None)
    assert d.acquire and not d.drop_lease and d.view == CANDIDATE
    assert decide(None, "a", 7).drop_lease  # a lease of ours with no record: let it go


def test_decide_holder_keeps_its_lease() -> None:
    d = decide(A, "a", 11)
    assert d.view == View("leader", A, holder=True)
    assert not d.acquire and not d.drop_lease


def test_decide_same_master_other_worker_leads_without_holding() -> None:
    d = decide(A, "a", None)
    assert d.view == View("leader", A, holder=False) and not d.acquire


def test_decide_other_master_means_follow_and_drop_our_lease() -> None:
    assert decide(A, "b", None).view == View("follower", A)
    d = decide(A, "b", 12)
    assert d.view.role == "follower" and d.drop_lease and not d.acquire


def test_decide_replaces_a_record_without_lease() -> None:
    stale = LeaderRecord(id="x", url="http://x:1", since="t", lease=0, mod_revision=42)
    d = decide(stale, "a", None)
    assert d.acquire and d.replace_revision == 42 and d.view == CANDIDATE


def test_parse_leader() -> None:
    kv = KV(keys.LEADER, b'{"id":"a","url":"http://a:1","since":"s"}', 3, 4, 1, lease=9)
    assert parse_leader(kv) == LeaderRecord(
        id="a", url="http://a:1", since="s", lease=9, mod_revision=4
    )
    assert parse_leader(None) is None
    garbage = parse_leader(KV(keys.LEADER, b"[not json", 3, 4, 1, lease=9))
    assert garbage is not None and garbage.url == ""


@pytest.mark.parametrize(
    ("path", "forwarded", "view", "expected"),
    [
        ("/api/v1/networks", False, View("follower", A), "http://a:9999"),
        ("/api/v1/alloc/endpoints", False, View("follower", A), "http://a:9999"),
        ("/api/v1/leader", False, View("follower", A), None),  # answered locally
        ("/api/v1/leader/", False, View("follower", A), None),
        ("/version", False, View("follower", A), None),
        ("/api/v1/networks", True, View("follower", A), None),  # never forwarded twice
        ("/api/v1/networks", False, View("leader", A), None),
        ("/api/v1/networks", False, View("leader", A, holder=True), None),
        ("/api/v1/networks", False, CANDIDATE, None),  # no leader known: serve here
        (
            "/api/v1/networks",
            False,
            View("follower", LeaderRecord(id="b", url="", since="", lease=1)),
            None,
        ),
        (
            "/api/v1/networks",
            False,
            View("follower", LeaderRecord(id="b", url="http://me/", since="", lease=1)),
            None,
        ),
    ],
)
def test_forward_target(path: str, forwarded: bool, view: View, expected: str | None) -> None:
    assert forward_target(path, forwarded, view, "http://me") == expected


def test_control_url() -> None:
    assert control_url("127.0.0.1:9999") == "http://127.0.0.1:9999"
    assert control_url("127.0.0.1:9999", "https://m1:443/") == "https://m1:443"
    assert control_url("0.0.0.0:9999", "10.0.0.1:9999") == "http://10.0.0.1:9999"
    assert unreachable_host(control_url("0.0.0.0:9999"))
    assert unreachable_host("http://[::]:9999")
    assert not unreachable_host("http://10.0.0.1:9999")


# --- the elector on a real embedded store ---


class Clock:
    """A hand-driven clock for the electors' beliefs (the store keeps real time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(str(tmp_path / "state.db"))
    yield s
    s.close()


def elector(store: Store, master: str, clock: Clock | None = None, ttl: int = 10) -> Elector:
    return Elector(
        store, master_id=master, url=f"http://{master}:9999", ttl=ttl, clock=clock or Clock()
    )


def test_one_leader_others_follow(store: EmbeddedStore) -> None:
    e1, e2 = elector(store, "m1"), elector(store, "m2")
    v1 = e1.step()
    assert v1.role == "leader" and v1.holder and e1.is_holder() and e1.term == 1
    v2 = e2.step()
    assert v2.role == "follower" and not v2.holder and not e2.is_holder()
    assert v2.leader is not None and v2.leader.url == "http://m1:9999"
    record = json.loads(store.get(keys.LEADER).value)  # type: ignore[union-attr]
    assert record["id"] == "m1" and record["url"] == "http://m1:9999" and record["since"]
    status = e2.status()
    assert status["leader"]["url"] == "http://m1:9999"
    assert status["self"] == {
        "id": "m2",
        "url": "http://m2:9999",
        "role": "follower",
        "holdsLease": False,
    }
    assert status["leaderTTL"] == 10
    for _ in range(3):  # steady state: nothing changes
        assert e1.step().holder and e2.step().role == "follower"
    assert e1.term == 1 and e2.term == 0


def test_workers_of_the_leading_master_all_lead(store: EmbeddedStore) -> None:
    w1, w2 = elector(store, "m1"), elector(store, "m1")
    assert w1.step().holder
    v = w2.step()
    assert v.role == "leader" and not v.holder and not w2.is_holder()


def test_graceful_stop_hands_over_at_once(store: EmbeddedStore) -> None:
    e1, e2 = elector(store, "m1"), elector(store, "m2")
    e1.step()
    e2.step()
    e1.stop()
    assert store.get(keys.LEADER) is None  # the lease was revoked with its key
    assert not e1.is_holder() and e1.view() == CANDIDATE
    assert e2.step().holder and e2.term == 1
    assert e1.step().role == "follower"
    e2.stop()
    assert e1.step() == CANDIDATE  # a stopped elector never takes the lead again
    assert store.get(keys.LEADER) is None


def test_lost_lease_steps_down(store: EmbeddedStore) -> None:
    clock = Clock()
    e1, e2 = elector(store, "m1", clock), elector(store, "m2", clock)
    e1.step()
    kv = store.get(keys.LEADER)
    assert kv is not None
    store.lease_revoke(kv.lease)  # the store expired it (e.g. the process was paused)
    assert e2.step().holder
    clock.now += 5  # e1's next refresh is due: it gets LeaseNotFound
    v = e1.step()
    assert not v.holder and v.role == "follower" and not e1.is_holder()
    assert e2.is_holder()


class FlakyStore(Store):
    """A real store that becomes unreachable while ``down`` is set."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("store is down (test)")

    def get(self, key: str) -> KV | None:
        self._check()
        return self.inner.get(key)

    def range(self, prefix: str) -> Any:
        self._check()
        return self.inner.range(prefix)

    def txn(self, compares: Any, success: Any, failure: Any = ()) -> Any:
        self._check()
        return self.inner.txn(compares, success, failure)

    def txn_batch(self, members: Any) -> Any:
        self._check()
        return self.inner.txn_batch(members)

    def watch(self, prefix: str, start_revision: int) -> Any:
        return self.inner.watch(prefix, start_revision)

    def lease_grant(self, ttl: int, keepalive: bool = False) -> Lease:
        self._check()
        lease = self.inner.lease_grant(ttl)
        return Lease(lease.id, lease.ttl, self)

    def lease_refresh(self, lease_id: int) -> int:
        self._check()
        return self.inner.lease_refresh(lease_id)

    def lease_revoke(self, lease_id: int) -> None:
        self._check()
        self.inner.lease_revoke(lease_id)

    def revision(self) -> int:
        return self.inner.revision()

    def close(self) -> None:
        pass


def test_holder_that_cannot_refresh_stops_believing_by_itself(store: EmbeddedStore) -> None:
    clock = Clock()
    flaky = FlakyStore(store)
    e1 = elector(flaky, "m1", clock, ttl=3)  # type: ignore[arg-type]
    assert e1.step().holder
    flaky.down = True
    clock.now += 2.9
    e1.step()  # the refresh fails; the belief still holds within the TTL
    assert e1.is_holder()
    clock.now += 0.2
    # No step needed: the belief is bounded by time, even if the thread were stuck.
    assert not e1.is_holder() and e1.view() == CANDIDATE
    e1.step()
    assert not e1.is_holder()
    assert e1.status()["self"]["role"] == "candidate"


def test_follower_view_goes_stale_without_reads(store: EmbeddedStore) -> None:
    clock = Clock()
    e1 = elector(store, "m1", clock)
    flaky = FlakyStore(store)
    e2 = elector(flaky, "m2", clock)  # type: ignore[arg-type]
    e1.step()
    assert e2.step().role == "follower"
    flaky.down = True
    clock.now += 11
    assert e2.step() == CANDIDATE  # serves locally rather than trusting an old view


def test_record_without_lease_is_replaced(store: EmbeddedStore) -> None:
    store.put(keys.LEADER, b'{"id":"ghost","url":"http://ghost:1","since":""}')
    e1 = elector(store, "m1")
    assert e1.step().holder
    assert parse_leader(store.get(keys.LEADER)).id == "m1"  # type: ignore[union-attr]


def test_never_two_holders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random steps, graceful stops and kill -9s (abandoned electors that still believe):
    at no point do two electors hold the lease."""
    rng = random.Random(4)
    clock = Clock()
    # One clock for the store's lease expiry and the electors' beliefs: the test then
    # checks the bound exactly, at any speed.
    monkeypatch.setattr("store.embedded.time", types.SimpleNamespace(time=clock))
    seen: set[str] = set()
    stores = [EmbeddedStore(str(tmp_path / "state.db")) for _ in range(2)]  # two "hosts"
    live: list[Elector] = []
    abandoned: list[Elector] = []
    n = 0
    try:
        for _ in range(400):
            if len(live) < 3:
                n += 1
                live.append(elector(stores[n % 2], f"m{n}", clock, ttl=2))
            e = rng.choice(live)
            action = rng.random()
            if action < 0.8:
                e.step()
            elif action < 0.9:
                e.stop()
                live.remove(e)
            else:
                live.remove(e)  # kill -9: its lease lives on until it expires
                abandoned.append(e)
            clock.now += rng.choice([0.0, 0.1, 0.5, 1.5])
            for s in stores:
                s.expire_leases()
            holders = [x for x in live + abandoned if x.is_holder()]
            assert len(holders) <= 1, [x.master_id for x in holders]
            seen.update(x.master_id for x in holders)
        assert len(seen) > 10  # the lead changed hands many times
    finally:
        for e in live:
            e.stop()
        for s in stores:
            s.close()


# --- forwarding through the Flask app ---


class AppSession:
    """A requests-like session that delivers to Flask apps by URL (no sockets)."""

    def __init__(self, apps: dict[str, Flask]) -> None:
        self.apps = apps
        self.calls: list[tuple[str, str, dict[str, str]]] = []

    def request(self, method: str, url: str, **kw: Any) -> requests.Response:
        base = next(b for b in self.apps if url.startswith(b))
        self.calls.append((method, url, dict(kw.get("headers") or {})))
        r = (
            self.apps[base]
            .test_client()
            .open(url[len(base) :], method=method, data=kw.get("data"), headers=kw.get("headers"))
        )
        resp = requests.Response()
        resp.status_code = r.status_code
        resp._content = r.data
        resp.headers.update(dict(r.headers))
        return resp


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def two_masters(tmp_path: Path) -> Iterator[tuple[Any, ...]]:
    """A leader and a follower app, each on its own handle of one store file."""
    stores = [EmbeddedStore(str(tmp_path / "state.db")) for _ in range(2)]
    states = [ClusterState(s) for s in stores]
    states[0].ensure_defaults()
    e1 = elector(stores[0], "m1")
    e2 = elector(stores[1], "m2")
    e1.step()
    e2.step()
    session = AppSession({})
    leader = create_app(states[0], {"CONTROL_URL": e1.url}, elector=e1, session=session)
    follower = create_app(states[1], {"CONTROL_URL": e2.url}, elector=e2, session=session)
    session.apps.update({e1.url: leader, e2.url: follower})
    yield leader, follower, e1, e2, session
    for s in stores:
        s.close()


def test_follower_forwards_to_the_leader(two_masters: tuple[Any, ...]) -> None:
    _, follower, e1, e2, session = two_masters
    c = follower.test_client()
    r = c.post("/api/v1/networks/default:n1?x=1", json={"subnet": "10.1.0.0/24"})
    assert r.status_code == 200, r.json
    assert r.headers[SERVED_BY] == e1.url and r.headers[FORWARDED_BY] == e2.url
    assert r.json["gateway"] == "10.1.0.1"
    method, url, headers = session.calls[-1]
    assert (method, url) == ("POST", e1.url + "/api/v1/networks/default:n1?x=1")
    assert headers[FORWARDED_BY] == e2.url and headers["Content-Type"] == "application/json"
    # Refusals come back as the leader gave them.
    r = c.delete("/api/v1/tenants/default")
    assert r.status_code == 409 and r.headers[SERVED_BY] == e1.url
    assert set(r.json) == {"error", "object", "reason"}
    r = c.get("/api/v1/nosuch")
    assert r.status_code == 404 and r.headers[SERVED_BY] == e1.url


def test_follower_answers_leader_and_version_itself(two_masters: tuple[Any, ...]) -> None:
    _, follower, e1, e2, session = two_masters
    c = follower.test_client()
    r = c.get("/api/v1/leader")
    assert r.headers[SERVED_BY] == e2.url and FORWARDED_BY not in r.headers
    assert r.json["self"]["role"] == "follower" and r.json["leader"]["url"] == e1.url
    assert c.get("/version").headers[SERVED_BY] == e2.url
    assert session.calls == []


def test_forwarded_request_is_served_where_it_lands(two_masters: tuple[Any, ...]) -> None:
    _, follower, _, e2, session = two_masters
    r = follower.test_client().get("/api/v1/tenants", headers={FORWARDED_BY: "http://other"})
    assert r.status_code == 200 and r.headers[SERVED_BY] == e2.url
    assert session.calls == []


def test_leader_serves_locally(two_masters: tuple[Any, ...]) -> None:
    leader, _, e1, _, session = two_masters
    r = leader.test_client().get("/api/v1/tenants")
    assert r.status_code == 200 and r.headers[SERVED_BY] == e1.url
    assert session.calls == []


def test_unreachable_leader_is_a_503_naming_it(tmp_path: Path) -> None:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    try:
        dead = Elector(store, master_id="m1", url=f"http://127.0.0.1:{_closed_port()}")
        dead.step()
        e2 = elector(store, "m2")
        e2.step()
        app = create_app(ClusterState(store), {"CONTROL_URL": e2.url}, elector=e2)
        r = app.test_client().get("/api/v1/tenants")
        assert r.status_code == 503
        assert set(r.json) == {"error", "object", "reason"}
        assert dead.url in r.json["error"] and "retry" in r.json["error"]
        assert "refused" in r.json["error"].lower()
    finally:
        store.close()


def test_vanished_leader_is_looked_up_again(tmp_path: Path) -> None:
    """The follower's view is stale (the leader just resigned): on a refused connection it
    looks again, takes the lead and serves the request itself."""
    store = EmbeddedStore(str(tmp_path / "state.db"))
    try:
        state = ClusterState(store)
        state.ensure_defaults()
        gone = Elector(store, master_id="m1", url=f"http://127.0.0.1:{_closed_port()}")
        gone.step()
        e2 = elector(store, "m2")
        e2.step()
        gone.stop()
        assert e2.view().role == "follower"  # not stepped since
        app = create_app(state, {"CONTROL_URL": e2.url}, elector=e2)
        r = app.test_client().get("/api/v1/tenants")
        assert r.status_code == 200 and r.headers[SERVED_BY] == e2.url
        assert e2.is_holder()
    finally:
        store.close()


def test_standalone_app_has_no_leader(tmp_path: Path) -> None:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    try:
        r = create_app(ClusterState(store)).test_client().get("/api/v1/leader")
        assert r.status_code == 200 and r.json["self"]["role"] == "standalone"
    finally:
        store.close()


def test_flags_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from master.cli import parser

    args = parser().parse_args([])
    assert (args.leader_ttl, args.host_reclaim_grace) == (10, 1800.0)
    monkeypatch.setenv("NETMASTER_LEADER_TTL", "4")
    monkeypatch.setenv("NETMASTER_HOST_RECLAIM_GRACE", "0")
    args = parser().parse_args([])
    assert (args.leader_ttl, args.host_reclaim_grace) == (4, 0.0)
    args = parser().parse_args(["--leader-ttl", "7", "--host-reclaim-grace", "90"])
    assert (args.leader_ttl, args.host_reclaim_grace) == (7, 90.0)
