"""The host daemons (OVS, dockerd) and test images that the integration tests rely on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed.host import (
    BUSYBOX_IMAGE,
    HOST_DAEMONS_SCRIPT,
    IPERF_IMAGE,
    daemon_pids,
    docker_client,
    ensure_host_daemons,
    ensure_test_image,
    ovs_datapath,
    restart_ovs_vswitchd,
    run_script,
)
from testbed.wait import wait_for

pytestmark = pytest.mark.usefixtures("root")

TEST_BRIDGE = "t-np-br"


def sh(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module", autouse=True)
def host() -> str:
    return ensure_host_daemons()


def test_script_reports_each_daemon(host: str) -> None:
    lines = host.strip().splitlines()
    assert any(line.startswith("openvswitch: ") for line in lines), host
    assert f"(datapath {ovs_datapath()})" in host
    assert any(line.startswith("dockerd: ") for line in lines), host


def test_docker_info() -> None:
    r = sh("docker", "info")
    assert r.returncode == 0, r.stderr
    assert docker_client().ping()


def test_test_image_runs() -> None:
    ensure_test_image(BUSYBOX_IMAGE)
    r = sh("docker", "run", "--rm", "--net", "none", BUSYBOX_IMAGE, "true")
    assert r.returncode == 0, r.stderr


def test_test_image_has_applets() -> None:
    ensure_test_image(BUSYBOX_IMAGE)
    applets = ["ip", "ping", "nc", "wget", "udhcpc", "sleep", "httpd"]
    out = docker_client().containers.run(
        BUSYBOX_IMAGE, ["which", *applets], network_mode="none", remove=True
    )
    found = [Path(p).name for p in out.decode().split()]
    assert found == applets
    # Raises ContainerError when the udhcpc event script is missing.
    docker_client().containers.run(
        BUSYBOX_IMAGE,
        ["test", "-x", "/usr/share/udhcpc/default.script"],
        network_mode="none",
        remove=True,
    )


def test_iperf_image_runs() -> None:
    ensure_test_image(IPERF_IMAGE)
    out = docker_client().containers.run(
        IPERF_IMAGE, ["iperf3", "--version"], network_mode="none", remove=True
    )
    assert b"iperf 3" in out


def test_ovs_show() -> None:
    r = sh("ovs-vsctl", "--timeout=5", "show")
    assert r.returncode == 0, r.stderr
    assert "ovs_version" in r.stdout


# The kernel datapath ("system") has no module on this kind of machine: the VM lab opens
# it on a real kernel (integration/vm/test_kernel_host.py, `ovs-dpctl show`).
@pytest.mark.parametrize("datapath", ["netdev"])
def test_bridge_add_del(datapath: str) -> None:
    sh("ovs-vsctl", "--timeout=5", "--if-exists", "del-br", TEST_BRIDGE)
    try:
        r = sh(
            "ovs-vsctl", "--timeout=10", "add-br", TEST_BRIDGE,
            "--", "set", "bridge", TEST_BRIDGE, f"datapath_type={datapath}",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        r = sh("ovs-vsctl", "--timeout=5", "get", "bridge", TEST_BRIDGE, "datapath_type")
        assert r.stdout.strip() == datapath
        # ovs-vswitchd really opened it in that datapath (not just a row in the db).
        r = sh("ovs-appctl", "--timeout=5", "dpif/show")
        assert r.returncode == 0, r.stderr
        dpif = "ovs-netdev" if datapath == "netdev" else "ovs-system"
        assert f"{datapath}@{dpif}" in r.stdout, r.stdout
        assert TEST_BRIDGE in r.stdout
    finally:
        r = sh("ovs-vsctl", "--timeout=10", "--if-exists", "del-br", TEST_BRIDGE)
    assert r.returncode == 0, r.stderr
    assert TEST_BRIDGE not in sh("ovs-vsctl", "list-br").stdout.split()


def test_default_bridge_container_pings_gateway() -> None:
    ensure_test_image(BUSYBOX_IMAGE)
    script = 'gw=$(ip route | awk "/^default/ {print \\$3}"); echo "gw=$gw"; ping -c 2 -W 3 "$gw"'
    out = docker_client().containers.run(BUSYBOX_IMAGE, ["sh", "-c", script], remove=True)
    assert b" 0% packet loss" in out, out.decode()


def test_host_networking_prepared() -> None:
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "1"
    assert Path("/run/docker/plugins").is_dir()


def test_daemons_detached_from_caller() -> None:
    """Daemons run in sessions of their own: a Ctrl-C in the caller's terminal misses them."""
    pids = daemon_pids()
    assert all(pids.values()), pids
    for name, pid in pids.items():
        assert os.getsid(pid) not in (os.getsid(0), 0), name
        assert os.getpgid(pid) != os.getpgrp(), name


def test_second_run_is_noop() -> None:
    before = daemon_pids()
    assert all(before.values()), before
    out = run_script(HOST_DAEMONS_SCRIPT)
    assert "openvswitch: running" in out, out
    assert "dockerd: running" in out, out
    assert daemon_pids() == before
    assert ensure_host_daemons() is not None


def test_ovs_started_by_the_script_has_userspace_tso() -> None:
    """README (How the datapath works, Offloads): on the userspace datapath, an
    ovs-vswitchd the script has to start gets `userspace-tso-enable` first; its bridge taps
    then have TX checksumming on (ovs-vswitchd turns it on only with TSO)."""
    if ovs_datapath() != "netdev":
        pytest.skip("the kernel datapath: userspace TSO does not apply")
    sh("ovs-vsctl", "remove", "Open_vSwitch", ".", "other_config", "userspace-tso-enable")
    restart_ovs_vswitchd(cleanup=False)  # stops it; the script starts it again
    r = sh("ovs-vsctl", "get", "Open_vSwitch", ".", "other_config:userspace-tso-enable")
    assert r.stdout.strip() == '"true"', (r.stdout, r.stderr)
    add = sh("ovs-vsctl", "--timeout=10", "add-br", TEST_BRIDGE, "--", "set", "bridge",
             TEST_BRIDGE, "datapath_type=netdev")  # fmt: skip
    assert add.returncode == 0, add.stderr
    try:
        wait_for(lambda: Path(f"/sys/class/net/{TEST_BRIDGE}").exists(), 10, TEST_BRIDGE)
        assert "tx-checksumming: on" in sh("ethtool", "-k", TEST_BRIDGE).stdout
    finally:
        sh("ovs-vsctl", "--timeout=10", "--if-exists", "del-br", TEST_BRIDGE)
