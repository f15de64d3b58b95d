"""One store watch shared by many: the watches of prefixes under a common parent (an agent's
cluster mirrors; many simulated agents in one process) ride on a single stream to etcd.

The hub follows its parent prefix from the start revision of its first watch, keeps the
most recent events (``history`` of them), and hands each watch the events under its prefix
from its own start revision on: from that history for a start it has already passed, live
after that. A start older than the history raises Missed (a Compacted): the caller reads
again and watches from a newer revision, as after a compaction. A failure of the shared
stream (etcd compacted its history, the store closed) ends every watch on it the same way,
and the next watch starts the stream afresh.

The cost of sharing: the stream carries every key under the parent, including keys none
of the watches want (filtered out here).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Iterator
from typing import Protocol

from store.base import Compacted, Event, Store, StoreError, Watch

log = logging.getLogger(__name__)


class WatchSource(Protocol):
    """What gives watches: a Store, or a WatchHub in front of one."""

    def watch(self, prefix: str, start_revision: int) -> Watch: ...


class Missed(Compacted):
    """The hub's history no longer reaches back to a watch's start revision."""


class _Subscription(Watch):
    def __init__(self, hub: WatchHub, prefix: str, start: int) -> None:
        self.hub = hub
        self.prefix = prefix
        self.start = start
        self.queue: queue.SimpleQueue[Event | BaseException | None] = queue.SimpleQueue()
        self._done = False

    def offer(self, ev: Event) -> bool:
        """Queue ``ev`` if this watch wants it."""
        if ev.kv.mod_revision >= self.start and ev.kv.key.startswith(self.prefix):
            self.queue.put(ev)
            return True
        return False

    def __iter__(self) -> Iterator[Event]:
        while not self._done:
            item = self.queue.get()
            if item is None:
                self._done = True
                return
            if isinstance(item, BaseException):
                self._done = True
                raise item
            yield item

    def cancel(self) -> None:
        self.hub._drop(self)
        self.queue.put(None)


class WatchHub:
    """The watches of prefixes under ``prefix``, on one store watch (see the module doc).

    ``received``: events the shared stream brought; ``delivered``: events handed to watches.
    """

    def __init__(self, store: Store, prefix: str, *, history: int = 10_000) -> None:
        self.store = store
        self.prefix = prefix
        self.history = history
        self.received = 0
        self.delivered = 0
        self.streams = 0  # how many times the shared stream was started
        self._lock = threading.Lock()
        self._subs: list[_Subscription] = []
        self._events: collections.deque[Event] = collections.deque()
        self._low = 0  # the history holds every event from this revision on...
        self._next = 0  # ...up to this one (excluded); 0: no shared stream
        self._upstream: Watch | None = None
        self._closed = False

    def watch(self, prefix: str, start_revision: int) -> Watch:
        """Events under ``prefix`` (under the hub's) from ``start_revision`` on, in order."""
        if not prefix.startswith(self.prefix):
            raise ValueError(f"{prefix!r} is not under the hub's prefix {self.prefix!r}")
        if start_revision <= 0:
            start_revision = self.store.revision() + 1
        sub = _Subscription(self, prefix, start_revision)
        with self._lock:
            if self._closed:
                raise StoreError("the watch hub is closed")
            if self._upstream is None:
                self._follow(start_revision)
            if start_revision < self._low:
                sub.queue.put(Missed(self._low - 1))
                return sub
            if start_revision < self._next:
                for ev in self._events:
                    sub.offer(ev)
            self._subs.append(sub)
        return sub

    def follow(self) -> None:
        """Start the shared stream now, from the store's next revision, if it is not
        running: watches that read their prefix after this start inside its history
        (none meets Missed). A store that cannot answer leaves it to the first watch."""
        try:
            start = self.store.revision() + 1
        except StoreError as e:
            log.info(
                "watch hub %s: not started ahead (%s); the first watch starts it", self.prefix, e
            )
            return
        with self._lock:
            if self._upstream is None and not self._closed:
                self._follow(start)

    def watching(self) -> int:
        """How many watches the hub serves now."""
        with self._lock:
            return len(self._subs)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            upstream, self._upstream = self._upstream, None
            subs, self._subs = self._subs, []
        if upstream is not None:
            upstream.cancel()
        for sub in subs:
            sub.queue.put(None)

    def _drop(self, sub: _Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def _follow(self, start: int) -> None:
        """Start the shared stream at ``start`` (the lock held)."""
        upstream = self.store.watch(self.prefix, start, prev_kv=False)
        self._upstream = upstream
        self._events.clear()
        self._low = self._next = start
        self.streams += 1
        threading.Thread(
            target=self._run, args=(upstream,), name=f"watch-hub:{self.prefix}", daemon=True
        ).start()

    def _run(self, upstream: Watch) -> None:
        try:
            for ev in upstream:
                self._deliver(upstream, ev)
        except StoreError as e:
            self._end(upstream, e)
            return
        except Exception as e:  # a bug: still end the watches, so their owners notice
            log.exception("watch hub %s: the shared stream failed", self.prefix)
            self._end(upstream, StoreError(f"the shared watch failed: {e!r}"))
            return
        self._end(upstream, None)

    def _deliver(self, upstream: Watch, ev: Event) -> None:
        with self._lock:
            if upstream is not self._upstream:
                return
            self.received += 1
            self._events.append(ev)
            self._next = max(self._next, ev.kv.mod_revision + 1)
            if len(self._events) > self.history:
                # Forget whole revisions: the history is complete from self._low on.
                self._low = self._events.popleft().kv.mod_revision + 1
                while self._events and self._events[0].kv.mod_revision < self._low:
                    self._events.popleft()
            self.delivered += sum(sub.offer(ev) for sub in self._subs)

    def _end(self, upstream: Watch, error: BaseException | None) -> None:
        """The shared stream ended: so does every watch on it; the next watch starts afresh."""
        with self._lock:
            if upstream is not self._upstream:
                return
            self._upstream = None
            subs, self._subs = self._subs, []
        if error is not None:
            log.info("watch hub %s: %s; its %d watch(es) read again", self.prefix, error, len(subs))
        for sub in subs:
            sub.queue.put(error)
