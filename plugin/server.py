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
from typing import Any

from werkzeug.serving import ThreadedWSGIServer

BACKLOG = 1024


class SocketServer(ThreadedWSGIServer):  # type: ignore[misc]
    request_queue_size = BACKLOG


def make_socket_server(path: str, app: Any, mode: int = 0o600) -> SocketServer:
    """Listen on the unix socket ``path`` (made with ``mode``) and serve ``app`` from
    ``serve_forever()``; each connection in its own thread."""
    # Whoever may write to the socket may drive the host's networking: ``mode`` from the
    # moment it exists (the umask), not only after a chmod.
    umask = os.umask(0o777 & ~mode)
    try:
        server = SocketServer(f"unix://{path}", 0, app)
    finally:
        os.umask(umask)
    os.chmod(path, mode)
    return server
