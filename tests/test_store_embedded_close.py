"""Closing the embedded store while other threads use it (a separate file: the cases run in
a child interpreter, since the failure they guard against is a crash)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLOSE_UNDER_WATCHES = """
import sys, threading
from store.base import StoreError
from store.embedded import EmbeddedStore

def drain(watch):
    try:
        for _ in watch:
            pass
    except StoreError:
        pass  # a watch may end with the store's closing

for _ in range(50):
    # poll_interval=0: the watches never stop querying, so close() always finds some busy.
    s = EmbeddedStore(sys.argv[1], poll_interval=0)
    threads = [
        threading.Thread(target=drain, args=(s.watch("/", 1),), daemon=True) for _ in range(8)
    ]
    for t in threads:
        t.start()
    s.close()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a watch outlived close()"
print("ok")
"""


def test_close_never_closes_a_connection_under_a_running_statement(tmp_path: Path) -> None:
    # It used to: SQLite then freed what the watch's statement was using (a segfault).
    done = subprocess.run(
        [sys.executable, "-c", CLOSE_UNDER_WATCHES, str(tmp_path / "state.db")],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-3000:]
