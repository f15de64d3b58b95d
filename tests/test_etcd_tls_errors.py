"""What a TLS failure with etcd means (common/etcd_tls.py) and the start-up check that acts
on it (store/startup.py). The exceptions are built as requests raises them, with the
OpenSSL texts a real etcd 3.4 produced (integration/test_etcd_tls.py gets them for real)."""

from __future__ import annotations

import json
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3

from common.etcd_tls import (
    EtcdTls,
    TlsProblem,
    file_problem,
    first_tls_problem,
    ssl_error_in,
    tls_problem,
    unused_tls,
)
from store import StoreError
from store.embedded import EmbeddedStore
from store.etcd_gateway import EndpointsUnavailable
from store.startup import StoreStartError, open_store_at_start, probe

EP = "https://10.0.0.5:2379"
TLS = EtcdTls(ca="/etc/np/ca.pem", cert="/etc/np/client.pem", key="/etc/np/client-key.pem")


def via_requests(inner: BaseException) -> requests.exceptions.SSLError:
    """``inner`` (an ssl.SSLError) wrapped as requests hands it over."""
    reason = urllib3.exceptions.SSLError(inner)
    return requests.exceptions.SSLError(
        urllib3.exceptions.MaxRetryError(None, "/v3/kv/range", reason)  # type: ignore[arg-type]
    )


def openssl(cls: type[ssl.SSLError], errno: int, text: str, **attrs: Any) -> ssl.SSLError:
    """An SSL error with OpenSSL's text; ``attrs`` are those the ssl module sets itself."""
    e = cls(errno, text)
    for name, value in attrs.items():
        setattr(e, name, value)
    return e


def verify_failed(message: str, code: int) -> requests.exceptions.SSLError:
    text = f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message} (_ssl.c:1006)"
    return via_requests(
        openssl(
            ssl.SSLCertVerificationError,
            1,
            text,
            library="SSL",
            reason="CERTIFICATE_VERIFY_FAILED",
            verify_code=code,
            verify_message=message,
        )
    )


def eof_after_handshake() -> requests.exceptions.SSLError:
    """What a TLS 1.3 client sees when etcd refuses its certificate: EOF on the first read."""
    return via_requests(
        openssl(ssl.SSLEOFError, 8, "EOF occurred in violation of protocol (_ssl.c:2427)")
    )


def alert(name: str) -> requests.exceptions.SSLError:
    text = f"[SSL: {name}] {name.lower().replace('_', ' ')} (_ssl.c:2427)"
    return via_requests(openssl(ssl.SSLError, 1, text, library="SSL", reason=name))


def refused() -> requests.ConnectionError:
    conn: Any = None
    reason = urllib3.exceptions.NewConnectionError(conn, "[Errno 111] Connection refused")
    return requests.ConnectionError(
        urllib3.exceptions.MaxRetryError(None, "/", reason)  # type: ignore[arg-type]
    )


def message(exc: BaseException, tls: EtcdTls = TLS) -> str:
    problem = tls_problem(EP, exc, tls)
    assert problem is not None
    assert "\n" not in problem.message
    return problem.message


# ---------------------------------------------------------------- the message


def test_a_wrong_ca_names_the_endpoint_and_the_ca_file() -> None:
    m = message(verify_failed("unable to get local issuer certificate", 20))
    assert m == (
        f"etcd at {EP}: its certificate could not be verified (unable to get local issuer "
        "certificate); check that --etcd-ca /etc/np/ca.pem is the CA that signed etcd's "
        "server certificate"
    )


def test_without_a_ca_the_system_store_is_blamed() -> None:
    m = message(verify_failed("unable to get local issuer certificate", 20), EtcdTls())
    assert "against the default CA bundle (Python requests' certifi)" in m and "give the CA" in m
    assert "--etcd-ca" in m


def test_a_certificate_for_another_host_says_so() -> None:
    m = message(verify_failed("IP address mismatch, certificate is not valid for '10.0.0.5'", 64))
    assert m.startswith(f"etcd at {EP}: its certificate could not be verified (IP address")
    assert "must name the host or IP address given in --etcd-endpoints" in m


def test_the_text_alone_is_enough() -> None:
    # The ssl module's attributes may be missing (another Python, a wrapped error).
    bare = ssl.SSLError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed (_ssl.c:1006)"
    )
    m = message(via_requests(bare))
    assert "could not be verified (self-signed)" in m and "--etcd-ca /etc/np/ca.pem" in m


