"""The plugin socket's server: a private socket with a deep listen backlog."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
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


def raw(path: Path, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(str(path))
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Serve a small app on a socket (with ``error_body`` when given), in a thread."""
    servers: list[Any] = []
    app = Flask("t")

    @app.post("/Plugin.Activate")
    def activate() -> dict[str, Any]:
        return {"Implements": ["NetworkDriver"]}

    def serve(**kw: Any) -> Path:
        path = tmp_path / f"p{len(servers)}.sock"
        server = make_socket_server(str(path), app, **kw)
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return path

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


BIG = b"a" * 70000  # more than the server reads as one line
UNPARSABLE = {
    "request line too long": (b"POST /" + BIG + b" HTTP/1.1\r\n\r\n", 414),
    "header line too long": (b"POST /Plugin.Activate HTTP/1.1\r\nX: " + BIG + b"\r\n\r\n", 431),
    "too many headers": (
        b"POST /Plugin.Activate HTTP/1.1\r\n"
        + b"".join(b"X-%d: 1\r\n" % i for i in range(101))
        + b"\r\n",
        431,
    ),
    "HTTP version not supported": (b"POST /Plugin.Activate HTTP/9.1\r\n\r\n", 505),
    "HTTP version not valid": (b"POST /Plugin.Activate HTTP/1\r\n\r\n", 400),
    "one word": (b"GARBAGE-" + b"x" * 200 + b"\r\n\r\n", 400),
    "four words": (b"POST /Plugin.Activate HTTP/1.1 " + b"x" * 200 + b"\r\n\r\n", 400),
}


@pytest.mark.parametrize("case", UNPARSABLE)
def test_a_request_the_server_cannot_parse_gets_dockers_json_error(
    served: Callable[..., Path], case: str
) -> None:
    data, status = UNPARSABLE[case]
    answer = raw(served(), data)
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} "), answer[:200]
    assert "Content-Type: application/json" in lines
    assert f"Content-Length: {len(body)}" in lines
    error = json.loads(body)
    assert set(error) == {"Err"} and error["Err"].startswith("request: ")
    assert b"x" * 100 not in body and b"a" * 100 not in body and len(body) < 200


def test_each_socket_answers_in_its_own_error_shape(served: Callable[..., Path]) -> None:
    def shape(reason: str) -> dict[str, Any]:
        return {"error": f"request: {reason}", "object": "request", "reason": reason}

    answer = raw(served(error_body=shape), b"POST /x HTTP/9.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 505 ")
    assert json.loads(answer.partition(b"\r\n\r\n")[2]) == shape(
        "the HTTP version is not supported: send HTTP/1.1 (or HTTP/1.0)"
    )
    # What the server parses reaches the app (werkzeug upper-cases a method).
    for method in (b"POST", b"post"):
        ok = raw(served(), method + b" /Plugin.Activate HTTP/1.1\r\nHost: p\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 ") and b"NetworkDriver" in ok
