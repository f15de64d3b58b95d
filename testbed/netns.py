"""Calling into a network namespace of the test's own from the test process itself.

A network namespace is a property of a thread on Linux: one thread that joins it opens
its sockets there (127.0.0.1 is the namespace's loopback), and the processes it starts are
born there. So servers on 127.0.0.1 inside the namespace, and the test's own clients of
them, all run through ``InNetns``; nothing is bound on the host's addresses.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000


def _join(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    path = name if name.startswith("/") else f"/run/netns/{name}"
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


class InNetns:
    """One thread inside the network namespace ``name`` (made with ``ip netns add``), or at
    the path ``name`` (e.g. /proc/PID/ns/net of a container)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool = ThreadPoolExecutor(1, f"netns-{name}", initializer=_join, initargs=(name,))

    def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in the namespace and return what it returns (or raise what it raises)."""
        return self._pool.submit(fn, *args, **kwargs).result()

    def close(self) -> None:
        self._pool.shutdown()
