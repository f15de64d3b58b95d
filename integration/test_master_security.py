"""A real netmaster (gunicorn) over HTTPS with a token file, on 127.0.0.1: what netctl, the
agent's client and plain requests get with and without the CA and the right token; token
rotation by SIGHUP; and the refusal to listen beyond loopback unprotected."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from common.models import EndpointRequest, Network
from master.election import FORWARDED_BY, SERVED_BY
from plugin.master_client import MasterClient, MasterError, leader_url_from_store
from store import open_store
from testbed.master import VENV_BIN, MasterProcess, free_port
from testbed.pki import MasterSecurity, TestCA
from testbed.wait import tcp_listening, wait_for


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[MasterProcess]:
    security = MasterSecurity.create(tmp_path / "pki", ips=["127.0.0.1"])
    m = MasterProcess(tmp_path / "master", security=security, extra=["--log-level", "debug"])
    m.start()
    try:
        yield m
    finally:
        m.stop()


def netctl(m: MasterProcess, *args: str, url: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NETCTL_", "NETMASTER"))}
    return subprocess.run(
        [str(VENV_BIN / "netctl"), "--netmaster", url or m.url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def test_netctl_with_the_ca_and_the_admin_token(secure: MasterProcess) -> None:
    sec = secure.security
    assert sec is not None
    auth = ["--tls-ca", str(sec.ca), "--auth-token-file", str(sec.token_file("admin"))]
    res = netctl(secure, *auth, "tenant", "create", "blue")
    assert res.returncode == 0, res.stderr
    res = netctl(secure, *auth, "tenant", "ls")
    assert res.returncode == 0 and "blue" in res.stdout.split()
    # A bare host:port with --tls-ca means https://.
    bare = secure.url.removeprefix("https://")
    assert netctl(secure, *auth, "tenant", "rm", "blue", url=bare).returncode == 0


def test_netctl_without_the_ca_fails_in_one_line(secure: MasterProcess) -> None:
    sec = secure.security
    assert sec is not None
    res = netctl(secure, "--auth-token-file", str(sec.token_file("admin")), "tenant", "ls")
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr == (
        f"netctl: no TLS connection to netmaster at {secure.url}: its certificate cannot be "
        "verified (unable to get local issuer certificate); give the CA that signed it "
        "with --tls-ca\n"
    )
    plain = secure.url.replace("https://", "http://")
    res = netctl(secure, "tenant", "ls", url=plain)
    assert res.returncode == 1 and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr and res.stderr.startswith("netctl: ")


def test_no_token_is_401_and_the_meta_routes_are_public(secure: MasterProcess) -> None:
    verify = secure.verify
    r = requests.get(f"{secure.url}/api/v1/networks", verify=verify, timeout=10)
    assert r.status_code == 401 and set(r.json()) == {"error", "object", "reason"}
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="netmaster"'
    for path in ("/version", "/api/v1/leader", "/api/v1/openapi.json"):
        assert requests.get(secure.url + path, verify=verify, timeout=10).ok, path
    leader = requests.get(f"{secure.url}/api/v1/leader", verify=verify, timeout=10).json()
    assert leader["self"]["url"] == secure.url  # the control URL other masters forward to


def test_the_agent_token_allocates_but_cannot_delete_a_tenant(secure: MasterProcess) -> None:
    sec = secure.security
    assert sec is not None
    agent = MasterClient(secure.url, tls_ca=str(sec.ca), token=sec.agent, backoff=0)
    agent.create_network(Network(tenantName="default", networkName="sec", subnet="10.61.0.0/24"))
    ep = agent.create_endpoint(EndpointRequest(endpointID="e1", networkName="sec", host="h1"))
    assert ep.ipAddress == "10.61.0.2"
    assert secure.api("POST", "tenants/blue", json={}).ok  # admin
    r = secure.api("DELETE", "tenants/blue", role="agent")
    assert r.status_code == 403 and r.json()["reason"] == (
        "role agent may not call DELETE /api/v1/tenants/<key>: it needs role admin"
    )
    assert secure.api("GET", "tenants/blue", role="reader").ok  # nothing changed
    res = netctl(
        secure,
        "--tls-ca",
        str(sec.ca),
        "--auth-token-file",
        str(sec.token_file("agent")),
        "tenant",
        "rm",
        "blue",
    )
    assert res.returncode == 1 and res.stderr == (
        "netctl: DELETE /api/v1/tenants/blue: role agent may not call "
        "DELETE /api/v1/tenants/<key>: it needs role admin\n"
    )
    # Without the CA the agent's client fails with words, not a traceback.
    lost = MasterClient(secure.url, token=sec.agent, retries=1)
    with pytest.raises(MasterError, match="certificate cannot be verified"):
        lost.list_networks()
    assert agent.delete_endpoint("e1").endpointID == "e1"
    agent.delete_network("default", "sec")


def served_certificate(m: MasterProcess) -> bytes:
    """The DER certificate a TLS handshake with ``m`` gets (not verified)."""
    pem = ssl.get_server_certificate(("127.0.0.1", m.port), timeout=10)
    return ssl.PEM_cert_to_DER_cert(pem)


def test_sighup_rereads_the_certificate(tmp_path: Path) -> None:
    """README "Security": `kill -HUP` makes netmaster read its certificate and key again."""
    security = MasterSecurity.create(tmp_path / "pki")
    m = MasterProcess(tmp_path / "master", security=security).start()
    try:
        assert m.proc is not None
        first = ssl.PEM_cert_to_DER_cert(security.cert.read_text())
        assert served_certificate(m) == first
        # A certificate of another CA over the same files, as an operator would rotate it.
        other = TestCA(tmp_path / "other", name="rotated CA")
        cert, key = other.issue("netmaster", ["127.0.0.1"])
        security.key.write_bytes(key.read_bytes())
        security.cert.write_bytes(cert.read_bytes())
        rotated = ssl.PEM_cert_to_DER_cert(cert.read_text())
        old_workers = set(m.worker_pids())
        os.kill(m.proc.pid, signal.SIGHUP)
        # SIGHUP starts new workers, then stops the old ones, which still hold the old cert.
        wait_for(
            lambda: m.worker_pids() and not old_workers & set(m.worker_pids()),
            30,
            "the workers from before the SIGHUP have gone",
            last=m.worker_pids,
        )
        assert served_certificate(m) == rotated
        assert requests.get(m.url + "/version", verify=str(other.cert), timeout=10).ok
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(m.url + "/version", verify=str(security.ca), timeout=10)
    finally:
        m.stop()


def test_sighup_rereads_the_token_file_and_no_token_is_logged(secure: MasterProcess) -> None:
    sec = secure.security
    assert sec is not None and secure.proc is not None
    new_admin = "rotated-" + sec.admin[:24]
    text = sec.tokens.read_text()
    sec.tokens.write_text(text.replace(sec.admin, new_admin))
    os.kill(secure.proc.pid, signal.SIGHUP)

    def status(token: str) -> int:
        headers = {"Authorization": f"Bearer {token}"}
        url = f"{secure.url}/api/v1/tenants"
        return requests.get(url, headers=headers, verify=secure.verify, timeout=10).status_code

    wait_for(lambda: status(new_admin) == 200, 30, "the rotated admin token is accepted")
    assert status(sec.admin) == 401
    # A broken file on the next SIGHUP keeps the tokens read before.
    sec.tokens.write_text("root nope\n")
    os.kill(secure.proc.pid, signal.SIGHUP)
    wait_for(
        lambda: "keeping the tokens read before" in secure.log.read_text(),
        30,
        "netmaster logs that it keeps its tokens",
    )
    assert status(new_admin) == 200
    log = secure.log.read_text()
    assert "GET /api/v1/tenants" in log  # the access log is on (--log-level debug)
    for token in (sec.admin, sec.agent, sec.reader, new_admin):
        assert token not in log


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "client-certificates"])
def test_followers_forward_over_tls_with_the_callers_token(tmp_path: Path, mutual: bool) -> None:
    """Two secured masters on one store: the follower verifies the leader with --tls-ca
    (and presents its own certificate when masters require client certificates) and passes
    the caller's token on; the agent finds the leader's https:// URL in the store."""
    security = MasterSecurity.create(tmp_path / "pki", ips=["127.0.0.1"], mutual=mutual)
    shared = tmp_path / "shared"
    ms = [MasterProcess(shared, security=security, extra=["--leader-ttl", "3"]) for _ in "ab"]
    store = None
    try:
        for m in ms:
            m.start()

        def leader() -> MasterProcess | None:
            roles = {m.url: m.api("GET", "leader").json()["self"]["role"] for m in ms}
            return next((m for m in ms if roles[m.url] == "leader"), None)

        lead = wait_for(leader, 20, "one of the two masters leads")
        follower = next(m for m in ms if m is not lead)
        r = follower.api(
            "POST", "networks/default:fw", role="agent", json={"subnet": "10.62.0.0/24"}
        )
        assert r.status_code == 200, r.text
        assert r.headers[SERVED_BY] == lead.url and r.headers[FORWARDED_BY] == follower.url
        r = follower.api("DELETE", "networks/default:fw", role="reader")
        assert r.status_code == 403 and r.headers[SERVED_BY] == follower.url  # refused there
        store = open_store(None, str(shared))
        agent = MasterClient(
            follower.url,
            leader=leader_url_from_store(store),
            tls_ca=str(security.ca),
            token=security.agent,
            client_cert=security.client_cert(),
        )
        assert agent.current_url() == lead.url and lead.url.startswith("https://")
        ep = agent.create_endpoint(EndpointRequest(endpointID="e1", networkName="fw", host="h"))
        assert ep.ipAddress == "10.62.0.2"
    finally:
        if store is not None:
            store.close()
        for m in ms:
            m.stop()


