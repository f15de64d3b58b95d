"""The plugin socket's server: a private socket with a deep listen backlog."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from flask import Flask

from plugin.server import BACKLOG, make_socket_server


def test_the_socket_is_private_and_its_backlog_deep(tmp_path: Path) -> None:
    path = tmp_path / "p.sock"
    server = make_socket_server(str(path), Flask("t"))
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert server.request_queue_size == BACKLOG > 128  # werkzeug's own is 128
    finally:
        server.server_close()
