"""netmaster's start-up checks: a non-loopback listen address needs TLS and tokens (or
--insecure), the TLS flags load, and the control URL follows TLS."""

from __future__ import annotations

from pathlib import Path

import pytest

from master.cli import (
    control_url,
    control_url_mismatch,
    exposure_refusal,
    loopback_only,
    main,
    parser,
    tls_problem,
)


@pytest.mark.parametrize(
    ("listen", "local"),
    [
        ("127.0.0.1:9999", True),
        ("127.3.2.1:9999", True),
        ("http://127.0.0.1:9999/", True),
        ("localhost:9999", True),
        ("[::1]:9999", True),
        ("0.0.0.0:9999", False),
        ("[::]:9999", False),
        ("10.0.0.1:9999", False),
        ("master1:9999", False),  # a name may resolve to anything
        (":9999", False),
    ],
)
def test_loopback_only(listen: str, local: bool) -> None:
    assert loopback_only(listen) is local


def test_loopback_needs_nothing() -> None:
    assert exposure_refusal("127.0.0.1:9999", tls=False, auth=False, insecure=False) is None
    assert exposure_refusal("[::1]:9999", tls=False, auth=False, insecure=False) is None


def test_exposed_without_tls_and_tokens_is_refused_saying_what_to_pass() -> None:
    message = exposure_refusal("0.0.0.0:9999", tls=False, auth=False, insecure=False)
    assert message is not None
    assert message.startswith("netmaster: --listen-url 0.0.0.0:9999 is reachable from other")
    assert "without TLS (--tls-cert FILE --tls-key FILE) and authentication" in message
    for flag in ("--tls-cert FILE --tls-key FILE", "--auth-token-file FILE", "--insecure"):
        assert flag in message
    only_tls = exposure_refusal("10.0.0.1:9999", tls=True, auth=False, insecure=False)
    assert only_tls is not None and "without authentication (--auth-token-file FILE)" in only_tls
    only_auth = exposure_refusal("10.0.0.1:9999", tls=False, auth=True, insecure=False)
    assert only_auth is not None and "without TLS (--tls-cert" in only_auth
    assert "authentication (" not in only_auth


def test_exposed_with_both_or_insecure_starts() -> None:
    assert exposure_refusal("0.0.0.0:9999", tls=True, auth=True, insecure=False) is None
    assert exposure_refusal("0.0.0.0:9999", tls=False, auth=False, insecure=True) is None


def test_the_cli_refuses_before_serving(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--listen-url", "0.0.0.0:1", "--data-dir", str(tmp_path / "data")])
    assert isinstance(e.value.code, str)  # printed on stderr, exit status 1
    assert not (tmp_path / "data").exists()  # refused before it made anything
    assert "--tls-cert FILE --tls-key FILE and --auth-token-file FILE" in e.value.code
    assert "--insecure" in e.value.code


def test_the_cli_refuses_a_bad_token_file_naming_the_line(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("admin secret-secret-secret-1\nroot secret-secret-secret-2\n")
    with pytest.raises(SystemExit) as e:
        main(["--auth-token-file", str(tokens), "--data-dir", str(tmp_path)])
    assert e.value.code == (
        f"netmaster: --auth-token-file: token file {tokens} line 2: unknown role 'root'; "
        "the roles are reader, agent, admin"
    )


def test_tls_flags(tmp_path: Path) -> None:
    assert tls_problem("", "", "") is None
    assert (
        tls_problem("c.pem", "", "") == "--tls-cert and --tls-key go together: give both or neither"
    )
    assert tls_problem("", "", "", "ca.pem") == (
        "--tls-client-ca needs --tls-cert and --tls-key: client certificates need TLS"
    )
    missing = str(tmp_path / "none.pem")
    problem = tls_problem(missing, missing, "")
    assert problem == f"--tls-cert {missing} --tls-key {missing}: No such file or directory"
    (tmp_path / "junk.pem").write_text("not a certificate")
    problem = tls_problem("", "", str(tmp_path / "junk.pem"))
    assert problem is not None and problem.startswith(f"--tls-ca {tmp_path / 'junk.pem'}: ")


def test_the_control_url_follows_tls() -> None:
    assert control_url("0.0.0.0:9999", "10.0.0.1:9999", tls=True) == "https://10.0.0.1:9999"
    assert control_url("10.0.0.1:9999", tls=True) == "https://10.0.0.1:9999"
    assert control_url("http://10.0.0.1:9999", tls=True) == "https://10.0.0.1:9999"
    assert control_url("10.0.0.1:9999") == "http://10.0.0.1:9999"
    assert control_url_mismatch("https://10.0.0.1:9999", tls=True) is None
    assert control_url_mismatch("https://proxy:443", tls=False) is None  # a TLS proxy in front
    warning = control_url_mismatch("http://10.0.0.1:9999", tls=True)
    assert warning is not None and "write https://" in warning


def test_security_flags_and_their_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parser().parse_args([])
    assert (args.tls_cert, args.tls_key, args.tls_ca, args.auth_token_file) == ("", "", "", "")
    assert args.insecure is False
    monkeypatch.setenv("NETMASTER_TLS_CERT", "/etc/np/cert.pem")
    monkeypatch.setenv("NETMASTER_AUTH_TOKEN_FILE", "/etc/np/tokens")
    monkeypatch.setenv("NETMASTER_INSECURE", "1")
    args = parser().parse_args([])
    assert (args.tls_cert, args.auth_token_file, args.insecure) == (
        "/etc/np/cert.pem",
        "/etc/np/tokens",
        True,
    )
