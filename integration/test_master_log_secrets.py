"""No token reaches a real netmaster's log at --log-level debug, however a client sends it:
as a bearer token, as HTTP Basic's user or password, in another scheme, in a malformed
header line, in the userinfo of an absolute URL, through a follower that forwards it to the
leader, or in a request cut off halfway. Every request still gets its answer."""

from __future__ import annotations

import base64
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testbed.master import MasterProcess
from testbed.wait import wait_for


def token_file(directory: Path) -> tuple[Path, dict[str, str]]:
    directory.mkdir(parents=True, exist_ok=True)
    tokens = {role: secrets.token_hex(24) for role in ("admin", "agent", "reader")}
    path = directory / "tokens"
    path.write_text("".join(f"{role} {t} log-{role}\n" for role, t in tokens.items()))
    path.chmod(0o600)
    return path, tokens


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def raw(m: MasterProcess, data: bytes) -> bytes:
    """Send ``data`` on a new connection, then read until the master closes it."""
    with socket.create_connection((m.host, m.port), timeout=30) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.fixture
def masters(tmp_path: Path) -> Iterator[tuple[MasterProcess, MasterProcess, dict[str, str]]]:
    """Two masters with tokens, logging at debug, on one store: the leader and a follower."""
    path, tokens = token_file(tmp_path / "secrets")
    flags = ["--log-level", "debug", "--auth-token-file", str(path), "--leader-ttl", "3"]
    ms = [MasterProcess(tmp_path / "shared", extra=flags) for _ in "ab"]
    try:
        for m in ms:
            m.start()

        def leader() -> MasterProcess | None:
            roles = {m.url: requests.get(f"{m.url}/api/v1/leader", timeout=10).json() for m in ms}
            return next((m for m in ms if roles[m.url]["self"]["role"] == "leader"), None)

        lead = wait_for(leader, 20, "one of the two masters leads")
        yield lead, next(m for m in ms if m is not lead), tokens
    finally:
        for m in ms:
            m.stop()


def test_no_token_reaches_the_log_however_it_is_sent(
    masters: tuple[MasterProcess, MasterProcess, dict[str, str]],
) -> None:
    lead, follower, tokens = masters
    admin = tokens["admin"]
    url = "/api/v1/tenants"
    as_headers = {
        f"Bearer {admin}": 200,
        basic(admin, ""): 401,  # curl -u "$TOKEN:"
        basic("admin", admin): 401,  # curl -u "admin:$TOKEN"
        f"Token {admin}": 401,
        admin: 401,
        f"Bearer {admin}x": 401,
    }
    for m in (lead, follower):  # the follower forwards each to the leader
        for header, status in as_headers.items():
            r = requests.get(m.url + url, headers={"Authorization": header}, timeout=30)
            assert r.status_code == status, (header, r.text)
            assert admin not in r.text
    t = admin.encode()
    get = b"GET /api/v1/tenants HTTP/1.1\r\nHost: " + lead.host.encode() + b"\r\n"
    malformed = {
        # A header line without its colon, a name that is no token, a value with a control
        # character, a request line with a third word: gunicorn's parser refuses them, and
        # its message repeated the raw input.
        get + b"Authorization Bearer " + t + b"\r\n\r\n": 400,
        get + b"Bearer " + t + b": x\r\n\r\n": 400,
        get + b"Authorization: Bearer " + t + b"\x01\r\n\r\n": 400,
        get.replace(b" HTTP/1.1", b" " + t + b" HTTP/1.1") + b"\r\n": 400,
        # A user and password in an absolute request target.
        get.replace(b"/api", b"http://admin:" + t + b"@" + lead.host.encode() + b"/api")
        + b"\r\n": 401,
    }
    for m in (lead, follower):
        for request, status in malformed.items():
            answer = raw(m, request)
            assert status_of(answer) == status, (request, answer)
            assert t not in answer, answer
    # Cut off after the Authorization header: the master never sees the request whole.
    cut = get + b"Authorization: Bearer " + t + b"\r\n"
    assert raw(lead, cut) == b""
    # Both logs are at debug (read once the masters have stopped, so nothing is left
    # unwritten): every request line is there, and no token.
    for m in (lead, follower):
        m.stop()
        log = m.log.read_text(errors="replace")
        for token in tokens.values():
            assert token not in log, m.log
        assert f"GET {url} HTTP/1.1" in log
        assert "log-admin" in log  # the access log names the caller by the token file's NAME
