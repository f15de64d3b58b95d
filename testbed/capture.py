"""tcpdump around some traffic: started, and known to be listening, before the traffic.

tcpdump says "listening on IFACE" on stderr once its socket is attached; packets sent
before that are not seen. ``capture`` waits for that line instead of a fixed sleep.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Callable

from .wait import wait_for


def capture(cmd: list[str], traffic: Callable[[], object], timeout: float = 15) -> str:
    """What ``cmd`` (``tcpdump -l -c N ...``, in the right namespace) printed of the packets
    seen while ``traffic()`` ran; ``traffic`` runs once tcpdump listens."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.fileno()
    said = bytearray()
    try:
        os.set_blocking(err, False)

        def listening() -> bool:
            with contextlib.suppress(BlockingIOError):  # nothing more said yet
                said.extend(os.read(err, 4096))
            if b"listening on" in said:
                return True
            if proc.poll() is not None:
                raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: {said!r}")
            return False

        wait_for(listening, timeout, f"{cmd[0]} listening", 0.05, lambda: bytes(said))
        os.set_blocking(err, True)
        traffic()
        out, _ = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        proc.wait()
    return out.decode(errors="replace")


def ipv4_tos(text: str, header: str = "proto ICMP") -> set[str]:
    """The TOS bytes of the IPv4 headers in ``tcpdump -v`` output whose protocol is ``header``."""
    return set(re.findall(rf"\btos (0x[0-9a-f]+),[^)]*{re.escape(header)}", text))


def ipv6_class(text: str) -> set[str]:
    """The traffic class bytes of the IPv6 headers in ``tcpdump -v`` output (which leaves a
    class of 0 out)."""
    return {m[1] or "0x0" for m in re.finditer(r"\bIP6 \((?:class (0x[0-9a-f]+))?", text)}
