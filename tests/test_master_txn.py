"""The compare-and-swap plumbing (master/txn.py) over an embedded store, and the purity of
master/decisions."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import master.txn as txn_module
from master.errors import Conflict, Unavailable
from master.txn import (
    MAX_ATTEMPTS,
    HotCache,
    Retry,
    TxnStore,
    absent,
    none_under,
    retrying,
    unchanged,
    untouched_since,
)
from store import KV, Delete, Put, Store, StoreError, StoreUnavailable, open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(None, str(tmp_path))
    yield s
    s.close()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(txn_module.time, "sleep", slept.append)
    return slept


def test_retrying_decides_again_until_the_compares_hold(sleeps: list[float]) -> None:
    calls = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Retry
        return "done"

    assert retrying("network t:n", attempt) == "done"
    assert len(calls) == 3 and sleeps == [0.001, 0.002]


def test_retrying_gives_up_with_a_conflict(sleeps: list[float]) -> None:
    def attempt() -> None:
        raise Retry

    with pytest.raises(Conflict) as e:
        retrying("network t:n", attempt)
    assert str(e.value) == "network t:n: too many concurrent updates; retry the request"
    assert len(sleeps) == MAX_ATTEMPTS and max(sleeps) == 0.05
    assert sleeps == sorted(sleeps)  # the backoff grows, up to its cap


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (StoreUnavailable("connection refused"), "cluster store unavailable: connection refused"),
        (StoreError("disk full"), "cluster store error: disk full"),
    ],
)
def test_store_errors_become_unavailable(error: StoreError, reason: str) -> None:
    def attempt() -> None:
        raise error

    with pytest.raises(Unavailable) as e:
        retrying("endpoint e1", attempt)
    assert (e.value.obj, e.value.reason, e.value.status) == ("endpoint e1", reason, 503)


class _DownStore:
    """A store whose every read fails, as when etcd is unreachable."""

    def get(self, key: str) -> KV | None:
        raise StoreUnavailable("no etcd endpoint answered")

    def range(self, prefix: str) -> None:
        raise StoreUnavailable("no etcd endpoint answered")


def test_reads_map_store_errors() -> None:
    down = TxnStore(_DownStore())  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="cluster store: no etcd endpoint answered"):
        down.get("/netplugin/global")
    with pytest.raises(Unavailable, match="cluster store: no etcd endpoint answered"):
        down.range("/netplugin/")


def test_commit_raises_retry_when_a_compare_fails(store: Store) -> None:
    t = TxnStore(store)
    rev = t.commit([absent("/k")], [Put("/k", b"1")])
    kv = t.get("/k")
    assert kv is not None and kv.mod_revision == rev
    with pytest.raises(Retry):
        t.commit([absent("/k")], [Put("/k", b"2")])
    t.commit([unchanged(kv)], [Put("/k", b"2")])
    with pytest.raises(Retry):
        t.commit([unchanged(kv)], [Put("/k", b"3")])  # kv is stale now
    assert t.get("/k").value == b"2"  # type: ignore[union-attr]


def test_prefix_compares(store: Store) -> None:
    t = TxnStore(store)
    t.commit([none_under("/p/")], [Put("/p/a", b"1")])
    with pytest.raises(Retry):
        t.commit([none_under("/p/")], [Put("/q", b"1")])
    _, rev = t.range("/p/")
    t.commit([untouched_since("/p/", rev)], [Put("/q", b"2")])
    t.commit([], [Put("/p/b", b"1")])
    with pytest.raises(Retry):
        t.commit([untouched_since("/p/", rev)], [Put("/q", b"3")])


def test_a_txn_never_deletes_what_it_puts(store: Store) -> None:
    t = TxnStore(store)
    t.commit([], [Put("/a/1", b"x"), Put("/a/2", b"x"), Put("/b", b"x")])
    ops = t.without_overlaps(
        [Delete("/a/", prefix=True), Delete("/b"), Delete("/c"), Put("/a/1", b"y"), Put("/b", b"y")]
    )
    assert ops == [Delete("/a/2"), Delete("/c"), Put("/a/1", b"y"), Put("/b", b"y")]
    t.commit([], ops)
    assert [kv.key for kv in t.range("/")[0]] == ["/a/1", "/b"]
    untouched = [Delete("/a/", prefix=True), Put("/z", b"1")]
    assert t.without_overlaps(untouched) == untouched


def test_hot_cache_serves_until_asked_fresh(store: Store) -> None:
    t = TxnStore(store)
    hot = HotCache(t)
    parsed: list[bytes] = []

    def parse(kv: KV) -> bytes:
        parsed.append(kv.value)
        return kv.value.upper()

    assert hot.get("/n", False, parse) is None
    t.commit([], [Put("/n", b"a")])
    hit = hot.get("/n", False, parse)
    assert hit is not None and hit[1] == b"A"
    t.commit([], [Put("/n", b"b")])
    stale = hot.get("/n", False, parse)
    assert stale is not None and stale[1] == b"A"  # the txn's compare will catch it
    fresh = hot.get("/n", True, parse)
    assert fresh is not None and fresh[1] == b"B" and parsed == [b"a", b"b"]
    assert hot.get("/n", False, parse) == fresh
    t.commit([], [Delete("/n")])
    assert hot.get("/n", True, parse) is None
    assert hot.get("/n", False, parse) is None  # a missing record leaves the cache


def test_decisions_import_no_store_and_no_io() -> None:
    code = (
        "import pkgutil, sys, importlib, master.decisions as d\n"
        "for m in pkgutil.iter_modules(d.__path__):\n"
        "    importlib.import_module('master.decisions.' + m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in "
        "('store', 'flask', 'requests', 'sqlite3', 'datapath', 'plugin') "
        "or n in ('master.txn', 'master.addresses', 'master.state'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
