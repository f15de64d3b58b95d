"""Run a real netmaster (gunicorn) process for integration tests, and stop it by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import requests

from .pki import MasterSecurity
from .wait import wait_for

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MasterProcess:
    def __init__(
        self,
        data_dir: Path,
        etcd_endpoints: str = "",
        port: int | None = None,
        extra: list[str] | None = None,
        host: str = "127.0.0.1",
        netns: str | None = None,
        security: MasterSecurity | None = None,
        log: Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.host = host
        self.netns = netns  # a network namespace (the test's own) to run it in
        # With ``security``: HTTPS with its certificate, and its token file.
        self.security = security
        self.url = f"{'https' if security else 'http'}://{host}:{self.port}"
        self.data_dir = data_dir
        self.etcd_endpoints = etcd_endpoints
        self.extra = extra or []
        self.proc: subprocess.Popen[bytes] | None = None
        # Beside the data unless given (a test that fills the data's disk logs elsewhere).
        self.log = log or data_dir / f"netmaster-{self.port}.log"

    def start(self, timeout: float = 20.0) -> MasterProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
        cmd = [
            *prefix,
            str(VENV_BIN / "netmaster"),
            "--listen-url",
            f"{self.host}:{self.port}",
            "--data-dir",
            str(self.data_dir),
            "--etcd-endpoints",
            self.etcd_endpoints,
            *(self.security.master_flags() if self.security else []),
            *self.extra,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETMASTER_")}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"netmaster exited with {proc.returncode}:\n{self.log.read_text()}"
                )
            try:
                return requests.get(self.url + "/version", timeout=1, **self.tls()).ok
            except requests.RequestException:
                return False

        try:
            wait_for(answers, timeout, f"netmaster answers GET {self.url}/version")
        except TimeoutError as e:
            self.stop()
            raise RuntimeError(f"{e}:\n{self.log.read_text()}") from None
        return self

    @property
    def verify(self) -> str | bool:
        """What requests verifies this master's certificate with."""
        return str(self.security.ca) if self.security else True

    def tls(self) -> dict[str, object]:
        """requests' TLS arguments for this master: verify, and a client certificate."""
        cert = self.security.client_cert() if self.security else None
        return {"verify": self.verify, **({"cert": cert} if cert else {})}

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code = self.proc.returncode
        self.proc = None

        # After SIGKILL of the arbiter its orphaned worker keeps serving until it notices
        # (about a second); wait until the port is really free so a restart is not fooled.
        def port_free() -> bool:
            with socket.socket() as s:
                return s.connect_ex((self.host, self.port)) != 0

        wait_for(port_free, timeout, f"nothing listens on {self.host}:{self.port} any more")
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def worker_pids(self) -> list[int]:
        """The gunicorn workers: the processes whose parent is this master's arbiter."""
        if self.proc is None:
            return []
        return children(self.proc.pid)

    def kill_all(self) -> None:
        """kill -9 the arbiter and its workers at once, as a machine dying would.

        (After a kill -9 of the arbiter alone, its workers notice and exit gracefully.)
        """
        if self.proc is None:
            return
        workers = self.worker_pids()
        os.kill(self.proc.pid, signal.SIGKILL)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.stop(signal.SIGKILL)

    def api(
        self, method: str, path: str, *, role: str = "admin", **kw: object
    ) -> requests.Response:
        """A REST call (with ``role``'s token when the master requires tokens)."""
        if self.security is not None:
            kw = {"headers": self.security.headers(role), **self.tls(), **kw}
        return requests.request(method, f"{self.url}/api/v1/{path.lstrip('/')}", timeout=30, **kw)  # type: ignore[arg-type]


def children(pid: int) -> list[int]:
    """The PIDs whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: fields follow the last ")".
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found
