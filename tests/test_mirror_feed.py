"""plugin.cluster.MirrorFeed: many mirrors kept by one thread on one watch, against a
scripted store; and the registration keeping its lease alive in its own loop."""

from __future__ import annotations

import threading
from pathlib import Path

from common import keys
from common.records import HostRecord
from plugin.cluster import ClusterView, HostRegistration, MirrorFeed, PrefixMirror
from store.base import KV, Compacted, Event, RangeResult, StoreUnavailable
from store.embedded import EmbeddedStore
from store.hub import Missed
from testbed.scripted_watch import ScriptedWatch
from testbed.wait import wait_for

WAIT = 10.0  # only a bound on a hung test
A, B = "/r/a/", "/r/b/"


class Store:
    """range() answers from ``data`` at ``rev`` (or raises what ``fail`` holds for a prefix);
    watch() hands out scripted watches."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.rev = 10
        self.fail: dict[str, Exception] = {}
        self.reads: list[tuple[str, int]] = []
        self.watches: list[ScriptedWatch] = []
        self.begun_before_read: list[bool] = []

    def range(self, prefix: str) -> RangeResult:
        self.begun_before_read.append(all(w.begun for w in self.watches))
        if prefix in self.fail:
            raise self.fail.pop(prefix)
        self.reads.append((prefix, self.rev))
        kvs = [KV(k, v, 1, 1, 1) for k, v in sorted(self.data.items()) if k.startswith(prefix)]
        return RangeResult(kvs, self.rev)

    def revision(self) -> int:
        return self.rev

    def watch(self, prefix: str, start_revision: int) -> ScriptedWatch:
        self.watches.append(ScriptedWatch(prefix, start_revision))
        return self.watches[-1]


def put(key: str, rev: int, value: bytes = b'{"v": 1}') -> Event:
    return Event("put", KV(key, value, rev, rev, 1))


def feed_of(
    store: Store, changes: list[str] | None = None
) -> tuple[MirrorFeed, PrefixMirror, PrefixMirror]:
    def changed(prefix: str) -> None:
        if changes is not None:
            changes.append(prefix)

    a = PrefixMirror(store, A, lambda: changed(A))  # type: ignore[arg-type]
    b = PrefixMirror(store, B, lambda: changed(B))  # type: ignore[arg-type]
    return MirrorFeed(store, (a, b), "/r/", store.watch), a, b


def test_the_first_watch_starts_at_the_next_revision_before_the_reads() -> None:
    store = Store()
    feed, a, b = feed_of(store)
    feed.start()
    try:
        assert a.synced.wait(WAIT) and b.synced.wait(WAIT)
        assert [(w.prefix, w.start) for w in store.watches] == [("/r/", 11)]
        assert store.begun_before_read == [True, True]  # the stream opened, then the reads
    finally:
        feed.stop()


def test_one_watch_from_the_oldest_read_feeds_each_mirror_what_its_read_did_not_hold() -> None:
    store = Store()
    store.data = {A + "1": b'{"v": 1}'}
    changes: list[str] = []
    feed, a, b = feed_of(store, changes)
    a.read()  # read at 10; b reads at 12: what it holds of 11 and 12 must not come again
    store.rev = 12
    feed.start()
    try:
        wait_for(lambda: len(store.watches) == 1, WAIT, "the feed's one watch")
        w = store.watches[0]
        assert (w.prefix, w.start) == ("/r/", 11)
        assert store.reads == [(A, 10), (B, 12)]  # a was not read again
        changes.clear()
        for ev in (put(A + "2", 11), put(B + "old", 12), put("/r/c/x", 12), put(B + "new", 13)):
            w.items.put(ev)
        wait_for(lambda: b.get("new") is not None, WAIT, "b's new key")
        assert set(a.values()) == {"1", "2"} and set(b.values()) == {"new"}
        assert (a.revision, b.revision) == (11, 13)
        assert changes == [A, B]  # one change per applied event, none for what was skipped
    finally:
        feed.stop()
    assert w.cancelled.wait(WAIT)  # stop() cancels the watch


def test_two_keys_of_one_revision_both_reach_the_mirror() -> None:
    store = Store()
    feed, a, _ = feed_of(store)
    feed.start()
    try:
        wait_for(lambda: store.watches, WAIT, "the watch")
        store.watches[0].items.put(put(A + "x", 11))
        store.watches[0].items.put(put(A + "y", 11))
        wait_for(lambda: set(a.values()) == {"x", "y"}, WAIT, "both keys of revision 11")
    finally:
        feed.stop()


def test_compacted_history_makes_every_mirror_on_the_watch_read_again() -> None:
    store = Store()
    feed, a, b = feed_of(store)
    feed.start()
    try:
        wait_for(lambda: store.watches, WAIT, "the first watch")
        store.rev = 20
        store.data = {B + "k": b'{"v": 2}'}
        store.watches[0].items.put(Missed(15))  # a hub's history fell short: no pause
        wait_for(lambda: len(store.reads) == 4, WAIT, "the mirrors read again")
        assert store.watches[1].start == 21  # opened before they read: from now
        assert store.reads[2:] == [(A, 20), (B, 20)]
        assert (a.restarts, b.restarts) == (1, 1) and b.get("k") == {"v": 2}
        assert (a.failures, b.failures) == (0, 0)
    finally:
        feed.stop()


def test_a_failed_read_is_retried_and_the_mirrors_already_read_keep_theirs() -> None:
    store = Store()
    store.fail[B] = StoreUnavailable("etcd away")
    feed, a, b = feed_of(store)
    feed.backoff.first = 0.01
    feed.start()
    try:
        assert b.synced.wait(WAIT)
        assert store.reads == [(A, 10), (B, 10)]  # a read once
        first, again = store.watches
        assert first.cancelled.is_set() and again.start == 11  # from a's read on
        assert (a.failures, b.failures, feed.failures) == (0, 1, 1)
        assert (a.restarts, b.restarts) == (0, 0)  # no watch was lost
    finally:
        feed.stop()


def test_a_watch_that_fails_otherwise_counts_a_failure_and_reads_again() -> None:
    store = Store()
    feed, a, b = feed_of(store)
    feed.backoff.first = 0.01
    feed.start()
    try:
        wait_for(lambda: store.watches, WAIT, "the first watch")
        store.watches[0].items.put(StoreUnavailable("the shared stream failed"))
        wait_for(lambda: len(store.reads) == 4, WAIT, "the mirrors read again")
        assert (a.restarts, b.failures, feed.failures) == (1, 1, 1)
    finally:
        feed.stop()


def test_a_cluster_view_is_kept_by_one_thread(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        before = {t.name for t in threading.enumerate()}
        view = ClusterView(store, lambda: None).start()
        try:
            assert view.wait_synced(WAIT)
            names = [t.name for t in threading.enumerate() if t.name not in before]
            assert names.count(f"cluster state {keys.ROOT}") == 1
            assert not [n for n in names if n.startswith("cluster state ") and n != view.feed.name]
        finally:
            view.stop()


class CountingRefreshes(EmbeddedStore):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.refreshes = 0

    def lease_refresh(self, lease_id: int) -> int:
        self.refreshes += 1
        return super().lease_refresh(lease_id)


def test_the_registration_keeps_its_lease_alive_in_its_own_loop(tmp_path: Path) -> None:
    with CountingRefreshes(str(tmp_path / "state.db")) as store:
        reg = HostRegistration(store, HostRecord(host="h1"), ttl=1).start()
        try:
            assert reg.registered.wait(WAIT)
            kv = store.get(keys.host("h1"))
            assert kv is not None
            wait_for(lambda: store.refreshes >= 2, WAIT, "the lease refreshed twice")
            assert not [t for t in threading.enumerate() if t.name.startswith("lease-keepalive")]
            now = store.get(keys.host("h1"))
            assert now is not None and now.lease == kv.lease
        finally:
            reg.stop()
        assert store.get(keys.host("h1")) is None


def test_keep_alive_ends_when_its_sleep_says_stop_or_the_lease_is_gone(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        lease = store.lease_grant(3)
        lease.keep_alive(lambda _s: True)  # asked to stop: returns at once, not lost
        assert not lease.lost.is_set()
        store.lease_revoke(lease.id)
        lease.keep_alive(lambda _s: False)  # the next refresh finds it gone
        assert lease.lost.is_set()


def test_a_compaction_pauses_the_read_again() -> None:
    store = Store()
    feed, _, _ = feed_of(store)
    feed.start()
    try:
        wait_for(lambda: store.watches, WAIT, "the first watch")
        store.watches[0].items.put(Compacted(5))
        wait_for(lambda: len(store.reads) == 4, WAIT, "the mirrors read again")
    finally:
        feed.stop()


class Unreachable(EmbeddedStore):
    def lease_refresh(self, lease_id: int) -> int:
        raise StoreUnavailable("etcd too slow to answer")


def test_refresh_retries_are_spaced_ever_further_apart(tmp_path: Path) -> None:
    with Unreachable(str(tmp_path / "state.db")) as store:
        lease = store.lease_grant(30)
        waits: list[float] = []

        def sleep(seconds: float) -> bool:
            waits.append(seconds)
            return len(waits) > 7

        lease.keep_alive(sleep)
        retries = waits[1:]  # after the first, jittered, refresh
        assert retries[0] <= 0.5 and max(retries) <= 10.0
        rising = retries[:5]  # 0.5, 1, 2, 4, 8 s, each less up to half: then capped at ttl/3
        assert rising == sorted(rising) and retries[-1] > 4 * retries[0]
        assert not lease.lost.is_set()  # within its TTL: not lost
