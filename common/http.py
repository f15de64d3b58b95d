"""What a failed HTTP request means: whether it certainly never reached the server, and the
operating system's reason behind it. Shared by every client of ours (etcd, masters)."""

from __future__ import annotations

import http.client
import socket
import ssl
from collections.abc import Iterator

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


# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
NAME_MISMATCH = (62, 64)


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception behind it (requests and urllib3 wrap several deep)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        nxt = [getattr(e, "reason", None), e.__cause__, e.__context__]
        nxt += [a for a in e.args if isinstance(a, BaseException)]
        todo += [n for n in nxt if isinstance(n, BaseException)]


def os_reason(exc: BaseException) -> str | None:
    """The readable OS-level cause buried in a requests/urllib3 exception chain, if any:
    "connection refused", "cannot resolve host: ...", "no route to host"."""
    for e in exception_chain(exc):
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return f"cannot resolve host: {e.strerror or e}"
        if isinstance(e, http.client.RemoteDisconnected):
            return "the server closed the connection without an answer (does it serve https://?)"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror[:1].lower() + e.strerror[1:]
    return None


def tls_reason(exc: BaseException) -> str:
    """Why a TLS handshake failed, in words a user can act on."""
    for e in exception_chain(exc):
        if isinstance(e, ssl.SSLCertVerificationError):
            what = getattr(e, "verify_message", None) or e.reason or "certificate verify failed"
            if getattr(e, "verify_code", None) in NAME_MISMATCH:
                return (
                    f"its certificate is not valid for this name ({what}); use a name or "
                    "address the certificate was issued for"
                )
            return (
                f"its certificate cannot be verified ({what}); give the CA that signed it "
                "with --tls-ca"
            )
        if isinstance(e, ssl.SSLError) and e.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
            return "it requires a client certificate: give one with --tls-cert and --tls-key"
        if isinstance(e, ssl.SSLError) and e.reason == "WRONG_VERSION_NUMBER":
            return "it does not speak TLS there (an http:// URL?)"
        if isinstance(e, ssl.SSLError):
            return f"TLS handshake failed: {e.reason or e}"
    return short_reason(exc)


def short_reason(exc: BaseException) -> str:
    """os_reason(), or the exception's own text when the chain holds no OS error."""
    return os_reason(exc) or str(exc)
