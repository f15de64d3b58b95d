"""Group commit: the allocation txns of one process's threads, committed together.

Each request plans its txn alone (compares and ops, against what it read), exactly as it
would to commit it alone, and hands it to ``GroupCommit.txn``. The first request to find
no commit in flight leads: it takes what is queued (the members independent of each
other, ``store.batch.split_batch``), commits them with one ``Store.txn_batch`` (one fsync,
one etcd round trip), gives each its own outcome, and passes the lead to the first
request still queued, which does the same with whatever queued meanwhile. No request
waits for a timer: a batch is what arrived while the previous commit was in flight, and
a lone request commits at once.

A member's outcome is the one it would have had alone (store/batch.py), so the callers'
retry loops are unchanged: a member whose compares failed retries on fresh reads, and the
others in its batch are not affected. A member that conflicts with one already in the
batch (the same endpoint ID twice at once) waits for the next batch, at its head.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from store import Compare, Op, Store, StoreError, StoreUnavailable, Txn, TxnResult, check_txn
from store.batch import MAX_BATCH, split_batch, writes


@dataclass(eq=False)
class _Slot:
    """One queued txn. Its thread sleeps on ``_wake`` (a lock taken at birth, cheaper than an
    Event) until it is released once: the txn was committed, or the lead is handed to it."""

    txn: Txn
    result: TxnResult | None = None
    error: BaseException | None = None
    _wake: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._wake.acquire()

    @property
    def done(self) -> bool:
        return self.result is not None or self.error is not None

    def wait(self) -> None:
        self._wake.acquire()

    def wake(self) -> None:
        self._wake.release()

    def finish(self, result: TxnResult | None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.wake()


class GroupCommit:
    """Commits the txns handed to it by concurrent threads in batches, one leader at a time."""

    def __init__(self, store: Store, limit: int = MAX_BATCH) -> None:
        self._store = store
        self._limit = limit
        self._lock = threading.Lock()
        self._queue: deque[_Slot] = deque()
        self._leader: _Slot | None = None
        self._sizes: Counter[int] = Counter()  # batch size -> how many batches
        self._last = 0  # the size of the last batch

    def txn(self, compares: Sequence[Compare], ops: Sequence[Op]) -> TxnResult:
        """Commit ``ops`` iff ``compares`` hold, as ``Store.txn`` would, in the next batch."""
        slot = _Slot(Txn(tuple(compares), tuple(ops)))
        # What the store would refuse, it refuses in this thread, before the batch.
        check_txn(slot.txn.compares, slot.txn.ops, ())
        writes(slot.txn)
        with self._lock:
            self._queue.append(slot)
            if self._leader is None:
                self._leader = slot
            leading = self._leader is slot
        if not leading:
            slot.wait()  # until committed, or handed the lead
        if not slot.done:
            if leading and self._last > 1 and len(self._queue) == 1:
                # The threads of the last batch are on their way back with new requests:
                # let them queue behind this one (a yield of the GIL, not a timed wait).
                time.sleep(0)
            try:
                while not slot.done:
                    self._commit_next()
            finally:
                self._pass_lead(slot)
        if slot.error is not None:
            raise slot.error
        assert slot.result is not None
        return slot.result

    def _pass_lead(self, me: _Slot) -> None:
        with self._lock:
            if not me.done and me in self._queue:
                self._queue.remove(me)  # leaving on an exception: not the next leader
            nxt = self._queue[0] if self._queue else None
            self._leader = nxt
        if nxt is not None:
            nxt.wake()

    def _commit_next(self) -> None:
        """Take the next batch off the queue, commit it, and hand out the outcomes."""
        with self._lock:
            queued = list(self._queue)
            if len(queued) == 1:
                batch, self._queue = queued, deque()
            else:
                taken, waiting = split_batch([s.txn for s in queued], self._limit)
                batch = [queued[i] for i in taken]
                self._queue = deque(queued[i] for i in waiting)
            self._sizes[len(batch)] += 1
            self._last = len(batch)
        for s, outcome in zip(batch, self._commit(batch), strict=True):
            if isinstance(outcome, TxnResult):
                s.finish(outcome)
            else:
                s.finish(None, outcome)

    def _commit(self, batch: list[_Slot]) -> list[TxnResult | BaseException]:
        """Each member's outcome, or the exception it must raise."""
        if len(batch) == 1:
            return [self._alone(batch[0].txn)]
        try:
            res = self._store.txn_batch([s.txn for s in batch])
        except StoreUnavailable as e:
            return [_copy(e) for _ in batch]  # the outcome is unknown: never sent twice
        except StoreError:
            # Refused as a whole (too large a request, say): each alone instead, so that
            # one member's problem stays its own.
            return [self._alone(s.txn) for s in batch]
        except BaseException as e:
            return [_copy(e) for _ in batch]
        return [TxnResult(ok, res.revision) for ok in res.succeeded]

    def _alone(self, t: Txn) -> TxnResult | BaseException:
        try:
            return self._store.txn(t.compares, t.ops)
        except BaseException as e:
            return e

    def stats(self) -> dict[str, Any]:
        """Batches so far: how many, of how many txns, and how many batches of each size."""
        with self._lock:
            sizes = dict(sorted(self._sizes.items()))
        batches = sum(sizes.values())
        txns = sum(n * c for n, c in sizes.items())
        return {
            "batches": batches,
            "txns": txns,
            "meanBatch": round(txns / batches, 2) if batches else 0.0,
            "maxBatch": max(sizes, default=0),
            "sizes": {str(n): c for n, c in sizes.items()},
        }


def _copy(e: BaseException) -> BaseException:
    """Each thread raises its own exception object (raising one object from several
    threads at once would tangle their tracebacks)."""
    try:
        return copy.copy(e)
    except Exception:
        return e
