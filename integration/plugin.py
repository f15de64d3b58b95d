"""Run a real netplugin agent process for integration tests and benchmarks; stop it by PID."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SOCKET = "/run/docker/plugins/netplugin.sock"
BIN = Path(sys.executable).parent


def serving(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        return s.connect_ex(path) == 0


class PluginProcess:
    def __init__(self, master_url: str, log: Path) -> None:
        self.master_url = master_url
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20) -> float:
        """Start and wait until the socket serves; returns the seconds that took."""
        t0 = time.monotonic()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "netplugin"), "--netmaster", self.master_url, "--log-level", "info"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"netplugin exited:\n{self.log.read_text()[-3000:]}")
            if serving(SOCKET):
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"netplugin did not serve {SOCKET}:\n{self.log.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
