"""Connections under faults: slow clients do not starve the master (a real gunicorn), and
a burst of concurrent connections on the plugin's unix socket is answered whole.

No timing is asserted: the property is "answered at all, within a generous deadline, while
the slow clients are still connected".
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import socket
import ssl
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from testbed.master import MasterProcess
from testbed.pki import MasterSecurity
from testbed.wait import wait_for

ANSWER_DEADLINE = 60.0  # generous: "answered at all"


def slow_request(host: str, headers: str = "") -> tuple[bytes, bytes]:
    """The head and body of the request a slow client sends (``headers``: extra lines)."""
    body = json.dumps({"endpointID": "slow", "networkName": "nope"}).encode()
    head = (
        f"POST /api/v1/alloc/endpoints HTTP/1.1\r\nHost: {host}\r\n{headers}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head, body


class SlowClients:
    """Connections that hold the server's attention, each with the bytes it still has to
    send, one byte each per round (see plain() and tls())."""

    def __init__(self, conns: list[tuple[socket.socket, bytes]]) -> None:
        self.socks = [s for s, _ in conns]
        self.pending = [data for _, data in conns]
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle, daemon=True)

    @classmethod
    def plain(cls, host: str, port: int, count: int) -> SlowClients:
        """Some send nothing, some trickle a request's headers, some send headers and
        trickle the body."""
        head, body = slow_request(host)
        conns: list[tuple[socket.socket, bytes]] = []
        for i in range(count):
            s = socket.create_connection((host, port), timeout=10)
            match i % 3:
                case 0:  # connects, sends nothing
                    conns.append((s, b""))
                case 1:  # trickles the request line and headers
                    conns.append((s, head + body))
                case _:  # whole headers, then trickles the body
                    s.sendall(head)
                    conns.append((s, body))
        return cls(conns)

    @classmethod
    def tls(cls, host: str, port: int, count: int, security: MasterSecurity) -> SlowClients:
        """The same over TLS: some trickle the handshake's ClientHello, some complete the
        handshake and then send nothing, trickle the request's headers, or trickle its body
        (a byte of a TLS connection is a record of its own)."""
        head, body = slow_request(host, f"Authorization: Bearer {security.admin}\r\n")
        context = ssl.create_default_context(cafile=str(security.ca))
        conns: list[tuple[socket.socket, bytes]] = []
        # Handshakes first: the ClientHellos must not wait behind them to start trickling.
        for i in sorted(range(count), key=lambda i: i % 4 == 0):
            s = socket.create_connection((host, port), timeout=10)
            if i % 4 == 0:  # trickles its ClientHello: the handshake never ends
                conns.append((s, client_hello(host)))
                continue
            tls = context.wrap_socket(s, server_hostname=host)  # the handshake, whole
            match i % 4:
                case 1:  # sends nothing after the handshake
                    conns.append((tls, b""))
                case 2:  # trickles the request line and headers
                    conns.append((tls, head + body))
                case _:  # whole headers, then trickles the body
                    tls.sendall(head)
                    conns.append((tls, body))
        return cls(conns)

    def _trickle(self) -> None:
        # One byte per connection per round, a round every 0.2 s: slow on purpose (the
        # clients must stay mid-request for the whole test), not a synchronisation.
        while not self._stop.wait(0.2):
            for i, s in enumerate(self.socks):
                data = self.pending[i]
                if len(data) > 1:  # never the last byte: the request stays unfinished
                    with contextlib.suppress(OSError):
                        s.send(data[:1])
                    self.pending[i] = data[1:]
            self.rounds += 1

    def connected(self) -> int:
        """How many of the slow connections the server has not closed."""
        return sum(not peer_closed(s) for s in self.socks)

    def __enter__(self) -> SlowClients:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self.socks:
            s.close()


def peer_closed(s: socket.socket) -> bool:
    """Whether the server closed (or reset) ``s``, whatever it sent before: a TLS server may
    have sent session tickets the client never read."""
    poller = select.poll()
    poller.register(s.fileno(), select.POLLRDHUP)
    return any(
        ev & (select.POLLRDHUP | select.POLLHUP | select.POLLERR) for _, ev in poller.poll(0)
    )


def client_hello(host: str) -> bytes:
    """The first flight of a TLS handshake with ``host``, as bytes to trickle."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_slow_clients_do_not_starve_the_master(tmp_path: Path) -> None:
    """Six times more slow clients than threads; the request timeout is long, so they stay
    connected (mid-request) for the whole test."""
    threads = 4
    extra = ["--workers", "1", "--threads", str(threads), "--request-timeout", "600"]
    master = MasterProcess(tmp_path / "data", extra=extra)
    try:
        master.start()
        assert master.api("POST", "networks/default:n1", json={"subnet": "10.92.0.0/24"}).ok
        with SlowClients.plain("127.0.0.1", master.port, 6 * threads) as slow:
            wait_for(lambda: slow.rounds >= 10, 60, "every slow client sent some bytes")
            for i in range(2 * threads):
                body = {"endpointID": f"fast{i}", "networkName": "n1"}
                r = requests.post(
                    f"{master.url}/api/v1/alloc/endpoints", json=body, timeout=ANSWER_DEADLINE
                )
                assert r.status_code == 201, r.text
                assert requests.get(f"{master.url}/version", timeout=ANSWER_DEADLINE).ok
            assert slow.connected() == len(slow.socks), "the slow clients were cut off"
    finally:
        master.stop()


