"""When a request buffered by the master's worker is whole enough to hand to a thread, and
how the worker's main loop handshakes and reads without blocking."""

from __future__ import annotations

import datetime
import selectors
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from master.httpworker import (
    READ,
    WRITE,
    BufferingThreadWorker,
    handshake,
    receive,
    request_complete,
    worker_class,
)

HEAD = b"POST /api/v1/alloc/endpoints HTTP/1.1\r\nHost: m\r\nContent-Length: 5\r\n\r\n"


def test_a_request_is_whole_with_its_head_and_body() -> None:
    assert not request_complete(b"")
    assert not request_complete(b"GET /version HTTP/1.1\r\nHost: m\r\n")
    assert request_complete(b"GET /version HTTP/1.1\r\nHost: m\r\n\r\n")
    assert not request_complete(HEAD)
    assert not request_complete(HEAD + b"1234")
    assert request_complete(HEAD + b"12345")
    assert request_complete(HEAD + b"12345GET /next")  # pipelined: the first is whole


def test_headers_are_read_case_blind_and_oddities_go_to_gunicorn() -> None:
    assert not request_complete(HEAD.replace(b"Content-Length", b"content-LENGTH"))
    assert request_complete(HEAD.replace(b"5", b"five"))  # gunicorn answers 400 at once
    expect = HEAD.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    assert request_complete(expect)  # the client waits for "go on" before its body


def test_chunked_bodies_end_with_the_last_chunk() -> None:
    chunked = b"POST /x HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert not request_complete(chunked)
    assert not request_complete(chunked + b"5\r\nhello\r\n")
    assert request_complete(chunked + b"5\r\nhello\r\n0\r\n\r\n")


def test_a_chunked_body_is_whole_with_its_trailer_and_not_before() -> None:
    chunked = b"POST /x HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\n"
    # A chunk whose data ends like the last chunk is not the end.
    assert not request_complete(chunked + b"4\r\nx0\r\n\r\n")
    assert request_complete(chunked + b"4\r\nx0\r\n\r\n0\r\n\r\n")
    assert request_complete(chunked + b"2;ext=1\r\n{}\r\n0;last\r\n\r\n")
    # Trailer fields come between the last chunk and the empty line that ends the body.
    assert not request_complete(chunked + b"0\r\nX-Sum: 1\r\n")
    assert request_complete(chunked + b"0\r\nX-Sum: 1\r\n\r\n")
    assert not request_complete(chunked + b"2\r\n{}")  # its CRLF is still to come


def test_what_gunicorn_refuses_at_once_goes_to_a_thread_at_once() -> None:
    """Not waited for until the request timeout: gunicorn answers it with its error."""
    chunked = b"POST /x HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert request_complete(chunked + b"zz\r\n")  # a chunk size that is no number
    assert request_complete(chunked + b"2\r\n{}XX")  # a chunk without its CRLF
    two = HEAD.replace(b"\r\n\r\n", b"\r\nContent-Length: 9\r\n\r\n")
    assert request_complete(two)  # two Content-Lengths
    assert request_complete(HEAD.replace(b"5", b"+5"))


def test_a_huge_request_goes_to_a_thread_as_it_is() -> None:
    assert request_complete(b"x" * 100, max_buffered=100)
    assert not request_complete(b"x" * 99, max_buffered=100)


def test_the_worker_class_carries_its_timeout() -> None:
    cls = worker_class(7.5)
    assert issubclass(cls, BufferingThreadWorker) and cls.request_timeout == 7.5
    assert BufferingThreadWorker.request_timeout == 30.0


class FakeSock:
    """A socket whose recv()/do_handshake() play a script: bytes, or an exception to raise."""

    def __init__(self, *script: bytes | BaseException) -> None:
        self.script = list(script)
        self.reads: list[int] = []

    def recv(self, n: int) -> bytes:
        self.reads.append(n)
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def do_handshake(self) -> None:
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step


def test_reading_goes_on_until_the_socket_would_block() -> None:
    sock = FakeSock(b"GET /", b"version", ssl.SSLWantReadError())
    assert receive(sock, b"") == (b"GET /version", READ)
    assert sock.script == []  # a TLS socket's own buffer is drained, not left behind
    assert receive(FakeSock(b"x", BlockingIOError()), b"ab") == (b"abx", READ)
    assert receive(FakeSock(ssl.SSLWantWriteError()), b"ab") == (b"ab", WRITE)


def test_a_closed_or_broken_connection_ends_the_reading() -> None:
    assert receive(FakeSock(b"GET", b""), b"") == (b"GET", None)
    assert receive(FakeSock(b"GET", ConnectionResetError()), b"") == (b"", None)
    assert receive(FakeSock(ssl.SSLError("bad record mac")), b"x") == (b"", None)


def test_reading_stops_at_the_limit() -> None:
    sock = FakeSock(b"12345", b"67890", b"never read")
    assert receive(sock, b"", limit=8) == (b"1234567890", READ)
    assert sock.script == [b"never read"]


def test_a_handshake_step_says_what_to_wait_for() -> None:
    assert handshake(FakeSock(ssl.SSLWantReadError())) == READ
    assert handshake(FakeSock(ssl.SSLWantWriteError())) == WRITE
    assert handshake(FakeSock(b"")) == 0
    with pytest.raises(ssl.SSLError):
        handshake(FakeSock(ssl.SSLError("wrong version number")))


def _server_context(tmp_path: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "m")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    pem = tmp_path / "server.pem"
    pem.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem)
    return context


def test_a_real_tls_request_is_read_without_blocking(tmp_path: Path) -> None:
    """Handshake and reading driven by readiness as the worker's main loop does, against a
    client sending a request of several TLS records at once."""
    server_raw, client_raw = socket.socketpair()
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
    request = HEAD.replace(b"5", b"40000") + b"x" * 40000  # three records or more
    with (
        _server_context(tmp_path).wrap_socket(
            server_raw, server_side=True, do_handshake_on_connect=False
        ) as server,
        client_context.wrap_socket(client_raw, do_handshake_on_connect=False) as client,
    ):
        server.setblocking(False)
        sender = threading.Thread(target=lambda: (client.do_handshake(), client.sendall(request)))
        sender.start()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(server, READ)
                want = handshake(server)
                while want:
                    selector.modify(server, want)
                    selector.select(10)
                    want = handshake(server)
                buf, want = receive(server, b"")
                while not request_complete(buf):
                    assert want is not None
                    selector.modify(server, want)
                    assert selector.select(10), "no more bytes"
                    buf, want = receive(server, buf)
            assert buf == request and server.pending() == 0
        finally:
            sender.join(10)
