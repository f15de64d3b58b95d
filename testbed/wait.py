"""Waiting on a condition, never on the clock: the one polling helper of tests and benchmarks.

A test that needs something to have happened (a server listening, a host's registration
expired, a tunnel port gone) polls for exactly that, with a deadline, and fails with a
message that says what did not happen. A fixed sleep stays only where time passing is the
subject of the test (an outage that lasts N seconds), or where it gives a wrongly eager
component the chance to misbehave before a negative check; each such sleep says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.1,
    last: Callable[[], object] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    After ``timeout`` seconds raise TimeoutError naming ``what`` (the condition, worded as
    what should have happened) and, if given, ``last()``: the state seen at the deadline.
    An exception from ``predicate`` (a process that exited, say) ends the wait at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f"; last seen: {last()}" if last is not None else ""
            raise TimeoutError(f"not within {timeout}s: {what}{seen}")
        time.sleep(interval)


def tcp_listening(proc_net_tcp: str, port: int) -> bool:
    """Whether the text of /proc/net/tcp (and/or tcp6) shows a socket listening on ``port``.

    Read it inside the namespace of the server (``docker exec C cat /proc/net/tcp``,
    ``ip netns exec NS cat ...``): a connection attempt would be taken by a one-shot server.
    """
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) > 3 and ":" in fields[1] and fields[3] == "0A":  # 0A = LISTEN
            try:
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    return True
            except ValueError:
                continue
    return False