def test_a_request_that_never_arrives_whole_is_dropped(tmp_path: Path) -> None:
    master = MasterProcess(tmp_path / "data", extra=["--request-timeout", "1"])
    try:
        master.start()
        with SlowClients.plain("127.0.0.1", master.port, 6) as slow:
            wait_for(lambda: slow.connected() == 0, 60, "the master closed the slow clients")
        assert requests.get(f"{master.url}/version", timeout=ANSWER_DEADLINE).ok
    finally:
        master.stop()


def test_slow_tls_clients_do_not_starve_a_tls_master(tmp_path: Path) -> None:
    """The same under TLS: slow handshakes and slow requests after a handshake, six times
    more than threads; HTTPS clients with the CA and a token are all answered meanwhile."""
    threads = 4
    security = MasterSecurity.create(tmp_path / "pki")
    extra = ["--workers", "1", "--threads", str(threads), "--request-timeout", "600"]
    master = MasterProcess(tmp_path / "data", extra=extra, security=security)
    try:
        master.start()
        assert master.api("POST", "networks/default:n1", json={"subnet": "10.92.0.0/24"}).ok
        with (
            SlowClients.tls("127.0.0.1", master.port, 6 * threads, security) as slow,
            requests.Session() as kept_alive,  # its connection comes back through the buffer
        ):
            wait_for(lambda: slow.rounds >= 10, 60, "every slow client sent some bytes")
            for i in range(2 * threads):
                body = {"endpointID": f"fast{i}", "networkName": "n1"}
                r = requests.post(
                    f"{master.url}/api/v1/alloc/endpoints",
                    json=body,
                    headers=security.headers(),
                    timeout=ANSWER_DEADLINE,
                    **master.tls(),  # type: ignore[arg-type]
                )
                assert r.status_code == 201, r.text
                version = kept_alive.get(
                    f"{master.url}/version",
                    timeout=ANSWER_DEADLINE,
                    **master.tls(),  # type: ignore[arg-type]
                )
                assert version.ok
            assert slow.connected() == len(slow.socks), "the slow clients were cut off"
    finally:
        master.stop()


def test_a_tls_request_that_never_arrives_whole_is_dropped(tmp_path: Path) -> None:
    security = MasterSecurity.create(tmp_path / "pki")
    master = MasterProcess(tmp_path / "data", extra=["--request-timeout", "1"], security=security)
    try:
        master.start()
        with SlowClients.tls("127.0.0.1", master.port, 8, security) as slow:
            wait_for(lambda: slow.connected() == 0, 60, "the master closed the slow clients")
        assert requests.get(f"{master.url}/version", timeout=ANSWER_DEADLINE, **master.tls()).ok
    finally:
        master.stop()


