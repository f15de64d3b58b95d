"""Removing an endpoint's switch port and veth after its caller has the answer.

Docker waits on DeleteEndpoint (and so does `docker run --rm`, and the next container's
start behind it), but nothing needs the port gone by then: its flows are removed before
the answer, so the port carries no traffic. ovs-vswitchd's port removal (the wait for
its ``cur_cfg``) and the kernel's veth deletion cost tens of milliseconds, so they run
here, in the background, in the order they were asked for.

Each removal is keyed by the endpoint: plugging the same endpoint again (a retried
CreateEndpoint, the same veth names) first waits for its removal (``wait``); removing a
network, stopping the agent and the leak checks of tests wait for all of them
(``settle``). A removal that fails is logged and counted; what it left is removed by the
next resync, which removes every port and veth no endpoint owns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

log = logging.getLogger(__name__)


class Teardown:
    """Background removals by key, each key's in order; ``workers`` run at once."""

    def __init__(self, workers: int = 2) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="teardown")
        self._lock = threading.Lock()
        self._pending: dict[str, Future[None]] = {}
        self.failed = 0  # removals that raised, since start
        self.done = 0  # removals that finished, since start

    def submit(self, key: str, remove: Callable[[], None]) -> None:
        """Run ``remove`` in the background, after any earlier removal of ``key``."""
        with self._lock:
            prior = self._pending.get(key)
            future = self._pool.submit(self._run, key, prior, remove)
            self._pending[key] = future
        future.add_done_callback(lambda f: self._forget(key, f))

    def _run(self, key: str, prior: Future[None] | None, remove: Callable[[], None]) -> None:
        if prior is not None:
            _quietly(prior, None)
        try:
            remove()
        except Exception:
            self.failed += 1
            log.exception("%s: removing its port and veth failed; the next resync does", key)
            raise
        finally:
            self.done += 1

    def _forget(self, key: str, future: Future[None]) -> None:
        with self._lock:
            if self._pending.get(key) is future:
                del self._pending[key]

    def wait(self, key: str, timeout: float | None = None) -> bool:
        """Wait for the removal of ``key`` if one is pending; False if it is still running
        after ``timeout``."""
        with self._lock:
            future = self._pending.get(key)
        return future is None or _quietly(future, timeout)

    def settle(self, timeout: float | None = None) -> int:
        """Wait for every removal asked for so far; how many are still pending after
        ``timeout`` (0: all done)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            futures = list(self._pending.values())
        for future in futures:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            _quietly(future, left)
        return sum(not f.done() for f in futures)

    def pending(self) -> list[str]:
        """The keys whose removal has not finished."""
        with self._lock:
            return sorted(self._pending)

    def stop(self, timeout: float) -> int:
        """Finish what is pending (up to ``timeout``), then accept no more; what is left."""
        left = self.settle(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)
        return left


def _quietly(future: Future[None], timeout: float | None) -> bool:
    """Wait for ``future``; True once it is done, whatever it raised (that was logged)."""
    try:
        future.result(timeout)
    except FutureTimeout:
        return False
    except Exception:  # logged where it was raised
        pass
    return True
