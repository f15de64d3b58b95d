"""gunicorn's gthread worker, except that a connection gets a thread only once its whole
request has arrived.

Stock gthread hands a connection to a thread as soon as it is readable, and the thread then
blocks until the rest of the request comes. A few clients that send a request a byte at a
time, or stop halfway, hold every thread, and the master answers nobody (shown by
integration/test_faults_connections.py; a client that sends nothing at all is parked by
gthread itself after 5 s, one that trickles is not). Here the worker's main loop reads
requests without blocking into a per-connection buffer and hands the connection to a thread
when the buffer holds the request's head and its Content-Length body (or, for a chunked
body or ``Expect: 100-continue``, when it looks whole or asks to go on). A slow client
costs a socket and a buffer, never a thread. A request that has not arrived whole within
``request_timeout`` seconds is dropped by the main loop. Kept-alive connections come back
through the same buffer for their next request.

Under TLS (gunicorn's certfile) the main loop also does the handshake: it wraps the accepted
socket with gunicorn's own SSLContext (the one ``ssl_context`` in the config builds, so
client-certificate requirements and ALPN stay as configured) without handshaking on
connect, drives ``do_handshake()`` as the socket becomes readable or writable, then buffers
the decrypted request as above; ``request_timeout`` covers handshake and request together.
The thread gets the wrapped, handshaken socket and the buffered bytes, and neither wraps nor
handshakes again. A failed handshake (a refused client certificate, plain HTTP on the TLS
port) closes the connection, logged at debug (after the client's own close, or its request
timeout, so that it gets the TLS alert saying why). A connection that negotiated HTTP/2 by ALPN
(only when gunicorn's ``http_protocols`` offers h2; netmaster's does not) goes to a thread
after its handshake, as stock gthread serves it.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import time
from datetime import datetime
from functools import partial
from typing import Any

from gunicorn import http, util
from gunicorn import sock as gsock
from gunicorn.http.wsgi import Response, default_environ
from gunicorn.workers.gthread import ThreadWorker

from .httperrors import INTERNAL, Limits, error_response, refusal

MAX_BUFFERED = 1 << 20  # past this much, a request goes to a thread as it is
READ_CHUNK = 1 << 16
DEFAULT_REQUEST_TIMEOUT = 30.0
READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


def request_complete(buf: bytes, max_buffered: int = MAX_BUFFERED) -> bool:
    """Whether ``buf`` (the bytes of a connection so far) holds a request a thread can serve
    without waiting for the client: its head, and its body when the head says how long."""
    if len(buf) >= max_buffered:
        return True
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False
    length: int | None = None
    chunked = False
    for line in buf[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            if length is not None or not value.isdigit():
                return True  # two, or not a number: gunicorn refuses it at once
            length = int(value)
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value
        elif name == b"expect" and value == b"100-continue":
            return True  # the client waits for a "go on" before its body
    if chunked:
        return chunked_complete(buf[end + 4 :])
    return len(buf) - end - 4 >= (length or 0)


def chunked_complete(body: bytes) -> bool:
    """Whether ``body`` (what follows a chunked request's head) holds its last chunk and its
    trailer section; also when it is malformed (gunicorn refuses it at once)."""
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return False
        size = body[pos:eol].split(b";", 1)[0].strip(b" \t")
        if not size or size.strip(b"0123456789abcdefABCDEF"):
            return True
        if int(size, 16) == 0:
            break
        pos = eol + 2 + int(size, 16) + 2
        if pos > len(body):
            return False
        if body[pos - 2 : pos] != b"\r\n":
            return True
    trailer = body[eol + 2 :]  # header lines, then an empty line
    return trailer.startswith(b"\r\n") or b"\r\n\r\n" in trailer


def handshake(sock: Any) -> int:
    """One non-blocking step of a TLS handshake: 0 when it is done, else the selector event
    (READ or WRITE) to wait for before the next step. A failed handshake raises OSError
    (ssl.SSLError is one)."""
    try:
        sock.do_handshake()
    except ssl.SSLWantReadError:
        return READ
    except ssl.SSLWantWriteError:
        return WRITE
    return 0


def receive(sock: Any, buf: bytes, limit: int = MAX_BUFFERED) -> tuple[bytes, int | None]:
    """Read what ``sock`` (plain or TLS, non-blocking) has, up to ``limit`` bytes in all:
    ``buf`` with those bytes, and the selector event to wait for before reading more, or
    None when the peer closed or the connection broke.

    Reading goes on until the socket would block, so nothing stays behind in a TLS socket's
    own buffer (``pending()``), where no selector would see it."""
    try:
        while len(buf) < limit:
            data = sock.recv(READ_CHUNK)
            if not data:
                return buf, None
            buf += data
    except (BlockingIOError, ssl.SSLWantReadError):
        return buf, READ
    except ssl.SSLWantWriteError:  # the TLS layer has to send first (a key update)
        return buf, WRITE
    except OSError:
        return b"", None
    return buf, READ


class BufferingThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread whose threads only ever see whole requests."""

    request_timeout = DEFAULT_REQUEST_TIMEOUT

    def enqueue_req(self, conn: Any) -> None:
        """Called on the main loop for a new, kept-alive or pipelined connection."""
        if getattr(conn, "np_ready", False):
            conn.np_ready = False
            super().enqueue_req(conn)
            return
        conn.np_handshaking = conn.np_closing = False
        if self.cfg.is_ssl and not conn.initialized and not isinstance(conn.sock, ssl.SSLSocket):
            try:
                conn.sock = gsock.ssl_context(self.cfg).wrap_socket(
                    conn.sock,
                    server_side=True,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                    do_handshake_on_connect=False,
                )
            except (OSError, ValueError) as e:
                self.log.debug("Cannot start TLS with %s: %s", conn.client, e)
                self.nr_conns -= 1
                conn.close()
                return
            conn.np_handshaking = True
        buf = b""
        if conn.parser is not None:  # pipelined bytes already read for the next request
            buf = conn.parser.unreader.buf.getvalue()
            conn.parser.unreader.buf.seek(0)
            conn.parser.unreader.buf.truncate()
        conn.np_buffer = buf
        if request_complete(buf) and buf:
            self._hand_over(conn)
            return
        conn.sock.setblocking(False)
        conn.timeout = time.monotonic() + self.request_timeout
        conn.np_event = READ
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, READ, partial(self._ready, conn))
        if isinstance(conn.sock, ssl.SSLSocket):
            # A TLS socket may hold decrypted bytes no selector sees: read them now. (And a
            # new one's ClientHello is usually here already.)
            self._ready(conn, conn.sock)

    def _ready(self, conn: Any, _sock: Any) -> None:
        """On the main loop, when a buffering connection is readable (or writable, as its
        TLS layer asked): go on with the handshake, then read the request."""
        if conn.np_closing:
            _, want = receive(conn.sock, b"")  # what a refused client still sends: dropped
            if want is None:
                self._drop(conn)
            return
        if conn.np_handshaking:
            try:
                want = handshake(conn.sock)
            except OSError as e:
                self.log.debug("TLS handshake with %s failed: %s", conn.client, e)
                self._refuse(conn)
                return
            if want:
                self._wait(conn, want)
                return
            conn.np_handshaking = False
            if gsock.is_http2_negotiated(conn.sock):
                self._unpark(conn)  # HTTP/2 frames are not buffered: served as gthread does
                self._hand_over(conn)
                return
        conn.np_buffer, want = receive(conn.sock, conn.np_buffer)
        if request_complete(conn.np_buffer) and conn.np_buffer:
            self._unpark(conn)
            self._hand_over(conn)
        elif want is None:
            self._drop(conn)
        else:
            self._wait(conn, want)

    def _refuse(self, conn: Any) -> None:
        """After a failed handshake: a FIN behind the TLS alert, then read (and drop) what
        the client still sends until it closes, or until its request timeout. Closing with
        its bytes unread would reset the connection, and the client could lose the alert
        that says why (a TLS 1.3 client sends its request before the server has checked its
        certificate)."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)  # also leaves TLS: reads are plain from here
        except OSError:
            self._drop(conn)
            return
        conn.np_handshaking, conn.np_closing = False, True
        self._wait(conn, READ)
        self._ready(conn, conn.sock)

    def _wait(self, conn: Any, event: int) -> None:
        if event != conn.np_event:
            conn.np_event = event
            self.poller.modify(conn.sock, event, partial(self._ready, conn))

    def _unpark(self, conn: Any) -> None:
        self.poller.unregister(conn.sock)
        self.pending_conns.remove(conn)

    def _drop(self, conn: Any) -> None:
        self._unpark(conn)
        self.nr_conns -= 1
        conn.close()

    def _hand_over(self, conn: Any) -> None:
        conn.np_ready = True
        conn.data_ready = True  # gthread must not wait for data: it is here
        self.enqueue_req(conn)

    def finish_request(self, conn: Any, fs: Any) -> None:
        """On the main loop, after a thread served a request: as gthread, except that a
        kept-alive TLS connection whose next bytes are already decrypted (read ahead into
        the TLS socket's own buffer, which no selector sees) is buffered at once."""
        super().finish_request(conn, fs)
        sock = conn.sock
        if isinstance(sock, ssl.SSLSocket) and _pending(sock) and conn in self.keepalived_conns:
            self.poller.unregister(sock)
            self.keepalived_conns.remove(conn)
            self.enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        """In a thread: feed the buffered request to the parser, then serve as gthread does."""
        buf = getattr(conn, "np_buffer", b"")
        conn.np_buffer = b""
        if isinstance(conn.sock, ssl.SSLSocket) and not conn.initialized:
            conn.sock.setblocking(True)
            if not self._init_tls(conn):
                return False
        if buf:
            conn.sock.setblocking(True)
            conn.init()
            conn.parser.unreader.unread(buf)
        return super().handle(conn)

    def _init_tls(self, conn: Any) -> bool:
        """TConn.init() for a socket the main loop wrapped and handshook: the parser only."""
        conn.initialized = True
        if not gsock.is_http2_negotiated(conn.sock):
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
            return True
        conn.is_http2 = True
        try:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client, http2_connection=True)
            conn.parser.initiate_connection()
        except Exception as e:  # as gthread's handle() would log it: the connection closes
            self.log.debug("HTTP/2 connection with %s failed: %s", conn.client, e)
            return False
        return True

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        """In a thread, when gunicorn cannot parse a request (or serving it failed below
        the app): answer in the API's JSON, never gunicorn's HTML page, and log the reason,
        never the request's raw text (a malformed header line may hold a token)."""
        started = datetime.now()
        addr = addr or ("", -1)
        if getattr(getattr(req, "body", None), "failed", False):
            # Draining a body the app did not read failed, after the app's answer went out:
            # a second answer would be taken for the next request's. The connection closes.
            self.log.debug("closing the connection of %s: its request body is not valid", addr[0])
            return
        refused = refusal(exc, Limits.of(self.cfg))
        if refused is None:
            self.log.exception("Error handling request (below the app)")
            refused = INTERNAL
        else:
            self.log.info(
                "refused a request from %s: %d %s", addr[0], refused.status, refused.reason
            )
        if req is None and isinstance(exc, http.errors.InvalidHeader):
            req = exc.req  # the head was read (a bad Content-Length): the access log has it
        if req is not None:
            environ = default_environ(req, client, self.cfg)
            environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = addr[0], str(addr[1])
            resp = Response(req, client, self.cfg)
            resp.status = refused.status_line
            self.log.access(resp, req, environ, datetime.now() - started)
        try:
            util.write_nonblock(client, error_response(refused))
        except Exception:
            self.log.debug("Failed to send error message.")


def _pending(sock: ssl.SSLSocket) -> int:
    try:
        return sock.pending()
    except (OSError, ValueError):
        return 0


def worker_class(request_timeout: float) -> type[BufferingThreadWorker]:
    """The worker class with ``request_timeout`` (seconds a client may take to send a request)."""
    return type(
        "BufferingThreadWorker",
        (BufferingThreadWorker,),
        {"request_timeout": float(request_timeout), "__module__": __name__},
    )
