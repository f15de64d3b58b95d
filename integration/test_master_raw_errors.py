"""Requests a real netmaster (gunicorn) cannot parse get the API's JSON error, over plain HTTP
and TLS: the right status, ``Content-Type: application/json`` and ``{"error", "object",
"reason"}``, never gunicorn's HTML page, and never the bad input echoed back."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from testbed.master import MasterProcess
from testbed.pki import MasterSecurity

BIG = "a" * 9000  # more than any line or field gunicorn takes


@dataclass
class Client:
    master: MasterProcess
    token: str  # the admin token, "" when the master has none
    context: ssl.SSLContext | None

    def connect(self) -> socket.socket:
        s = socket.create_connection((self.master.host, self.master.port), timeout=30)
        if self.context is None:
            return s
        return self.context.wrap_socket(s, server_hostname=self.master.host)

    def request(self, first: str, *headers: str, body: bytes = b"", auth: bool = True) -> bytes:
        """A request with Host (and the admin token), ``headers`` and ``body``."""
        lines = [first, f"Host: {self.master.host}"]
        if self.token and auth:
            lines.append(f"Authorization: Bearer {self.token}")
        return ("\r\n".join([*lines, *headers]) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    after: bytes  # what the connection carried after this answer, until it closed


def exchange(client: Client, data: bytes) -> Answer:
    """Send ``data``, read one answer (its head, then Content-Length bytes), then whatever
    follows until the master closes the connection."""
    with client.connect() as s:
        s.sendall(data)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(65536)
            assert chunk, f"the master closed without an answer (after {got!r})"
            got += chunk
        head, _, rest = got.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
        length = int(headers["content-length"])
        while len(rest) < length:
            chunk = s.recv(65536)
            assert chunk, "the master closed inside the body"
            rest += chunk
        body, after = rest[:length], rest[length:]
        if not isinstance(s, ssl.SSLSocket):
            # Kept alive or not, the master closes now. (A TLS socket cannot half-close:
            # the master closes a kept-alive one after its keep-alive time, 2 s.)
            s.shutdown(socket.SHUT_WR)
        while chunk := s.recv(65536):
            after += chunk
    return Answer(int(lines[0].split(" ", 2)[1]), headers, body, after)


@pytest.fixture(scope="module", params=["plain", "tls"])
def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    tmp = tmp_path_factory.mktemp(request.param)
    security = MasterSecurity.create(tmp / "pki") if request.param == "tls" else None
    m = MasterProcess(tmp / "master", security=security).start()
    try:
        if security is None:
            yield Client(m, "", None)
        else:
            context = ssl.create_default_context(cafile=str(security.ca))
            yield Client(m, security.admin, context)
    finally:
        m.stop()


POST = "POST /api/v1/tenants/raw HTTP/1.1"
CHUNKED = "Transfer-Encoding: chunked"
R, P = "request", "/api/v1/tenants/raw"  # who the error names: the request, or the route
# name: (request line, headers, body, status, object). gunicorn refuses each before the app
# runs, except a chunked body's errors: the app reads the body, and answers for its route.
CASES: dict[str, tuple[str, tuple[str, ...], bytes, int, str]] = {
    "lower-case method": ("get /version HTTP/1.1", (), b"", 400, R),
    "method with a bad character": ("G#T /version HTTP/1.1", (), b"", 400, R),
    "request line too long": (f"GET /{BIG} HTTP/1.1", (), b"", 414, R),
    "two spaces in the request line": ("GET  /version HTTP/1.1", (), b"", 400, R),
    "no HTTP version": ("GET /version", (), b"", 400, R),
    "HTTP version not x.y": ("GET /version HTTP/1", (), b"", 400, R),
    "HTTP/2.0 in a request line": ("GET /version HTTP/2.0", (), b"", 505, R),
    "bare LF": ("GET /version HTTP/1.1\nX-A: 1", (), b"", 400, R),
    "header name not a token": ("GET /version HTTP/1.1", ("Bad Name: x",), b"", 400, R),
    "header line without a colon": ("GET /version HTTP/1.1", ("Bearer x",), b"", 400, R),
    "control character in a value": ("GET /version HTTP/1.1", ("X-A: a\x01b",), b"", 400, R),
    "Host twice": ("GET /version HTTP/1.1", ("Host: other",), b"", 400, R),
    "obsolete line folding": ("GET /version HTTP/1.1", ("X-A: 1", " folded"), b"", 400, R),
    "header field too long": ("GET /version HTTP/1.1", (f"X-Long: {BIG}",), b"", 431, R),
    "too many header fields": (
        "GET /version HTTP/1.1", tuple(f"X-{i}: 1" for i in range(101)), b"", 431, R
    ),
    "Content-Length not a number": (POST, ("Content-Length: two",), b"{}", 400, R),
    "Content-Length twice": (POST, ("Content-Length: 2", "Content-Length: 3"), b"{}", 400, R),
    "Content-Length beside chunked": (POST, ("Content-Length: 2", CHUNKED), b"0\r\n\r\n", 400, R),
    "Transfer-Encoding unknown": (POST, ("Transfer-Encoding: br",), b"", 501, R),
    "Transfer-Encoding not chunked": (POST, ("Transfer-Encoding: gzip",), b"", 400, R),
    "Expect other than 100-continue": (POST, ("Expect: 200-ok",), b"", 417, R),
    "scheme headers disagree": (
        "GET /version HTTP/1.1", ("X-Forwarded-Proto: https", "X-Forwarded-Ssl: off"), b"", 400, R
    ),
    "chunk size not hexadecimal": (POST, (CHUNKED,), b"zz\r\n{}\r\n0\r\n\r\n", 400, P),
    "chunk without its CRLF": (POST, (CHUNKED,), b"2\r\n{}XX0\r\n\r\n", 400, P),
    "chunk extension not valid": (POST, (CHUNKED,), b'2;a="\r\n{}\r\n0\r\n\r\n', 400, P),
    "forbidden header in the trailer": (POST, (CHUNKED,), b"0\r\nHost: x\r\n\r\n", 400, P),
}  # fmt: skip


def assert_api_error(answer: Answer, status: int) -> dict[str, str]:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json", answer
    body = json.loads(answer.body)
    assert set(body) == {"error", "object", "reason"} and all(body.values()), body
    assert body["reason"] in body["error"]
    assert BIG[:100].encode() not in answer.body and len(answer.body) < 1024
    return body


@pytest.mark.parametrize("case", CASES)
def test_a_request_gunicorn_refuses_gets_the_apis_json_error(client: Client, case: str) -> None:
    first, headers, body, status, obj = CASES[case]
    answer = exchange(client, client.request(first, *headers, body=body))
    assert assert_api_error(answer, status)["object"] == obj
    assert answer.after == b""  # one answer, then the connection closes


def test_the_refusal_names_the_limit_and_the_fix(client: Client) -> None:
    answer = exchange(client, client.request(f"GET /{BIG} HTTP/1.1"))
    assert assert_api_error(answer, 414)["reason"] == "the request line is longer than 4094 bytes"
    answer = exchange(client, client.request("get /version HTTP/1.1"))
    assert assert_api_error(answer, 400)["reason"] == (
        "method get is not valid: methods are case-sensitive; send GET"
    )


def test_an_unknown_method_is_still_the_apis_405(client: Client) -> None:
    answer = exchange(client, client.request("FOO /version HTTP/1.1"))
    assert assert_api_error(answer, 405)["object"] == "/version"


def test_a_bad_body_the_app_did_not_read_gets_no_second_answer(client: Client) -> None:
    """The app answers (a 405 without reading the body); draining the bad chunked body
    afterwards fails, and the connection closes without a second answer."""
    data = client.request("POST /version HTTP/1.1", CHUNKED, body=b"zz\r\n{}\r\n0\r\n\r\n")
    answer = exchange(client, data)
    assert_api_error(answer, 405)
    assert answer.after == b""


def test_a_request_without_host_is_served(client: Client) -> None:
    """gunicorn does not refuse an HTTP/1.1 request without Host: the API answers it."""
    answer = exchange(client, b"GET /version HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert answer.status == 200 and "version" in json.loads(answer.body)
