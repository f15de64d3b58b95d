"""What a failed HTTP request means: whether it certainly never reached the server, and the
operating system's reason behind it. Shared by every client of ours (etcd, masters)."""

from __future__ import annotations

import socket

import requests
import urllib3


def never_sent(e: requests.RequestException) -> bool:
    """Whether the request certainly never reached the server (connecting failed).

    Only then is it safe to send a non-idempotent request again, or elsewhere.
    """
    if isinstance(e, requests.exceptions.ConnectTimeout | requests.exceptions.SSLError):
        return True
    if isinstance(e, requests.exceptions.ConnectionError) and e.args:
        reason = getattr(e.args[0], "reason", None)
        return isinstance(
            reason, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError
        )
    return False


def os_reason(exc: BaseException) -> str | None:
    """The readable OS-level cause buried in a requests/urllib3 exception chain, if any:
    "connection refused", "cannot resolve host: ...", "no route to host"."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return f"cannot resolve host: {e.strerror or e}"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror[:1].lower() + e.strerror[1:]
        nxt = [getattr(e, "reason", None), e.__cause__, e.__context__]
        nxt += [a for a in e.args if isinstance(a, BaseException)]
        todo += [n for n in nxt if isinstance(n, BaseException)]
    return None


def short_reason(exc: BaseException) -> str:
    """os_reason(), or the exception's own text when the chain holds no OS error."""
    return os_reason(exc) or str(exc)
