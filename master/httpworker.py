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
through the same buffer for their next request. Under TLS (gunicorn's certfile) the worker
is stock gthread: buffering would need the handshake in the main loop too.
"""

from __future__ import annotations

import selectors
import time
from functools import partial
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

MAX_BUFFERED = 1 << 20  # past this much, a request goes to a thread as it is
READ_CHUNK = 1 << 16
DEFAULT_REQUEST_TIMEOUT = 30.0


def request_complete(buf: bytes, max_buffered: int = MAX_BUFFERED) -> bool:
    """Whether ``buf`` (the bytes of a connection so far) holds a request a thread can serve
    without waiting for the client: its head, and its body when the head says how long."""
    if len(buf) >= max_buffered:
        return True
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False
    length, chunked = 0, False
    for line in buf[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return True  # gunicorn refuses it at once
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value
        elif name == b"expect" and value == b"100-continue":
            return True  # the client waits for a "go on" before its body
    if chunked:
        return buf.endswith(b"0\r\n\r\n")
    return len(buf) - end - 4 >= length


class BufferingThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gthread whose threads only ever see whole requests."""

    request_timeout = DEFAULT_REQUEST_TIMEOUT

    def enqueue_req(self, conn: Any) -> None:
        """Called on the main loop for a new, kept-alive or pipelined connection."""
        if self.cfg.is_ssl or getattr(conn, "np_ready", False):
            # Under TLS the bytes on the socket are the handshake's, which gthread's thread
            # must see: such connections are served as stock gthread serves them.
            conn.np_ready = False
            super().enqueue_req(conn)
            return
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
        self.pending_conns.append(conn)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))

    def _readable(self, conn: Any, _sock: Any) -> None:
        closed = False
        try:
            while len(conn.np_buffer) < MAX_BUFFERED:
                data = conn.sock.recv(READ_CHUNK)
                if not data:
                    closed = True
                    break
                conn.np_buffer += data
        except BlockingIOError:
            pass
        except OSError:
            closed, conn.np_buffer = True, b""
        if request_complete(conn.np_buffer) and conn.np_buffer:
            self._unpark(conn)
            self._hand_over(conn)
        elif closed:
            self._unpark(conn)
            self.nr_conns -= 1
            conn.close()

    def _unpark(self, conn: Any) -> None:
        self.poller.unregister(conn.sock)
        self.pending_conns.remove(conn)

    def _hand_over(self, conn: Any) -> None:
        conn.np_ready = True
        conn.data_ready = True  # gthread must not wait for data: it is here
        self.enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        """In a thread: feed the buffered request to the parser, then serve as gthread does."""
        buf = getattr(conn, "np_buffer", b"")
        if buf:
            conn.np_buffer = b""
            conn.sock.setblocking(True)
            conn.init()
            conn.parser.unreader.unread(buf)
        return super().handle(conn)


def worker_class(request_timeout: float) -> type[BufferingThreadWorker]:
    """The worker class with ``request_timeout`` (seconds a client may take to send a request)."""
    return type(
        "BufferingThreadWorker",
        (BufferingThreadWorker,),
        {"request_timeout": float(request_timeout), "__module__": __name__},
    )
