"""netmaster and netplugin on an etcd that serves TLS and requires client certificates.

Certificates are made here (a CA, a server certificate for 127.0.0.1, a client one, and a
second, rogue CA with its own). The store contract runs over TLS; a real netmaster serves
from such an etcd; a real netplugin agent runs on it with a private Open vSwitch in a
network namespace of the test's own; and a certificate that is missing, unreadable, not
trusted or refused ends either program at start with one line naming the endpoint or flag.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import keys
from common.records import HostRecord, NetworkRecord, TenantRecord
from plugin.cli import parser as plugin_parser
from plugin.daemon import open_cluster_store
from store.base import Store
from store.etcd import EtcdStore
from testbed.etcd import EtcdServer, free_port
from testbed.master import MasterProcess
from testbed.netns import InNetns
from testbed.ovs import OvsInstance, stop_pid
from testbed.pki import Pki, make_pki
from testbed.require import require_etcd, require_ovs
from testbed.store_contract import StoreContract
from testbed.wait import wait_for

pytestmark = pytest.mark.etcd

BIN = Path(sys.executable).parent
NETPLUGIN_ENV = ("NETPLUGIN_ETCD_CA", "NETPLUGIN_ETCD_CERT", "NETPLUGIN_ETCD_KEY")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The CA etcd trusts, and the certificates it signed."""
    return make_pki(tmp_path_factory.mktemp("pki"), "etcd")


