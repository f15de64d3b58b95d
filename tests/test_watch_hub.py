"""store.hub: many watches on one shared store watch, against a scripted upstream."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from common import keys
from common.models import GlobalSettings
from common.records import encode_config
from plugin.cluster import COMPACTED_PAUSE, ClusterView, reread_pause
from store.base import KV, Compacted, Event, StoreError, Watch
from store.embedded import EmbeddedStore
from store.hub import Missed, WatchHub
from testbed.scripted_watch import ScriptedWatch
from testbed.wait import wait_for

WAIT = 10.0  # only a bound on a hung test


class Store:
    """The part of a Store a hub uses: watch (recorded) and revision."""

    def __init__(self) -> None:
        self.upstreams: list[ScriptedWatch] = []

    def watch(self, prefix: str, start_revision: int, *, prev_kv: bool = True) -> ScriptedWatch:
        self.upstreams.append(ScriptedWatch(prefix, start_revision, prev_kv))
        return self.upstreams[-1]

    def revision(self) -> int:
        return 100


def put(key: str, rev: int) -> Event:
    return Event("put", KV(key, b"v", rev, rev, 1))


def take(w: Watch, n: int) -> list[tuple[str, int]]:
    """The first ``n`` events of ``w`` (in a thread: iteration blocks), as (key, revision)."""
    got: list[tuple[str, int]] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            for ev in w:
                got.append((ev.kv.key, ev.kv.mod_revision))
                if len(got) == n:
                    break
        except BaseException as e:
            failed.append(e)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(WAIT), got
    if failed:
        raise failed[0]
    return got


def hub_with(history: int = 100) -> tuple[WatchHub, Store]:
    store = Store()
    return WatchHub(store, "/r/", history=history), store  # type: ignore[arg-type]


def test_watches_of_several_prefixes_share_one_stream_without_prev_kv() -> None:
    hub, store = hub_with()
    a = hub.watch("/r/a/", 10)
    b = hub.watch("/r/b/", 11)
    assert len(store.upstreams) == 1 and hub.watching() == 2
    up = store.upstreams[0]
    assert (up.prefix, up.start, up.prev_kv) == ("/r/", 10, False)
    for ev in (put("/r/a/1", 10), put("/r/b/1", 10), put("/r/x", 11), put("/r/b/2", 11)):
        up.items.put(ev)
    up.items.put(put("/r/a/2", 12))
    assert take(a, 2) == [("/r/a/1", 10), ("/r/a/2", 12)]
    assert take(b, 1) == [("/r/b/2", 11)]  # b started after revision 10
    assert (hub.received, hub.delivered) == (5, 3)
    hub.close()
    assert up.cancelled.is_set()


def test_a_watch_from_a_revision_already_passed_gets_it_from_the_history() -> None:
    hub, store = hub_with()
    hub.watch("/r/a/", 10)
    up = store.upstreams[0]
    for ev in (put("/r/b/1", 10), put("/r/b/2", 11), put("/r/b/3", 11)):
        up.items.put(ev)
    wait_for(lambda: hub.received == 3, WAIT, "the hub took three events")
    late = hub.watch("/r/b/", 11)
    up.items.put(put("/r/b/4", 12))
    assert take(late, 3) == [("/r/b/2", 11), ("/r/b/3", 11), ("/r/b/4", 12)]
    assert len(store.upstreams) == 1


def test_a_watch_older_than_the_history_is_told_to_read_again() -> None:
    hub, store = hub_with(history=2)
    hub.watch("/r/a/", 10)
    up = store.upstreams[0]
    for ev in (put("/r/a/1", 10), put("/r/a/2", 11), put("/r/a/3", 11), put("/r/a/4", 12)):
        up.items.put(ev)
    wait_for(lambda: hub.received == 4, WAIT, "the hub took four events")
    # Two kept: revision 10 went, and 11 with it, since a revision is kept whole or not at all.
    with pytest.raises(Missed) as missed:
        take(hub.watch("/r/a/", 11), 1)
    assert missed.value.compact_revision == 11
    assert isinstance(missed.value, Compacted)
    assert take(hub.watch("/r/a/", 12), 1) == [("/r/a/4", 12)]
    # ...and a watch older than the stream's own start is told the same
    with pytest.raises(Missed):
        take(hub.watch("/r/a/", 9), 1)


def test_a_failed_stream_ends_every_watch_and_the_next_watch_starts_one_afresh() -> None:
    hub, store = hub_with()
    a, b = hub.watch("/r/a/", 10), hub.watch("/r/b/", 10)
    store.upstreams[0].items.put(Compacted(12))
    for w in (a, b):
        with pytest.raises(Compacted):
            take(w, 1)
    assert hub.watching() == 0
    again = hub.watch("/r/a/", 20)
    assert len(store.upstreams) == 2 and store.upstreams[1].start == 20 and hub.streams == 2
    store.upstreams[1].items.put(put("/r/a/1", 20))
    assert take(again, 1) == [("/r/a/1", 20)]


def test_a_cancelled_watch_ends_and_gets_no_more() -> None:
    hub, store = hub_with()
    a, b = hub.watch("/r/a/", 10), hub.watch("/r/a/", 10)
    a.cancel()
    assert take(a, 1) == [] and hub.watching() == 1
    store.upstreams[0].items.put(put("/r/a/1", 10))
    assert take(b, 1) == [("/r/a/1", 10)]
    assert hub.delivered == 1


def test_a_watch_must_be_under_the_hub_and_the_hub_open() -> None:
    hub, _ = hub_with()
    with pytest.raises(ValueError, match="not under"):
        hub.watch("/other/", 1)
    hub.close()
    with pytest.raises(StoreError, match="closed"):
        hub.watch("/r/a/", 1)


def test_a_watch_from_now_starts_after_the_current_revision() -> None:
    hub, store = hub_with()
    hub.watch("/r/a/", 0)
    assert store.upstreams[0].start == 101


def test_only_a_real_compaction_pauses_the_next_read() -> None:
    assert reread_pause(Missed(5), lambda: 1.0) == 0.0
    assert reread_pause(Compacted(5), lambda: 0.5) == COMPACTED_PAUSE / 2


class CountingStore(EmbeddedStore):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.watches: list[tuple[str, bool]] = []

    def watch(self, prefix: str, start_revision: int, *, prev_kv: bool = True) -> Any:
        self.watches.append((prefix, prev_kv))
        return super().watch(prefix, start_revision, prev_kv=prev_kv)


def test_a_cluster_view_follows_every_prefix_on_one_store_watch(tmp_path: Path) -> None:
    with CountingStore(str(tmp_path / "state.db")) as store:
        store.put(keys.host("h1"), b'{"host": "h1"}')
        view = ClusterView(store, lambda: None).start()
        try:
            assert view.wait_synced(WAIT)
            store.put(keys.host("h2"), b'{"host": "h2"}')
            store.put(keys.GLOBAL, encode_config(GlobalSettings(arpMode="flood")))
            wait_for(lambda: set(view.hosts.values()) == {"h1", "h2"}, WAIT, "h2 mirrored")
            wait_for(lambda: view.arp_mode() == "flood", WAIT, "the settings mirrored")
            assert store.watches == [(keys.ROOT, False)]
        finally:
            view.stop()


def test_a_cluster_view_may_be_given_its_watches(tmp_path: Path) -> None:
    with CountingStore(str(tmp_path / "state.db")) as store:
        hub = WatchHub(store, keys.ROOT)
        view = ClusterView(store, lambda: None, watches=hub).start()
        try:
            assert view.wait_synced(WAIT)
            wait_for(lambda: hub.watching() == 1, WAIT, "the view's one watch on the hub")
            store.put(keys.host("h1"), b'{"host": "h1"}')
            wait_for(lambda: set(view.hosts.values()) == {"h1"}, WAIT, "h1 mirrored")
            assert store.watches == [(keys.ROOT, False)]  # the hub's
        finally:
            view.stop()
            hub.close()


def test_a_hub_started_ahead_serves_watches_that_read_after_it() -> None:
    hub, store = hub_with()
    hub.follow()  # the store is at revision 100
    assert [u.start for u in store.upstreams] == [101]
    up = store.upstreams[0]
    up.items.put(put("/r/a/1", 101))
    wait_for(lambda: hub.received == 1, WAIT, "the hub took the event")
    # A mirror that read its prefix at revision 100, after the hub started: no Missed.
    assert take(hub.watch("/r/a/", 101), 1) == [("/r/a/1", 101)]
    hub.follow()  # already following: no second stream
    assert len(store.upstreams) == 1


def test_a_hub_whose_store_is_down_is_started_by_its_first_watch() -> None:
    hub, store = hub_with()

    def down() -> int:
        raise StoreError("etcd is unreachable")

    store.revision = down  # type: ignore[method-assign]
    hub.follow()
    assert store.upstreams == []
    hub.watch("/r/a/", 10)
    assert [u.start for u in store.upstreams] == [10]