def test_client_certificates_when_the_master_requires_them(tmp_path: Path) -> None:
    security = MasterSecurity.create(tmp_path / "pki", mutual=True)
    m = MasterProcess(tmp_path / "master", security=security)
    try:
        m.start()
        assert security.client is not None
        cert, key = (str(p) for p in security.client)
        auth = [
            "--tls-ca",
            str(security.ca),
            "--auth-token-file",
            str(security.token_file("admin")),
        ]
        res = netctl(m, *auth, "tenant", "ls")
        assert res.returncode == 1 and res.stderr.count("\n") == 1, res.stderr
        assert "Traceback" not in res.stderr
        assert "requires a client certificate: give one with --tls-cert and --tls-key" in res.stderr
        res = netctl(m, *auth, "--tls-cert", cert, "--tls-key", key, "tenant", "ls")
        assert res.returncode == 0 and "default" in res.stdout.split(), res.stderr
        agent = MasterClient(
            m.url, tls_ca=str(security.ca), token=security.agent, client_cert=(cert, key)
        )
        assert [n.networkName for n in agent.list_networks()] == []
        # The certificate is asked for at the handshake, before any route: the token-free
        # health routes need one too (README, Security).
        for path in ("/version", "/api/v1/leader", "/api/v1/openapi.json"):
            with pytest.raises(requests.exceptions.ConnectionError):  # SSLError, or a reset
                requests.get(m.url + path, verify=str(security.ca), timeout=10)
            ok = requests.get(m.url + path, verify=str(security.ca), cert=(cert, key), timeout=10)
            assert ok.status_code == 200, path
    finally:
        m.stop()


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of this test's own, with only its loopback up."""
    name = f"npsec{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_a_master_beyond_loopback_needs_tls_and_tokens_or_insecure(
    tmp_path: Path, netns: str
) -> None:
    port = free_port()
    cmd = [
        "ip", "netns", "exec", netns, str(VENV_BIN / "netmaster"),
        "--listen-url", f"0.0.0.0:{port}", "--data-dir", str(tmp_path),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMASTER_")}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        f"netmaster: --listen-url 0.0.0.0:{port} is reachable from other machines, and "
        "without TLS (--tls-cert FILE --tls-key FILE) and authentication (--auth-token-file "
        "FILE) anyone who reaches it can change or delete every network. Pass --tls-cert "
        "FILE --tls-key FILE and --auth-token-file FILE (README: Security), listen on "
        "127.0.0.1, or pass --insecure to serve it unprotected anyway."
    )
    log = tmp_path / "insecure.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--insecure"], stdout=out, stderr=subprocess.STDOUT, env=env)
    try:

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"netmaster --insecure exited:\n{log.read_text()}")
            tcp = subprocess.run(
                ["ip", "netns", "exec", netns, "cat", "/proc/net/tcp"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            return tcp_listening(tcp, port)

        wait_for(listening, 30, f"netmaster --insecure listens on 0.0.0.0:{port} in {netns}")
        assert "--insecure: 0.0.0.0:" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
