"""The HTTP server of the Docker plugin socket: werkzeug's threaded server on a unix socket.

Docker calls a plugin in bursts (a daemon restart, many containers at once), and Go's
dialer connects without blocking: when the socket's listen backlog is full, the connect
fails at once with EAGAIN ("resource temporarily unavailable") and Docker reports the
call as failed. werkzeug listens with a backlog of 128; we ask for BACKLOG (the kernel caps
it at net.core.somaxconn, 4096 by default since Linux 5.4). Each accepted connection gets
its own thread.

A request whose line or headers the server cannot parse never reaches the app. The
standard library's handler answers it with an HTML page (without even a status line when
the request line is unreadable) that repeats the bad input; ``json_errors`` answers it in
the socket's own JSON error shape (Docker reads ``{"Err": ...}``) instead.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import tempfile
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

BACKLOG = 1024
# What http.server reads at most: a line (request line or header), and header fields.
MAX_LINE = getattr(http.client, "_MAXLINE", 65536)
MAX_HEADERS = getattr(http.client, "_MAXHEADERS", 100)

ErrorBody = Callable[[str], dict[str, Any]]

log = logging.getLogger("netplugin.server")


def docker_error(reason: str) -> dict[str, Any]:
    """Docker's error shape (a plugin's answer with "Err" is a failed call)."""
    return {"Err": f"request: {reason}"}


def parse_error_reason(status: int, message: str | None) -> str:
    """Why the server refused a request it could not parse (``message``: the standard
    library's, which may quote the raw input: only compared, never repeated)."""
    if status == 414:
        return f"the request line is longer than {MAX_LINE} bytes"
    if status == 431 and message == "Too many headers":
        return f"the request has more than {MAX_HEADERS} header fields"
    if status == 431:
        return f"a header line is longer than {MAX_LINE} bytes"
    if status == 505:
        return "the HTTP version is not supported: send HTTP/1.1 (or HTTP/1.0)"
    if status == 400:
        return "the request line is not 'METHOD /path HTTP/1.1'"
    return HTTPStatus(status).phrase.lower()


def error_answer(status: int, body: dict[str, Any]) -> bytes:
    """A whole HTTP/1.1 answer with a JSON body; the connection closes after it."""
    data = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + data


class JsonErrorHandler(WSGIRequestHandler):  # type: ignore[misc]
    """werkzeug's handler, whose answers to unparsable requests are JSON."""

    error_body: ErrorBody = staticmethod(docker_error)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        reason = parse_error_reason(int(code), message)
        log.debug("refused a request: %d %s", code, reason)
        self.close_connection = True
        self.wfile.write(error_answer(int(code), self.error_body(reason)))


def json_errors(error_body: ErrorBody) -> type[JsonErrorHandler]:
    """The request handler that answers unparsable requests with ``error_body(reason)``."""
    return type("JsonErrorHandler", (JsonErrorHandler,), {"error_body": staticmethod(error_body)})


class SocketServer(ThreadedWSGIServer):  # type: ignore[misc]
    request_queue_size = BACKLOG


def make_socket_server(
    path: str, app: Any, mode: int = 0o600, error_body: ErrorBody = docker_error
) -> SocketServer:
    """Listen on the unix socket ``path`` (made with ``mode``) and serve ``app`` from
    ``serve_forever()``; each connection in its own thread. A request the server cannot
    parse is answered with ``error_body(reason)`` (Docker's shape unless told)."""
    # Whoever may write to the socket may drive the host's networking: it gets ``mode`` in
    # a directory only we may enter, then moves into place whole. (Not by the umask: that is
    # the whole process's, and other threads are creating files by now.)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(path) or ".") as private:
        staged = os.path.join(private, "s")
        server = SocketServer(f"unix://{staged}", 0, app, handler=json_errors(error_body))
        os.chmod(staged, mode)
        os.replace(staged, path)
    return server
