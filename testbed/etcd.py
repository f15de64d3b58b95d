"""A real single-member etcd for tests: 127.0.0.1, free ports, a temporary data dir."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from .wait import wait_for

ETCD_BINARY = os.environ.get("ETCD_BINARY", "/usr/bin/etcd")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EtcdServer:
    """Starts, stops, kills and restarts one etcd process, always by its PID.

    Restarts reuse the ports and the data dir, so clients and history survive them.
    ``tls`` is an optional (ca_cert, cert, key) triple: etcd then serves https and
    requires client certificates signed by the CA.
    """

    def __init__(
        self,
        base_dir: str | Path | None = None,
        *,
        binary: str = ETCD_BINARY,
        name: str = "test",
        tls: tuple[str, str, str] | None = None,
        host: str = "127.0.0.1",
        netns: str | None = None,
    ) -> None:
        self.binary = binary
        self.host = host  # the address it serves on
        self.netns = netns  # a network namespace (the test's own) to run it in
        self.name = name
        self.tls = tls
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="etcd-test-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "etcd.log"
        # A namespace of the test's own is empty: etcd's usual ports are free there.
        self.client_port = free_port() if netns is None else 2379
        self.peer_port = free_port() if netns is None else 2380
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.client_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 15.0) -> None:
        """Start etcd and wait until it serves requests."""
        if self.running():
            return
        peer = f"http://{self.host}:{self.peer_port}"
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        cmd = [
            *prefix,
            self.binary,
            "--name", self.name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.endpoint,
            "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.name}={peer}",
            # Fast elections, and a 1 s minimum lease TTL (etcd's floor is 1.5 election timeouts).
            "--heartbeat-interval", "10",
            "--election-timeout", "100",
            # etcd 3.4's default logger (capnslog) leaves the zap logger nil, and a read
            # index that times out (etcd overloaded: bench.scale at 1,000 hosts) then
            # panics in sendReadIndex's warning; zap logs it.
            "--logger", "zap",
        ]  # fmt: skip
        if self.tls:
            ca, cert, key = self.tls
            cmd += [
                "--cert-file", cert,
                "--key-file", key,
                "--trusted-ca-file", ca,
                "--client-cert-auth",
            ]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the test run must not reach it first
            )
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float = 15.0) -> None:
        def healthy() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited during start-up:\n{self.log_tail()}")
            return self._healthy()

        try:
            wait_for(healthy, timeout, "etcd serves a linearizable read", interval=0.05)
        except TimeoutError as e:
            self.kill()
            raise RuntimeError(f"{e}:\n{self.log_tail()}") from None

    def _call(self, path: str, body: dict[str, object], timeout: float = 5.0) -> dict[str, object]:
        """POST to etcd's JSON gateway (stdlib only: never the code under test)."""
        req = urllib.request.Request(
            f"{self.endpoint}/v3/{path}", data=json.dumps(body).encode(), method="POST"
        )
        ctx = None
        if self.tls:
            ca, cert, key = self.tls
            ctx = ssl.create_default_context(cafile=ca)
            ctx.load_cert_chain(cert, key)
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def _healthy(self) -> bool:
        # A linearizable read succeeds only once a leader has been elected.
        try:
            self._call("kv/range", {"key": "AA=="}, timeout=1)
            return True
        except (urllib.error.URLError, OSError):
            return False

    def wipe(self) -> None:
        """Delete every key (history stays: revisions keep counting up)."""
        self._call("kv/deleterange", {"key": "AA==", "range_end": "AA=="})

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        self.proc = None

    def restart(self, down_for: float = 0.0) -> None:
        """Stop, stay down ``down_for`` seconds, start again on the same ports and data."""
        self.stop()
        if down_for:
            time.sleep(down_for)  # the outage itself: its length is what the caller asks for
        self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def cleanup(self) -> None:
        """Stop etcd and remove the data dir if this helper created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
