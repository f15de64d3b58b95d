"""Real TCP and UDP between containers, driven from the test process: sockets are made
inside a container's network namespace (a socket stays in the namespace it was made in),
so a test needs nothing in the image beyond busybox and reads every outcome directly."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator

from .netns import InNetns


def container_pid(name: str) -> int:
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Pid}}", name],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(out.stdout.strip())


class NamespaceNet:
    """A network namespace (a name of `ip netns`, or a path), to make sockets in."""

    def __init__(self, netns: str) -> None:
        self._ns = InNetns(netns)

    def socket(self, kind: int) -> socket.socket:
        return self._ns(socket.socket, socket.AF_INET, kind)

    def close(self) -> None:
        self._ns.close()


class ContainerNet(NamespaceNet):
    """A container's network namespace."""

    def __init__(self, container: str, pid: int | None = None) -> None:
        self.container = container
        pid = container_pid(container) if pid is None else pid
        super().__init__(f"/proc/{pid}/ns/net")


class EchoServer:
    """Echoes on TCP and UDP ``port`` in a container, in daemon threads, until closed. With
    ``greeting``, each TCP connection first gets it, and each datagram gets it as the answer
    instead of its echo."""

    def __init__(self, net: ContainerNet, port: int, greeting: bytes = b"") -> None:
        self.greeting = greeting
        self.tcp = net.socket(socket.SOCK_STREAM)
        self.udp = net.socket(socket.SOCK_DGRAM)
        for s in (self.tcp, self.udp):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port))
        self.tcp.listen(256)
        self._threads = [
            threading.Thread(target=self._accept, daemon=True),
            threading.Thread(target=self._datagrams, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            if self.greeting:
                conn.sendall(self.greeting)
        self._echo(conn)

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(4096)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def _datagrams(self) -> None:
        while True:
            try:
                data, peer = self.udp.recvfrom(4096)
                if peer is None:  # shut down
                    return
                self.udp.sendto(self.greeting or data, peer)
            except OSError:
                return

    def close(self) -> None:
        for s in (self.tcp, self.udp):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def tcp_opens(net: ContainerNet, ip: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a new TCP connection from the container to ip:port opens and echoes."""
    with contextlib.closing(net.socket(socket.SOCK_STREAM)) as s:
        s.settimeout(timeout)
        try:
            s.connect((ip, port))
            s.sendall(b"hello")
            return s.recv(16) == b"hello"
        except OSError:
            return False


def udp_answers(net: ContainerNet, ip: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a datagram from the container to ip:port gets its echo back."""
    with contextlib.closing(net.socket(socket.SOCK_DGRAM)) as s:
        s.settimeout(timeout)
        try:
            s.sendto(b"hello", (ip, port))
            return s.recv(16) == b"hello"
        except OSError:
            return False


@contextlib.contextmanager
def tcp_session(net: ContainerNet, ip: str, port: int) -> Iterator[socket.socket]:
    """An open TCP connection (for "established connections are not cut")."""
    s = net.socket(socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect((ip, port))
        yield s
    finally:
        s.close()


def echoes(s: socket.socket, payload: bytes = b"still here") -> bool:
    try:
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            chunk = s.recv(len(payload) - len(got))
            if not chunk:
                return False
            got += chunk
        return got == payload
    except OSError:
        return False


class NameServer(EchoServer):
    """Answers every TCP connection on ``port`` in a container with its name, then echoes
    what the connection sends until it closes: who a connection to a VIP reached, and
    whether it is still open. Every datagram to ``port`` gets the name back too."""

    def __init__(self, net: ContainerNet, port: int, name: str) -> None:
        super().__init__(net, port, greeting=name.encode())


def who_answers(
    net: NamespaceNet, ip: str, port: int, n: int, timeout: float = 2.0, udp: bool = False
) -> dict[str, int]:
    """n new TCP connections (or UDP flows: a datagram from a new socket, so a new source
    port, each) from a namespace to ip:port, one after another: how often each NameServer
    answered ("error" for a connection that did not open or say a name, or a datagram not
    answered; "elsewhere" for an answer from another address than ip:port)."""
    got: dict[str, int] = {}
    for _ in range(n):
        with contextlib.closing(net.socket(socket.SOCK_DGRAM if udp else socket.SOCK_STREAM)) as s:
            s.settimeout(timeout)
            try:
                if udp:
                    s.sendto(b"?", (ip, port))
                    data, peer = s.recvfrom(64)
                    who = data.decode() if peer == (ip, port) else "elsewhere"
                else:
                    s.connect((ip, port))
                    who = s.recv(64).decode() or "error"
            except OSError:
                who = "error"
        got[who] = got.get(who, 0) + 1
    return got
