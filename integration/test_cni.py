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

from cni.launcher import install
from common import cni
from testbed.host import AGENT_DATA_DIR, endpoint_port, pool_records, spare_pool_ports
from testbed.lab import BIN, NetctlLab, ip_of, run
from testbed.master import MasterProcess
from testbed.plugin import PluginProcess
from testbed.site import restart_stopped, serve_stack
from testbed.wait import wait_for

# This checkout's plugin as `netplugin-cni install` installs it (the console script in BIN
# imports the installed package, which may be another checkout's).
_INSTALLED = tempfile.TemporaryDirectory(prefix="np-cni-bin-")
PLUGIN = Path(install(_INSTALLED.name))
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


POOL = ["--cni-pair", "pool"]

# The agents' data directories, where they record which endpoint each pool port serves.
DATA_DIRS: list[Path] = []


def records() -> dict[str, str]:
    return pool_records(*DATA_DIRS)


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, PluginProcess]]:
    # Pods take pool ports here (a move in, a move home: the path with most to go wrong);
    # the test of a pod's own pair restarts the agent with --cni-pair own.
    for master, plugin in serve_stack(tmp_path_factory, POOL):
        DATA_DIRS.append(plugin.data_dir or AGENT_DATA_DIR)
        yield master, plugin


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
    """The host's interfaces but the networks' gateway ports and spare pool ports (see
    ovs_ports)."""
    spare = spare_pool_ports(run("ip", "-o", "link").stdout, records())
    return {n for n in os.listdir("/sys/class/net") if not n.startswith("npgw")} - spare


