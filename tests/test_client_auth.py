"""The clients' side of security: the token file, the Authorization and TLS settings the
shared transport sends, how a failed handshake is worded, and netctl and the Docker driver
against a master that requires tokens."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from docker_plugin import GW_OPTS, NID, FakeDatapath, call

from common.client import MasterTransport, no_answer
from common.credentials import CredentialError, client_token, parse_token
from netctl.cli import main as netctl
from netctl.client import wording
from plugin.app import create_app
from plugin.cli import parser as plugin_parser
from plugin.driver import Driver
from plugin.master_client import MasterClient
from testbed.real_master import RealMaster, real_master

SECRET = "s3cret-0123456789abcdef"


# --- the client token file ---


def test_a_client_token_file_holds_the_token_alone() -> None:
    assert parse_token(f"# netctl token\n\n  {SECRET}  \n", "f") == SECRET
    for text, message in (
        ("", "f: no token in it"),
        ("# nothing\n", "f: no token in it"),
        (f"agent {SECRET}\n", "f: expected the token alone on one line"),
        (f"{SECRET}\n{SECRET}x\n", "f: expected the token alone on one line"),
    ):
        with pytest.raises(CredentialError) as e:
            parse_token(text, "f")
        assert str(e.value).startswith(message) and SECRET not in str(e.value)


def test_the_file_wins_over_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(SECRET + "\n")
    assert client_token(str(path), "from-env") == SECRET
    assert client_token("", " from-env ") == "from-env"
    assert client_token("", "") == ""
    with pytest.raises(CredentialError, match=r"token file .*nope: cannot read it"):
        client_token(str(tmp_path / "nope"), "from-env")


# --- what the transport sends ---


class Recorder:
    """A requests-like session that records each request's keyword arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def request(self, method: str, url: str, **kw: Any) -> requests.Response:
        self.calls.append((url, kw))
        resp = requests.Response()
        resp.status_code = 200
        resp._content = b"{}"
        return resp


def test_the_transport_sends_the_token_and_verifies_with_the_ca() -> None:
    rec = Recorder()
    t = MasterTransport(
        "10.0.0.1:9999", wording, timeout=1, session=rec, tls_ca="/ca.pem", token=SECRET
    )  # type: ignore[arg-type]
    t.call("GET", "/api/v1/tenants")
    url, kw = rec.calls[-1]
    assert url == "https://10.0.0.1:9999/api/v1/tenants"  # a CA given: https by default
    assert kw["verify"] == "/ca.pem" and kw["headers"] == {"Authorization": f"Bearer {SECRET}"}
    plain = MasterTransport("10.0.0.1:9999", wording, timeout=1, session=rec)  # type: ignore[arg-type]
    plain.call("GET", "/version")
    url, kw = rec.calls[-1]
    assert url == "http://10.0.0.1:9999/version" and "verify" not in kw and "headers" not in kw


def _ssl_failure(inner: ssl.SSLError) -> requests.exceptions.SSLError:
    reason = urllib3.exceptions.SSLError(inner)
    return requests.exceptions.SSLError(urllib3.exceptions.MaxRetryError(None, "/", reason))  # type: ignore[arg-type]


def test_a_failed_handshake_says_what_to_do() -> None:
    unverified = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] ...")
    unverified.verify_message = "unable to get local issuer certificate"
    failure = no_answer("https://m:1", _ssl_failure(unverified), 5)
    assert failure.stage == "tls"
    assert wording(failure) == (
        "no TLS connection to netmaster at https://m:1: its certificate cannot be verified "
        "(unable to get local issuer certificate); give the CA that signed it with --tls-ca"
    )
    mismatch = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] ...")
    mismatch.verify_code = 64
    mismatch.verify_message = "IP address mismatch, certificate is not valid for '10.0.0.9'."
    failure = no_answer("https://10.0.0.9:1", _ssl_failure(mismatch), 5)
    assert failure.reason == (
        "its certificate is not valid for this name (IP address mismatch, certificate is not "
        "valid for '10.0.0.9'.); use a name or address the certificate was issued for"
    )
    plain = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    plain.reason = "WRONG_VERSION_NUMBER"
    failure = no_answer("https://m:1", _ssl_failure(plain), 5)
    assert failure.reason == "it does not speak TLS there (an http:// URL?)"
    required = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] ...")
    required.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"
    failure = no_answer("https://m:1", _ssl_failure(required), 5)
    assert failure.reason == (
        "it requires a client certificate: give one with --tls-cert and --tls-key"
    )


# --- netctl against a master that requires tokens ---