def _responses(tls: ssl.SSLSocket, count: int) -> list[bytes]:
    """The status lines of the next ``count`` responses (each with a Content-Length body)."""
    data, lines = b"", []
    while len(lines) < count:
        while (end := data.find(b"\r\n\r\n")) < 0:
            chunk = tls.recv(65536)
            assert chunk, f"closed after {lines}"
            data += chunk
        head, data = data[:end], data[end + 4 :]
        lines.append(head.split(b"\r\n")[0])
        if head.startswith(b"HTTP/1.1 100"):
            continue
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(data) < length:
            data += tls.recv(65536)
        data = data[length:]
    return lines


def test_kept_alive_and_pipelined_tls_requests_are_answered(tmp_path: Path) -> None:
    """One TLS connection: a request, then two more pipelined in one TLS record behind an
    ``Expect: 100-continue`` body. The thread reads that body from the socket itself, and
    the request behind it stays in the TLS layer's own buffer, where no selector sees it."""
    security = MasterSecurity.create(tmp_path / "pki")
    master = MasterProcess(tmp_path / "data", security=security)
    try:
        master.start()
        assert master.api("POST", "networks/default:n1", json={"subnet": "10.92.0.0/24"}).ok
        context = ssl.create_default_context(cafile=str(security.ca))
        auth = f"Host: m\r\nAuthorization: Bearer {security.admin}\r\n"
        version = f"GET /version HTTP/1.1\r\n{auth}\r\n".encode()
        body = json.dumps({"endpointID": "e1", "networkName": "n1"}).encode().ljust(10000)
        head = (
            f"POST /api/v1/alloc/endpoints HTTP/1.1\r\n{auth}Expect: 100-continue\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        with context.wrap_socket(
            socket.create_connection(("127.0.0.1", master.port), timeout=ANSWER_DEADLINE),
            server_hostname="127.0.0.1",
        ) as tls:
            tls.sendall(version)
            assert _responses(tls, 1) == [b"HTTP/1.1 200 OK"]
            tls.sendall(head)
            assert _responses(tls, 1) == [b"HTTP/1.1 100 Continue"]
            tls.sendall(body + version)  # one TLS record
            assert _responses(tls, 2) == [b"HTTP/1.1 201 CREATED", b"HTTP/1.1 200 OK"]
    finally:
        master.stop()


PLUGIN_SERVER = """
import sys
from plugin.app import create_app
from plugin.driver import Driver
from plugin.master_client import MasterClient
from plugin.server import make_socket_server

# The real app and server; the driver's master and datapath are never reached by the calls
# this test makes (Activate, GetCapabilities).
driver = Driver(MasterClient("http://127.0.0.1:9"), datapath=None, host="h1")
server = make_socket_server(sys.argv[1], create_app(driver))
print("serving", flush=True)
server.serve_forever()
"""

CALLS = ["/Plugin.Activate", "/NetworkDriver.GetCapabilities"]


def _connect_now(path: str) -> socket.socket:
    """Connect as Go's dialer does (Docker's): without blocking, so a full backlog fails."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect(path)
    except BlockingIOError:
        s.close()
        raise
    s.setblocking(True)
    s.settimeout(ANSWER_DEADLINE)
    return s


def _answer(s: socket.socket) -> bytes:
    data = b""
    with s:
        while chunk := s.recv(65536):
            data += chunk
    return data


def test_200_concurrent_connections_on_the_plugin_socket_are_all_answered(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "plugin.sock")
    proc = subprocess.Popen(
        [sys.executable, "-c", PLUGIN_SERVER, path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "serving"
        # The server is frozen while the 200 connect at once (as a busy or paused agent
        # would be): every connection must wait in the listen backlog, none be refused.
        proc.send_signal(signal.SIGSTOP)
        try:
            socks = [_connect_now(path) for _ in range(200)]
            for i, s in enumerate(socks):
                call = CALLS[i % len(CALLS)]
                s.sendall(
                    f"POST {call} HTTP/1.1\r\nHost: plugin\r\nContent-Type: application/json\r\n"
                    "Content-Length: 2\r\nConnection: close\r\n\r\n{}".encode()
                )
        finally:
            proc.send_signal(signal.SIGCONT)
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(_answer, socks))
        for i, answer in enumerate(answers):
            assert answer.startswith(b"HTTP/1.1 200"), (i, answer[:200])
            expected = b"NetworkDriver" if i % 2 == 0 else b'"Scope"'
            assert expected in answer, (i, answer[-200:])
    finally:
        proc.kill()
        proc.wait(10)