@pytest.mark.parametrize(
    "name",
    ["SSLV3_ALERT_BAD_CERTIFICATE", "TLSV13_ALERT_CERTIFICATE_REQUIRED", "TLSV1_ALERT_UNKNOWN_CA"],
)
def test_a_refused_client_certificate_names_the_cert_file(name: str) -> None:
    problem = tls_problem(EP, alert(name), TLS)
    assert problem is not None and problem.certain
    assert problem.message.startswith(f"etcd at {EP} did not accept the client certificate (")
    assert "--etcd-cert /etc/np/client.pem is signed by a CA etcd trusts" in problem.message


def test_no_client_certificate_asks_for_one() -> None:
    no_cert = EtcdTls(ca="/etc/np/ca.pem")
    m = message(alert("SSLV3_ALERT_BAD_CERTIFICATE"), no_cert)
    assert m.startswith(f"etcd at {EP} closed the TLS connection (sslv3 alert bad certificate)")
    assert "requires a client certificate" in m and "--etcd-cert and --etcd-key" in m


def test_an_eof_after_the_handshake_is_a_refusal_to_be_confirmed() -> None:
    problem = tls_problem(EP, eof_after_handshake(), EtcdTls(ca="/ca.pem"))
    assert problem == TlsProblem(
        f"etcd at {EP} closed the TLS connection (closed after the handshake): it requires a "
        "client certificate; give one signed by a CA etcd trusts with --etcd-cert and "
        "--etcd-key",
        certain=False,
    )


def test_a_plain_http_etcd_on_an_https_endpoint() -> None:
    eof = openssl(
        ssl.SSLEOFError,
        8,
        "[SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol (_ssl.c:1006)",
        library="SSL",
        reason="UNEXPECTED_EOF_WHILE_READING",
    )
    problem = tls_problem(EP, via_requests(eof), TLS)
    assert problem is not None and not problem.certain
    assert "closed the connection in the TLS handshake" in problem.message
    assert "does it serve TLS on this port" in problem.message
    wrong = openssl(ssl.SSLError, 1, "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1)")
    problem = tls_problem(EP, via_requests(wrong), TLS)
    assert problem is not None and problem.certain
    assert problem.message == (
        f"etcd at {EP} does not speak TLS on this port (wrong version number); "
        "is it an http:// endpoint?"
    )


def test_local_files_that_do_not_load() -> None:
    mismatch = openssl(
        ssl.SSLError, 116, "[X509: KEY_VALUES_MISMATCH] key values mismatch (_ssl.c:3926)"
    )
    assert message(via_requests(mismatch)) == (
        f"etcd at {EP}: the key --etcd-key /etc/np/client-key.pem does not belong to the "
        "certificate --etcd-cert /etc/np/client.pem"
    )
    no_ca = openssl(ssl.SSLError, 136, "[X509: NO_CERTIFICATE_OR_CRL_FOUND] no certificate")
    assert message(via_requests(no_ca)) == (
        f"etcd at {EP}: --etcd-ca /etc/np/ca.pem holds no PEM certificate"
    )
    pem = via_requests(openssl(ssl.SSLError, 524297, "[SSL] PEM lib (_ssl.c:3926)"))
    loading = message(pem)
    assert "cannot load the client certificate --etcd-cert /etc/np/client.pem and key" in loading
    cert_only = EtcdTls(ca="/ca.pem", cert="/c.pem")
    assert message(pem, cert_only).endswith("(PEM lib); give the key with --etcd-key")


def test_an_unknown_ssl_error_still_names_the_flags() -> None:
    odd = via_requests(openssl(ssl.SSLError, 1, "[SSL: SOMETHING_NEW] something new (_ssl.c:1)"))
    assert message(odd) == (
        f"etcd at {EP}: TLS failed (something new); check --etcd-ca, --etcd-cert and --etcd-key"
    )


def test_what_is_no_tls_problem() -> None:
    assert tls_problem(EP, refused(), TLS) is None
    assert tls_problem(EP, requests.ReadTimeout("read timed out"), TLS) is None
    assert tls_problem(EP, StoreError("etcd: 503"), TLS) is None


def test_the_ssl_error_is_found_in_the_chain() -> None:
    inner = openssl(ssl.SSLError, 1, "[SSL: X] x")
    assert ssl_error_in(via_requests(inner)) is inner
    bare = requests.exceptions.SSLError("handshake failed")
    assert ssl_error_in(bare) is bare
    assert ssl_error_in(refused()) is None


def test_the_first_endpoint_with_a_tls_problem_is_named() -> None:
    b = "https://10.0.0.6:2379"
    failures = [(EP, refused()), (b, verify_failed("unable to get local issuer certificate", 20))]
    problem = first_tls_problem(failures, TLS)
    assert problem is not None and problem.message.startswith(f"etcd at {b}: ")
    assert first_tls_problem([(EP, refused())], TLS) is None