def ovs_ports() -> set[str]:
    """The bridge's ports but the networks' gateways (made for a network on its first
    endpoint here, they stay while it exists, as for Docker's containers) and the port
    pool's spare ones (made ahead of demand, when the agent likes)."""
    spare = spare_pool_ports(run("ip", "-o", "link").stdout, records())
    return {
        p
        for p in run("ovs-vsctl", "list-ports", "netplugin").stdout.split()
        if not p.startswith("npgw")
    } - spare


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
    host_end = endpoint_port(records(), cni.endpoint_id(cid, "eth0"))
    assert host_end in ovs_ports() and result["interfaces"][0]["name"] == host_end
    assert host_end in records()  # a spare pool port's, moved into the pod
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
    # Its end came home: the pool port serves again, still on the switch.
    wait_for(
        lambda: host_end in spare_pool_ports(run("ip", "-o", "link").stdout, records()),
        10,
        f"{host_end} is a spare pool port again",
    )
    assert host_end in run("ovs-vsctl", "list-ports", "netplugin").stdout.split()
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
    for version in ("0.3.0", "0.3.1", "0.4.0", "1.0.0"):
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
    host_end = endpoint_port(records(), cni.endpoint_id(cid, "eth0"))
    index = Path(f"/sys/class/net/{host_end}/ifindex").read_text()
    ofport = run("ovs-vsctl", "get", "interface", host_end, "ofport").stdout
    pinging = subprocess.Popen(
        ["ip", "netns", "exec", name, "ping", "-q", "-i", "0.05", "-w", "12", peer_ip],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    spare = spare_pool_ports(run("ip", "-o", "link").stdout, records())
    plugin.stop()
    plugin.start()
    out, _ = pinging.communicate(timeout=30)
    sent, received = (int(x.split()[0]) for x in out.split("\n")[-3].split(",")[:2])
    assert sent > 100 and received == sent, out
    assert Path(f"/sys/class/net/{host_end}/ifindex").read_text() == index  # not re-made
    assert run("ovs-vsctl", "get", "interface", host_end, "ofport").stdout == ofport
    # The spare pool ports were kept across the restart (none removed).
    assert spare and spare <= spare_pool_ports(run("ip", "-o", "link").stdout, records())
    assert exec_plugin("CHECK", cid, path, {**conf(lab), "prevResult": result}) == (0, None)
    assert exec_plugin("DEL", cid, path, conf(lab)) == (0, None)


@pytest.mark.parametrize("flags", [["--cni-pair", "own"], ["--port-pool", "0"]])
def test_a_pods_own_pair_is_made_with_its_end_in_its_namespace(
    stack: tuple[MasterProcess, PluginProcess], pods: list[str], flags: list[str]
) -> None:
    """An agent that gives pods their own pair (--cni-pair own, or auto while a port add
    costs less than a move; and without a pool) makes it with the pod's end made in the
    pod's namespace: it works as a moved one does, no pool port is taken, and DEL leaves
    nothing."""
    master, plugin = stack
    plugin.stop()
    plugin.extra = flags
    try:
        plugin.start()
        with NetctlLab(master.url, f"10.245.{next(_SUBNETS)}.0/24") as lab:
            peer_ip = ip_of(lab.container(lab.network))
            name, path = pod(pods)
            cid = uuid.uuid4().hex
            status, result = exec_plugin("ADD", cid, path, conf(lab))
            assert status == 0, result
            host_end = "vp" + cni.endpoint_id(cid, "eth0")[:11]  # its own pair's
            assert result["interfaces"][0]["name"] == host_end and host_end in ovs_ports()
            if "--cni-pair" in flags:
                shown = run(str(BIN / "netctl"), "host", "inspect", "teardown").stdout
                assert "CNI pods get:         their own pair (--cni-pair)" in shown, shown
            wait_for(
                lambda: (
                    in_ns(name, "ping", "-c", "1", "-W", "1", peer_ip, check=False).returncode == 0
                ),
                15,
                "the pod reaches the docker container",
            )
            assert exec_plugin("CHECK", cid, path, {**conf(lab), "prevResult": result}) == (0, None)
            assert exec_plugin("DEL", cid, path, conf(lab)) == (0, None)
            assert "eth0" not in in_ns(name, "ip", "-o", "link").stdout
            assert host_end not in links()  # the pair went with the pod's end
            wait_for(lambda: host_end not in ovs_ports(), 10, f"{host_end} leaves the switch")
    finally:
        plugin.stop()
        plugin.extra = POOL
        plugin.start()


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
    from testbed.probe import EchoServer, NamespaceNet, tcp_opens

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


def gateway_routes(ns: str) -> set[tuple[str, str, str]]:
    """The namespace's routes through a gateway, both families, as `ip -j route` shows
    them: (destination, gateway, interface)."""
    found = set()
    for family, default in (("-4", "0.0.0.0/0"), ("-6", "::/0")):
        for r in json.loads(in_ns(ns, "ip", "-j", family, "route", "show", "table", "main").stdout):
            if r.get("gateway"):
                dst = default if r["dst"] == "default" else r["dst"]
                found.add((dst, r["gateway"], r["dev"]))
    return found


def reported(result: dict[str, Any], ifname: str) -> set[tuple[str, str, str]]:
    return {(r["dst"], r["gw"], ifname) for r in result.get("routes", [])}


def pings(ns: str, address: str) -> bool:
    return in_ns(ns, "ping", "-c", "1", "-W", "1", address, check=False).returncode == 0


def test_a_second_interface_has_the_routes_its_result_lists(
    lab: NetctlLab, pods: list[str]
) -> None:
    """Issue 22: a pod with eth0 on one network and net1 on another. net1's ADD used to
    answer a default route via its gateway that the namespace never got (eth0's was there
    first), so CHECK of ADD's own result failed with 102. Both families, real packets; and
    Debian's ptp with host-local, the reference, answers and routes a second interface the
    same way (no routes unless its configuration asks)."""
    n = int(lab.subnet.split(".")[2])
    nets = {}
    for letter, octet in (("a", 241), ("b", 242)):
        name = f"{lab.prefix}{letter}"
        lab.netctl("net", "create", "-s", f"10.{octet}.{n}.0/24",
                   "--subnetv6", f"fd{octet - 200}:{n}::/64", name)  # fmt: skip
        nets[letter] = name
    pod_ns, pod_path = pod(pods)
    cid = uuid.uuid4().hex
    made: list[tuple[str, str, str, str]] = []  # (container, path, ifname, network): DEL'd after
    try:
        peers = {}
        for letter, network in nets.items():
            _, peer_path = pod(pods)
            peer_cid = uuid.uuid4().hex
            status, peer = exec_plugin("ADD", peer_cid, peer_path, conf(lab, network=network))
            assert status == 0 and peer is not None, peer
            made.append((peer_cid, peer_path, "eth0", network))
            peers[letter] = [ip["address"].split("/")[0] for ip in peer["ips"]]
        status, eth0 = exec_plugin("ADD", cid, pod_path, conf(lab, network=nets["a"]))
        assert status == 0 and eth0 is not None, eth0
        made.append((cid, pod_path, "eth0", nets["a"]))
        status, net1 = exec_plugin(
            "ADD", cid, pod_path, conf(lab, network=nets["b"]), ifname="net1"
        )
        assert status == 0 and net1 is not None, net1
        made.append((cid, pod_path, "net1", nets["b"]))

        assert gateway_routes(pod_ns) == reported(eth0, "eth0") | reported(net1, "net1")
        for ifname, network, result in (("eth0", nets["a"], eth0), ("net1", nets["b"], net1)):
            check = {**conf(lab, network=network), "prevResult": result}
            assert exec_plugin("CHECK", cid, pod_path, check, ifname=ifname) == (0, None)
        assert {(r["dst"], r["gw"]) for r in eth0["routes"]} == {
            ("0.0.0.0/0", f"10.241.{n}.1"), ("::/0", f"fd41:{n}::1"),
        }  # fmt: skip
        assert "routes" not in net1, net1  # a second interface: no default route
        for address in peers["a"] + peers["b"]:  # IPv4 and IPv6 of each network's peer
            wait_for(lambda a=address: pings(pod_ns, a), 15, f"the pod pings {address}")
        # Asking net2 for the default route eth0 has: refused, nothing of net2 left.
        before = ovs_ports()
        asked = conf(lab, network=nets["b"], routes=[{"dst": "0.0.0.0/0"}])
        status, err = exec_plugin("ADD", cid, pod_path, asked, ifname="net2")
        assert status == 1 and err is not None and err["code"] == cni.DATAPATH_FAILURE, err
        assert "the pod has it already via eth0" in err["msg"]
        assert ovs_ports() == before and "net2" not in in_ns(pod_ns, "ip", "-o", "link").stdout

        # DEL of net1 takes only what its ADD made: eth0's default routes stay.
        assert exec_plugin("DEL", cid, pod_path, conf(lab, network=nets["b"]), ifname="net1") == (
            0, None,
        )  # fmt: skip
        made.remove((cid, pod_path, "net1", nets["b"]))
        assert gateway_routes(pod_ns) == reported(eth0, "eth0")
        check = {**conf(lab, network=nets["a"]), "prevResult": eth0}
        assert exec_plugin("CHECK", cid, pod_path, check) == (0, None)
        assert all(pings(pod_ns, a) for a in peers["a"])

        # The reference: ptp with host-local, eth0 asking for a default route, net1 not.
        if not Path(CNI_PATH, "ptp").exists():
            pytest.fail("containernetworking-plugins is not installed (scripts/bootstrap.sh)")
        ref_ns, ref_path = pod(pods)
        with tempfile.TemporaryDirectory() as d:
            ref = [
                {"cniVersion": "1.0.0", "name": f"ref{i}", "type": "ptp",
                 "ipam": {"type": "host-local", "subnet": f"10.246.{i}.0/24", "dataDir": d,
                          **({"routes": [{"dst": "0.0.0.0/0"}]} if i == 0 else {})}}
                for i in (0, 1)
            ]  # fmt: skip
            ptp = f"{CNI_PATH}/ptp"
            _, ref_eth0 = exec_plugin("ADD", cid, ref_path, ref[0], plugin=ptp)
            _, ref_net1 = exec_plugin("ADD", cid, ref_path, ref[1], ifname="net1", plugin=ptp)
            ref_routes = gateway_routes(ref_ns)
            exec_plugin("DEL", cid, ref_path, ref[1], ifname="net1", plugin=ptp)
            exec_plugin("DEL", cid, ref_path, ref[0], plugin=ptp)
        assert ref_eth0 is not None and ref_net1 is not None
        assert "routes" in ref_eth0 and "routes" not in ref_net1, (ref_eth0, ref_net1)
        assert {(dst, dev) for dst, _, dev in ref_routes if dst == "0.0.0.0/0"} == {
            ("0.0.0.0/0", "eth0")
        }
        assert set(net1) == set(ref_net1)
    finally:
        for container, path, ifname, network in reversed(made):
            exec_plugin("DEL", container, path, conf(lab, network=network), ifname=ifname)
        for network in nets.values():
            lab.netctl("net", "rm", network, check=False)
