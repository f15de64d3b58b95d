"""The cluster-state store contract shared by the embedded and the etcd backends.

The model is etcd's: a flat ordered key space of bytes values, one global revision
that every committed write (a whole transaction) increments once, per-key
create/mod revisions and versions, watches that replay history from a revision,
and leases whose expiry deletes the keys attached to them.
"""

from __future__ import annotations

import abc
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

log = logging.getLogger(__name__)

Target = Literal["create", "mod", "version", "value"]
CompareOp = Literal["==", "!=", "<", ">"]


class StoreError(Exception):
    """Base class of store failures."""


class StoreUnavailable(StoreError):
    """The backend cannot be reached (every etcd endpoint is down, the db file is unusable)."""


class StoreCorrupt(StoreError):
    """The embedded store's file is damaged or is not a store: nothing may start on it."""

    def __init__(self, path: str, damage: str) -> None:
        name = path.rsplit("/", 1)[-1]
        super().__init__(
            f"the embedded store {path} {damage}. Restore it from a backup, or move it aside "
            f"(with any {name}-wal and {name}-shm beside it) to start with an empty store"
        )
        self.path = path
        self.damage = damage

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.path, self.damage))


class Compacted(StoreError):
    """A watch asked for history that has been compacted away; the caller must resync by range."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision {compact_revision} and older have been compacted")
        self.compact_revision = compact_revision


class LeaseNotFound(StoreError):
    """The lease expired or was revoked."""


@dataclass(frozen=True, slots=True)
class KV:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Compare:
    """One guard of a transaction.

    With ``prefix=True`` the guard must hold for every key under ``key``; an absent key
    (or an empty prefix) compares as create=mod=version=0 and never equals any value.
    ``Compare(k, "create", "==", 0)`` therefore means "k does not exist", and with
    ``prefix=True`` "no key under k exists". As in etcd, a ``"value"`` compare on an absent
    key (or an empty prefix) fails whatever the op, ``"!="`` included.
    """

    key: str
    target: Target
    op: CompareOp
    value: int | bytes
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    key: str
    prefix: bool = False


Op = Put | Delete


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int  # the store revision after the txn (unchanged when nothing was written)


@dataclass(frozen=True, slots=True)
class Txn:
    """One member of a batch (``Store.txn_batch``): if every compare holds, apply ``ops``."""

    compares: tuple[Compare, ...] = ()
    ops: tuple[Op, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchResult:
    succeeded: tuple[bool, ...]  # each member's outcome, in order
    revision: int  # the store revision after the batch


@dataclass(frozen=True, slots=True)
class Event:
    type: Literal["put", "delete"]
    kv: KV  # for a delete: the key, value b"", mod_revision = the deleting revision
    prev_value: bytes | None = None


@dataclass(frozen=True, slots=True)
class RangeResult:
    kvs: list[KV]
    revision: int  # the store revision the read was served at


# A failed refresh's step before its first doubling: the first retry comes 0.25-0.5 s later.
RETRY_FIRST = 0.25


def first_refresh(ttl: float, rand: float) -> float:
    """Seconds from a grant to the lease's first refresh: a random part (``rand`` of half)
    of ttl/3 early, so leases granted together (a thousand hosts when etcd is back after an
    outage) are not refreshed together ever after."""
    return ttl / 3 * (1.0 - 0.5 * rand)


def retry_after(retry: float, ttl: float, left: float, rand: float) -> tuple[float, float]:
    """After a failed refresh: (the next step, ``retry`` doubled up to ttl/3; the seconds to
    wait, that step less a random part, ``rand``, of half, and never past ``left``, the time
    the lease surely lives). A thousand hosts retrying every 0.5 s would add 2,000
    requests/s to an etcd too slow to answer them."""
    retry = min(retry * 2, ttl / 3)
    return retry, min(retry * (1.0 - 0.5 * rand), max(left, 0.01))


@dataclass
class Lease:
    """A granted lease. ``keepalive=True`` at grant time refreshes it in the background."""

    id: int
    ttl: int
    _store: Store = field(repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    lost: threading.Event = field(default_factory=threading.Event, repr=False)

    def refresh(self) -> int:
        """Refresh once; returns the remaining TTL. Raises LeaseNotFound when it is gone."""
        return self._store.lease_refresh(self.id)

    def revoke(self) -> None:
        self._stop.set()
        self._store.lease_revoke(self.id)

    def stop_keepalive(self) -> None:
        self._stop.set()

    def start_keepalive(self) -> None:
        """Keep the lease alive (keep_alive) in a daemon thread of its own until stopped."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self.keep_alive, name=f"lease-keepalive:{self.id:x}", daemon=True
        )
        self._thread.start()

    def keep_alive(self, sleep: Callable[[float], bool] | None = None) -> None:
        """Refresh every ttl/3 in the caller's thread until stopped or lost (``lost`` set).

        ``sleep(seconds)`` waits between refreshes and answers True when the caller wants
        it to stop (by default: stop_keepalive() or revoke()). Refresh failures other than
        LeaseNotFound (an outage) are retried, ever further apart, until the TTL measured
        from the last successful refresh has passed; then the lease counts as lost.
        """
        wait = sleep or self._stop.wait
        ttl = max(self.ttl, 1)
        # The lease is certain to live until deadline: ttl after the last refresh was sent.
        deadline = time.monotonic() + ttl
        interval = first_refresh(ttl, random.random())
        retry = RETRY_FIRST
        while not wait(interval) and not self._stop.is_set():
            sent = time.monotonic()
            try:
                ttl = max(self.refresh(), 1)
            except LeaseNotFound:
                self.lost.set()
                return
            except Exception as e:  # an outage: retry until the lease must have expired
                if time.monotonic() >= deadline:
                    log.warning("lease %x lost: no refresh within its TTL: %s", self.id, e)
                    self.lost.set()
                    return
                left = deadline - time.monotonic()
                retry, interval = retry_after(retry, ttl, left, random.random())
                continue
            deadline = sent + ttl
            interval = ttl / 3
            retry = RETRY_FIRST