# ---------------------------------------------------------------- the files


def test_file_problems(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "c.pem", "k.pem"))
    for f in (ca, cert, key):
        f.write_text("pem")
    assert file_problem(EtcdTls(str(ca), str(cert), str(key))) is None
    assert file_problem(EtcdTls()) is None
    assert file_problem(EtcdTls(ca=str(tmp_path))) is None  # a directory of CA certificates
    gone = str(tmp_path / "gone.pem")
    assert file_problem(EtcdTls(str(ca), gone, str(key))) == (
        f"--etcd-cert {gone}: cannot read it (no such file or directory)"
    )
    assert file_problem(EtcdTls(gone, str(cert), str(key))) == (
        f"--etcd-ca {gone}: cannot read it (no such file or directory)"
    )
    assert file_problem(EtcdTls(str(ca), str(cert), str(tmp_path))) == (
        f"--etcd-key {tmp_path}: is a directory, not a PEM file"
    )
    assert file_problem(EtcdTls(str(ca), "", str(key))) == (
        f"--etcd-key {key} is given without --etcd-cert"
    )


def problem_as(uid: int | None, tls: EtcdTls) -> str | None:
    """file_problem() as seen by ``uid`` (a forked child drops to it), or by us."""
    if uid is None:
        return file_problem(tls)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on, only os._exit
        status = 1
        try:
            os.close(read)
            os.setgid(uid)
            os.setuid(uid)
            os.write(write, json.dumps(file_problem(tls)).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as answer:
        out = answer.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, "the child could not drop to nobody"
    return json.loads(out)


def test_an_unreadable_file() -> None:
    # Root reads any file: when we are root, the check runs as nobody.
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        key = Path(folder) / "k.pem"
        key.write_text("pem")
        key.chmod(0)
        uid = 65534 if os.geteuid() == 0 else None
        problem = problem_as(uid, EtcdTls(cert=str(key), key=str(key)))
    assert problem == f"--etcd-cert {key}: cannot read it (permission denied)"


def test_tls_files_with_plain_http_endpoints_are_unused() -> None:
    assert unused_tls(["http://a:2379", "HTTP://b:2379"], TLS) is not None
    assert unused_tls(["http://a:2379", "b:2379"], TLS) is None  # bare: https with TLS
    assert unused_tls(["http://a:2379"], EtcdTls()) is None


# ---------------------------------------------------------------- the start-up check


class ScriptedStore:
    """A store whose revision() fails as scripted (an exception), then answers."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.reads = 0

    def revision(self) -> int:
        self.reads += 1
        if self.failures:
            raise self.failures.pop(0)
        return 7


def unavailable(*failures: tuple[str, BaseException]) -> EndpointsUnavailable:
    return EndpointsUnavailable("no etcd endpoint available", failures)


def test_a_certificate_problem_stops_at_the_first_read() -> None:
    store = ScriptedStore(unavailable((EP, verify_failed("unable to get local issuer", 20))))
    with pytest.raises(StoreStartError, match=f"^etcd at {EP}: its certificate could not"):
        probe(store, TLS, pause=0)  # type: ignore[arg-type]
    assert store.reads == 1


def test_a_closed_connection_is_asked_again_before_it_is_believed() -> None:
    store = ScriptedStore(*(unavailable((EP, eof_after_handshake())) for _ in range(3)))
    with pytest.raises(StoreStartError, match="did not accept the client certificate"):
        probe(store, TLS, attempts=3, pause=0)  # type: ignore[arg-type]
    assert store.reads == 3
    # A server that was merely restarting answers the second time.
    store = ScriptedStore(unavailable((EP, eof_after_handshake())))
    probe(store, TLS, attempts=3, pause=0)  # type: ignore[arg-type]
    assert store.reads == 2


def test_an_etcd_that_is_down_is_left_to_the_callers_retries() -> None:
    store = ScriptedStore(unavailable((EP, refused())))
    probe(store, TLS, pause=0)  # type: ignore[arg-type]
    assert store.reads == 1
    store = ScriptedStore(StoreError("etcd: something else"))
    probe(store, TLS, pause=0)  # type: ignore[arg-type]


def test_open_store_at_start(tmp_path: Path) -> None:
    embedded = open_store_at_start([], str(tmp_path), TLS)  # no etcd: TLS flags are moot
    try:
        assert isinstance(embedded, EmbeddedStore)
    finally:
        embedded.close()
    gone = str(tmp_path / "gone.pem")
    with pytest.raises(StoreStartError, match=f"^--etcd-ca {gone}: cannot read it"):
        open_store_at_start([EP], str(tmp_path), EtcdTls(ca=gone))
