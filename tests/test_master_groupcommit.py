"""master/groupcommit.py: concurrent txns share commits, each keeping its own outcome.

Batches are made to form deterministically: the store's first commit is held until the
other threads have queued behind it, so they all go in the next batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from master.groupcommit import GroupCommit
from store import BatchResult, Compare, Put, StoreError, StoreUnavailable, Txn, TxnResult
from store.embedded import EmbeddedStore
from testbed.wait import wait_for


class HeldStore(EmbeddedStore):
    """An embedded store that holds its first commit until released, and logs batches."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.holding = threading.Event()
        self.batches: list[int] = []
        self.batch_error: Exception | None = None
        self.armed = False  # whether the next commit is held

    def _hold(self) -> None:
        if self.armed:
            self.armed = False
            self.holding.set()
            assert self.gate.wait(10)

    def txn(self, compares: Any, success: Any, failure: Any = ()) -> TxnResult:
        self._hold()
        return super().txn(compares, success, failure)

    def txn_batch(self, members: Sequence[Txn]) -> BatchResult:
        self._hold()
        self.batches.append(len(members))
        if self.batch_error is not None:
            raise self.batch_error
        return super().txn_batch(members)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HeldStore]:
    s = HeldStore(str(tmp_path / "state.db"))
    yield s
    s.close()


def create(key: str, value: bytes = b"v") -> tuple[list[Compare], list[Put]]:
    return [Compare(key, "create", "==", 0)], [Put(key, value)]


def run_held(store: HeldStore, group: GroupCommit, calls: list[Callable[[], Any]]) -> list[Any]:
    """Run calls[0] (it leads and its commit is held), then the others once it is held, each
    once the one before has queued (so they queue in order); release when they have all
    queued. Returns each call's result or exception."""
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except Exception as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(calls))]
    store.armed = True
    threads[0].start()
    assert store.holding.wait(10)
    for n, t in enumerate(threads[1:], 1):
        t.start()
        wait_for(lambda n=n: len(group._queue) == n, 10, f"call {n} queued")
    store.gate.set()
    for t in threads:
        t.join(10)
    return out


def test_a_lone_txn_commits_at_once(store: HeldStore) -> None:
    group = GroupCommit(store)
    assert group.txn(*create("/k")).succeeded
    assert not group.txn(*create("/k")).succeeded
    assert store.batches == []  # alone: a plain txn
    assert group.stats() == {
        "batches": 2,
        "txns": 2,
        "meanBatch": 1.0,
        "maxBatch": 1,
        "sizes": {"1": 2},
    }


def test_what_queued_meanwhile_is_one_batch_with_its_own_outcomes(store: HeldStore) -> None:
    store.put("/taken", b"x")
    group = GroupCommit(store)
    calls: list[Callable[[], Any]] = [
        lambda: group.txn(*create("/lead")),
        lambda: group.txn(*create("/a")),
        # Refused (its guard fails): changes nothing, for the others neither.
        lambda: group.txn([Compare("/taken", "create", "==", 0)], [Put("/d", b"1")]),
        lambda: group.txn(*create("/b")),
        lambda: group.txn([Compare("/taken", "value", "==", b"x")], [Put("/c", b"1")]),
    ]
    before = store.revision()
    out = run_held(store, group, calls)
    assert [r.succeeded for r in out] == [True, True, False, True, True]
    assert store.batches == [4]
    assert out[1].revision == out[3].revision == out[4].revision == before + 2
    assert store.get("/a") and store.get("/b") and store.get("/c") and not store.get("/d")
    kv = store.get("/taken")
    assert kv is not None and kv.value == b"x"
    assert group.stats()["sizes"] == {"1": 1, "4": 1}


def test_a_conflicting_txn_waits_for_the_next_batch(store: HeldStore) -> None:
    group = GroupCommit(store)
    calls: list[Callable[[], Any]] = [
        lambda: group.txn(*create("/lead")),
        lambda: group.txn(*create("/same", b"1")),
        lambda: group.txn(*create("/same", b"2")),  # same key: not in the same batch
        lambda: group.txn(*create("/other")),
    ]
    out = run_held(store, group, calls)
    assert [r.succeeded for r in out[1:]] == [True, False, True]
    kv = store.get("/same")
    assert kv is not None and kv.value == b"1"
    assert store.batches == [2]  # /same#1 with /other; /same#2 alone after them
    assert group.stats()["sizes"] == {"1": 2, "2": 1}


def test_an_unknown_outcome_is_every_members(store: HeldStore) -> None:
    group = GroupCommit(store)
    store.batch_error = StoreUnavailable("etcd at x failed during /kv/txn; outcome unknown")
    calls: list[Callable[[], Any]] = [lambda i=i: group.txn(*create(f"/k{i}")) for i in range(4)]
    out = run_held(store, group, calls)
    assert out[0].succeeded
    errors = out[1:]
    assert all(isinstance(e, StoreUnavailable) for e in errors)
    assert len({id(e) for e in errors}) == 3  # each thread raises its own
    assert store.get("/k1") is None


def test_a_batch_refused_as_a_whole_is_committed_one_by_one(store: HeldStore) -> None:
    group = GroupCommit(store)
    store.batch_error = StoreError("etcd: request is too large")
    calls: list[Callable[[], Any]] = [lambda i=i: group.txn(*create(f"/k{i}")) for i in range(4)]
    calls.append(lambda: group.txn(*create("/k1")))  # the second, after /k1 alone
    out = run_held(store, group, calls)
    assert [r.succeeded for r in out] == [True, True, True, True, False]


def test_what_the_store_refuses_is_refused_in_its_own_thread(store: HeldStore) -> None:
    group = GroupCommit(store)
    with pytest.raises(StoreError):
        group.txn([], [Put("/k", b"1"), Put("/k", b"2")])
    with pytest.raises(TypeError):
        group.txn([], ["not an op"])  # type: ignore[list-item]
    assert group.txn(*create("/k")).succeeded  # and the queue is not stuck


def test_many_threads_every_txn_answered_once(store: HeldStore) -> None:
    group = GroupCommit(store)
    threads, per_thread = 16, 30
    won: list[str] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        for i in range(per_thread):
            # Half the keys are contended by two threads: exactly one of them wins each.
            key = f"/k{(t // 2) if i % 2 else t}-{i}"
            if group.txn(*create(key, f"{t}".encode())).succeeded:
                with lock:
                    won.append(key)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert len(won) == len(set(won))
    assert sorted(won) == sorted(kv.key for kv in store.range("/k").kvs)
    stats = group.stats()
    assert stats["txns"] == threads * per_thread


def test_a_leader_that_fails_outside_the_store_does_not_stall_the_queue(
    store: HeldStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = GroupCommit(store)
    import master.groupcommit as gc

    real = gc.split_batch
    calls = {"n": 0}

    def broken_once(members: Any, limit: int) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise MemoryError("boom")
        return real(members, limit)

    monkeypatch.setattr(gc, "split_batch", broken_once)
    calls_: list[Callable[[], Any]] = [lambda i=i: group.txn(*create(f"/k{i}")) for i in range(4)]
    out = run_held(store, group, calls_)
    assert out[0].succeeded  # the held lone commit
    # The next leader's split failed: it raises, and the others still commit.
    assert sum(isinstance(r, MemoryError) for r in out) == 1
    assert sum(isinstance(r, TxnResult) and r.succeeded for r in out) == 3