@pytest.fixture(scope="module")
def rogue(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Another CA, unknown to etcd, and its certificates."""
    return make_pki(tmp_path_factory.mktemp("rogue"), "rogue")


def tls_etcd_server(base: Path, pki: Pki) -> EtcdServer:
    return EtcdServer(base, tls=(pki.ca, pki.server, pki.server_key))


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EtcdServer]:
    """etcd on 127.0.0.1 serving https only to clients with a certificate from ``pki``."""
    require_etcd()
    with tls_etcd_server(tmp_path_factory.mktemp("etcd-tls"), pki) as server:
        yield server


def client_flags(pki: Pki) -> list[str]:
    return ["--etcd-ca", pki.ca, "--etcd-cert", pki.client, "--etcd-key", pki.client_key]


def tls_store(server: EtcdServer, pki: Pki) -> EtcdStore:
    return EtcdStore([server.endpoint], ca_cert=pki.ca, cert=pki.client, key=pki.client_key)


# ---------------------------------------------------------------- the store


@pytest.fixture(scope="module")
def contract_tls_etcd(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EtcdServer]:
    """A private TLS etcd: the contract checks global revisions, so nothing else may write."""
    require_etcd()
    with tls_etcd_server(tmp_path_factory.mktemp("etcd-tls-contract"), pki) as server:
        yield server


class TestTlsContract(StoreContract):
    """The whole store contract (put/get/range/txn/watch/lease/compaction) over TLS."""

    @pytest.fixture
    def store(self, contract_tls_etcd: EtcdServer, pki: Pki) -> Iterator[Store]:
        s = tls_store(contract_tls_etcd, pki)
        assert s.endpoints == [contract_tls_etcd.endpoint]
        assert s.endpoints[0].startswith("https://127.0.0.1:")
        yield s
        s.close()


# ---------------------------------------------------------------- netmaster


def test_master_serves_from_a_tls_etcd(tls_etcd: EtcdServer, pki: Pki, tmp_path: Path) -> None:
    m = MasterProcess(tmp_path / "master", tls_etcd.endpoint, extra=client_flags(pki))
    try:
        m.start()
        assert m.api("POST", "tenants/tlsblue", json={"tenantName": "tlsblue"}).status_code == 200
        r = m.api("POST", "networks/tlsblue:web", json={"subnet": "10.77.0.0/24"})
        assert r.status_code == 200, r.text
    finally:
        m.stop()
    # The records are in etcd, read back over TLS by a client of our own.
    with tls_store(tls_etcd, pki) as s:
        tenant = s.get(keys.tenant("tlsblue"))
        assert tenant is not None and TenantRecord.decode(tenant.value).id == "tlsblue"
        net = s.get(keys.network("tlsblue", "web"))
        assert net is not None
        record = NetworkRecord.decode(net.value)
        assert record.config.subnet == "10.77.0.0/24" and record.config.tenantName == "tlsblue"


def refused_start(m: MasterProcess) -> str:
    """Start a netmaster that must refuse to start: its whole output, once it has exited."""
    try:
        with pytest.raises(RuntimeError, match="netmaster exited"):
            m.start()
        assert m.proc is not None and m.proc.returncode not in (0, None)
        return m.log.read_text()
    finally:
        m.stop()


def one_line(output: str, prog: str) -> str:
    """The single line a program printed, which must be its own message, not a traceback."""
    assert "Traceback" not in output, output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"{prog}: "), output
    return lines[0]


def test_master_without_a_client_certificate_refuses_to_start(
    tls_etcd: EtcdServer, pki: Pki, tmp_path: Path
) -> None:
    m = MasterProcess(tmp_path / "m", tls_etcd.endpoint, extra=["--etcd-ca", pki.ca])
    line = one_line(refused_start(m), "netmaster")
    assert f"etcd at {tls_etcd.endpoint} " in line
    assert "requires a client certificate" in line and "--etcd-cert" in line


def test_master_with_the_wrong_ca_refuses_to_start(
    tls_etcd: EtcdServer, pki: Pki, rogue: Pki, tmp_path: Path
) -> None:
    flags = ["--etcd-ca", rogue.ca, "--etcd-cert", pki.client, "--etcd-key", pki.client_key]
    m = MasterProcess(tmp_path / "m", tls_etcd.endpoint, extra=flags)
    line = one_line(refused_start(m), "netmaster")
    assert f"etcd at {tls_etcd.endpoint}: its certificate could not be verified" in line
    assert f"--etcd-ca {rogue.ca}" in line


def test_master_with_a_client_certificate_etcd_does_not_trust_refuses_to_start(
    tls_etcd: EtcdServer, pki: Pki, rogue: Pki, tmp_path: Path
) -> None:
    flags = ["--etcd-ca", pki.ca, "--etcd-cert", rogue.client, "--etcd-key", rogue.client_key]
    m = MasterProcess(tmp_path / "m", tls_etcd.endpoint, extra=flags)
    line = one_line(refused_start(m), "netmaster")
    assert f"etcd at {tls_etcd.endpoint} did not accept the client certificate" in line
    assert f"--etcd-cert {rogue.client}" in line


@pytest.mark.parametrize("flag", ["--etcd-ca", "--etcd-cert", "--etcd-key"])
def test_master_with_a_missing_tls_file_refuses_to_start(
    tls_etcd: EtcdServer, pki: Pki, tmp_path: Path, flag: str
) -> None:
    flags = client_flags(pki)
    missing = str(tmp_path / "nowhere" / "file.pem")
    flags[flags.index(flag) + 1] = missing
    m = MasterProcess(tmp_path / "m", tls_etcd.endpoint, extra=flags)
    line = one_line(refused_start(m), "netmaster")
    assert line == f"netmaster: {flag} {missing}: cannot read it (no such file or directory)"


# ---------------------------------------------------------------- netplugin


def agent_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NETPLUGIN_")}


def agent_command(workdir: Path, host: str, etcd: str, master: str, ovsdb: str) -> list[str]:
    """netplugin with everything it owns private to ``workdir`` (socket, bridge, OVSDB)."""
    return [
        str(BIN / "netplugin"),
        "--host", host,
        "--netmaster", master,
        "--etcd-endpoints", etcd,
        "--ovsdb", ovsdb,
        "--socket", str(workdir / "np.sock"),
        "--api-socket", str(workdir / "api.sock"),
        "--cni-socket", str(workdir / "cni.sock"),
        "--bridge", "nptls",
        "--of-port", str(free_port()),
        "--docker-host", f"unix://{workdir / 'no-docker.sock'}",
        "--data-dir", str(workdir / "data"),
        "--host-ttl", "3",
    ]  # fmt: skip


def agent_refuses(cmd: list[str], log: Path) -> str:
    """Run a netplugin that must exit at start (before it touches OVS): its whole output."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=agent_env())
    try:
        code = proc.wait(30)
    finally:
        stop_pid(proc, signal.SIGKILL)
    assert code != 0, log.read_text()
    return log.read_text()


def test_agent_with_the_wrong_ca_refuses_to_start(
    tls_etcd: EtcdServer, pki: Pki, rogue: Pki, tmp_path: Path
) -> None:
    # Nothing it could reach exists: were the check missing it would fail on OVS, not TLS.
    cmd = agent_command(
        tmp_path, "tls-bad", tls_etcd.endpoint, "http://127.0.0.1:1", f"unix:{tmp_path}/no.sock"
    )
    cmd += ["--etcd-ca", rogue.ca, "--etcd-cert", pki.client, "--etcd-key", pki.client_key]
    line = one_line(agent_refuses(cmd, tmp_path / "agent.log"), "netplugin")
    assert f"etcd at {tls_etcd.endpoint}: its certificate could not be verified" in line
    assert f"--etcd-ca {rogue.ca}" in line


def test_agent_without_a_client_certificate_refuses_to_start(
    tls_etcd: EtcdServer, pki: Pki, tmp_path: Path
) -> None:
    cmd = agent_command(
        tmp_path, "tls-bad", tls_etcd.endpoint, "http://127.0.0.1:1", f"unix:{tmp_path}/no.sock"
    )
    cmd += ["--etcd-ca", pki.ca]
    line = one_line(agent_refuses(cmd, tmp_path / "agent.log"), "netplugin")
    assert f"etcd at {tls_etcd.endpoint} " in line and "requires a client certificate" in line


def test_agent_with_a_missing_key_file_refuses_to_start(
    tls_etcd: EtcdServer, pki: Pki, tmp_path: Path
) -> None:
    cmd = agent_command(
        tmp_path, "tls-bad", tls_etcd.endpoint, "http://127.0.0.1:1", f"unix:{tmp_path}/no.sock"
    )
    missing = str(tmp_path / "client-key.pem")
    cmd += ["--etcd-ca", pki.ca, "--etcd-cert", pki.client, "--etcd-key", missing]
    line = one_line(agent_refuses(cmd, tmp_path / "agent.log"), "netplugin")
    assert line == f"netplugin: --etcd-key {missing}: cannot read it (no such file or directory)"


def test_agent_store_from_the_environment(
    tls_etcd: EtcdServer, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's own store opening, with the flags given as NETPLUGIN_ETCD_* variables."""
    for var, path in zip(NETPLUGIN_ENV, (pki.ca, pki.client, pki.client_key), strict=True):
        monkeypatch.setenv(var, path)
    args = plugin_parser().parse_args(
        ["--etcd-endpoints", tls_etcd.endpoint, "--data-dir", str(tmp_path)]
    )
    store = open_cluster_store(args)
    try:
        assert isinstance(store, EtcdStore)
        key = f"/tls-test/{uuid.uuid4().hex[:8]}"
        store.put(key, b"v")
        kv = store.get(key)
        assert kv is not None and kv.value == b"v"
    finally:
        store.close()
    monkeypatch.delenv("NETPLUGIN_ETCD_CERT")
    monkeypatch.delenv("NETPLUGIN_ETCD_KEY")
    args = plugin_parser().parse_args(["--etcd-endpoints", tls_etcd.endpoint])
    with pytest.raises(SystemExit, match="requires a client certificate"):
        open_cluster_store(args)


def test_agent_store_waits_for_an_etcd_that_is_down(pki: Pki, tmp_path: Path) -> None:
    """Only TLS problems stop the agent: an etcd that does not answer may yet come up."""
    down = f"https://127.0.0.1:{free_port()}"
    args = plugin_parser().parse_args(["--etcd-endpoints", down, *client_flags(pki)])
    store = open_cluster_store(args)
    try:
        assert isinstance(store, EtcdStore) and store.endpoints == [down]
    finally:
        store.close()


@pytest.fixture
def agent_lab(tmp_path: Path) -> Iterator[tuple[OvsInstance, InNetns]]:
    """A network namespace of this test's own with a private Open vSwitch in it."""
    require_etcd()
    require_ovs()
    ovs = OvsInstance(f"nptls-{os.getpid()}", tmp_path / "ovs")
    ovs.start()
    ns = InNetns(ovs.netns)
    try:
        yield ovs, ns
    finally:
        ns.close()
        ovs.stop()


def test_agent_runs_on_a_tls_etcd(
    agent_lab: tuple[OvsInstance, InNetns], pki: Pki, tmp_path: Path
) -> None:
    """A whole netplugin agent on a TLS etcd: it registers its host and resyncs from it.

    etcd, netmaster and the agent all run in the lab's namespace, on its 127.0.0.1; the
    agent programs the lab's own Open vSwitch, so the host's OVS and dockerd are untouched.
    """
    ovs, ns = agent_lab
    etcd = ns(tls_etcd_server, tmp_path / "etcd", pki)
    master = ns(MasterProcess, tmp_path / "master", etcd.endpoint, extra=client_flags(pki))
    agent: subprocess.Popen[bytes] | None = None
    log = tmp_path / "agent.log"
    try:
        ns(etcd.start)
        ns(master.start)
        workdir = tmp_path / "agent"
        workdir.mkdir()
        cmd = agent_command(workdir, "tls-host", etcd.endpoint, master.url, ovs.db_target)
        with open(log, "wb") as out:
            agent = subprocess.Popen(
                ["ip", "netns", "exec", ovs.netns, *cmd, *client_flags(pki)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=agent_env(),
                start_new_session=True,
            )

        def alive() -> None:
            if agent is None or agent.poll() is not None:
                raise RuntimeError(f"netplugin exited:\n{log.read_text()[-3000:]}")

        def registered() -> HostRecord | None:
            alive()
            with tls_store(etcd, pki) as s:
                kv = s.get(keys.host("tls-host"))
            return HostRecord.decode(kv.value) if kv is not None else None

        record = wait_for(lambda: ns(registered), 30, "netplugin registered its host in etcd")
        assert record.host == "tls-host"

        def resynced() -> bool:
            alive()
            return "resynced with the cluster" in log.read_text()

        wait_for(resynced, 30, "netplugin read the cluster state and resynced", last=log.read_text)
        assert ovs.vsctl("br-exists", "nptls") == ""  # exit status 0: the bridge is there
        assert os.path.exists(workdir / "np.sock")

        # Stopping revokes its lease over TLS too: the registration is gone at once.
        stop_pid(agent)
        assert agent.returncode == 0, log.read_text()[-3000:]
        with tls_store(etcd, pki) as s:
            assert ns(s.get, keys.host("tls-host")) is None
    finally:
        stop_pid(agent)
        try:
            ns(master.stop)
        finally:
            ns(etcd.cleanup)
