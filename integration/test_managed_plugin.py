"""netplugin as a Docker managed (v2) plugin, with the real docker CLI: `make plugin`'s build
and `docker plugin create`, enable, networks and containers on `NAME:TAG`, disable/enable
and a dockerd restart under running containers, `docker plugin rm`, and `docker plugin
install` from a registry started here (Debian's docker-registry on 127.0.0.1).

The plugin gets its own OpenFlow port, netmaster port and data directory through
`docker plugin set`; like every docker test, it expects no other netplugin on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testbed.etcd import EtcdServer
from testbed.host import BUSYBOX_IMAGE, TEST_LABEL, ensure_test_image, restart_dockerd
from testbed.managed import Plugin, build, docker, private_dockerd
from testbed.master import VENV_BIN, MasterProcess, free_port
from testbed.multihost import Cluster
from testbed.site import dockerd_for
from testbed.wait import wait_for

pytestmark = pytest.mark.usefixtures("root")


def run(name: str, net: str, *cmd: str, restart: bool = False) -> str:
    extra = ["--restart", "always"] if restart else []
    return docker(
        "run", "-d", "--name", name, "--net", net, "--label", TEST_LABEL, *extra,
        BUSYBOX_IMAGE, *cmd,
    )  # fmt: skip


def ip_of(container: str) -> str:
    return docker(
        "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container
    )


def ping_counts(container: str, ip: str, count: int, interval: str = "0.1") -> tuple[int, int]:
    out = docker("exec", container, "ping", "-q", "-i", interval, "-c", str(count), ip, check=False)
    for line in out.splitlines():
        if "packets transmitted" in line:
            sent, received = line.split(",")[:2]
            return int(sent.split()[0]), int(received.split()[0])
    raise AssertionError(f"no ping summary: {out}")


def agent_pid() -> int | None:
    """The managed plugin's agent process (python -m plugin.cli), if one runs."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmdline[1:3] == [b"-m", b"plugin.cli"] and b"/opt/netplugin" in cmdline[0]:
                return int(entry.name)
    return None


def http_get(from_container: str, ip: str) -> str:
    """One TCP request/response through busybox nc to the httpd of ``ip``."""
    return docker(
        "exec", from_container, "sh", "-c",
        f"printf 'GET /etc/hostname HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {ip} 80 | tail -1",
    )  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    ensure_test_image()
    name = f"netplugin-test-{uuid.uuid4().hex[:6]}:v2"
    build_dir = tmp_path_factory.mktemp("plugin")
    out = build(name, build_dir)
    assert f"created {name}" in out
    try:
        yield name, build_dir
    finally:
        # Never with networks of its driver left: docker could not remove those any more.
        if not docker("network", "ls", "-q", "--filter", f"driver={name}", check=False):
            docker("plugin", "rm", "-f", name, check=False)


@pytest.fixture
def plugin(built: tuple[str, Path], tmp_path: Path) -> Iterator[Plugin]:
    """The built plugin, created again if a test removed it, disabled after the test."""
    name, build_dir = built
    if docker("plugin", "inspect", name, check=False) in ("", "[]"):
        docker("plugin", "create", name, str(build_dir))
    p = Plugin(name, tmp_path / "data")
    p.data.mkdir()
    try:
        yield p
    finally:
        p.remove(keep=True)


def test_manifest_declares_both_drivers_and_the_settings(built: tuple[str, Path]) -> None:
    config = json.loads((built[1] / "config.json").read_text())
    assert config["interface"]["types"] == ["docker.networkdriver/1.0", "docker.ipamdriver/1.0"]
    inspect = json.loads(docker("plugin", "inspect", built[0]))[0]
    settable = {e["Name"] for e in inspect["Config"]["Env"] if "value" in (e["Settable"] or [])}
    # Every agent flag an operator changes has its variable, and docker knows it.
    for var in ("NETPLUGIN_ETCD_ENDPOINTS", "NETPLUGIN_NETMASTER", "NETPLUGIN_VTEP_IP",
                "NETPLUGIN_VLAN_IF", "NETPLUGIN_HOST", "NETPLUGIN_LOG_LEVEL"):  # fmt: skip
        assert var in settable
    assert inspect["Enabled"] is False


