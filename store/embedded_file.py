"""The embedded store's file: made whole when new, refused when damaged, never started empty.

SQLite opens almost anything: an empty file is an empty database, a truncated file reads
fine until a query reaches a missing page, and ``CREATE TABLE IF NOT EXISTS`` would quietly
give a damaged store new, empty tables. Every process that opens the store (each netmaster
worker, the agent with --data-dir) therefore runs ``prepare`` first:

- **No file**: a new store is written aside (``state.db.new-<pid>-<random>``: schema, WAL
  mode, fsync) and hard-linked into place. The link fails if another process got there
  first, and then that one is used. So a store file is never seen half-made, and
  netplugin never leaves an empty (0-byte) one.
- **A file**: it must be a whole store: the SQLite header, ``PRAGMA quick_check`` on a
  read-only connection (the file is not changed, whatever it holds) and our four tables.
  Otherwise ``StoreCorrupt``, whose message names the file, says what is wrong and what
  to do: restore it from a backup, or move it aside to start with an empty store.
- **A 0-byte file is damage, always** (whether or not WAL files lie beside it): it is what
  a truncation leaves, never a new store (see above). A 0-byte store made by an older
  netplugin that crashed in its first milliseconds is the one false alarm; moving it aside
  is then the right thing to do anyway.
- **No file, but a non-empty ``-wal`` beside it**: part of a store was deleted. Starting a
  new store there would adopt (or discard) the stray log: refused too.

The check costs about 5 ms for 10k keys and 45 ms for a 30 MB store (30k keys and 110k
history events), once per process start.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import urllib.parse

from store.base import StoreCorrupt, StoreUnavailable

HEADER = b"SQLite format 3\x00"
TABLES = ("kv", "events", "meta", "leases")

SCHEMA = """
BEGIN IMMEDIATE;
CREATE TABLE kv (
    key BLOB PRIMARY KEY,
    value BLOB NOT NULL,
    create_rev INTEGER NOT NULL,
    mod_rev INTEGER NOT NULL,
    version INTEGER NOT NULL,
    lease INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX kv_lease ON kv (lease) WHERE lease != 0;
CREATE TABLE events (
    rev INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    key BLOB NOT NULL,
    type INTEGER NOT NULL,
    value BLOB NOT NULL,
    create_rev INTEGER NOT NULL,
    version INTEGER NOT NULL,
    lease INTEGER NOT NULL,
    prev BLOB,
    PRIMARY KEY (rev, seq)
) WITHOUT ROWID;
CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE leases (
    id INTEGER PRIMARY KEY,
    ttl INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
INSERT INTO meta (name, value) VALUES ('revision', 1), ('compacted', 0), ('schema', 1);
COMMIT;
"""

# SQLite's primary result codes: "this is not (or no longer) a database", "disk full".
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_NOTADB = 26


def describe_error(path: str, e: sqlite3.Error) -> str:
    """A failed statement, as the store's users see it (wrapped in StoreUnavailable)."""
    if getattr(e, "sqlite_errorcode", 0) & 0xFF == _SQLITE_FULL:
        return f"the embedded store {path}: its disk is full ({e}); free space there and retry"
    return f"the embedded store {path}: {e}"


def file_damage(exists: bool, size: int, header: bytes, wal_size: int) -> str | None:
    """What is wrong with a store file, from what ``stat`` and its first bytes show; None
    if it may be a store (``quick_check`` decides) or does not exist (a new one is made)."""
    if not exists:
        if wal_size > 0:
            return (
                f"is missing, but its write-ahead log (-wal, {wal_size} bytes) is there: "
                "part of the store was deleted"
            )
        return None
    if size == 0:
        return (
            "is empty (0 bytes): it was truncated (netplugin makes a new store aside and "
            "links it into place whole, so it never leaves an empty one)"
        )
    if not header.startswith(HEADER):
        return "is not an SQLite database (its header is damaged or overwritten)"
    return None


def check_damage(rows: list[tuple[str, ...]], tables: set[str]) -> str | None:
    """What ``PRAGMA quick_check`` (``rows``) and the tables found say is wrong, if anything."""
    found = [str(r[0]) for r in rows]
    if found != ["ok"]:
        first = found[0] if found else "no answer"
        more = f" ({len(found)} problems)" if len(found) > 1 else ""
        return f"is damaged: SQLite's integrity check found: {first}{more}"
    missing = [t for t in TABLES if t not in tables]
    if missing:
        return f"is not a netplugin store: it has no {', '.join(missing)} table"
    return None


def prepare(path: str, busy_timeout: float = 60.0) -> None:
    """Make a new store at ``path`` if there is none, else check the one there is.

    Raises StoreCorrupt for a damaged file (left as it is), StoreUnavailable if the file
    cannot be read or made.
    """
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            header = f.read(len(HEADER))
        exists = True
    except FileNotFoundError:
        exists, size, header = False, 0, b""
    except OSError as e:
        raise StoreUnavailable(f"cannot read the embedded store {path}: {e}") from e
    try:
        wal_size = os.stat(path + "-wal").st_size
    except OSError:
        wal_size = 0
    if (damage := file_damage(exists, size, header, wal_size)) is not None:
        raise StoreCorrupt(path, damage)
    if not exists:
        _create(path)
    _verify(path, busy_timeout)


def _verify(path: str, busy_timeout: float) -> None:
    try:
        _check(path, busy_timeout)
    except StoreCorrupt:
        _forget_index(path)
        raise


def _forget_index(path: str) -> None:
    """Remove the empty -wal and the -shm a read-only check makes beside a damaged store, so
    the directory is left as it was (an empty -wal holds nothing; one with frames in it is
    never touched)."""
    try:
        if os.stat(path + "-wal").st_size != 0:
            return
    except OSError:
        return
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.unlink(path + suffix)


def _check(path: str, busy_timeout: float) -> None:
    uri = f"file:{urllib.parse.quote(path)}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        finally:
            conn.close()
    except sqlite3.Error as e:
        code = getattr(e, "sqlite_errorcode", 0) & 0xFF
        if code in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
            raise StoreCorrupt(path, f"is damaged: {e}") from e
        raise StoreUnavailable(f"cannot read the embedded store {path}: {e}") from e
    if (damage := check_damage(rows, tables)) is not None:
        raise StoreCorrupt(path, damage)


def _create(path: str) -> None:
    """Write a new store aside and link it into place (unless another process just did)."""
    tmp = f"{path}.new-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)
        finally:
            conn.close()  # checkpoints: the whole store is in the file
        _fsync(tmp)
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.link(tmp, path)
        _fsync(os.path.dirname(os.path.abspath(path)))
    except (sqlite3.Error, OSError) as e:
        raise StoreUnavailable(f"cannot create the embedded store {path}: {e}") from e
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.unlink(tmp + suffix)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
