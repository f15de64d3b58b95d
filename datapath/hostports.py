"""The host's side of choosing published ports: its ephemeral port range, read under
``proc_sys`` (a managed plugin sees the host's as /host/proc/sys), and a bind() probe that
finds a port a process on the host uses (docker-proxy of Docker's bridge is one)."""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path

from .ports import DEFAULT_EPHEMERAL, PortConflict

log = logging.getLogger(__name__)

HOST_PROCESS = "a process on the host"


def parse_port_range(text: str) -> tuple[int, int]:
    """net.ipv4.ip_local_port_range ("32768\\t60999") as (first, last)."""
    lo, hi = (int(v) for v in text.split())
    if not 0 < lo <= hi <= 65535:
        raise ValueError(text)
    return lo, hi


class HostPorts:
    def __init__(self, proc_sys: str | Path = "/proc/sys") -> None:
        self.proc_sys = Path(proc_sys)

    def ephemeral_range(self) -> tuple[int, int]:
        path = self.proc_sys / "net" / "ipv4" / "ip_local_port_range"
        try:
            return parse_port_range(path.read_text())
        except (OSError, ValueError) as e:
            lo, hi = DEFAULT_EPHEMERAL
            log.warning("cannot read %s (%s); random host ports come from %d-%d", path, e, lo, hi)
            return DEFAULT_EPHEMERAL

    def probe(self, proto: str, host_ip: str, port: int) -> str | None:
        """None if a socket of ``proto`` could bind host_ip:port now, else who holds it."""
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        with socket.socket(socket.AF_INET, kind) as s:
            if proto == "tcp":  # connections in TIME_WAIT hold no port a listener wants
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host_ip or "0.0.0.0", port))
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return HOST_PROCESS
                if e.errno == errno.EADDRNOTAVAIL:
                    raise PortConflict(f"{host_ip} is not an address of this host") from None
                raise
        return None