def test_lifecycle_with_running_containers(plugin: Plugin) -> None:
    plugin.configure()
    plugin.enable()
    # Docker records the driver as NAME:TAG; both drivers answer under it.
    plugin.network("v2net", "10.231.0.0/24")
    run("v2-a", "v2net", "httpd", "-f", "-p", "80", "-h", "/", restart=True)
    run("v2-b", "v2net", "sleep", "3600", restart=True)
    a, b = ip_of("v2-a"), ip_of("v2-b")
    assert ping_counts("v2-b", a, 3) == (3, 3)
    assert http_get("v2-b", a) == docker("exec", "v2-a", "hostname")

    # The operator's window: the agent's inspect API, in the plugin's socket directory.
    plugin_id = docker("plugin", "inspect", "-f", "{{.Id}}", plugin.name)
    api = f"/run/docker/plugins/{plugin_id}/netplugin-api.sock"
    shown = json.loads(plugin.netctl("host", "inspect", "--socket", api, "--json", "endpoints"))
    assert {a, b} <= {e["ipv4"] for e in shown}, shown

    # A network made with netctl reaches docker under the plugin's full name.
    plugin.netctl("net", "create", "-s", "10.232.0.0/24", "v2ctl")
    wait_for(
        lambda: "v2ctl" in docker("network", "ls", "--filter", f"driver={plugin.name}"),
        30,
        "the docker sync creates v2ctl with the plugin's NAME:TAG",
    )

    # disable/enable while containers talk: the switch keeps forwarding.
    pinger = subprocess.Popen(
        ["docker", "exec", "v2-b", "ping", "-q", "-i", "0.05", "-c", "200", a],
        stdout=subprocess.PIPE,
        text=True,
    )
    docker("plugin", "disable", "-f", plugin.name)
    assert not plugin.enabled()
    plugin.enable()
    out, _ = pinger.communicate(timeout=60)
    summary = next(line for line in out.splitlines() if "packets transmitted" in line)
    sent, received = (int(part.split()[0]) for part in summary.split(",")[:2])
    assert (sent, received) == (200, 200), summary
    # The agent is back: a new container gets an address and talks.
    run("v2-c", "v2net", "sleep", "3600")
    assert ping_counts("v2-c", a, 2) == (2, 2)

    # The agent dies: the plugin exits, dockerd starts it again, traffic never stops.
    agent = agent_pid()
    assert "--host-ttl 12" in Path(f"/proc/{agent}/cmdline").read_text().replace("\0", " ")
    pinger = subprocess.Popen(
        ["docker", "exec", "v2-b", "ping", "-q", "-i", "0.05", "-c", "100", a],
        stdout=subprocess.PIPE,
        text=True,
    )
    os.kill(agent, signal.SIGKILL)
    wait_for(lambda: agent_pid() not in (None, agent), 60, "dockerd restarts the plugin")
    out, _ = pinger.communicate(timeout=60)
    summary = next(line for line in out.splitlines() if "packets transmitted" in line)
    assert summary.startswith("100 packets transmitted, 100 packets received"), summary
    wait_for(lambda: http_get("v2-b", a) == docker("exec", "v2-a", "hostname"), 30, "TCP")
    run("v2-d", "v2net", "sleep", "3600")
    assert ping_counts("v2-d", a, 1) == (1, 1)

    # A dockerd restart: plugins start before dockerd's API listens; containers with a
    # restart policy come back on their addresses.
    restart_dockerd()
    wait_for(plugin.enabled, 60, "the plugin enabled after dockerd's restart")
    wait_for(
        lambda: (
            docker("inspect", "-f", "{{.State.Running}}", "v2-b", check=False) == "true"
            and docker("inspect", "-f", "{{.State.Running}}", "v2-a", check=False) == "true"
        ),
        90,
        "v2-a and v2-b restarted by dockerd",
    )
    # Docker asks for their addresses again (not necessarily the same ones, as with its
    # bridge): each gets one of the network's, and they differ.
    a, b = ip_of("v2-a"), ip_of("v2-b")
    assert a != b and a.startswith("10.231.0.") and b.startswith("10.231.0.")
    wait_for(lambda: ping_counts("v2-b", a, 1)[1] == 1, 30, "v2-b reaches v2-a after the restart")
    assert http_get("v2-b", a) == docker("exec", "v2-a", "hostname")

    # `docker plugin rm` once nothing uses it: its processes are gone.
    for c in ("v2-a", "v2-b", "v2-c", "v2-d"):
        docker("rm", "-f", c)
    plugin.netctl("net", "rm", "v2ctl")
    docker("network", "rm", "v2net")
    docker("plugin", "disable", plugin.name)
    docker("plugin", "rm", plugin.name)
    gone = subprocess.run(
        ["docker", "plugin", "inspect", plugin.name], capture_output=True, text=True
    )
    assert gone.returncode != 0 and f'plugin "{plugin.name}" not found' in gone.stderr, gone
    assert not Path(f"/run/docker/plugins/{plugin_id}").exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "plugin.managed" not in ps


