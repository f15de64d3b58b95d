"""Watches of the embedded store: reading its events table, and waking on its writes.

A watch reads the history in bounded batches of revisions. It is woken at once by a write
of this process (``Changes``) and polls for the writes of other processes on the file.
"""

from __future__ import annotations

import collections
import sqlite3
import threading
from collections.abc import Callable, Iterator

from store.base import KV, Compacted, Event, Watch

PUT, DELETE = 0, 1
WATCH_BATCH_REVS = 1000

# Reads the events from a revision on: (events, the next revision to read, caught up).
EventReader = Callable[[int], tuple[list[Event], int, bool]]


def events_since(
    conn: sqlite3.Connection, clause: str, params: tuple[bytes, ...], start: int
) -> tuple[list[Event], int, bool]:
    """Events under the clause from ``start`` on, in a bounded batch of revisions.

    Run inside a read transaction. Returns the events, the next revision to read from,
    and whether that reached the current revision.
    """
    meta = dict(
        conn.execute("SELECT name, value FROM meta WHERE name IN ('revision', 'compacted')")
    )
    rev, compacted = int(meta["revision"]), int(meta["compacted"])
    if start <= compacted:
        raise Compacted(compacted)
    if start > rev:
        return [], start, True
    upper = min(rev, start + WATCH_BATCH_REVS - 1)
    rows = conn.execute(
        "SELECT rev, key, type, value, create_rev, version, lease, prev FROM events"
        f" WHERE rev BETWEEN ? AND ? AND {clause} ORDER BY rev, seq",
        (start, upper, *params),
    ).fetchall()
    events = []
    for r, key, typ, value, create, version, lease, prev in rows:
        kv = KV(key.decode(), value, create, r, version, lease)
        events.append(Event("put" if typ == PUT else "delete", kv, prev))
    return events, upper + 1, upper == rev


class Changes:
    """A generation count of this process's commits, and a condition to wait for the next."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.generation = 0

    def committed(self) -> None:
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake every waiter (a watch cancelled, the store closed)."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float, cancelled: threading.Event) -> None:
        """Wait up to ``timeout`` unless a commit happened since generation ``seen``."""
        with self._cond:
            if self.generation == seen and not cancelled.is_set():
                self._cond.wait(timeout)


class EmbeddedWatch(Watch):
    """Reads the events table: woken at once by this process's writes, polls for others'."""

    def __init__(
        self,
        read: EventReader,
        start_revision: int,
        changes: Changes,
        closed: threading.Event,
        poll: float,
    ) -> None:
        self._read = read
        self._next = start_revision
        self._changes = changes
        self._closed = closed
        self._poll = poll
        self._pending: collections.deque[Event] = collections.deque()
        self._cancelled = threading.Event()

    def __iter__(self) -> Iterator[Event]:
        while not (self._cancelled.is_set() or self._closed.is_set()):
            if self._pending:
                yield self._pending.popleft()
                continue
            seen = self._changes.generation
            events, self._next, caught_up = self._read(self._next)
            self._pending.extend(events)
            if not events and caught_up:
                self._changes.wait(seen, self._poll, self._cancelled)

    def cancel(self) -> None:
        self._cancelled.set()
        self._changes.wake()