class Watch(abc.ABC):
    """A running watch. Iterate for events; ``cancel()`` ends the iteration."""

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Event]: ...

    @abc.abstractmethod
    def cancel(self) -> None: ...

    def begin(self) -> None:  # noqa: B027 (a hook: most watches need nothing here)
        """Start following now, not at the first iteration (etcd: open the stream)."""


class Store(abc.ABC):
    """One interface, two backends (embedded SQLite, etcd)."""

    @abc.abstractmethod
    def get(self, key: str) -> KV | None: ...

    @abc.abstractmethod
    def range(self, prefix: str) -> RangeResult:
        """All keys starting with ``prefix``, ordered by key, with the read revision."""

    @abc.abstractmethod
    def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        """Atomically: if every compare holds apply ``success`` else ``failure``."""

    @abc.abstractmethod
    def txn_batch(self, members: Sequence[Txn]) -> BatchResult:
        """Commit independent txns together, each with the outcome it would have alone.

        The members must be independent (``store.batch``: none writes a key another one
        writes or compares; at most ``store.batch.MAX_BATCH``), else StoreError and nothing
        is written. Each member applies its ops iff its own compares hold: one member's
        failed compare changes nothing for the others. The backends commit the whole batch
        as one write (one fsync, one etcd round trip) at one new revision, unchanged when
        nothing was written; a put on a lease that is gone fails the whole batch
        (LeaseNotFound).
        """

    @abc.abstractmethod
    def watch(self, prefix: str, start_revision: int, *, prev_kv: bool = True) -> Watch:
        """Events for keys under ``prefix`` with revision >= ``start_revision``, in order.

        Backend outages are ridden out inside the watch: it resumes from the last
        delivered revision + 1, so no event is lost or duplicated. Raises ``Compacted``
        from iteration if ``start_revision`` (or the resume point) is compacted.
        ``prev_kv=False``: the caller never reads ``Event.prev_value``, which etcd then
        leaves out (it costs etcd a read per event and watcher); it may be None.
        """

    @abc.abstractmethod
    def lease_grant(self, ttl: int, keepalive: bool = False) -> Lease: ...

    @abc.abstractmethod
    def lease_refresh(self, lease_id: int) -> int: ...

    @abc.abstractmethod
    def lease_revoke(self, lease_id: int) -> None: ...

    @abc.abstractmethod
    def revision(self) -> int:
        """The current store revision."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def compact(self, revision: int) -> None:
        """Discard the history older than ``revision`` (watches from before it raise Compacted)."""
        raise NotImplementedError

    # Conveniences built on the primitives.

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        return self.txn((), (Put(key, value, lease),)).revision

    def delete(self, key: str, prefix: bool = False) -> int:
        return self.txn((), (Delete(key, prefix),)).revision

    def create(self, key: str, value: bytes, lease: int = 0) -> bool:
        """Put ``key`` only if it does not exist."""
        return self.txn((Compare(key, "create", "==", 0),), (Put(key, value, lease),)).succeeded

    def watch_callback(
        self, prefix: str, start_revision: int, callback: Callable[[Event], None]
    ) -> tuple[Watch, threading.Thread]:
        """Run a watch in a daemon thread, calling ``callback`` per event."""
        w = self.watch(prefix, start_revision)

        def loop() -> None:
            for ev in w:
                callback(ev)

        t = threading.Thread(target=loop, name=f"watch:{prefix}", daemon=True)
        t.start()
        return w, t


def prefix_end(prefix: str) -> str:
    """The first key after every key that starts with ``prefix`` (etcd's range_end)."""
    return prefix_end_bytes(prefix).decode("utf-8", errors="surrogateescape")


def prefix_end_bytes(prefix: str) -> bytes:
    """``prefix_end`` as raw bytes: safe for non-ASCII prefixes, whose end is not valid UTF-8."""
    b = bytearray(prefix.encode())
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return b"\0"


def check_txn(compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> None:
    """Reject what etcd rejects, so both backends fail alike.

    Raises TypeError for a compare value of the wrong type and StoreError when a branch
    puts one key twice or puts a key that one of its deletes also covers.
    """
    for c in compares:
        if c.target == "value":
            if not isinstance(c.value, bytes | bytearray):
                raise TypeError(f"a value compare needs bytes, got {type(c.value).__name__}")
        elif not isinstance(c.value, int) or isinstance(c.value, bool):
            raise TypeError(f"a {c.target} compare needs an int, got {type(c.value).__name__}")
    for branch in (success, failure):
        puts: set[str] = set()
        for op in branch:
            if isinstance(op, Put):
                if not isinstance(op.value, bytes | bytearray):
                    raise TypeError(f"put value must be bytes, got {type(op.value).__name__}")
                if op.key in puts:
                    raise StoreError(f"duplicate key given in txn request: {op.key!r}")
                puts.add(op.key)
        for op in branch:
            if isinstance(op, Delete):
                hit = [k for k in puts if (k.startswith(op.key) if op.prefix else k == op.key)]
                if hit:
                    raise StoreError(f"duplicate key given in txn request: {hit[0]!r}")
