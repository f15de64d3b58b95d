"""Run a real netplugin agent process for integration tests and benchmarks; stop it by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .wait import wait_for

SOCKET = "/run/docker/plugins/netplugin.sock"
BIN = Path(sys.executable).parent


def serving(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        return s.connect_ex(path) == 0


class PluginProcess:
    """netplugin on the host's dockerd and OVS, on the same store as the master it uses
    (its embedded store's data dir, or etcd)."""

    def __init__(
        self,
        master_url: str,
        log: Path,
        data_dir: Path | None = None,
        etcd_endpoints: str = "",
        extra: list[str] | None = None,
    ) -> None:
        self.master_url = master_url
        self.log = log
        self.data_dir = data_dir
        self.etcd_endpoints = etcd_endpoints
        self.extra = extra or []
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        cmd = [str(BIN / "netplugin"), "--netmaster", self.master_url, "--log-level", "info"]
        if self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        if self.etcd_endpoints:
            cmd += ["--etcd-endpoints", self.etcd_endpoints]
        return [*cmd, *self.extra]

    def start(self, timeout: float = 20) -> float:
        """Start and wait until the socket serves; returns the seconds that took."""
        t0 = time.monotonic()
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETPLUGIN_")}
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=env
            )
        proc = self.proc

        def serves() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"netplugin exited:\n{self.log.read_text()[-3000:]}")
            return serving(SOCKET)

        try:
            wait_for(serves, timeout, f"netplugin serves {SOCKET}", interval=0.05)
        except TimeoutError as e:
            self.stop()
            raise RuntimeError(f"{e}:\n{self.log.read_text()[-3000:]}") from None
        return time.monotonic() - t0

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
