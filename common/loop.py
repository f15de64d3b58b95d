"""Every background loop of the agent, written once: a Reconciler runs one pass function in
its own thread, and Backoff spaces out retries.

A pass runs when poked (a burst of pokes is one pass), every ``interval``, and when it asks
to: it returns None (wait for the next poke or interval) or the seconds until it should run
again (a poke still wakes it sooner). A pass that raises is run again after a backoff that
doubles to its cap; the first failure of a run is logged, and so is the recovery. stop()
ends the loop after the pass under way, calling ``on_stop`` to cut a blocking one short (a
watch, an event stream): nothing waits on a thread that will not end.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from collections.abc import Callable
from typing import Self

log = logging.getLogger("netplugin")


class Backoff:
    """Delays that double from ``first`` to ``cap`` while failures go on; reset() on success.

    With ``jitter`` (0..1) each delay is cut by a random fraction up to ``jitter`` of it, so
    that many clients failing together (an etcd restart, a thousand agents' watches) do not
    come back together either. ``rand`` draws from [0, 1): tests pass their own.
    """

    def __init__(
        self,
        first: float = 0.5,
        cap: float = 10.0,
        *,
        jitter: float = 0.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not 0.0 <= jitter <= 1.0:
            raise ValueError(f"jitter {jitter} is not between 0 and 1")
        self.first, self.cap, self.jitter = first, cap, jitter
        self._rand = rand
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(delay * 2, self.cap)
        return jittered(delay, self.jitter, self._rand)

    def reset(self) -> None:
        self._next = self.first


def jittered(delay: float, jitter: float, rand: Callable[[], float] = random.random) -> float:
    """``delay`` less a random fraction of it, up to ``jitter`` (0: exactly ``delay``)."""
    return delay * (1.0 - jitter * rand()) if jitter else delay


class Reconciler:
    """One background loop around ``pass_fn`` (see the module's docstring); each loop of
    the agent is one, or a subclass that passes one of its methods.

    ``expected``: the errors a pass may meet in normal life (a store or dockerd away), logged
    without a traceback; any other is a bug, logged with one. ``passes`` and ``failures``
    count, for the metrics.
    """

    def __init__(
        self,
        name: str,
        pass_fn: Callable[[], float | None],
        *,
        interval: float | None = None,
        coalesce: float = 0.05,
        backoff: Backoff | None = None,
        expected: tuple[type[BaseException], ...] = (),
        on_stop: Callable[[], object] | None = None,
        run_at_start: bool = False,
    ) -> None:
        self.name = name
        self.pass_fn = pass_fn
        self.interval = interval
        self.coalesce = coalesce
        self.backoff = backoff or Backoff()
        self.expected = expected
        self.on_stop = on_stop
        self.passes = 0
        self.failures = 0
        self._poke = threading.Event()
        self._stop = threading.Event()
        if run_at_start:
            self._poke.set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def poke(self) -> None:
        self._poke.set()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        if self.on_stop is not None:
            with contextlib.suppress(Exception):
                self.on_stop()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the loop to end after stop() (a loop never started has)."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def sleep(self, seconds: float) -> bool:
        """Wait inside a pass, cut short by stop(): True if stopped."""
        return self._stop.wait(seconds)

    def _run(self) -> None:
        wait = self.interval
        failing = False
        while True:
            if wait is None or wait > 0:
                self._poke.wait(wait)
            if self._stop.is_set() or (self.coalesce and self._stop.wait(self.coalesce)):
                return
            self._poke.clear()
            try:
                again = self.pass_fn()
            except Exception as e:
                if self._stop.is_set():
                    return  # cut short by stop(): not a failure
                self.failures += 1
                delay = self.backoff.next()
                level = logging.DEBUG if failing else logging.WARNING
                log.log(
                    level,
                    "%s: %s; retrying in %.1fs",
                    self.name,
                    str(e) or type(e).__name__,
                    delay,
                    exc_info=not failing and not isinstance(e, self.expected),
                )
                failing = True
                if self._stop.wait(delay):
                    return
                wait = 0.0
                continue
            self.passes += 1
            self.backoff.reset()
            if failing:
                log.info("%s: working again", self.name)
            failing = False
            if again is None:
                wait = self.interval
            else:
                wait = again if self.interval is None else min(again, self.interval)
