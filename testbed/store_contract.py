"""The store contract (store/base.py), run unchanged against every backend.

Use: subclass ``StoreContract`` in a ``Test*`` class and give it a ``store`` fixture. Each
test works under its own key prefix ``p``, so a store shared between tests is fine as long
as nothing else writes to it while a test runs (tests compare global revisions).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from store.base import (
    Compacted,
    Compare,
    Delete,
    Event,
    LeaseNotFound,
    Put,
    Store,
    StoreError,
    Txn,
    Watch,
)

from .wait import wait_for

WAIT = 10.0  # generous bound for anything asynchronous


class Collector:
    """Iterates a watch in a thread and queues what it yields (events or the exception)."""

    def __init__(self, store: Store, prefix: str, start_revision: int) -> None:
        self.watch: Watch = store.watch(prefix, start_revision)
        self.items: queue.Queue[Event | BaseException] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for ev in self.watch:
                self.items.put(ev)
        except BaseException as e:
            self.items.put(e)

    def take(self, n: int, timeout: float = WAIT) -> list[Event]:
        deadline = time.monotonic() + timeout
        out: list[Event] = []
        while len(out) < n:
            try:
                item = self.items.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise AssertionError(f"got {len(out)} of {n} events: {out}") from None
            if isinstance(item, BaseException):
                raise item
            out.append(item)
        return out

    def error(self, timeout: float = WAIT) -> BaseException:
        item = self.items.get(timeout=timeout)
        assert isinstance(item, BaseException), f"expected an exception, got {item}"
        return item

    def assert_quiet(self, seconds: float = 0.3) -> None:
        """A negative check: give a wrong extra event ``seconds`` to arrive, then see none."""
        time.sleep(seconds)
        assert self.items.empty(), f"unexpected: {list(self.items.queue)}"

    def close(self) -> None:
        self.watch.cancel()
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "cancel() did not end the iteration"


def summary(events: list[Event]) -> list[tuple[str, str, bytes, int]]:
    return [(e.type, e.kv.key, e.kv.value, e.kv.mod_revision) for e in events]


INT_CASES = [
    # (op, offset added to the actual value, expected)
    ("==", 0, True),
    ("==", 1, False),
    ("!=", 0, False),
    ("!=", 1, True),
    ("<", 1, True),
    ("<", 0, False),
    (">", -1, True),
    (">", 0, False),
]
VALUE_FOR_OFFSET = {-1: b"l", 0: b"m", 1: b"n"}


class StoreContract:
    """The backend-independent behaviour of a Store."""

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        raise NotImplementedError("a backend's test class provides the store fixture")

    @pytest.fixture
    def p(self) -> str:
        return f"/contract/{uuid.uuid4().hex[:12]}/"

    @pytest.fixture
    def watches(self) -> Iterator[Callable[[Store, str, int], Collector]]:
        made: list[Collector] = []

        def make(store: Store, prefix: str, start: int) -> Collector:
            c = Collector(store, prefix, start)
            made.append(c)
            return c

        yield make
        for c in made:
            c.close()

    # Keys and values.

    def test_get_missing(self, store: Store, p: str) -> None:
        assert store.get(p + "nothing") is None

    def test_put_get(self, store: Store, p: str) -> None:
        rev = store.put(p + "bin", b"\x00\xff\x10binary")
        kv = store.get(p + "bin")
        assert kv is not None
        assert (kv.key, kv.value, kv.mod_revision, kv.lease) == (
            p + "bin",
            b"\x00\xff\x10binary",
            rev,
            0,
        )
        store.put(p + "empty", b"")
        empty = store.get(p + "empty")
        assert empty is not None and empty.value == b""

    def test_put_bumps_revision_once(self, store: Store, p: str) -> None:
        before = store.revision()
        rev = store.put(p + "a", b"1")
        assert rev == before + 1 == store.revision()

    def test_delete(self, store: Store, p: str) -> None:
        store.put(p + "a", b"1")
        before = store.revision()
        assert store.delete(p + "a") == before + 1
        assert store.get(p + "a") is None

    def test_delete_missing_writes_nothing(self, store: Store, p: str, watches: Callable) -> None:
        before = store.revision()
        w = watches(store, p, before + 1)
        assert store.delete(p + "missing") == before
        assert store.delete(p + "none/", prefix=True) == before
        assert store.revision() == before
        w.assert_quiet()

    def test_range_ordering_and_revision(self, store: Store, p: str) -> None:
        for k in ["b", "a/x", "ab", "a", "c/d/e", "A", "é"]:
            store.put(p + k, k.encode())
        store.put(p[:-1] + "x", b"sibling outside the prefix")
        res = store.range(p)
        assert [kv.key for kv in res.kvs] == [
            p + k for k in sorted(["b", "a/x", "ab", "a", "c/d/e", "A", "é"], key=str.encode)
        ]
        assert all(kv.value == kv.key[len(p) :].encode() for kv in res.kvs)
        assert res.revision == store.revision()
        assert [kv.key for kv in store.range(p + "a").kvs] == [p + "a", p + "a/x", p + "ab"]
        assert store.range(p + "zz").kvs == []

    def test_range_includes_the_prefix_key_and_everything(self, store: Store, p: str) -> None:
        store.put(p, b"self")
        store.put(p + "child", b"c")
        assert [kv.key for kv in store.range(p).kvs] == [p, p + "child"]
        everything = {kv.key for kv in store.range("").kvs}
        assert {p, p + "child"} <= everything

    def test_range_non_ascii_prefix(self, store: Store, p: str) -> None:
        # The range end of "é" is not valid UTF-8: it must be handled as bytes.
        store.put(p + "é1", b"1")
        store.put(p + "é2", b"2")
        store.put(p + "f", b"3")
        assert [kv.key for kv in store.range(p + "é").kvs] == [p + "é1", p + "é2"]
        assert store.delete(p + "é", prefix=True) > 0
        assert [kv.key for kv in store.range(p).kvs] == [p + "f"]

    def test_range_returns_many_keys(self, store: Store, p: str) -> None:
        for chunk in range(3):
            store.txn((), [Put(f"{p}k{chunk}-{i:03d}", b"v") for i in range(100)])
        assert len(store.range(p).kvs) == 300

    def test_revision_bookkeeping(self, store: Store, p: str) -> None:
        k = p + "k"
        r1 = store.put(k, b"1")
        r2 = store.put(k, b"2")
        kv = store.get(k)
        assert kv is not None
        assert (kv.create_revision, kv.mod_revision, kv.version) == (r1, r2, 2)
        store.delete(k)
        r4 = store.put(k, b"3")
        kv = store.get(k)
        assert kv is not None
        assert (kv.create_revision, kv.mod_revision, kv.version) == (r4, r4, 1)

    # Transactions.

    def test_txn_is_one_revision(self, store: Store, p: str, watches: Callable) -> None:
        store.put(p + "c", b"old")
        before = store.revision()
        w = watches(store, p, before + 1)
        res = store.txn((), [Put(p + "b", b"B"), Put(p + "a", b"A"), Delete(p + "c")])
        assert res.succeeded and res.revision == before + 1 == store.revision()
        for k in ("a", "b"):
            kv = store.get(p + k)
            assert kv is not None and kv.mod_revision == res.revision
        assert summary(w.take(3)) == [
            ("put", p + "b", b"B", res.revision),
            ("put", p + "a", b"A", res.revision),
            ("delete", p + "c", b"", res.revision),
        ]

    def test_txn_writing_nothing_keeps_revision(self, store: Store, p: str) -> None:
        store.put(p + "a", b"1")
        before = store.revision()
        res = store.txn([Compare(p + "a", "value", "==", b"other")], [Put(p + "a", b"2")])
        assert res == type(res)(False, before)
        res = store.txn([Compare(p + "a", "value", "==", b"1")], [Delete(p + "missing")])
        assert res == type(res)(True, before)
        assert store.revision() == before

    def test_failure_branch(self, store: Store, p: str) -> None:
        store.put(p + "a", b"1")
        res = store.txn(
            [Compare(p + "a", "version", ">", 5)],
            [Put(p + "ok", b"x")],
            [Put(p + "failed", b"y")],
        )
        assert not res.succeeded
        assert store.get(p + "ok") is None
        kv = store.get(p + "failed")
        assert kv is not None and kv.mod_revision == res.revision == store.revision()

    @pytest.mark.parametrize("target", ["create", "mod", "version", "value"])
    @pytest.mark.parametrize(("op", "offset", "expected"), INT_CASES)
    def test_compare(
        self, store: Store, p: str, target: str, op: str, offset: int, expected: bool
    ) -> None:
        k = p + "k"
        store.put(k, b"x")
        store.put(p + "other", b"x")  # so that create, mod and version all differ
        store.put(k, b"m")
        kv = store.get(k)
        assert kv is not None
        actual = {"create": kv.create_revision, "mod": kv.mod_revision, "version": kv.version}
        value: int | bytes = (
            VALUE_FOR_OFFSET[offset] if target == "value" else actual[target] + offset
        )
        res = store.txn([Compare(k, target, op, value)], [Put(p + "hit", b"1")])  # type: ignore[arg-type]
        assert res.succeeded is expected
        assert (store.get(p + "hit") is not None) is expected

    def test_compare_longer_value_is_greater(self, store: Store, p: str) -> None:
        store.put(p + "k", b"m")
        assert store.txn([Compare(p + "k", "value", "<", b"ma")], []).succeeded
        assert store.txn([Compare(p + "k", "value", ">", b"")], []).succeeded

    def test_compare_missing_key(self, store: Store, p: str) -> None:
        k = p + "missing"

        def holds(c: Compare) -> bool:
            return store.txn([c], []).succeeded

        assert holds(Compare(k, "create", "==", 0))
        assert holds(Compare(k, "mod", "==", 0))
        assert holds(Compare(k, "version", "<", 1))
        assert not holds(Compare(k, "version", ">", 0))
        assert not holds(Compare(k, "value", "==", b""))
        assert not holds(Compare(k, "value", "!=", b"x"))  # a missing value never compares
        assert store.create(k, b"1")
        assert not store.create(k, b"2")
        kv = store.get(k)
        assert kv is not None and kv.value == b"1"

    def test_prefix_compare(self, store: Store, p: str) -> None:
        store.put(p + "d/a", b"v")
        store.put(p + "d/b", b"v")
        store.put(p + "d/b", b"v")
        store.put(p + "e", b"w")  # outside p + "d/"

        def holds(c: Compare) -> bool:
            return store.txn([c], []).succeeded

        d = p + "d/"
        assert holds(Compare(d, "version", ">", 0, prefix=True))
        assert holds(Compare(d, "version", "<", 3, prefix=True))
        assert not holds(Compare(d, "version", "==", 1, prefix=True))  # d/b has version 2
        assert holds(Compare(d, "value", "==", b"v", prefix=True))
        assert not holds(Compare(p, "value", "==", b"v", prefix=True))  # e differs
        assert not holds(Compare(d, "create", "==", 0, prefix=True))
        empty = p + "none/"
        assert holds(Compare(empty, "create", "==", 0, prefix=True))
        assert holds(Compare(empty, "version", "<", 1, prefix=True))
        assert not holds(Compare(empty, "mod", ">", 0, prefix=True))
        assert not holds(Compare(empty, "value", "==", b"", prefix=True))

    def test_several_compares_all_must_hold(self, store: Store, p: str) -> None:
        store.put(p + "a", b"1")
        yes = Compare(p + "a", "value", "==", b"1")
        no = Compare(p + "b", "create", ">", 0)
        assert store.txn([yes, yes], []).succeeded
        assert not store.txn([yes, no], []).succeeded

    def test_delete_prefix(self, store: Store, p: str, watches: Callable) -> None:
        for k in ["a", "a/b", "ab", "b"]:
            store.put(p + k, b"v" + k.encode())
        before = store.revision()
        w = watches(store, p, before + 1)
        rev = store.delete(p + "a", prefix=True)
        assert rev == before + 1
        assert [kv.key for kv in store.range(p).kvs] == [p + "b"]
        events = w.take(3)
        assert summary(events) == [("delete", p + k, b"", rev) for k in ["a", "a/b", "ab"]]
        assert [e.prev_value for e in events] == [b"va", b"va/b", b"vab"]

    def test_duplicate_key_in_txn_is_rejected(self, store: Store, p: str) -> None:
        before = store.revision()
        with pytest.raises(StoreError):
            store.txn((), [Put(p + "a", b"1"), Put(p + "a", b"2")])
        with pytest.raises(StoreError):
            store.txn((), [Delete(p, prefix=True), Put(p + "a", b"2")])
        assert store.revision() == before

    # Batches of independent txns (Store.txn_batch).

    def test_batch_members_have_their_own_outcomes(
        self, store: Store, p: str, watches: Callable
    ) -> None:
        store.put(p + "held", b"1")
        before = store.revision()
        w = watches(store, p, before + 1)
        res = store.txn_batch(
            [
                Txn((Compare(p + "a", "create", "==", 0),), (Put(p + "a", b"A"),)),
                Txn((Compare(p + "held", "create", "==", 0),), (Put(p + "b", b"B"),)),
                Txn((Compare(p + "held", "value", "==", b"1"),), (Put(p + "c", b"C"),)),
                Txn((), (Delete(p + "missing"),)),
            ]
        )
        assert res.succeeded == (True, False, True, True)
        assert res.revision == before + 1 == store.revision()  # one revision for the batch
        assert store.get(p + "b") is None
        for k in ("a", "c"):
            kv = store.get(p + k)
            assert kv is not None and kv.mod_revision == res.revision
        assert summary(w.take(2)) == [
            ("put", p + "a", b"A", res.revision),
            ("put", p + "c", b"C", res.revision),
        ]

    def test_batch_compares_see_the_state_before_it(self, store: Store, p: str) -> None:
        store.put(p + "k", b"1")
        kv = store.get(p + "k")
        assert kv is not None
        before = store.revision()
        res = store.txn_batch(
            [
                Txn((Compare(p + "k", "mod", "==", kv.mod_revision),), (Put(p + "x", b"1"),)),
                Txn((Compare(p + "k", "mod", "==", before + 1),), (Put(p + "y", b"1"),)),
            ]
        )
        assert res.succeeded == (True, False)

    def test_batch_writing_nothing_keeps_revision(self, store: Store, p: str) -> None:
        store.put(p + "a", b"1")
        before = store.revision()
        res = store.txn_batch(
            [
                Txn((Compare(p + "a", "value", "==", b"2"),), (Put(p + "b", b"2"),)),
                Txn((Compare(p + "a", "create", "==", 0),), (Put(p + "c", b"2"),)),
            ]
        )
        assert res.succeeded == (False, False) and res.revision == before
        empty = store.txn_batch([])
        assert empty.succeeded == () and empty.revision == before == store.revision()

    def test_batch_of_dependent_txns_is_rejected(self, store: Store, p: str) -> None:
        store.put(p + "a", b"1")
        before = store.revision()
        for batch in (
            [Txn((), (Put(p + "k", b"1"),)), Txn((), (Put(p + "k", b"2"),))],
            [Txn((), (Put(p + "b", b"1"),)), Txn((Compare(p + "b", "create", "==", 0),), ())],
            [Txn((), (Delete(p, prefix=True),)), Txn((), (Put(p + "z", b"1"),))],
            [Txn((), (Put(p + "a", b"1"), Put(p + "a", b"2")))],
        ):
            with pytest.raises(StoreError):
                store.txn_batch(batch)
        assert store.revision() == before and store.get(p + "k") is None

    def test_batch_with_an_unknown_lease_writes_nothing(self, store: Store, p: str) -> None:
        before = store.revision()
        with pytest.raises(LeaseNotFound):
            store.txn_batch(
                [Txn((), (Put(p + "j", b"v"),)), Txn((), (Put(p + "k", b"v", lease=0x7EADBEEF),))]
            )
        assert store.get(p + "j") is None and store.revision() == before

    def test_batches_from_16_threads_allocate_each_slot_once(self, store: Store, p: str) -> None:
        """Threads race batches of create-if-absent txns over the same slots: every slot
        is won once, and each winner is the txn that was told it succeeded."""
        slots, threads = 40, 16
        won: list[tuple[int, bytes]] = []
        lock = threading.Lock()

        def racer(t: int) -> None:
            for base in range(0, slots, 4):
                batch = [
                    Txn(
                        (Compare(f"{p}s{i}", "create", "==", 0),),
                        (Put(f"{p}s{i}", f"t{t}".encode()),),
                    )
                    for i in range(base, base + 4)
                ]
                res = store.txn_batch(batch)
                with lock:
                    won.extend(
                        (base + j, f"t{t}".encode()) for j, ok in enumerate(res.succeeded) if ok
                    )

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(racer, range(threads)))
        assert sorted(i for i, _ in won) == list(range(slots))
        for i, who in won:
            kv = store.get(f"{p}s{i}")
            assert kv is not None and kv.value == who

    def test_cas_increments_from_32_threads(self, store: Store, p: str) -> None:
        key, threads, per_thread = p + "counter", 32, 5

        def increment() -> None:
            while True:
                kv = store.get(key)
                if kv is None:
                    guard = Compare(key, "create", "==", 0)
                    value = 1
                else:
                    guard = Compare(key, "mod", "==", kv.mod_revision)
                    value = int(kv.value) + 1
                if store.txn([guard], [Put(key, str(value).encode())]).succeeded:
                    return

        def worker(_: int) -> None:
            for _ in range(per_thread):
                increment()

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(worker, range(threads)))
        kv = store.get(key)
        assert kv is not None
        assert int(kv.value) == threads * per_thread == kv.version

    # Watches.

    def test_watch_replays_history_once_in_order(
        self, store: Store, p: str, watches: Callable
    ) -> None:
        r1 = store.put(p + "a", b"1")
        r2 = store.put(p + "b", b"2")
        r3 = store.put(p + "a", b"3")
        r4 = store.txn((), [Put(p + "c", b"4"), Delete(p + "b")]).revision
        store.put(p[:-1] + "-outside", b"x")
        w = watches(store, p, r1)
        events = w.take(5)
        assert summary(events) == [
            ("put", p + "a", b"1", r1),
            ("put", p + "b", b"2", r2),
            ("put", p + "a", b"3", r3),
            ("put", p + "c", b"4", r4),
            ("delete", p + "b", b"", r4),
        ]
        assert [e.prev_value for e in events] == [None, None, b"1", None, b"2"]
        assert (events[2].kv.create_revision, events[2].kv.version) == (r1, 2)
        w.assert_quiet()
        r5 = store.put(p + "d", b"5")
        assert summary(w.take(1)) == [("put", p + "d", b"5", r5)]
        w.assert_quiet()

    def test_watch_from_a_middle_revision(self, store: Store, p: str, watches: Callable) -> None:
        store.put(p + "a", b"1")
        r2 = store.put(p + "a", b"2")
        w = watches(store, p, r2)
        assert summary(w.take(1)) == [("put", p + "a", b"2", r2)]
        w.assert_quiet()

    def test_watch_from_zero_sees_only_new_events(
        self, store: Store, p: str, watches: Callable
    ) -> None:
        store.put(p + "old", b"1")
        w = watches(store, p, 0)  # from the revision after the current one, fixed by now
        rev = store.put(p + "new", b"2")
        assert summary(w.take(1)) == [("put", p + "new", b"2", rev)]
        w.assert_quiet()

    def test_watch_filters_by_prefix(self, store: Store, p: str, watches: Callable) -> None:
        w = watches(store, p + "in/", 0)
        store.put(p + "out", b"x")
        store.put(p + "in", b"x")
        store.put(p + "inside", b"x")
        rev = store.put(p + "in/k", b"y")
        assert summary(w.take(1)) == [("put", p + "in/k", b"y", rev)]
        w.assert_quiet()

    def test_watch_delete_events(self, store: Store, p: str, watches: Callable) -> None:
        store.put(p + "k", b"v")
        w = watches(store, p, 0)
        rev = store.delete(p + "k")
        (ev,) = w.take(1)
        assert ev.type == "delete"
        assert (ev.kv.key, ev.kv.value, ev.kv.mod_revision) == (p + "k", b"", rev)
        assert ev.prev_value == b"v"

    def test_watch_cancel_ends_iteration(self, store: Store, p: str) -> None:
        w = store.watch(p, store.put(p + "k", b"v"))
        iterating, done = threading.Event(), threading.Event()

        def run() -> None:
            for _ in w:
                iterating.set()  # the next step waits inside the watch for a next event
            done.set()

        threading.Thread(target=run, daemon=True).start()
        assert iterating.wait(WAIT)
        w.cancel()
        assert done.wait(WAIT)

    def test_watch_callback(self, store: Store, p: str) -> None:
        got: queue.Queue[Event] = queue.Queue()
        w, t = store.watch_callback(p, 0, got.put)
        rev = store.put(p + "k", b"v")
        ev = got.get(timeout=WAIT)
        assert (ev.type, ev.kv.key, ev.kv.mod_revision) == ("put", p + "k", rev)
        w.cancel()
        t.join(WAIT)
        assert not t.is_alive()

    def test_watch_compacted_history(self, store: Store, p: str, watches: Callable) -> None:
        r1 = store.put(p + "a", b"1")
        store.put(p + "a", b"2")
        r3 = store.put(p + "a", b"3")
        store.compact(r3)
        assert isinstance(watches(store, p, r1).error(), Compacted)
        w = watches(store, p, r3)
        assert summary(w.take(1)) == [("put", p + "a", b"3", r3)]

    # Leases.

    def test_lease_expiry_deletes_keys_with_events(
        self, store: Store, p: str, watches: Callable
    ) -> None:
        lease = store.lease_grant(1)
        store.put(p + "l1", b"1", lease=lease.id)
        store.put(p + "l2", b"2", lease=lease.id)
        store.put(p + "plain", b"3")
        kv = store.get(p + "l1")
        assert kv is not None and kv.lease == lease.id
        w = watches(store, p, 0)
        wait_for(lambda: store.get(p + "l1") is None, WAIT, "lease expiry")
        assert [kv.key for kv in store.range(p).kvs] == [p + "plain"]
        events = w.take(2)
        assert [(e.type, e.kv.key) for e in events] == [("delete", p + "l1"), ("delete", p + "l2")]
        assert events[0].kv.mod_revision == events[1].kv.mod_revision
        with pytest.raises(LeaseNotFound):
            lease.refresh()
        with pytest.raises(LeaseNotFound):
            store.put(p + "late", b"x", lease=lease.id)

    def test_lease_revoke(self, store: Store, p: str, watches: Callable) -> None:
        lease = store.lease_grant(30)
        store.put(p + "a", b"1", lease=lease.id)
        store.put(p + "b", b"2", lease=lease.id)
        w = watches(store, p, 0)
        before = store.revision()
        lease.revoke()
        assert store.range(p).kvs == []
        assert summary(w.take(2)) == [
            ("delete", p + "a", b"", before + 1),
            ("delete", p + "b", b"", before + 1),
        ]
        with pytest.raises(LeaseNotFound):
            store.lease_revoke(lease.id)
        with pytest.raises(LeaseNotFound):
            store.put(p + "c", b"3", lease=lease.id)

    def test_lease_refresh(self, store: Store, p: str) -> None:
        lease = store.lease_grant(30)
        try:
            assert lease.ttl >= 30
            assert lease.refresh() == lease.ttl
        finally:
            lease.revoke()

    def test_keepalive_keeps_keys_past_ttl(self, store: Store, p: str) -> None:
        lease = store.lease_grant(1, keepalive=True)
        store.put(p + "k", b"v", lease=lease.id)
        time.sleep(3.5)  # time passing is the subject: past the TTL, only refreshes keep it
        assert store.get(p + "k") is not None
        assert not lease.lost.is_set()
        lease.stop_keepalive()
        wait_for(lambda: store.get(p + "k") is None, WAIT, "expiry once keepalive stopped")
        # The stopped keepalive thread does not notice; the lease is simply gone.
        with pytest.raises(LeaseNotFound):
            lease.refresh()

    def test_keepalive_reports_a_lost_lease(self, store: Store, p: str) -> None:
        lease = store.lease_grant(3, keepalive=True)
        store.lease_revoke(lease.id)  # behind the keepalive's back
        assert lease.lost.wait(WAIT)

    def test_put_with_unknown_lease_fails(self, store: Store, p: str) -> None:
        before = store.revision()
        with pytest.raises(LeaseNotFound):
            store.put(p + "k", b"v", lease=0x7EADBEEF)
        with pytest.raises(LeaseNotFound):
            store.txn((), [Put(p + "j", b"v"), Put(p + "k", b"v", lease=0x7EADBEEF)])
        assert store.get(p + "j") is None and store.get(p + "k") is None
        assert store.revision() == before
        with pytest.raises(LeaseNotFound):
            store.lease_refresh(0x7EADBEEF)
