"""The HTTP server of the Docker plugin socket: werkzeug's threaded server on a unix socket.

Docker calls a plugin in bursts (a daemon restart, many containers at once), and Go's
dialer connects without blocking: when the socket's listen backlog is full, the connect
fails at once with EAGAIN ("resource temporarily unavailable") and Docker reports the
call as failed. werkzeug listens with a backlog of 128; we ask for BACKLOG (the kernel caps
it at net.core.somaxconn, 4096 by default since Linux 5.4). Each accepted connection gets
its own thread.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from werkzeug.serving import ThreadedWSGIServer

BACKLOG = 1024


class SocketServer(ThreadedWSGIServer):  # type: ignore[misc]
    request_queue_size = BACKLOG


def make_socket_server(path: str, app: Any, mode: int = 0o600) -> SocketServer:
    """Listen on the unix socket ``path`` (made with ``mode``) and serve ``app`` from
    ``serve_forever()``; each connection in its own thread."""
    # Whoever may write to the socket may drive the host's networking: it gets ``mode`` in
    # a directory only we may enter, then moves into place whole. (Not by the umask: that is
    # the whole process's, and other threads are creating files by now.)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path) or ".") as private:
        staged = os.path.join(private, "s")
        server = SocketServer(f"unix://{staged}", 0, app)
        os.chmod(staged, mode)
        os.replace(staged, path)
    return server
