"""netplugin-cni with real parts: the executable run as a runtime runs it (the CNI_*
environment and the configuration on stdin) against network namespaces, the single-host
stack's agent doing the work; Debian's ptp and host-local as the reference for the result's
shape; Debian's podman running a container on a netplugin network through it; an agent
restart with pods running.

Run under the docker lock:

    flock /tmp/docker.lock env PYTHONPATH=$PWD .venv/bin/pytest -q integration/test_cni.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common import cni
from datapath.veth import veth_names

from .lab import BIN, NetctlLab, ip_of, run
from .master import MasterProcess
from .plugin import PluginProcess
from .test_docker_single_host import restart_stopped, serve_stack
from .wait import wait_for

PLUGIN = BIN / "netplugin-cni"
CNI_PATH = "/usr/lib/cni"  # Debian's containernetworking-plugins


def exec_plugin(
    command: str, container: str, netns: str, config: dict[str, Any], ifname: str = "eth0",
    args: str = "", plugin: Path | str = PLUGIN,
) -> tuple[int, dict[str, Any] | None]:  # fmt: skip
    """Run a CNI plugin as a runtime does; (exit status, its JSON answer or None)."""
    env = {
        "PATH": os.environ["PATH"],
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": container,
        "CNI_NETNS": netns,
        "CNI_IFNAME": ifname,
        "CNI_ARGS": args,
        "CNI_PATH": CNI_PATH,
    }
    proc = subprocess.run(
        [str(plugin)], input=json.dumps(config), capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    out = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, out


def in_ns(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("ip", "netns", "exec", ns, *cmd, check=check)


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, PluginProcess]]:
    yield from serve_stack(tmp_path_factory)


@pytest.fixture(autouse=True)
def stack_up(stack: tuple[MasterProcess, PluginProcess]) -> None:
    restart_stopped(stack)


_SUBNETS = iter(range(10, 100))


@pytest.fixture
def lab(stack: tuple[MasterProcess, PluginProcess]) -> Iterator[NetctlLab]:
    with NetctlLab(stack[0].url, f"10.245.{next(_SUBNETS)}.0/24") as lab:
        yield lab


@pytest.fixture
def pods() -> Iterator[list[str]]:
    """Network namespaces made with `ip netns add` for the test; deleted after it."""
    made: list[str] = []
    yield made
    for ns in made:
        run("ip", "netns", "del", ns, check=False)


def pod(pods: list[str]) -> tuple[str, str]:
    """A new namespace: (its name, its path as a runtime passes it)."""
    name = f"np-pod-{uuid.uuid4().hex[:6]}"
    run("ip", "netns", "add", name)
    pods.append(name)
    in_ns(name, "ip", "link", "set", "lo", "up")
    return name, f"/run/netns/{name}"


def conf(lab: NetctlLab, version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "pods", "type": "netplugin-cni",
            "network": lab.network, **extra}  # fmt: skip


def links() -> set[str]:
    """The host's interfaces but the networks' gateway ports (see ovs_ports)."""
    return {n for n in os.listdir("/sys/class/net") if not n.startswith("npgw")}


def ovs_ports() -> set[str]:
    """The bridge's ports but the networks' gateways (made for a network on its first
    endpoint here, they stay while it exists, as for Docker's containers)."""
    return {
        p
        for p in run("ovs-vsctl", "list-ports", "netplugin").stdout.split()
        if not p.startswith("npgw")
    }


def test_add_check_del_with_the_real_agent(lab: NetctlLab, pods: list[str]) -> None:
    docker_peer = lab.container(lab.network)
    peer_ip = ip_of(docker_peer)
    name, path = pod(pods)
    cid = uuid.uuid4().hex
    status, result = exec_plugin("ADD", cid, path, conf(lab))
    assert status == 0, result
    assert result is not None and result["cniVersion"] == "1.0.0"
    (ip,) = result["ips"]
    gateway = lab.subnet.replace(".0/24", ".1")
    assert ip["gateway"] == gateway and ip["address"].endswith("/24")
    assert result["interfaces"][1]["sandbox"] == path
    addr = in_ns(name, "ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout
    assert ip["address"] in addr
    assert f"default via {gateway} dev eth0" in in_ns(name, "ip", "route").stdout
    mtu = in_ns(name, "cat", "/sys/class/net/eth0/mtu").stdout.strip()
    assert int(mtu) > 0
    host_end, _ = veth_names(cni.endpoint_id(cid, "eth0"))
    assert host_end in ovs_ports()
    wait_for(
        lambda: in_ns(name, "ping", "-c", "1", "-W", "1", peer_ip, check=False).returncode == 0,
        15,
        "the pod pings a docker container of the same network",
    )
    shown = lab.inspect("net", lab.network)
    assert ip["address"].split("/")[0] in shown["allocatedAddresses"]
    assert exec_plugin("CHECK", cid, path, {**conf(lab), "prevResult": result}) == (0, None)
    # ADD again (a runtime retrying): the same answer, nothing re-made.
    assert exec_plugin("ADD", cid, path, conf(lab)) == (0, result)
    assert exec_plugin("DEL", cid, path, conf(lab)) == (0, None)
    assert "eth0" not in in_ns(name, "ip", "-o", "link").stdout
    assert host_end not in ovs_ports()
    gone = lab.inspect("net", lab.network).get("allocatedAddresses", [])
    assert ip["address"].split("/")[0] not in gone
    assert exec_plugin("DEL", cid, path, conf(lab)) == (0, None)  # twice: fine
    status, err = exec_plugin("CHECK", cid, path, {**conf(lab), "prevResult": result})
    assert status == 1 and err is not None and err["code"] == cni.UNKNOWN_CONTAINER


def test_a_bad_add_is_a_cni_error_and_leaks_nothing(
    lab: NetctlLab, pods: list[str], stack: tuple[MasterProcess, PluginProcess]
) -> None:
    _, path = pod(pods)
    before_ports = ovs_ports()
    before_links = links()
    for config, code in (
        (conf(lab, network="nosuch"), cni.UNKNOWN_NETWORK),
        ({**conf(lab), "cniVersion": "0.2.0"}, cni.INCOMPATIBLE_VERSION),
        ({"cniVersion": "1.0.0", "name": "x", "type": "netplugin-cni"}, cni.INVALID_CONFIG),
    ):
        status, err = exec_plugin("ADD", uuid.uuid4().hex, path, config)
        assert status == 1 and err is not None and err["code"] == code, err
    # A namespace that does not exist: the datapath fails half-way, and undoes it all.
    status, err = exec_plugin("ADD", uuid.uuid4().hex, "/run/netns/nonexistent", conf(lab))
    assert status == 1 and err is not None and err["code"] == cni.DATAPATH_FAILURE, err
    assert ovs_ports() == before_ports
    assert links() == before_links
    assert lab.inspect("net", lab.network).get("allocatedAddresses", []) == [
        lab.subnet.replace(".0/24", ".1")
    ]


def test_the_result_has_the_reference_plugins_shape(lab: NetctlLab, pods: list[str]) -> None:
    """Debian's ptp with host-local answers ADD with the same keys as netplugin-cni, in
    every version both speak."""
    if not Path(CNI_PATH, "ptp").exists():
        pytest.fail("containernetworking-plugins is not installed (scripts/bootstrap.sh)")
    for version in ("0.3.1", "0.4.0", "1.0.0"):
        _, ours_ns = pod(pods)
        _, ref_ns = pod(pods)
        cid = uuid.uuid4().hex
        ok, ours = exec_plugin("ADD", cid, ours_ns, conf(lab, version))
        with tempfile.TemporaryDirectory() as d:
            ref_conf = {
                "cniVersion": version, "name": "ref", "type": "ptp",
                "ipam": {"type": "host-local", "subnet": "10.246.0.0/24", "dataDir": d,
                         "routes": [{"dst": "0.0.0.0/0"}]},
            }  # fmt: skip
            ref_ok, ref = exec_plugin("ADD", cid, ref_ns, ref_conf, plugin=f"{CNI_PATH}/ptp")
            exec_plugin("DEL", cid, ref_ns, ref_conf, plugin=f"{CNI_PATH}/ptp")
        exec_plugin("DEL", cid, ours_ns, conf(lab, version))
        assert (ok, ref_ok) == (0, 0), (ours, ref)
        assert ours is not None and ref is not None
        assert set(ours) - {"dns"} == set(ref) - {"dns"}, (ours, ref)
        assert ours["cniVersion"] == ref["cniVersion"] == version
        assert set(ours["ips"][0]) == set(ref["ips"][0]), (ours["ips"], ref["ips"])
        assert {k for i in ours["interfaces"] for k in i} <= {
            k for i in ref["interfaces"] for k in i
        }
        assert set(ours["routes"][0]) <= set(ref["routes"][0]) | {"gw"}
        sandbox = [i for i in ours["interfaces"] if "sandbox" in i]
        assert ours["ips"][0]["interface"] == ours["interfaces"].index(sandbox[0])


def test_an_agent_restart_keeps_pods_talking_and_remakes_nothing(
    lab: NetctlLab, pods: list[str], stack: tuple[MasterProcess, PluginProcess]
) -> None:
    _, plugin = stack
    peer_ip = ip_of(lab.container(lab.network))
    name, path = pod(pods)
    cid = uuid.uuid4().hex
    status, result = exec_plugin("ADD", cid, path, conf(lab))
    assert status == 0, result
    wait_for(
        lambda: in_ns(name, "ping", "-c", "1", "-W", "1", peer_ip, check=False).returncode == 0,
        15,
        "the pod reaches the docker container",
    )
    host_end, _ = veth_names(cni.endpoint_id(cid, "eth0"))
    index = Path(f"/sys/class/net/{host_end}/ifindex").read_text()
    ofport = run("ovs-vsctl", "get", "interface", host_end, "ofport").stdout
    pinging = subprocess.Popen(
        ["ip", "netns", "exec", name, "ping", "-q", "-i", "0.05", "-w", "12", peer_ip],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    plugin.stop()
    plugin.start()
    out, _ = pinging.communicate(timeout=30)
    sent, received = (int(x.split()[0]) for x in out.split("\n")[-3].split(",")[:2])
    assert sent > 100 and received == sent, out
    assert Path(f"/sys/class/net/{host_end}/ifindex").read_text() == index  # not re-made
    assert run("ovs-vsctl", "get", "interface", host_end, "ofport").stdout == ofport
    assert exec_plugin("CHECK", cid, path, {**conf(lab), "prevResult": result}) == (0, None)
    assert exec_plugin("DEL", cid, path, conf(lab)) == (0, None)


def test_podman_runs_a_container_on_a_netplugin_network(lab: NetctlLab, tmp_path: Path) -> None:
    """A real CNI runtime: podman 4.3 with its CNI backend, configured in a directory of
    the test's (containers.conf, the conflist, the plugin's directory)."""
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed (scripts/bootstrap.sh)")
    peer_ip = ip_of(lab.container(lab.network))
    plugins, nets = tmp_path / "plugins", tmp_path / "net.d"
    plugins.mkdir()
    nets.mkdir()
    (plugins / "netplugin-cni").symlink_to(PLUGIN)
    (plugins / "loopback").symlink_to(f"{CNI_PATH}/loopback")
    name = f"{lab.prefix}pods"
    (nets / f"{name}.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": name,
        "plugins": [{"type": "netplugin-cni", "network": lab.network}],
    }))  # fmt: skip
    containers_conf = tmp_path / "containers.conf"
    containers_conf.write_text(
        "[containers]\n"
        # This VM's root lacks CAP_SYS_RESOURCE: podman's default rlimits (raised) fail.
        'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n'
        "[network]\n"
        'network_backend = "cni"\n'
        f'cni_plugin_dirs = ["{plugins}"]\n'
        f'network_config_dir = "{nets}"\n'
    )
    env = {**os.environ, "CONTAINERS_CONF": str(containers_conf)}
    image = "localhost/netplugin-test/busybox"
    if subprocess.run(["podman", "image", "exists", image], env=env).returncode != 0:
        save = subprocess.Popen(
            ["docker", "save", "netplugin-test/busybox"], stdout=subprocess.PIPE
        )
        subprocess.run(["podman", "load"], stdin=save.stdout, env=env, check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        save.wait()
    res = subprocess.run(
        ["podman", "run", "--rm", "--network", name, image,
         "sh", "-c", f"ip -4 addr show eth0 && ping -c 3 -W 2 {peer_ip}"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert lab.subnet.rsplit(".", 1)[0] in res.stdout and "3 packets received" in res.stdout
    # podman said DEL when the container went: nothing of it is left.
    wait_for(
        lambda: (
            lab.inspect("net", lab.network).get("allocatedAddresses", [])
            == [lab.subnet.replace(".0/24", ".1"), peer_ip]
        ),
        15,
        "the pod's address is released",
    )


def test_a_pod_in_a_group_meets_its_policy_as_a_container_does(
    lab: NetctlLab, pods: list[str]
) -> None:
    from .probe import EchoServer, NamespaceNet, tcp_opens

    group = lab.group("web")
    policy = lab.policy("in", ("1", "-d", "in", "-l", "tcp", "-P", "8080", "-j", "deny"))
    lab.netctl("group", "update", "-p", policy, group)
    name, path = pod(pods)
    cid = uuid.uuid4().hex
    status, result = exec_plugin("ADD", cid, path, conf(lab, group=group))
    assert status == 0 and result is not None, result
    ip = result["ips"][0]["address"].split("/")[0]
    pod_net = NamespaceNet(name)
    servers = [EchoServer(pod_net, 8080), EchoServer(pod_net, 8081)]
    client = lab.net(lab.container(lab.network))
    try:
        wait_for(lambda: tcp_opens(client, ip, 8081), 15, "a container reaches the pod")
        assert not tcp_opens(client, ip, 8080)  # the group's in rule, enforced on the pod
        shown = lab.inspect("group", group)
        assert [e["endpointID"] for e in shown["endpoints"]] == [cni.endpoint_id(cid, "eth0")]
    finally:
        for s in servers:
            s.close()
        pod_net.close()
        exec_plugin("DEL", cid, path, conf(lab, group=group))
