"""Removing deleted endpoints' switch ports and veths after their callers have the answer.

Docker waits on DeleteEndpoint (and so does `docker run --rm`, and the next container's
start behind it), but nothing needs the port gone by then: its flows are removed before
the answer, so the port carries no traffic. ovs-vswitchd's port removal (a reconfiguration
whose cost grows with the bridge's ports, and the wait for its ``cur_cfg``) and the
kernel's veth deletion cost tens of milliseconds, so they run here, on one background
thread. What is asked for while a removal runs is removed next in one batch: a burst of
deleted containers costs ovs-vswitchd one reconfiguration, not one each.

Each removal is keyed by its endpoint: plugging the same endpoint again (a retried
CreateEndpoint: the same veth names) first waits for its removal (``wait``); removing a
network, a refused attach, CNI DEL, stopping the agent and tests' leak checks wait for
them (``settle``). A removal that fails is logged and counted; what it left is removed by
the agent's audit or its next start, which remove every port and veth no endpoint owns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

log = logging.getLogger(__name__)

MAX_BATCH = 64  # endpoints removed in one batch (one OVSDB transaction)


class Teardown:
    """Background removals by key, in batches: ``remove(keys)`` removes them all (and
    raises if any failed)."""

    def __init__(self, remove: Callable[[list[str]], None], max_batch: int = MAX_BATCH) -> None:
        self._remove = remove
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: list[tuple[str, Future[None]]] = []
        self._pending: dict[str, Future[None]] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.failed = 0  # removals that failed, since start
        self.done = 0  # removals finished (failed ones too), since start
        self.batches = 0  # calls of remove(), since start

    def submit(self, key: str) -> None:
        """Remove ``key`` in the background."""
        future: Future[None] = Future()
        with self._cond:
            if self._stopped:
                raise RuntimeError(f"{key}: the agent is stopping; the next start removes it")
            self._queue.append((key, future))
            self._pending[key] = future
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="teardown", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
            self._run(batch)

    def _run(self, batch: list[tuple[str, Future[None]]]) -> None:
        keys = list(dict.fromkeys(k for k, _ in batch))
        error: Exception | None = None
        try:
            self._remove(keys)
        except Exception as e:
            error = e
            log.exception("%s: removing their ports and veths failed; the audit does", keys)
        with self._cond:
            self.batches += 1
            self.done += len(batch)
            self.failed += len(batch) if error is not None else 0
            for key, future in batch:
                if self._pending.get(key) is future:
                    del self._pending[key]
        for _, future in batch:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)

    def wait(self, key: str, timeout: float | None = None) -> bool:
        """Wait for the removal of ``key`` if one is pending; False if it is still pending
        after ``timeout``."""
        with self._cond:
            future = self._pending.get(key)
        return future is None or _finished(future, timeout)

    def settle(self, timeout: float | None = None) -> int:
        """Wait for every removal asked for so far; how many are still pending after
        ``timeout`` (0: all done)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            futures = list(self._pending.values())
        for future in futures:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            _finished(future, left)
        return sum(not f.done() for f in futures)

    def pending(self) -> list[str]:
        """The keys whose removal has not finished."""
        with self._cond:
            return sorted(self._pending)

    def stop(self, timeout: float) -> int:
        """Finish what is pending (up to ``timeout``) and accept no more; what is left."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        return self.settle(timeout)


def _finished(future: Future[None], timeout: float | None) -> bool:
    """Wait for ``future``; True once it is done, whatever it raised (that was logged)."""
    try:
        future.exception(timeout)
    except TimeoutError:
        return False
    return True
