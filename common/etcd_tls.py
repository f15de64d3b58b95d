"""What a TLS failure talking to etcd means, in one line a user can act on.

netmaster and netplugin share the flags ``--etcd-ca``, ``--etcd-cert`` and ``--etcd-key``.
At start each checks the files, then reads etcd once: an etcd that is down may come back
and is waited for as usual, but a certificate problem never heals by retrying, so it
stops the program with a message naming the endpoint, the problem and the flag and file
to check. These are the pure parts of that check; ``store.startup`` does the reading.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import requests

from common.http import NAME_MISMATCH, exception_chain

# The server refused our certificate, or wanted one (TLS alerts as OpenSSL names them).
_REFUSED_ALERTS = (
    "ALERT_BAD_CERTIFICATE",
    "ALERT_CERTIFICATE_REQUIRED",
    "ALERT_UNKNOWN_CA",
    "ALERT_CERTIFICATE_UNKNOWN",
    "ALERT_CERTIFICATE_EXPIRED",
    "ALERT_CERTIFICATE_REVOKED",
    "ALERT_HANDSHAKE_FAILURE",
    "ALERT_ACCESS_DENIED",
)
_TAG = re.compile(r"\[(\w+): (\w+)\]")


@dataclass(frozen=True)
class EtcdTls:
    """The TLS files given to reach etcd ("" when a flag is not given)."""

    ca: str = ""
    cert: str = ""
    key: str = ""


@dataclass(frozen=True)
class TlsProblem:
    """Why TLS to etcd failed, as one line; ``certain`` is False when one more attempt could
    still tell it apart from an etcd that merely went away mid-handshake."""

    message: str
    certain: bool = True


def file_problem(tls: EtcdTls) -> str | None:
    """The first TLS flag whose file cannot be read, or a key given without its certificate."""
    if tls.key and not tls.cert:
        return f"--etcd-key {tls.key} is given without --etcd-cert"
    for flag, path, may_be_dir in (
        ("--etcd-ca", tls.ca, True),  # a directory of hashed CA certificates also does
        ("--etcd-cert", tls.cert, False),
        ("--etcd-key", tls.key, False),
    ):
        if not path:
            continue
        if os.path.isdir(path):
            if may_be_dir:
                continue
            return f"{flag} {path}: is a directory, not a PEM file"
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            reason = (e.strerror or str(e)).lower()
            return f"{flag} {path}: cannot read it ({reason})"
    return None


def ssl_error_in(exc: BaseException) -> BaseException | None:
    """The ssl.SSLError (or else requests' SSLError) somewhere in a requests exception chain."""
    chain = list(exception_chain(exc))
    return next((e for e in chain if isinstance(e, ssl.SSLError)), None) or next(
        (e for e in chain if isinstance(e, requests.exceptions.SSLError)), None
    )


def _reason(e: BaseException) -> str:
    """OpenSSL's reason code (CERTIFICATE_VERIFY_FAILED, ...), from the error or its text."""
    reason = getattr(e, "reason", None)
    if isinstance(reason, str) and reason:
        return reason
    m = _TAG.search(str(e))
    return m.group(2) if m else ""


def _detail(e: BaseException) -> str:
    """The readable part of an SSL error: no "[LIB: CODE]" tag and no "(_ssl.c:123)"."""
    text = getattr(e, "verify_message", None) or (e.args[1] if len(e.args) > 1 else str(e))
    text = _TAG.sub("", str(text))
    text = re.sub(r"\s*\(_ssl\.c:\d+\)", "", text)
    return text.removeprefix(" certificate verify failed:").strip().rstrip(".")


def _verify_failed(where: str, e: BaseException, tls: EtcdTls) -> TlsProblem:
    detail = _detail(e)
    code = getattr(e, "verify_code", None)
    if code in NAME_MISMATCH or "mismatch" in detail.lower():
        return TlsProblem(
            f"{where}: its certificate could not be verified ({detail}): etcd's server "
            "certificate must name the host or IP address given in --etcd-endpoints"
        )
    if tls.ca:
        advice = f"check that --etcd-ca {tls.ca} is the CA that signed etcd's server certificate"
        return TlsProblem(f"{where}: its certificate could not be verified ({detail}); {advice}")
    return TlsProblem(
        f"{where}: its certificate could not be verified against the default CA "
        f"bundle (Python requests' certifi) ({detail}); give the CA that signed it with --etcd-ca"
    )


def _refused(where: str, detail: str, tls: EtcdTls, certain: bool) -> TlsProblem:
    if not tls.cert:
        return TlsProblem(
            f"{where} closed the TLS connection ({detail}): it requires a client certificate; "
            "give one signed by a CA etcd trusts with --etcd-cert and --etcd-key",
            certain,
        )
    return TlsProblem(
        f"{where} did not accept the client certificate ({detail}); check that --etcd-cert "
        f"{tls.cert} is signed by a CA etcd trusts (its --trusted-ca-file) and still valid",
        certain,
    )


def tls_problem(endpoint: str, exc: BaseException, tls: EtcdTls) -> TlsProblem | None:
    """What a failed request to ``endpoint`` says about TLS; None if it is no TLS problem
    (etcd down, refused, timed out: things that may pass)."""
    e = ssl_error_in(exc)
    if e is None:
        return None
    where = f"etcd at {endpoint}"
    reason = _reason(e)
    detail = _detail(e)
    if isinstance(e, ssl.SSLCertVerificationError) or reason == "CERTIFICATE_VERIFY_FAILED":
        return _verify_failed(where, e, tls)
    if any(reason.endswith(alert) for alert in _REFUSED_ALERTS):
        return _refused(where, detail, tls, certain=True)
    if reason == "WRONG_VERSION_NUMBER":
        return TlsProblem(
            f"{where} does not speak TLS on this port ({detail}); is it an http:// endpoint?"
        )
    if isinstance(e, ssl.SSLEOFError) or "EOF" in reason:
        if reason:  # cut off in the handshake itself: not TLS there, or a dying server
            return TlsProblem(
                f"{where} closed the connection in the TLS handshake ({detail}); does it "
                "serve TLS on this port (https:// in its --listen-client-urls)?",
                certain=False,
            )
        # Closed right after the handshake: etcd refused the client certificate (TLS 1.3).
        return _refused(where, "closed after the handshake", tls, certain=False)
    if reason == "NO_CERTIFICATE_OR_CRL_FOUND":
        return TlsProblem(f"{where}: --etcd-ca {tls.ca} holds no PEM certificate")
    if reason == "KEY_VALUES_MISMATCH":
        return TlsProblem(
            f"{where}: the key --etcd-key {tls.key} does not belong to the certificate "
            f"--etcd-cert {tls.cert}"
        )
    if "PEM lib" in str(e):
        if not tls.key:
            return TlsProblem(
                f"{where}: cannot load a certificate and its key from --etcd-cert {tls.cert} "
                "(PEM lib); give the key with --etcd-key"
            )
        return TlsProblem(
            f"{where}: cannot load the client certificate --etcd-cert {tls.cert} and key "
            f"--etcd-key {tls.key}: they must be PEM files (PEM lib)"
        )
    return TlsProblem(
        f"{where}: TLS failed ({detail or type(e).__name__}); check --etcd-ca, --etcd-cert "
        "and --etcd-key"
    )


def first_tls_problem(
    failures: Iterable[tuple[str, BaseException]], tls: EtcdTls
) -> TlsProblem | None:
    """The TLS problem of the first endpoint that had one, if any did."""
    for endpoint, exc in failures:
        problem = tls_problem(endpoint, exc, tls)
        if problem is not None:
            return problem
    return None


def unused_tls(endpoints: Sequence[str], tls: EtcdTls) -> str | None:
    """A warning when TLS files are given but every endpoint says plain http://."""
    if not (tls.ca or tls.cert) or not endpoints:
        return None
    if all(e.strip().lower().startswith("http://") for e in endpoints):
        return (
            f"--etcd-ca/--etcd-cert are given but every etcd endpoint is http:// "
            f"({', '.join(endpoints)}): TLS is not used; write https:// or leave the scheme out"
        )
    return None