@pytest.fixture
def admin_master(tmp_path: Path) -> Iterator[RealMaster]:
    with real_master(tmp_path, "admin") as m:
        yield m


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("NETMASTER", "NETCTL_TLS_CA", "NETCTL_AUTH_TOKEN_FILE", "NETCTL_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def run(capsys: pytest.CaptureFixture[str], argv: list[str], m: RealMaster) -> tuple[int, str]:
    try:
        rc = netctl(["--netmaster", m.url, *argv], session=m.session())
    except SystemExit as e:
        rc = int(e.code or 0)
    return rc, capsys.readouterr().err


def test_netctl_sends_the_token_from_its_file_or_environment(
    admin_master: RealMaster,
    tmp_path: Path,
    clean_env: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token_file = tmp_path / "netctl.token"
    token_file.write_text(admin_master.token + "\n")
    rc, err = run(capsys, ["tenant", "ls"], admin_master)
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith("netctl: GET /api/v1/tenants: authentication required")
    assert run(
        capsys, ["--auth-token-file", str(token_file), "tenant", "create", "blue"], admin_master
    ) == (0, "")
    clean_env.setenv("NETCTL_AUTH_TOKEN", admin_master.token)
    assert run(capsys, ["tenant", "rm", "blue"], admin_master) == (0, "")
    clean_env.setenv("NETCTL_AUTH_TOKEN", "wrong-token-0123456789")
    rc, err = run(capsys, ["tenant", "ls"], admin_master)
    assert (rc, err) == (1, "netctl: GET /api/v1/tenants: the bearer token is not valid\n")
    assert "wrong-token" not in err
    rc, err = run(
        capsys, ["--auth-token-file", str(tmp_path / "none"), "tenant", "ls"], admin_master
    )
    assert rc == 2 and f"token file {tmp_path / 'none'}: cannot read it" in err
    rc, err = run(capsys, ["--tls-cert", "c.pem", "tenant", "ls"], admin_master)
    assert rc == 2 and "--tls-cert and --tls-key go together" in err


def test_netctl_with_a_role_too_weak_says_which_role_it_needs(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with real_master(tmp_path, "agent") as m:
        clean_env.setenv("NETCTL_AUTH_TOKEN", m.token)
        rc, err = run(capsys, ["tenant", "rm", "default"], m)
    assert rc == 1 and err == (
        "netctl: DELETE /api/v1/tenants/default: role agent may not call "
        "DELETE /api/v1/tenants/<key>: it needs role admin\n"
    )


# --- Docker's calls through the plugin, with the agent's token ---


def test_docker_network_create_rename_and_rm_work_with_the_agent_role(tmp_path: Path) -> None:
    with real_master(tmp_path, "agent") as m:
        client = MasterClient(m.url, backoff=0, session=m.session(), token=m.token)
        named = threading.Event()

        def docker_name(network_id: str) -> str:
            named.set()
            return "web"

        driver = Driver(client, FakeDatapath(), host="h1", docker_name=docker_name)
        plugin = create_app(driver).test_client()
        pool = call(plugin, "IpamDriver.RequestPool", {"Pool": "10.5.0.0/24", "Options": {}})
        pool_id = pool.get_json()["PoolID"]
        gw = call(plugin, "IpamDriver.RequestAddress", {"PoolID": pool_id, "Options": GW_OPTS})
        body = {
            "NetworkID": NID,
            "Options": {"com.docker.network.generic": {}},
            "IPv4Data": [{"Pool": "10.5.0.0/24", "Gateway": gw.get_json()["Address"]}],
        }
        assert call(plugin, "NetworkDriver.CreateNetwork", body).status_code == 200
        assert named.wait(10)  # the rename ran, in its thread
        iface = {"Address": "", "AddressIPv6": "", "MacAddress": ""}
        ep = {"NetworkID": NID, "EndpointID": "e" * 64, "Interface": iface, "Options": {}}
        r = call(plugin, "NetworkDriver.CreateEndpoint", ep)
        assert r.status_code == 200, r.get_json()
        assert [n.networkName for n in m.state.networks.list()] == ["web"]
        ids = {"NetworkID": NID, "EndpointID": "e" * 64}
        assert call(plugin, "NetworkDriver.DeleteEndpoint", ids).status_code == 200
        assert call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID}).status_code == 200
        assert m.state.networks.list() == []


def test_a_reader_token_cannot_create_a_network_and_docker_is_told_why(tmp_path: Path) -> None:
    with real_master(tmp_path, "reader") as m:
        client = MasterClient(m.url, backoff=0, session=m.session(), token=m.token)
        plugin = create_app(Driver(client, FakeDatapath(), host="h1")).test_client()
        body = {"NetworkID": NID, "Options": {}, "IPv4Data": [{"Pool": "10.5.0.0/24"}]}
        r = call(plugin, "NetworkDriver.CreateNetwork", body)
        assert r.status_code != 200 and "it needs role agent" in r.get_json()["Err"]
        assert m.state.networks.list() == []


def test_agent_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = plugin_parser().parse_args([])
    assert (args.tls_ca, args.tls_cert, args.tls_key, args.auth_token_file) == ("", "", "", "")
    monkeypatch.setenv("NETPLUGIN_TLS_CA", "/etc/np/ca.pem")
    monkeypatch.setenv("NETPLUGIN_AUTH_TOKEN_FILE", "/etc/np/agent.token")
    args = plugin_parser().parse_args([])
    assert (args.tls_ca, args.auth_token_file) == ("/etc/np/ca.pem", "/etc/np/agent.token")
