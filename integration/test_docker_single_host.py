"""Single host end to end: the real docker CLI, dockerd, Open vSwitch, netmaster and netplugin.

The tests marked ``docker26`` run on both Docker versions (testbed/site.py): the host's
20.10 and Docker 26 on a simulated host; the others on 20.10 only."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.host import CREATE_NETWORK, TEST_LABEL, endpoint_port
from testbed.lab import ip_of
from testbed.ovs import stop_pid
from testbed.site import Site
from testbed.wait import tcp_listening, wait_for

IMAGE = "netplugin-test/busybox"
# `docker run` of a test container: detached, labelled for the sweep of leftovers.
RUN = ("docker", "run", "-d", "--label", TEST_LABEL)
BIN = Path(sys.executable).parent


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr or res.stdout}"
        )
    return res


@pytest.fixture
def names(site: Site) -> Iterator[list[str]]:
    """Unique names for this test; every container and network named here is removed after."""
    made: list[str] = []
    yield made
    remove(made)


def remove(names: list[str]) -> None:
    """Remove the containers, then the networks, of these names (those that exist)."""
    for name in reversed(names):
        sh("docker", "rm", "-f", name, check=False)
    for name in reversed(names):
        sh("docker", "network", "rm", name, check=False)


def unique(names: list[str], prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    names.append(name)
    return name


def network(names: list[str], subnet: str, *extra: str) -> str:
    name = unique(names, "np")
    sh(
        *CREATE_NETWORK,
        "--subnet",
        subnet,
        *extra,
        name,
    )
    return name


def run(names: list[str], net: str, *extra: str) -> str:
    name = unique(names, "c")
    sh(*RUN, "--name", name, "--net", net, *extra, IMAGE, "sleep", "600")
    return name


def endpoint_of(container: str, net: str) -> str:
    nets = json.loads(
        sh("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", container).stdout
    )
    return str(nets[net]["EndpointID"])


def listening(container: str, port: int) -> bool:
    """Whether a server in ``container`` listens on TCP ``port`` (read inside it: a probe
    connection would be served, and logged, like any other)."""
    tables = sh("docker", "exec", container, "cat", "/proc/net/tcp", "/proc/net/tcp6", check=False)
    return tcp_listening(tables.stdout, port)


def start_pinger(log: Path, *cmd: str) -> subprocess.Popen[bytes]:
    """``cmd`` (a ping) in the background with its output in ``log``, once it has had its
    first answer: traffic is flowing before the test disturbs it."""
    with open(log, "w") as out:
        pinger = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "bytes from" in log.read_text(), 20, f"a first answer to {cmd}")
    except BaseException:
        stop_pid(pinger)
        raise
    return pinger


def ping(container: str, target: str, count: int = 2) -> bool:
    return (
        sh(
            "docker", "exec", container, "ping", "-c", str(count), "-W", "2", target, check=False
        ).returncode
        == 0
    )


@pytest.mark.docker26
def test_containers_talk_to_each_other_the_gateway_and_the_host(
    site: Site, names: list[str]
) -> None:
    net = network(names, "10.81.0.0/24", "--gateway", "10.81.0.1", "--ip-range", "10.81.0.128/25")
    a, b = run(names, net), run(names, net)
    assert ip_of(a).startswith("10.81.0.1") and ip_of(a) != ip_of(b)
    assert int(ip_of(a).split(".")[-1]) >= 128  # --ip-range is honoured
    assert ping(a, ip_of(b)) and ping(a, "10.81.0.1")
    assert ping(a, site.host_ip())
    # TCP through the userspace datapath (the checksum trap).
    sh("docker", "exec", "-d", b, "httpd", "-f", "-p", "8080", "-h", "/var/www")
    wait_for(lambda: listening(b, 8080), 10, f"httpd in {b} listens on 8080")
    reply = sh(
        "docker",
        "exec",
        a,
        "sh",
        "-c",
        f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 {ip_of(b)} 8080',
    ).stdout
    assert "200 OK" in reply and "netplugin test image" in reply
    # The master knows the network and both endpoints.
    nets = site.get("networks")
    # ... under its docker name (docker's CreateNetwork carries none: learned afterwards).
    assert any(n["subnet"] == "10.81.0.0/24" and n["networkName"] == net for n in nets), nets
    shown = site.netctl("net", "ls").stdout
    assert re.search(rf"default\s+{net}\s", shown), shown
    eps = {e["ipAddress"] for e in site.get("endpoints")}
    assert {ip_of(a), ip_of(b)} <= eps


@pytest.mark.docker26
def test_networks_are_isolated(site: Site, names: list[str]) -> None:
    n1, n2 = network(names, "10.82.0.0/24"), network(names, "10.83.0.0/24")
    a, b = run(names, n1), run(names, n2)
    assert not ping(a, ip_of(b), count=1)
    assert not ping(b, ip_of(a), count=1)
    assert ping(a, "10.82.0.1")
    # The host would route between its gateway ports; our FORWARD chain drops that.
    drops = site.host("iptables", "-S", "NETPLUGIN-FWD").stdout
    assert "-A NETPLUGIN-FWD -i npgw+ -o npgw+ -j DROP" in drops


@pytest.mark.docker26
def test_static_ip_and_duplicate_refused(site: Site, names: list[str]) -> None:
    net = network(names, "10.84.0.0/24")
    a = run(names, net, "--ip", "10.84.0.50")
    assert ip_of(a) == "10.84.0.50"
    name = unique(names, "dup")
    res = sh(
        *RUN,
        "--name",
        name,
        "--net",
        net,
        "--ip",
        "10.84.0.50",
        IMAGE,
        "true",
        check=False,
    )
    assert res.returncode != 0 and "10.84.0.50" in res.stderr


@pytest.mark.docker26
def test_plugin_kill9_keeps_traffic_and_addresses(
    site: Site, names: list[str], tmp_path: Path
) -> None:
    net = network(names, "10.85.0.0/24")
    a, b = run(names, net), run(names, net)
    before = (ip_of(a), ip_of(b))
    log = tmp_path / "ping.out"
    pinger = start_pinger(log, "docker", "exec", a, "ping", "-i", "0.2", "-c", "60", ip_of(b))
    try:
        t0 = time.monotonic()
        site.stop_agent(signal.SIGKILL)
        try:
            time.sleep(1)  # the plugin stays down a while: traffic must not care
        finally:
            site.start_agent()
        downtime = time.monotonic() - t0
        pinger.wait(60)
    finally:
        stop_pid(pinger)
    out = log.read_text()
    m = re.search(r"(\d+) packets transmitted, (\d+) packets received", out)
    assert m, out
    lost = int(m.group(1)) - int(m.group(2))
    assert lost <= int(downtime) + 1, f"{lost} lost in {downtime:.1f}s of downtime"
    assert (ip_of(a), ip_of(b)) == before
    c = run(names, net)  # a new container after the restart gets a fresh address
    assert ip_of(c) not in before and ping(c, ip_of(a))


@pytest.mark.docker26
def test_containers_come_and_go_without_changing_the_switchs_database(
    site: Site, names: list[str]
) -> None:
    """A container's switch port comes from the port pool and goes back to it when the
    container ends (dockerd hands its end back to the host's namespace): under steady
    churn no OVSDB change, so ovs-vswitchd never reconfigures its ports on a container's
    path. A running neighbour keeps answering throughout."""
    net = network(names, "10.87.0.0/24")
    neighbour = run(names, net)
    neighbour_ip = ip_of(neighbour)

    def cycle() -> None:
        name = unique(names, "c")
        sh(*RUN, "--name", name, "--net", net, IMAGE, "ping", "-c", "1", "-W", "2", neighbour_ip)
        assert sh("docker", "wait", name).stdout.strip() == "0"  # it reached its neighbour
        sh("docker", "rm", "-f", name)

    for _ in range(2):  # the pool settles (a refill may come while the first runs)
        cycle()
    before = site.vsctl("get", "Open_vSwitch", ".", "next_cfg").strip()
    for _ in range(3):
        cycle()
    assert site.vsctl("get", "Open_vSwitch", ".", "next_cfg").strip() == before
    assert endpoint_port(site.pool_records(), endpoint_of(neighbour, net)).startswith("vq")


@pytest.mark.docker26
def test_network_rm_leaves_nothing_behind(site: Site, names: list[str]) -> None:
    net = network(names, "10.86.0.0/24")
    a = run(names, net)
    endpoint_id = json.loads(
        sh("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", a).stdout
    )[net]["EndpointID"]
    key = next(n["key"] for n in site.get("networks") if n["subnet"] == "10.86.0.0/24")
    tag = site.get(f"inspect/networks/{key}")["Oper"]["pktTag"]
    ports = site.vsctl("list-ports", "netplugin").split()
    port = endpoint_port(site.pool_records(), endpoint_id)
    assert port in ports and f"npgw{tag}" in ports
    sh("docker", "rm", "-f", a)
    sh("docker", "network", "rm", net)
    ports = site.vsctl("list-ports", "netplugin").split()
    links = site.host("ip", "-o", "link").stdout
    assert f"npgw{tag}" not in ports and f"npgw{tag}" not in links
    # The endpoint's port is gone, or back in the port pool serving nobody.
    assert endpoint_id not in site.pool_records().values()
    assert port not in ports or (port.startswith("vq") and port in links)
    nat = site.host("iptables", "-t", "nat", "-S", "NETPLUGIN-POSTROUTING").stdout
    assert "10.86.0.0/24" not in nat
    assert all(e["endpointID"] != endpoint_id for e in site.get("endpoints"))
    assert all(n["subnet"] != "10.86.0.0/24" for n in site.get("networks"))
    assert site.agent_running()


@pytest.mark.docker26
def test_connect_disconnect_and_tenant_options(site: Site, names: list[str]) -> None:
    tenant = f"t{uuid.uuid4().hex[:6]}"
    site.api("POST", f"tenants/{tenant}", json={}).raise_for_status()
    ours = len(names)  # the names this test makes from here on
    try:
        tnet = network(
            names, "10.87.0.0/24", "-o", f"tenant={tenant}", "-o", "encap=vlan", "-o", "pkt-tag=321"
        )
        base = network(names, "10.88.0.0/24")
        made = [n for n in site.get("networks") if n["subnet"] == "10.87.0.0/24"]
        assert len(made) == 1 and made[0]["tenantName"] == tenant
        assert (made[0]["encap"], made[0]["pktTag"]) == ("vlan", 321)
        a, b = run(names, base), run(names, tnet)
        sh("docker", "network", "connect", tnet, a)
        addrs = sh("docker", "exec", a, "ip", "-4", "-o", "addr").stdout
        assert "10.88.0." in addrs and "10.87.0." in addrs
        assert ping(a, ip_of(b))  # over the second interface
        sh("docker", "network", "disconnect", tnet, a)
        assert "10.87.0." not in sh("docker", "exec", a, "ip", "-4", "-o", "addr").stdout
        assert not ping(a, ip_of(b), count=1)
        sh("docker", "rm", "-f", a, b)
        sh("docker", "network", "rm", tnet)
    finally:
        remove(names[ours:])  # the tenant's network first: a tenant with one is kept
        site.api("DELETE", f"tenants/{tenant}")


@pytest.mark.docker26
def test_publish_port(site: Site, names: list[str]) -> None:
    net, other = network(names, "10.89.0.0/24"), network(names, "10.90.0.0/24")
    web = unique(names, "web")
    sh(
        *RUN,
        "--name",
        web,
        "--net",
        net,
        "-p",
        "18080:8080",
        IMAGE,
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/var/www",
    )
    host_ip = site.host_ip()
    request = f'printf "GET / HTTP/1.0\\r\\n\\r\\n" | nc -w 3 {host_ip} 18080'
    wait_for(lambda: listening(web, 8080), 10, f"httpd in {web} listens on 8080")
    curl = ("curl", "-s", "--max-time", "3", f"http://{host_ip}:18080/")
    from_host = site.host(*curl, check=False).stdout
    assert "netplugin test image" in from_host
    client = run(names, other)  # another network reaches it through the host, like docker's bridge
    assert "netplugin test image" in sh("docker", "exec", client, "sh", "-c", request).stdout
    sh("docker", "stop", "-t", "1", web)
    assert "18080" not in site.host("iptables", "-t", "nat", "-S", "NETPLUGIN-DNAT").stdout


@pytest.mark.docker26
def test_internal_network_has_no_way_out(site: Site, names: list[str]) -> None:
    net = network(names, "10.94.0.0/24", "--internal")
    a, b = run(names, net), run(names, net)
    assert ping(a, ip_of(b))
    routes = sh("docker", "exec", a, "ip", "route").stdout
    assert "default" not in routes, routes
    nat = site.host("iptables", "-t", "nat", "-S", "NETPLUGIN-POSTROUTING").stdout
    assert "10.94.0.0/24" not in nat


@pytest.mark.docker26
def test_ipv6_dual_stack(site: Site, names: list[str]) -> None:
    net = network(names, "10.95.0.0/24", "--ipv6", "--subnet", "fd95::/64")
    a, b = run(names, net), run(names, net)
    info = json.loads(
        sh("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", b).stdout
    )[net]
    v6 = info["GlobalIPv6Address"]
    assert v6.startswith("fd95::"), info
    res = sh("docker", "exec", a, "ping", "-6", "-c", "2", "-W", "2", v6, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ping(a, ip_of(b))


def test_concurrent_runs_get_distinct_addresses(site: Site, names: list[str]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    net = network(names, "10.96.0.0/24")
    containers = [unique(names, "par") for _ in range(16)]
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda n: sh(*RUN, "--name", n, "--net", net, IMAGE, "sleep", "600"),
                containers,
            )
        )
    addrs = [ip_of(c) for c in containers]
    assert len(set(addrs)) == 16
    assert ping(containers[0], addrs[-1])


@pytest.mark.docker26
def test_exhaustion_and_reuse(site: Site, names: list[str]) -> None:
    net = network(names, "10.97.0.0/29")  # 6 usable, 1 is the gateway
    made = [run(names, net) for _ in range(5)]
    extra = unique(names, "full")
    res = sh(*RUN, "--name", extra, "--net", net, IMAGE, "sleep", "600", check=False)
    assert res.returncode != 0 and "no free address" in res.stderr, res.stderr
    freed = ip_of(made[2])
    sh("docker", "rm", "-f", made[2])
    again = run(names, net)
    assert ip_of(again) == freed


def test_stale_ports_and_veths_are_collected_at_start(site: Site, names: list[str]) -> None:
    stale = "vp" + uuid.uuid4().hex[:11]
    site.host("ip", "link", "add", stale, "type", "veth", "peer", "name", "vc" + stale[2:])
    try:
        site.vsctl(
            "add-port", "netplugin", stale,
            "--", "set", "interface", stale, "external_ids:netplugin-endpoint=gone-" + stale,
        )  # fmt: skip
        net = network(names, "10.98.0.0/24")
        a, b = run(names, net), run(names, net)
        site.stop_agent()
        site.start_agent()

        def leftover() -> bool:
            return (
                stale
                in site.vsctl("list-ports", "netplugin") + site.host("ip", "-o", "link").stdout
            )

        wait_for(lambda: not leftover(), 15, f"the restarted plugin removes port and veth {stale}")
        assert not leftover()
        assert ping(a, ip_of(b))  # live endpoints were kept
    finally:
        site.vsctl("--if-exists", "del-port", "netplugin", stale)
        site.host("ip", "link", "del", stale, check=False)


@pytest.mark.docker26
def test_master_down_gives_a_clear_error(site: Site, names: list[str]) -> None:
    net = network(names, "10.99.0.0/24")
    a = run(names, net)
    site.stop_master()
    try:
        name = unique(names, "nomaster")
        res = sh(*RUN, "--name", name, "--net", net, IMAGE, "sleep", "600", check=False)
        assert res.returncode != 0 and "netmaster" in res.stderr and "unreachable" in res.stderr, (
            res.stderr
        )
    finally:
        site.start_master()
    b = run(names, net)
    assert ping(b, ip_of(a))
    eps = site.get("endpoints")
    assert sorted(e["ipAddress"] for e in eps if e["ipAddress"].startswith("10.99.")) == sorted(
        [ip_of(a), ip_of(b)]
    )  # the refused run left no endpoint or address behind


def running(container: str) -> bool:
    out = sh("docker", "inspect", "-f", "{{.State.Running}}", container, check=False).stdout
    return out.strip() == "true"


@pytest.mark.docker26
def test_network_rm_with_a_container_is_refused_by_docker_and_changes_nothing(
    site: Site, names: list[str]
) -> None:
    """dockerd itself refuses to remove a network that has endpoints on this host (20.10
    and 26 word it alike), before asking the driver: the network stays in docker, in the
    cluster and on the switch."""
    net = network(names, "10.72.0.0/24")
    a = run(names, net)
    res = sh("docker", "network", "rm", net, check=False)
    assert res.returncode != 0, res.stdout
    assert re.search(
        rf"error while removing network: network {net} id \w+ has active endpoints", res.stderr
    ), res.stderr
    assert sh("docker", "network", "inspect", "-f", "{{.Name}}", net).stdout.strip() == net
    assert any(n["networkName"] == net for n in site.get("networks"))
    assert ping(a, "10.72.0.1")


@pytest.mark.docker26
def test_docker_port_and_ps_show_no_published_port_while_it_works(
    site: Site, names: list[str]
) -> None:
    """`docker port`, the PORTS column of `docker ps` and NetworkSettings.Ports stay empty on
    20.10 and on 26 alike: both read a remote driver's EndpointOperInfo as JSON, then expect
    their own Go types. The port is published all the same (the DNAT chain has it), and
    netplugin's EndpointOperInfo reports it in Docker's shape, for API clients."""
    net = network(names, "10.73.0.0/24")
    web = run(names, net, "-p", "18090:8080", "-p", "18091:53/udp", "--expose", "9090")
    assert sh("docker", "port", web).stdout == ""
    ps = sh("docker", "ps", "--filter", f"name={web}", "--format", "{{.Ports}}").stdout
    assert ps.strip() == "", ps
    ports = sh("docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", web).stdout
    assert json.loads(ports) == {}
    asked = json.loads(
        sh("docker", "inspect", "-f", "{{json .HostConfig.PortBindings}}", web).stdout
    )
    assert asked["8080/tcp"] == [{"HostIp": "", "HostPort": "18090"}]
    dnat = site.host("iptables", "-w", "-t", "nat", "-S", "NETPLUGIN-DNAT").stdout
    assert re.search(rf"-p tcp .*--dport 18090 .*--to-destination {ip_of(web)}:8080", dnat), dnat
    assert re.search(rf"-p udp .*--dport 18091 .*--to-destination {ip_of(web)}:53", dnat), dnat


@pytest.mark.docker26
def test_docker_run_mac_address_is_kept(site: Site, names: list[str]) -> None:
    """`docker run --mac-address`: the driver keeps the address docker gives it (it fills in
    only what docker left empty) and plugs the port with it, so the container talks. This
    CLI (28) sends it per network, which needs API 1.44: Docker 26 (API 1.45) takes it;
    against 20.10 (API 1.41) the CLI itself refuses."""
    net = network(names, "10.71.0.0/24")
    a = run(names, net)
    name = unique(names, "mac")
    mac = "02:42:0a:47:00:99"
    res = sh(*RUN, "--name", name, "--net", net, "--mac-address", mac, IMAGE, "sleep", "600",
             check=False)  # fmt: skip
    if site.version == "docker20":
        assert res.returncode != 0 and "requires API version 1.44" in res.stderr, res.stderr
        return
    assert res.returncode == 0, res.stderr
    assert sh("docker", "exec", name, "cat", "/sys/class/net/eth0/address").stdout.strip() == mac
    assert ping(name, ip_of(a)) and ping(name, "10.71.0.1")


@pytest.mark.docker26
def test_docker_errors_name_the_driver_method_once(site: Site, names: list[str]) -> None:
    """Docker writes "Error response from daemon: " and the driver's method before the
    driver's message, on 20.10 and 26 alike; the message does not repeat the method."""
    net = network(names, "10.70.0.0/24")
    run(names, net, "--ip", "10.70.0.50")
    res = sh(*RUN, "--name", unique(names, "dup"), "--net", net, "--ip", "10.70.0.50", IMAGE,
             "true", check=False)  # fmt: skip
    assert res.stderr.startswith(
        "docker: Error response from daemon: IpamDriver.RequestAddress: address request in "
        "pool default:10.70.0.0/24: address 10.70.0.50 is already in use"
    ), res.stderr
    bad = unique(names, "np")
    res = sh(*CREATE_NETWORK, "--subnet", "10.69.0.0/24", "-o", "encap=bogus", bad, check=False)
    assert res.stderr.startswith(
        "Error response from daemon: NetworkDriver.CreateNetwork: network default:"
    ), res.stderr
    assert "field 'encap'" in res.stderr and "CreateNetwork: CreateNetwork" not in res.stderr


@pytest.mark.docker26
def test_dockerd_restart_brings_restart_policy_containers_back(
    site: Site, names: list[str]
) -> None:
    net = network(names, "10.79.0.0/24")
    a, b = run(names, net, "--restart", "always"), run(names, net, "--restart", "always")
    assert ping(a, ip_of(b))
    site.restart_dockerd()
    wait_for(lambda: running(a) and running(b), 60, f"dockerd restarts {a} and {b}")
    assert running(a) and running(b)
    assert ping(a, ip_of(b)) and ping(a, "10.79.0.1")
    # Stopping released the old endpoints and addresses; the restart booked new ones: the
    # master holds exactly the two containers' addresses plus the gateway.
    key = next(n["key"] for n in site.get("networks") if n["subnet"] == "10.79.0.0/24")
    oper = site.get(f"inspect/networks/{key}")["Oper"]
    assert sorted(e["ipAddress"] for e in oper["endpoints"]) == sorted([ip_of(a), ip_of(b)])
    assert sorted(oper["allocatedAddresses"]) == sorted([ip_of(a), ip_of(b), "10.79.0.1"])


@pytest.fixture
def outside() -> Iterator[str]:
    yield from outside_namespace()


def outside_namespace() -> Iterator[str]:
    """A namespace standing for the outside world: reachable from the host on 198.51.100.2,
    with no route back to any container subnet (only NAT'ed traffic can get an answer)."""
    ns, host_end = f"npout{uuid.uuid4().hex[:6]}", f"npo{uuid.uuid4().hex[:6]}"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "addr", "add", "198.51.100.1/30", "dev", host_end)
        sh("ip", "link", "set", host_end, "up")
        sh("ip", "-n", ns, "addr", "add", "198.51.100.2/30", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield ns
    finally:
        sh("ip", "link", "del", host_end, check=False)
        sh("ip", "netns", "del", ns, check=False)


def test_outbound_traffic_is_nated_unless_internal(
    site: Site, names: list[str], outside: str
) -> None:
    a = run(names, network(names, "10.78.0.0/24"))
    assert ping(a, "198.51.100.2")
    # The outside saw the host's address, not the container's.
    accept_one = (
        "import socket; s = socket.create_server(('198.51.100.2', 7777)); s.settimeout(10); "
        "c, peer = s.accept(); print(peer[0], flush=True)"
    )
    server = subprocess.Popen(
        ["ip", "netns", "exec", outside, sys.executable, "-c", accept_one],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(
            lambda: tcp_listening(
                sh("ip", "netns", "exec", outside, "cat", "/proc/net/tcp").stdout, 7777
            ),
            10,
            "the outside's server listens on 198.51.100.2:7777",
        )
        sh("docker", "exec", a, "sh", "-c", "echo hi | nc -w 2 198.51.100.2 7777", check=False)
        out, _ = server.communicate(timeout=10)
    finally:
        server.kill()
        server.wait()
    assert "198.51.100.1" in out and "10.78.0." not in out, out
    internal = run(names, network(names, "10.77.0.0/24", "--internal"))
    assert not ping(internal, "198.51.100.2", count=1)


def test_ovs_vswitchd_restart_restores_the_datapath(site: Site, names: list[str]) -> None:
    net = network(names, "10.76.0.0/24")
    a, b = run(names, net), run(names, net)
    assert ping(a, ip_of(b))
    # Flows live only in ovs-vswitchd; a stop with --cleanup (as before a reboot) also
    # removes the gateway's internal port device, and with it its address. The agent puts
    # all of them back when the new ovs-vswitchd connects.
    site.restart_ovs_vswitchd()
    wait_for(lambda: ping(a, "10.76.0.1", count=1), 20, f"{a} reaches its gateway again")
    assert ping(a, "10.76.0.1") and ping(a, ip_of(b))


def offloads_on(ifname: str, pid: int | None = None) -> bool:
    """Whether ``ifname`` (in the network namespace of ``pid``) has TX checksumming on."""
    where = ("nsenter", "-t", str(pid), "-n") if pid else ()
    out = sh(*where, "ethtool", "-k", ifname).stdout
    return "tx-checksumming: on" in out


def test_bulk_tcp_with_the_offloads_the_switch_takes(site: Site, names: list[str]) -> None:
    """64 MiB container to container and host to container, whatever the running
    ovs-vswitchd has: with userspace TSO the containers keep TX offloads (one host, no
    tunnel), without it they finish their checksums (else TCP fails)."""
    net = network(names, "10.74.0.0/24", "--gateway", "10.74.0.1")
    a, b = run(names, net), run(names, net)
    switch_tso = offloads_on("netplugin")  # ovs-vswitchd sets its own tap's offloads
    pid = int(sh("docker", "inspect", "-f", "{{.State.Pid}}", a).stdout)
    assert offloads_on("eth0", pid) == switch_tso
    size = 64 << 20
    # nc's stdin stays open: busybox nc ends the connection when its stdin ends.
    sh("docker", "exec", "-d", b, "sh", "-c", "sleep 60 | nc -l -p 9000 | wc -c > /tmp/got")
    wait_for(lambda: listening(b, 9000), 10, f"nc in {b} listens on 9000")
    sh("docker", "exec", a, "sh", "-c", f"dd if=/dev/zero bs=1M count=64 | nc -w 5 {ip_of(b)} 9000")
    got = lambda: sh("docker", "exec", b, "cat", "/tmp/got", check=False).stdout.strip()  # noqa: E731
    wait_for(lambda: got() == str(size), 30, f"{b} received {size} bytes (has {got()!r})")
    # The host's own packets come in through the gateway's tap, with its offloads.
    sh("docker", "exec", "-d", b, "sh", "-c", "sleep 60 | nc -l -p 9001 | wc -c > /tmp/got2")
    wait_for(lambda: listening(b, 9001), 10, f"nc in {b} listens on 9001")
    import socket

    with socket.create_connection((ip_of(b), 9001), timeout=10) as conn:
        chunk = bytes(1 << 20)
        for _ in range(64):
            conn.sendall(chunk)
    got2 = lambda: sh("docker", "exec", b, "cat", "/tmp/got2", check=False).stdout.strip()  # noqa: E731
    wait_for(lambda: got2() == str(size), 30, f"{b} received {size} bytes from the host")
