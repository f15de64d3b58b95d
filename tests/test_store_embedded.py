"""The embedded (SQLite) store: the shared contract, plus what only a shared db file can do."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import open_store
from store.base import Compacted, Store, StoreCorrupt
from store.embedded import EmbeddedStore
from testbed.store_contract import WAIT, Collector, StoreContract, summary
from testbed.wait import wait_for


class TestEmbeddedContract(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        s = EmbeddedStore(str(tmp_path / "state.db"))
        yield s
        s.close()


def run_python(code: str, *args: str, timeout: float = 60) -> str:
    """Run ``code`` in a fresh interpreter (a separate process on the same db file)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


CAS_WORKER = """
import sys
from store.base import Compare, Put
from store.embedded import EmbeddedStore

path, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = EmbeddedStore(path)
for _ in range(n):
    while True:
        kv = s.get(key)
        if kv is None:
            guard, value = Compare(key, "create", "==", 0), 1
        else:
            guard, value = Compare(key, "mod", "==", kv.mod_revision), int(kv.value) + 1
        if s.txn([guard], [Put(key, str(value).encode())]).succeeded:
            break
s.close()
"""

WRITER = """
import sys
from store.embedded import EmbeddedStore

path, tag = sys.argv[1], sys.argv[2]
s = EmbeddedStore(path)
print("ready", flush=True)
i = 0
while True:
    key = f"/kill/{tag}/{i:06d}"
    rev = s.put(key, key.encode())
    print(key, rev, flush=True)  # only ever after the commit returned
    i += 1
"""

PUTTER = """
import sys
from store.embedded import EmbeddedStore

s = EmbeddedStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    s.put(f"{sys.argv[2]}{i:03d}", str(i).encode())
s.close()
"""

LEASER = """
import sys
from store.embedded import EmbeddedStore

s = EmbeddedStore(sys.argv[1])
lease = s.lease_grant(1)
s.put(sys.argv[2], b"owned", lease=lease.id)
print(lease.id)
# Exits without closing or refreshing: only other processes can expire the lease now.
"""


def test_open_store_embedded(tmp_path: Path) -> None:
    for endpoints in (None, [], [""]):
        data_dir = tmp_path / f"data-{endpoints!r}" / "nested"
        s = open_store(endpoints, str(data_dir))
        try:
            assert isinstance(s, EmbeddedStore)
            assert (data_dir / "state.db").exists()
        finally:
            s.close()


def test_wal_and_full_sync(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as s:
        conn = s._conn()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL

        def other_thread() -> None:
            c = s._conn()
            assert c is not conn
            assert c.execute("PRAGMA synchronous").fetchone()[0] == 2

        t = threading.Thread(target=other_thread)
        t.start()
        t.join()


def test_state_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    with EmbeddedStore(path) as s:
        s.put("/a", b"1")
        rev = s.put("/b", b"2")
        lease = s.lease_grant(60)
        s.put("/c", b"3", lease=lease.id)
    with EmbeddedStore(path) as s:
        assert s.revision() == rev + 1
        assert [kv.key for kv in s.range("/").kvs] == ["/a", "/b", "/c"]
        assert s.lease_refresh(lease.id) == 60
        w = Collector(s, "/", rev)
        try:
            assert [e.kv.key for e in w.take(2)] == ["/b", "/c"]
        finally:
            w.close()


def test_history_is_bounded(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db"), history=10) as s:
        first = s.put("/k", b"0")
        for i in range(30):
            s.put("/k", str(i).encode())
        old = Collector(s, "/", first)
        recent = Collector(s, "/", s.revision() - 4)
        try:
            assert isinstance(old.error(), Compacted)
            assert len(recent.take(5)) == 5
        finally:
            old.close()
            recent.close()


def test_close_stops_background_threads(tmp_path: Path) -> None:
    s = EmbeddedStore(str(tmp_path / "state.db"))
    lease = s.lease_grant(5, keepalive=True)
    w = Collector(s, "/", 0)
    s.close()
    assert not s._sweeper.is_alive()
    assert lease._thread is not None
    lease._thread.join(WAIT)
    assert not lease._thread.is_alive()
    w.thread.join(WAIT)
    assert not w.thread.is_alive()


def test_cas_increments_from_8_processes(tmp_path: Path) -> None:
    path, procs, per_proc = str(tmp_path / "state.db"), 8, 25
    EmbeddedStore(path).close()  # create the schema once, so start-up races are not the test
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CAS_WORKER, path, "/counter", str(per_proc)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    with EmbeddedStore(path) as s:
        kv = s.get("/counter")
        assert kv is not None
        assert int(kv.value) == procs * per_proc == kv.version


def test_sigkill_loses_no_committed_write(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    committed: list[tuple[str, int]] = []
    rng = random.Random(1234)
    for round_ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, path, f"r{round_}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n", child.stderr
            for _ in range(rng.randint(20, 200)):
                line = child.stdout.readline()
                assert line, "the writer died"
            os.kill(child.pid, signal.SIGKILL)
            out, _ = child.communicate(timeout=WAIT)
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
                child.wait()
        # Everything printed was committed; a torn last line (no newline) is ignored.
        lines = out.split(b"\n")[:-1]
        committed += [(k.decode(), int(r)) for k, r in (ln.split() for ln in lines)]
    with EmbeddedStore(path) as s:
        assert s._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        missing = []
        for key, rev in committed:
            kv = s.get(key)
            if kv is None or kv.value != key.encode() or kv.mod_revision != rev:
                missing.append((key, rev, kv))
        assert not missing, f"{len(missing)} committed writes lost, e.g. {missing[:3]}"
        revs = [r for _, r in committed]
        assert revs == sorted(set(revs))


def test_watch_sees_other_process_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    with EmbeddedStore(path) as s:
        w = Collector(s, "/x/", 0)
        try:
            run_python(PUTTER, path, "/x/", "20")
            events = w.take(20)
            assert [(e.kv.key, e.kv.value) for e in events] == [
                (f"/x/{i:03d}", str(i).encode()) for i in range(20)
            ]
            revs = [e.kv.mod_revision for e in events]
            assert revs == list(range(revs[0], revs[0] + 20))
            w.assert_quiet()
        finally:
            w.close()


def test_lease_of_a_dead_process_expires(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    with EmbeddedStore(path) as s:
        w = Collector(s, "/owned", 0)
        try:
            lease_id = int(run_python(LEASER, path, "/owned"))
            first = w.take(1)[0]
            assert (first.type, first.kv.lease) == ("put", lease_id)
            wait_for(lambda: s.get("/owned") is None, WAIT, "the orphaned lease expired")
            assert summary(w.take(1)) == [("delete", "/owned", b"", first.kv.mod_revision + 1)]
        finally:
            w.close()


def test_unusable_db_file_is_refused_and_left_alone(tmp_path: Path) -> None:
    bad = tmp_path / "state.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreCorrupt, match="is not an SQLite database") as info:
        EmbeddedStore(str(bad))
    assert str(bad) in str(info.value)
    assert bad.read_bytes() == b"this is not a database" * 100
