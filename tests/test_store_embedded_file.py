"""The embedded store's file: a new one is made whole, a damaged one is refused with a message
that names it and says what to do, and the damaged file is left exactly as it was."""

from __future__ import annotations

import gc
import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from store import Put, StoreCorrupt
from store.embedded import EmbeddedStore
from store.embedded_file import HEADER, check_damage, describe_error, file_damage, prepare


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store with some history, closed (checkpointed into the one file)."""
    path = tmp_path / "state.db"
    with EmbeddedStore(str(path)) as s:
        for i in range(300):
            s.txn([], [Put(f"/netplugin/k/{i:04d}", b"x" * 200)])
    gc.collect()  # a connection of a thread that ended may wait for the collector
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    wal = tmp_path / "state.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0  # everything is in the one file
    return path


def _refused(path: Path, match: str) -> StoreCorrupt:
    before = _digest(path)
    with pytest.raises(StoreCorrupt, match=match) as info:
        EmbeddedStore(str(path))
    message = str(info.value)
    assert str(path) in message and "\n" not in message
    assert "Restore it from a backup, or move it aside" in message
    assert _digest(path) == before, "the damaged file was changed"
    return info.value


def test_what_stat_and_the_header_show() -> None:
    assert file_damage(False, 0, b"", 0) is None  # new
    assert "part of the store was deleted" in (file_damage(False, 0, b"", 4096) or "")
    assert "empty (0 bytes)" in (file_damage(True, 0, b"", 0) or "")
    assert "empty (0 bytes)" in (file_damage(True, 0, b"", 8192) or "")
    assert "not an SQLite database" in (file_damage(True, 4096, b"\0" * 16, 0) or "")
    assert file_damage(True, 4096, HEADER, 0) is None


def test_what_the_integrity_check_shows() -> None:
    tables = {"kv", "events", "meta", "leases"}
    assert check_damage([("ok",)], tables) is None
    found = check_damage([("Page 5: never used",), ("Page 6: never used",)], tables)
    assert found == "is damaged: SQLite's integrity check found: Page 5: never used (2 problems)"
    assert check_damage([("ok",)], {"kv"}) == (
        "is not a netplugin store: it has no events, meta, leases table"
    )


def test_a_sound_store_opens_and_keeps_its_keys(db: Path) -> None:
    with EmbeddedStore(str(db)) as s:
        assert len(s.range("/netplugin/").kvs) == 300


def test_truncated_to_half(db: Path) -> None:
    os.truncate(db, db.stat().st_size // 2)
    _refused(db, "is damaged")


def test_garbage_over_the_header(db: Path) -> None:
    with open(db, "r+b") as f:
        f.write(os.urandom(100))
    _refused(db, "not an SQLite database")


def test_garbage_inside(db: Path) -> None:
    with open(db, "r+b") as f:
        f.seek(db.stat().st_size // 2)
        f.write(b"\xff" * 8192)
    _refused(db, "is damaged")


def test_zero_length_with_or_without_wal_files(db: Path) -> None:
    os.truncate(db, 0)
    _refused(db, "empty")
    (db.parent / "state.db-wal").write_bytes(b"\0" * 4096)
    _refused(db, "empty")


def test_missing_but_its_wal_is_there(db: Path) -> None:
    wal = db.parent / "state.db-wal"
    db.rename(db.parent / "elsewhere.db")
    wal.write_bytes(b"\1" * 4096)
    with pytest.raises(StoreCorrupt, match="part of the store was deleted"):
        EmbeddedStore(str(db))
    assert not db.exists()


def test_another_sqlite_database(tmp_path: Path) -> None:
    other = tmp_path / "state.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB)")
    conn.close()
    _refused(other, "not a netplugin store")


def test_a_new_store_is_never_seen_half_made(tmp_path: Path) -> None:
    """8 processes create the same new store at once: all open one store, and no file of
    a creation is left behind."""
    path = tmp_path / "state.db"
    code = (
        "import sys\nfrom store.embedded import EmbeddedStore\nfrom store import Put\n"
        "with EmbeddedStore(sys.argv[1]) as s:\n"
        "    s.txn([], [Put('/netplugin/p/' + sys.argv[2], b'1')])\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path), str(i)], stderr=subprocess.PIPE, text=True
        )
        for i in range(8)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with EmbeddedStore(str(path)) as s:
        assert len(s.range("/netplugin/p/").kvs) == 8
    assert not [f for f in os.listdir(tmp_path) if ".new-" in f]


def test_prepare_alone_makes_a_store_that_opens(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    prepare(str(path))
    assert path.read_bytes().startswith(HEADER)
    with EmbeddedStore(str(path)) as s:
        assert s.revision() == 1


def test_a_full_disk_is_worded_for_the_user() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # SQLITE_FULL
    assert describe_error("/d/state.db", full) == (
        "the embedded store /d/state.db: its disk is full (database or disk is full); "
        "free space there and retry"
    )
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorcode = 5
    assert (
        describe_error("/d/state.db", locked)
        == "the embedded store /d/state.db: database is locked"
    )
