"""The embedded store's file under faults, with real netmaster and netplugin processes.

- A damaged store file (truncated, header overwritten, emptied): netmaster and netplugin
  refuse to start with one line naming the file, what is wrong and what to do, and leave
  the file exactly as it was. Neither ever starts on an empty store instead.
- A full disk (a real, small tmpfs): the master answers 503 naming the store, writes
  nothing half, keeps answering reads, and works again once there is space.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from common import keys
from master.decisions.consistency import check_state
from store.embedded import EmbeddedStore
from testbed.master import MasterProcess, free_port
from testbed.require import require_root

BIN = Path(sys.executable).parent


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _real_store(data: Path) -> Path:
    """A store a real master wrote (a network, endpoints), checkpointed into its one file."""
    master = MasterProcess(data, log=data.parent / "setup.log")
    try:
        master.start()
        assert master.api("POST", "networks/default:n1", json={"subnet": "10.90.0.0/24"}).ok
        for i in range(20):
            body = {"endpointID": f"e{i}", "networkName": "n1", "host": "h1"}
            assert master.api("POST", "alloc/endpoints", json=body).status_code == 201
    finally:
        master.stop()
    db = data / "state.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return db


def _damage(db: Path, how: str) -> None:
    match how:
        case "truncated to half":
            os.truncate(db, db.stat().st_size // 2)
        case "garbage over the header":
            with open(db, "r+b") as f:
                f.write(b"\x5a" * 512)
        case "zero length":
            os.truncate(db, 0)
        case "zero length beside a WAL":
            os.truncate(db, 0)
            (db.parent / "state.db-wal").write_bytes(b"\x37" * 8192)


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NETMASTER_", "NETPLUGIN_"))}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)


@pytest.mark.parametrize(
    "how",
    ["truncated to half", "garbage over the header", "zero length", "zero length beside a WAL"],
)
def test_a_damaged_store_file_stops_netmaster_and_netplugin(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    db = _real_store(data)
    _damage(db, how)
    before = {p.name: _digest(p) for p in data.iterdir() if p.name.startswith("state.db")}
    port = free_port()
    sock = tmp_path / "plugin.sock"
    runs = {
        "netmaster": [
            str(BIN / "netmaster"),
            "--data-dir",
            str(data),
            "--listen-url",
            f"127.0.0.1:{port}",
        ],
        "netplugin": [
            str(BIN / "netplugin"),
            "--data-dir",
            str(data),
            "--socket",
            str(sock),
            "--netmaster",
            f"http://127.0.0.1:{port}",
        ],
    }
    for prog, cmd in runs.items():
        done = _run(cmd)
        assert done.returncode != 0, f"{prog} started on a damaged store:\n{done.stderr}"
        lines = done.stderr.strip().splitlines()
        assert lines, f"{prog} said nothing"
        message = lines[-1]
        assert message.startswith(f"{prog}: the embedded store {db} "), message
        assert "Restore it from a backup, or move it aside" in message, message
        assert ("empty" if "zero" in how else "damaged" if "half" in how else "not an SQLite") in (
            message
        )
        after = {p.name: _digest(p) for p in data.iterdir() if p.name.startswith("state.db")}
        assert after == before, f"{prog} changed the damaged store's files"
    assert not sock.exists()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/version", timeout=2)


@contextlib.contextmanager
def _small_disk(path: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` mounted at ``path`` (we are root), unmounted in any case."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(disk: Path) -> Path:
    """Fill ``disk`` to the last byte with one file; returns it."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
    return filler


def test_disk_full_is_a_503_naming_the_store_and_heals(tmp_path: Path) -> None:
    require_root("mounting a tmpfs")
    with _small_disk(tmp_path / "disk", "3m") as disk:
        data = disk / "data"
        master = MasterProcess(data, log=tmp_path / "netmaster.log")
        filler: Path | None = None
        try:
            master.start()
            assert master.api("POST", "networks/default:n1", json={"subnet": "10.91.0.0/24"}).ok
            for i in range(5):
                body = {"endpointID": f"ok{i}", "networkName": "n1"}
                assert master.api("POST", "alloc/endpoints", json=body).status_code == 201
            filler = _fill(disk)

            # Writes fail whole, with the store named; nothing of them is left behind.
            refused = []
            for i in range(20):
                body = {"endpointID": f"full{i}", "networkName": "n1"}
                r = master.api("POST", "alloc/endpoints", json=body)
                assert r.status_code in (201, 503), r.text
                if r.status_code == 503:
                    refused.append(f"full{i}")
                    err = r.json()
                    assert set(err) == {"error", "object", "reason"}
                    assert err["object"] == f"endpoint full{i}"
                    assert f"the embedded store {data / 'state.db'}" in err["reason"]
                    assert "disk is full" in err["reason"]
            assert refused, "no write failed on a full disk"
            net = master.api("GET", "networks/default:n1")
            assert net.ok, "reads must go on while the disk is full"
            with EmbeddedStore(str(data / "state.db")) as store:
                scan = {kv.key: kv.value for kv in store.range(keys.ROOT).kvs}
            assert [str(p) for p in check_state(scan)] == []
            assert not [e for e in refused if keys.endpoint_index(e) in scan]

            # Space is back: the same requests succeed.
            filler.unlink()
            filler = None
            for ep in refused:
                body = {"endpointID": ep, "networkName": "n1"}
                r = master.api("POST", "alloc/endpoints", json=body)
                assert r.status_code == 201, r.text
            eps = master.api("GET", "endpoints").json()
            assert {e["endpointID"] for e in eps} >= set(refused)
            assert master.running()
        finally:
            if filler is not None:
                filler.unlink()
            master.stop()