def test_the_driver_is_named_with_its_tag(built: tuple[str, Path], tmp_path: Path) -> None:
    """README "Managed plugin": created as NAME:latest, `-d NAME` is refused ("could not
    resolve driver") and makes nothing; `-d NAME:latest` works."""
    build_dir = built[1]
    short = f"{built[0].split(':')[0]}-latest"
    plugin = Plugin(f"{short}:latest", tmp_path / "data")
    plugin.data.mkdir()
    docker("plugin", "create", plugin.name, str(build_dir))
    try:
        plugin.configure()
        plugin.enable()
        refused = subprocess.run(
            ["docker", "network", "create", "-d", short, "--ipam-driver", short,
             "--subnet", "10.237.0.0/24", "--label", TEST_LABEL, "v2short"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode != 0 and "could not resolve driver" in refused.stderr, refused
        assert "v2short" not in docker("network", "ls", "--format", "{{.Name}}").split()
        assert "v2short" not in plugin.netctl("net", "ls")
        plugin.network("v2tagged", "10.237.0.0/24")
        assert docker("network", "inspect", "-f", "{{.Driver}}", "v2tagged") == plugin.name
        docker("network", "rm", "v2tagged")
    finally:
        plugin.remove()


def test_the_same_plugin_on_docker26(
    built: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same build, created and enabled on Docker 26: the dockerd of a simulated host
    (its own network and mount namespaces and OVS; testbed/site.py), with the plugin's
    mounts set to that host's OVS and docker socket. Both drivers answer under NAME:TAG, and
    the agent learns that name from dockerd 26 (a netctl network reaches docker under it)."""
    name, build_dir = built
    # Short: containerd's sockets live under the exec root and unix paths stop at 108 bytes.
    work = Path(tempfile.mkdtemp(prefix="np26-", dir="/tmp"))
    lab = Cluster(work, hosts=1, masters=0, dockerd=dockerd_for("docker26"))
    try:
        lab.start(agents=False)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    host = lab.hosts[0]
    monkeypatch.setenv("DOCKER_HOST", f"unix://{host.docker_sock}")  # every docker() here
    try:
        assert docker("version", "-f", "{{.Server.Version}}").startswith("26.")
        docker("plugin", "create", name, str(build_dir))
        plugin = Plugin(name, tmp_path / "data")
        plugin.data.mkdir()
        plugin.settings += [
            f"ovsrun.source={host.ovs.workdir}",
            f"docker.source={host.docker_sock}",
        ]
        plugin.configure()
        plugin.enable()
        plugin.network("v26net", "10.235.0.0/24")
        run("v26-a", "v26net", "httpd", "-f", "-p", "80", "-h", "/")
        run("v26-b", "v26net", "sleep", "3600")
        a = ip_of("v26-a")
        assert ping_counts("v26-b", a, 2) == (2, 2)
        assert http_get("v26-b", a) == docker("exec", "v26-a", "hostname")
        # The plugin's own master listens on the host's loopback: netctl from the host.
        netctl = [str(VENV_BIN / "netctl"), "--netmaster", plugin.master_url]
        host.ns(*netctl, "net", "create", "-s", "10.236.0.0/24", "v26ctl")
        wait_for(
            lambda: "v26ctl" in docker("network", "ls", "--filter", f"driver={name}"),
            30,
            "the docker sync creates v26ctl with the plugin's NAME:TAG on Docker 26",
        )
        for c in ("v26-a", "v26-b"):
            docker("rm", "-f", c)
        host.ns(*netctl, "net", "rm", "v26ctl")
        docker("network", "rm", "v26net")
        wait_for(
            lambda: not docker("network", "ls", "-q", "--filter", f"driver={name}"),
            30,
            "no network of the plugin left",
        )
    finally:
        docker("rm", "-f", "v26-a", "v26-b", check=False)
        docker("plugin", "disable", "-f", name, check=False)
        docker("plugin", "rm", "-f", name, check=False)
        lab.stop()
        shutil.rmtree(work, ignore_errors=True)


def managed_processes() -> list[str]:
    """The command lines of the processes run from the plugin's rootfs."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cmdline.startswith("/opt/netplugin/"):
                out.append(cmdline.strip())
    return out


def test_agent_only_against_a_cluster(
    plugin: Plugin, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    """With the cluster's etcd and netmaster set, the plugin runs only the agent; networks
    made with netctl on the cluster's master appear in docker under the plugin's name."""
    etcd_server.wipe()
    master = MasterProcess(tmp_path / "master", etcd_endpoints=etcd_server.endpoint).start()
    try:
        plugin.master_url = master.url
        plugin.settings += [
            f"NETPLUGIN_ETCD_ENDPOINTS={etcd_server.endpoint}",
            f"NETPLUGIN_NETMASTER={master.url}",
        ]
        plugin.configure()
        plugin.enable()
        procs = managed_processes()
        assert [p for p in procs if "plugin.cli" in p] and not [
            p for p in procs if "master.cli" in p
        ], procs
        plugin.netctl("net", "create", "-s", "10.234.0.0/24", "v2cluster")
        wait_for(
            lambda: "v2cluster" in docker("network", "ls", "--filter", f"driver={plugin.name}"),
            30,
            "the agent mirrors the cluster's network into docker",
        )
        run("v2-e1", "v2cluster", "sleep", "3600")
        run("v2-e2", "v2cluster", "sleep", "3600")
        assert ping_counts("v2-e2", ip_of("v2-e1"), 2) == (2, 2)
        for c in ("v2-e1", "v2-e2"):
            docker("rm", "-f", c)
        plugin.netctl("net", "rm", "v2cluster")
    finally:
        plugin.remove(keep=True)  # before the master goes: removing its networks asks it
        master.stop()
        etcd_server.wipe()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("docker-registry")
    if binary is None:
        pytest.fail("docker-registry is not installed (scripts/bootstrap.sh installs it)")
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {tmp_path / 'blobs'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    proc = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:

        def answers() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"docker-registry exited ({proc.returncode})")
            try:
                return requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1).ok
            except requests.RequestException:
                return False

        wait_for(answers, 30, "the registry answers")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_install_from_a_registry(built: tuple[str, Path], registry: str, tmp_path: Path) -> None:
    # docker refuses a second plugin with a byte-identical rootfs: the local one goes first.
    docker("plugin", "rm", "-f", built[0], check=False)
    remote = f"{registry}/netplugin:test"
    try:
        out = build(remote, tmp_path / "build", push=True)
        assert f"created {remote}" in out
        docker("plugin", "rm", "-f", remote)
        assert docker("plugin", "inspect", remote, check=False) == "[]"
        # A dockerd that never had it installs it from the registry alone.
        with private_dockerd() as fresh:
            assert docker("plugin", "ls", "-q", host=fresh) == ""
            docker("plugin", "install", "--grant-all-permissions", "--disable", remote,
                   host=fresh, timeout=300)  # fmt: skip
            got = json.loads(docker("plugin", "inspect", remote, host=fresh))[0]
            types = json.dumps(got["Config"]["Interface"]["Types"])
            assert "networkdriver" in types and "ipamdriver" in types, types
            assert got["Config"]["Entrypoint"][-1] == "plugin.managed"
            docker("plugin", "rm", remote, host=fresh)
        plugin = Plugin(remote, tmp_path / "data")
        plugin.data.mkdir()
        try:
            install = ["plugin", "install", "--grant-all-permissions", "--disable", remote]
            res = subprocess.run(
                ["docker", *install, *plugin.settings], capture_output=True, text=True, timeout=300
            )
            if "incorrect privileges" in res.stderr:
                # Seen once in five runs on this dockerd (20.10), right after `plugin rm` of
                # the pushed plugin: its privileges check raced the removal. A second try
                # installed it; a real privilege mismatch fails again.
                res = subprocess.run(
                    ["docker", *install, *plugin.settings],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            assert res.returncode == 0, res.stderr
            plugin.enable()
            plugin.network("v2reg", "10.233.0.0/24")
            run("v2-r1", "v2reg", "sleep", "3600")
            run("v2-r2", "v2reg", "sleep", "3600")
            assert ping_counts("v2-r2", ip_of("v2-r1"), 2) == (2, 2)
        finally:
            plugin.remove()
    finally:
        docker("plugin", "rm", "-f", remote, check=False)
