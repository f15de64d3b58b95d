"""The embedded backend: one SQLite file in WAL mode, shared by the threads and processes of a host.

Opening: ``store.embedded_file.prepare`` makes a new file whole, and refuses a damaged one.

Durability: ``synchronous=FULL`` fsyncs the WAL on every commit, so a committed write
survives ``kill -9`` (and a power cut). Concurrency: every write is a ``BEGIN IMMEDIATE``
transaction, which serialises writers across processes through SQLite's file locks;
readers never block (WAL). Each thread gets its own connection. Watches read the events
table (``store.embedded_watch``).
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from store.base import (
    KV,
    BatchResult,
    Compare,
    Delete,
    Event,
    Lease,
    LeaseNotFound,
    Op,
    Put,
    RangeResult,
    Store,
    StoreError,
    StoreUnavailable,
    Txn,
    TxnResult,
    Watch,
    check_txn,
    prefix_end_bytes,
)
from store.batch import check_batch
from store.embedded_file import describe_error, prepare
from store.embedded_watch import DELETE, PUT, Changes, EmbeddedWatch, events_since

log = logging.getLogger(__name__)

_COLUMN = {"create": "create_rev", "mod": "mod_rev", "version": "version", "value": "value"}
_SQL_OP = {"==": "=", "!=": "!=", "<": "<", ">": ">"}


def _range_sql(prefix: str) -> tuple[str, tuple[bytes, ...]]:
    """A WHERE clause selecting the keys under ``prefix`` (byte order, like etcd)."""
    start = prefix.encode()
    end = prefix_end_bytes(prefix)
    if not start:  # the empty prefix: every key
        return "key >= ?", (start,)
    return "key >= ? AND key < ?", (start, end)


def _holds(op: str, a: int | bytes, b: int | bytes) -> bool:
    match op:
        case "==":
            return a == b
        case "!=":
            return a != b
        case "<":
            return a < b  # type: ignore[operator]
        case ">":
            return a > b  # type: ignore[operator]
    raise ValueError(f"unknown compare op {op!r}")


class _Conn:
    """A thread's connection; weakly tracked, so it goes away with its thread.

    Its thread holds ``lock`` while it runs statements, and close() takes it before closing
    the connection: closing a connection under a running statement crashes the interpreter.
    """

    __slots__ = ("__weakref__", "conn", "lock")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.lock = threading.RLock()


class EmbeddedStore(Store):
    """The store in one SQLite file; safe to share between threads and processes of a host."""

    def __init__(
        self,
        path: str,
        *,
        history: int = 100_000,
        busy_timeout: float = 60.0,
        poll_interval: float = 0.025,
        sweep_interval: float = 0.2,
    ) -> None:
        self.path = path
        self._history = max(history, 1)
        self._compact_every = max(1, min(1024, self._history // 10))
        self._busy_timeout = busy_timeout
        self._poll = poll_interval
        self._sweep_interval = sweep_interval
        self._local = threading.local()
        self._conns: weakref.WeakSet[_Conn] = weakref.WeakSet()
        self._conns_lock = threading.Lock()
        # Serialises this process's writers without spinning in SQLite's busy handler.
        self._wlock = threading.Lock()
        self._changes = Changes()
        self._closed = threading.Event()
        self._keepalives: weakref.WeakValueDictionary[int, Lease] = weakref.WeakValueDictionary()
        self._init_db()
        self._sweeper = threading.Thread(
            target=self._sweep_loop, name=f"lease-sweeper:{path}", daemon=True
        )
        self._sweeper.start()

    # Connections and transactions.

    def _conn(self) -> sqlite3.Connection:
        return self._holder().conn

    @contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, held so that close() cannot close it under a statement."""
        holder = self._holder()
        with holder.lock:
            yield holder.conn

    def _holder(self) -> _Conn:
        holder: _Conn | None = getattr(self._local, "conn", None)
        if holder is not None:
            return holder
        if self._closed.is_set():
            raise StoreError("store is closed")
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,  # only so close() can close it from another thread
            )
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as e:
            raise StoreUnavailable(f"cannot open {self.path}: {e}") from e
        holder = _Conn(conn)
        self._local.conn = holder
        with self._conns_lock:
            self._conns.add(holder)
        return holder

    def _unavailable(self, e: sqlite3.Error) -> StoreUnavailable:
        return StoreUnavailable(describe_error(self.path, e))

    def _init_db(self) -> None:
        # A new store is made whole, and a damaged one refused (StoreCorrupt), before any
        # connection of ours could write to it.
        prepare(self.path, self._busy_timeout)
        conn = self._conn()
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.Error as e:
            raise StoreUnavailable(f"cannot initialise {self.path}: {e}") from e
        if mode.lower() != "wal":
            raise StoreUnavailable(f"{self.path}: cannot switch to WAL (journal_mode={mode})")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the db's write lock (across processes)."""
        with self._using() as conn, self._wlock:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self._unavailable(e) from e
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as e:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        log.exception("rollback failed on %s", self.path)
                if isinstance(e, sqlite3.Error):
                    raise self._unavailable(e) from e
                raise
        self._changes.committed()

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every statement inside sees one snapshot."""
        with self._using() as conn:
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as e:
                raise self._unavailable(e) from e

    @staticmethod
    def _meta(conn: sqlite3.Connection, name: str) -> int:
        return int(conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()[0])

    def _set_revision(self, conn: sqlite3.Connection, rev: int) -> None:
        conn.execute("UPDATE meta SET value = ? WHERE name = 'revision'", (rev,))
        if rev % self._compact_every == 0 and rev > self._history:
            self._compact(conn, rev - self._history + 1)

    @staticmethod
    def _compact(conn: sqlite3.Connection, revision: int) -> None:
        """Drop the events older than ``revision``."""
        if revision - 1 > EmbeddedStore._meta(conn, "compacted"):
            conn.execute("DELETE FROM events WHERE rev < ?", (revision,))
            conn.execute("UPDATE meta SET value = ? WHERE name = 'compacted'", (revision - 1,))

    # Reads.

    def get(self, key: str) -> KV | None:
        try:
            with self._using() as conn:
                row = conn.execute(
                    "SELECT key, value, create_rev, mod_rev, version, lease FROM kv WHERE key = ?",
                    (key.encode(),),
                ).fetchone()
        except sqlite3.Error as e:
            raise self._unavailable(e) from e
        return None if row is None else KV(row[0].decode(), *row[1:])

    def range(self, prefix: str) -> RangeResult:
        clause, params = _range_sql(prefix)
        with self._read() as conn:
            rev = self._meta(conn, "revision")
            rows = conn.execute(
                "SELECT key, value, create_rev, mod_rev, version, lease FROM kv"
                f" WHERE {clause} ORDER BY key",
                params,
            ).fetchall()
        return RangeResult([KV(r[0].decode(), *r[1:]) for r in rows], rev)

    def revision(self) -> int:
        try:
            with self._using() as conn:
                return self._meta(conn, "revision")
        except sqlite3.Error as e:
            raise self._unavailable(e) from e

    # Writes.

    def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        check_txn(compares, success, failure)
        with self._write() as conn:
            rev = self._meta(conn, "revision")
            ok = all(self._check(conn, c) for c in compares)
            if self._apply(conn, success if ok else failure, rev + 1):
                rev += 1
                self._set_revision(conn, rev)
        return TxnResult(ok, rev)

    def txn_batch(self, members: Sequence[Txn]) -> BatchResult:
        """One SQLite transaction (one fsync) for the whole batch, at one new revision."""
        check_batch(members)
        with self._write() as conn:
            rev = self._meta(conn, "revision")
            # Every member's compares against the state before the batch, as etcd does; the
            # members are independent, so that is the state after any of the others too.
            ok = tuple(all(self._check(conn, c) for c in t.compares) for t in members)
            seq = 0
            for t, good in zip(members, ok, strict=True):
                if good:
                    seq = self._apply(conn, t.ops, rev + 1, seq)
            if seq:
                rev += 1
                self._set_revision(conn, rev)
        return BatchResult(ok, rev)

    @staticmethod
    def _check(conn: sqlite3.Connection, c: Compare) -> bool:
        column, op = _COLUMN[c.target], _SQL_OP[c.op]
        value = bytes(c.value) if c.target == "value" else int(c.value)  # type: ignore[arg-type]
        clause, params = _range_sql(c.key) if c.prefix else ("key = ?", (c.key.encode(),))
        # Column and operator come from fixed tables, never from the caller.
        count, failed = conn.execute(
            f"SELECT COUNT(*), COALESCE(SUM(NOT ({column} {op} ?)), 0) FROM kv WHERE {clause}",
            (value, *params),
        ).fetchone()
        if count == 0:
            return c.target != "value" and _holds(c.op, 0, value)
        return failed == 0

    def _apply(self, conn: sqlite3.Connection, ops: Sequence[Op], rev: int, seq: int = 0) -> int:
        """Apply ``ops`` at revision ``rev``, numbering their events from ``seq``; returns the
        next event number (``seq`` itself when nothing was written)."""
        now = time.time()
        for op in ops:
            if isinstance(op, Put):
                key, value = op.key.encode(), bytes(op.value)
                if op.lease:
                    row = conn.execute(
                        "SELECT expires_at FROM leases WHERE id = ?", (op.lease,)
                    ).fetchone()
                    if row is None or row[0] <= now:
                        raise LeaseNotFound(f"lease {op.lease:x} not found")
                old = conn.execute(
                    "SELECT value, create_rev, version FROM kv WHERE key = ?", (key,)
                ).fetchone()
                create, version, prev = (old[1], old[2] + 1, old[0]) if old else (rev, 1, None)
                conn.execute(
                    "INSERT OR REPLACE INTO kv (key, value, create_rev, mod_rev, version, lease)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (key, value, create, rev, version, op.lease),
                )
                self._event(conn, rev, seq, key, PUT, value, create, version, op.lease, prev)
                seq += 1
            elif isinstance(op, Delete):
                if op.prefix:
                    clause, params = _range_sql(op.key)
                else:
                    clause, params = "key = ?", (op.key.encode(),)
                seq = self._delete_where(conn, clause, params, rev, seq)
            else:
                raise TypeError(f"not an op: {op!r}")
        return seq

    def _delete_where(
        self,
        conn: sqlite3.Connection,
        clause: str,
        params: tuple[object, ...],
        rev: int,
        seq: int,
    ) -> int:
        rows = conn.execute(
            f"SELECT key, value FROM kv WHERE {clause} ORDER BY key", params
        ).fetchall()
        if rows:
            conn.execute(f"DELETE FROM kv WHERE {clause}", params)
        for key, prev in rows:
            self._event(conn, rev, seq, key, DELETE, b"", 0, 0, 0, prev)
            seq += 1
        return seq

    @staticmethod
    def _event(conn: sqlite3.Connection, *row: object) -> None:
        conn.execute(
            "INSERT INTO events (rev, seq, key, type, value, create_rev, version, lease, prev)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row,
        )

    def compact(self, revision: int) -> None:
        with self._write() as conn:
            if revision > self._meta(conn, "revision"):
                raise StoreError(f"cannot compact at future revision {revision}")
            self._compact(conn, revision)

    # Watches.

    def watch(self, prefix: str, start_revision: int, *, prev_kv: bool = True) -> Watch:
        # prev_kv=False saves nothing here: the events table holds the previous value.
        if start_revision <= 0:
            start_revision = self.revision() + 1
        clause, params = _range_sql(prefix)

        def read(start: int) -> tuple[list[Event], int, bool]:
            with self._read() as conn:
                return events_since(conn, clause, params, start)

        return EmbeddedWatch(read, start_revision, self._changes, self._closed, self._poll)

    # Leases.

    def lease_grant(self, ttl: int, keepalive: bool = False) -> Lease:
        ttl = max(int(ttl), 1)
        while True:
            lease_id = secrets.randbits(62) or 1  # random: ids are never reused across processes
            try:
                with self._write() as conn:
                    conn.execute(
                        "INSERT INTO leases (id, ttl, expires_at) VALUES (?, ?, ?)",
                        (lease_id, ttl, time.time() + ttl),
                    )
                break
            except StoreUnavailable as e:
                if not isinstance(e.__cause__, sqlite3.IntegrityError):
                    raise
        lease = Lease(lease_id, ttl, self)
        if keepalive:
            self._keepalives[lease_id] = lease
            lease.start_keepalive()
        return lease

    def lease_refresh(self, lease_id: int) -> int:
        with self._write() as conn:
            row = conn.execute(
                "SELECT ttl, expires_at FROM leases WHERE id = ?", (lease_id,)
            ).fetchone()
            now = time.time()
            if row is None or row[1] <= now:
                raise LeaseNotFound(f"lease {lease_id:x} not found")
            conn.execute("UPDATE leases SET expires_at = ? WHERE id = ?", (now + row[0], lease_id))
        return int(row[0])

    def lease_revoke(self, lease_id: int) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM leases WHERE id = ?", (lease_id,)).fetchone() is None:
                raise LeaseNotFound(f"lease {lease_id:x} not found")
            self._drop_lease(conn, lease_id)

    def _drop_lease(self, conn: sqlite3.Connection, lease_id: int) -> None:
        """Delete the lease and its keys, in one new revision if there are keys."""
        rev = self._meta(conn, "revision") + 1
        if self._delete_where(conn, "lease = ?", (lease_id,), rev, 0):
            self._set_revision(conn, rev)
        conn.execute("DELETE FROM leases WHERE id = ?", (lease_id,))

    def expire_leases(self) -> int:
        """Revoke every expired lease now (the sweeper does this periodically); returns how many."""
        try:
            with self._using() as conn:
                expired = conn.execute(
                    "SELECT 1 FROM leases WHERE expires_at <= ? LIMIT 1", (time.time(),)
                ).fetchone()
            if expired is None:
                return 0
        except sqlite3.Error as e:
            raise self._unavailable(e) from e
        with self._write() as conn:
            # Re-read under the write lock: another process may have swept them already.
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM leases WHERE expires_at <= ?", (time.time(),)
                ).fetchall()
            ]
            for lease_id in ids:
                self._drop_lease(conn, lease_id)
        return len(ids)

    def _sweep_loop(self) -> None:
        while not self._closed.wait(self._sweep_interval):
            try:
                self.expire_leases()
            except Exception:
                if not self._closed.is_set():
                    log.exception("lease sweep failed on %s", self.path)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        for lease in list(self._keepalives.values()):
            lease.stop_keepalive()
        self._changes.wake()
        if self._sweeper is not threading.current_thread():
            self._sweeper.join(timeout=self._busy_timeout)
        with self._conns_lock:
            conns = list(self._conns)
            self._conns.clear()
        for holder in conns:
            with holder.lock:  # not under a statement of its thread
                try:
                    holder.conn.close()
                except sqlite3.Error:
                    log.exception("closing a connection to %s failed", self.path)

    def __enter__(self) -> EmbeddedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
