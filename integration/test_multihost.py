"""Several hosts (network namespaces) with their own OVS, dockerd and netplugin agent, one
etcd and two masters: the real docker CLI on each host, real packets between them. The
tests marked ``docker26`` run on a cluster of Docker 26 hosts too (integration/conftest.py)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.host import BUSYBOX_IMAGE, TEST_LABEL
from testbed.multihost import Cluster, SimHost, sh
from testbed.ovs import stop_pid
from testbed.probe import ContainerNet, EchoServer, echoes, tcp_opens, tcp_session, udp_answers
from testbed.require import require_etcd
from testbed.site import dockerd_for
from testbed.wait import wait_for

pytestmark = pytest.mark.usefixtures("root")


@pytest.fixture(scope="module")
def lab(dockerd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster on the test's Docker version, started once for the module per version
    (three dockerds take a while)."""
    require_etcd()
    c = Cluster(tmp_path_factory.mktemp(f"multihost-{dockerd}"), dockerd=dockerd_for(dockerd))
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(lab: Cluster) -> Iterator[Cluster]:
    """The cluster as every test starts: etcd, the masters and every agent up, no partition,
    a full mesh of tunnels. Afterwards, whatever the outcome, anything still stopped or cut is
    brought back and the test's containers and networks are removed, so no test depends on
    what another one left behind."""
    lab.heal()
    before = lab.snapshot()
    yield lab
    lab.heal()
    lab.remove_made_since(before)


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def network(cluster: Cluster, prefix: str, subnet: str, on: list[SimHost], *opts: str) -> str:
    """A network made with netctl, once it is in the docker of every host of ``on``."""
    name = unique(prefix)
    cluster.netctl("net", "create", *opts, "-s", subnet, name)
    for h in on:
        wait_docker_network(h, name)
    return name


def wait_docker_network(host: SimHost, name: str, timeout: float = 20) -> None:
    wait_for(
        lambda: name in host.docker("network", "ls", "--format", "{{.Name}}").split(),
        timeout,
        f"{host.name}: docker network {name}",
    )


@pytest.mark.docker26
def test_containers_on_different_hosts_ping_over_vxlan(cluster: Cluster) -> None:
    h1, h2, _ = cluster.hosts
    net = network(cluster, "vx", "10.61.0.0/24", cluster.hosts, "-g", "10.61.0.1")
    a, b = cluster.run(h1, unique("a"), net), cluster.run(h2, unique("b"), net)
    assert cluster.ping(h1, a, cluster.ip_of(h2, b))
    assert cluster.ping(h2, b, cluster.ip_of(h1, a))
    mtu = h1.docker("exec", a, "cat", "/sys/class/net/eth0/mtu").strip()
    assert mtu == "1450"  # the uplink's 1500 minus VXLAN's 50
    assert cluster.ping(h1, a, "10.61.0.1")  # each host's own gateway


@pytest.mark.docker26
def test_vlan_network_across_hosts(cluster: Cluster) -> None:
    h1, _, h3 = cluster.hosts
    net = network(cluster, "vl", "10.62.0.0/24", [h1, h3], "-e", "vlan", "-p", "300")
    a, c = cluster.run(h1, unique("a"), net), cluster.run(h3, unique("c"), net)
    assert cluster.ping(h1, a, cluster.ip_of(h3, c))
    # Over the VLAN uplink, tagged 300, at the uplink's full MTU.
    assert h1.docker("exec", a, "cat", "/sys/class/net/eth0/mtu").strip() == "1500"
    flows = h1.ovs.ofctl("dump-flows", "netplugin")
    assert "dl_vlan=300" in flows and "push_vlan" in flows


def test_bulk_tcp_keeps_offloads_except_into_userspace_vxlan(cluster: Cluster) -> None:
    """The lab's ovs-vswitchd runs with userspace TSO, as scripts/host-daemons.sh starts it.
    OVS 3.1 cannot segment into its VXLAN tunnels, so the containers of a VXLAN network that
    spans hosts finish their checksums; VLAN networks keep TSO (the uplink segments). TCP
    carries every byte either way, on one host and across hosts."""
    h1, h2, h3 = cluster.hosts
    vx = network(cluster, "bt", "10.66.0.0/24", [h1, h2])
    vl = network(cluster, "bt", "10.67.0.0/24", [h1, h3], "-e", "vlan", "-p", "302")
    a, b, c = (
        cluster.run(h1, unique("a"), vx),
        cluster.run(h2, unique("b"), vx),
        cluster.run(h1, unique("c"), vx),
    )
    d, e, f = (
        cluster.run(h1, unique("d"), vl),
        cluster.run(h3, unique("e"), vl),
        cluster.run(h1, unique("f"), vl),
    )
    assert not cluster.tx_offloads(h1, a) and not cluster.tx_offloads(h2, b)
    assert cluster.tx_offloads(h1, d) and cluster.tx_offloads(h3, e)
    size = 16 << 20
    assert cluster.bulk_tcp((h1, a), (h2, b), 9100) == size  # VXLAN across hosts
    assert cluster.bulk_tcp((h1, a), (h1, c), 9101) == size  # VXLAN on one host
    assert cluster.bulk_tcp((h1, ""), (h1, c), 9105) == size  # the host, by its gateway tap
    assert cluster.bulk_tcp((h1, d), (h3, e), 9102) == size  # VLAN across hosts, with TSO
    assert cluster.bulk_tcp((h3, e), (h1, f), 9103) == size
    assert cluster.bulk_tcp((h1, d), (h1, f), 9104) == size  # VLAN on one host, with TSO
    assert cluster.bulk_tcp((h1, ""), (h1, f), 9106) == size


def test_networks_stay_isolated_across_hosts(cluster: Cluster) -> None:
    h1, h2, _ = cluster.hosts
    n1 = network(cluster, "iso", "10.63.0.0/24", [h1, h2])
    n2 = network(cluster, "iso", "10.64.0.0/24", [h1, h2])
    n3 = network(cluster, "iso", "10.65.0.0/24", [h1, h2], "-e", "vlan", "-p", "301")
    a = cluster.run(h1, unique("a"), n1)
    b, c, d = (cluster.run(h2, unique(x), n) for x, n in (("b", n1), ("c", n2), ("d", n3)))
    assert cluster.ping(h1, a, cluster.ip_of(h2, b))
    for other in (c, d):
        assert not cluster.ping(h1, a, cluster.ip_of(h2, other), count=1)
        assert not cluster.ping(h2, other, cluster.ip_of(h1, a), count=1)


@pytest.mark.docker26
def test_network_made_with_docker_on_one_host_is_usable_on_another(cluster: Cluster) -> None:
    h1, h2, h3 = cluster.hosts
    net = unique("dk")
    h1.docker(
        "network", "create", "-d", "netplugin", "--ipam-driver", "netplugin",
        "--subnet", "10.66.0.0/24", net,
    )  # fmt: skip
    wait_docker_network(h3, net)
    a, c = cluster.run(h1, unique("a"), net), cluster.run(h3, unique("c"), net)
    assert cluster.ping(h3, c, cluster.ip_of(h1, a))
    assert cluster.ip_of(h1, a) != cluster.ip_of(h3, c)  # one pool for all hosts
    # Deleting while containers run is refused, naming the hosts that have them.
    res = cluster.netctl("net", "rm", net, check=False)
    assert res.returncode != 0 and "h1" in res.stderr and "h3" in res.stderr, res.stderr
    for h, ctr in ((h1, a), (h3, c)):
        h.docker("rm", "-f", ctr)
    # docker network rm on any host removes it everywhere.
    h2.docker("network", "rm", net)
    for h in cluster.hosts:
        wait_for(
            lambda h=h: net not in h.docker("network", "ls", "--format", "{{.Name}}").split(),
            20,
            f"{h.name}: docker network {net} removed",
        )
    assert cluster.api("GET", f"networks/default:{net}").status_code == 404


def docker_network_id(host: SimHost, name: str) -> str:
    res = host.docker_res("network", "inspect", "--format", "{{.Id}}", name)
    return res.stdout.strip() if res.returncode == 0 else ""


@pytest.mark.docker26
def test_docker_network_rm_on_a_host_without_containers_is_refused(cluster: Cluster) -> None:
    """The cluster refuses while any host has endpoints, whichever host asks. Docker drops its
    own copy on the asking host whatever the driver answers, so the sync puts it back."""
    h1, h2, h3 = cluster.hosts
    net = unique("dk")
    h2.docker(
        "network", "create", "-d", "netplugin", "--ipam-driver", "netplugin",
        "--subnet", "10.67.0.0/24", net,
    )  # fmt: skip
    for h in (h1, h3):
        wait_docker_network(h, net)
    c = cluster.run(h3, unique("c"), net)
    for asking in (h1, h2):  # a mirror, and the host whose docker made the network
        old = docker_network_id(asking, net)
        asking.docker_res("network", "rm", net)
        # The cluster still has the network and its endpoint.
        got = cluster.api("GET", f"inspect/networks/default:{net}")
        assert got.status_code == 200 and got.json()["Oper"]["numEndpoints"] == 1, got.text
        # dockerd was told why, naming the host that has containers.
        log = asking.workdir / "dockerd.log"
        wait_for(
            lambda log=log: any(
                net in line and "host(s) h3" in line for line in log.read_text().splitlines()
            ),
            20,
            f"{asking.name}: dockerd logs the refusal naming h3",
        )
        # Put back on the asking host (not only at an agent restart), and usable there.
        wait_for(
            lambda asking=asking, old=old: docker_network_id(asking, net) not in ("", old),
            20,
            f"{asking.name}: docker network {net} restored",
        )
        a = cluster.run(asking, unique("a"), net)
        assert cluster.ping(asking, a, cluster.ip_of(h3, c))
        asking.docker("rm", "-f", a)
    for h in cluster.hosts:  # nobody else lost it
        assert docker_network_id(h, net), f"{h.name} lost {net}"
    assert cluster.ping(h3, c, "10.67.0.1")


def test_peer_leave_and_join_change_the_tunnels(cluster: Cluster) -> None:
    h1, h2, h3 = cluster.hosts
    for ctr in h3.docker("ps", "-q").split():  # a host with endpoints keeps its tunnel
        h3.docker("rm", "-f", ctr)
    h3.stop_agent()
    gone = h3.tunnel
    try:
        for h in (h1, h2):
            wait_for(lambda h=h: gone not in h.tunnels(), 20, f"{h.name}: tunnel to h3 removed")
        cluster.start_agent(h3)
    finally:
        cluster.ensure_agent(h3)
    cluster.wait_tunnels()
    assert gone in h1.tunnels() and gone in h2.tunnels()


@pytest.mark.docker26
def test_agent_kill9_and_restart_keep_cross_host_traffic(cluster: Cluster, tmp_path: Path) -> None:
    h1, h2, _ = cluster.hosts
    net = network(cluster, "k9", "10.67.0.0/24", [h1, h2])
    a, b = cluster.run(h1, unique("a"), net), cluster.run(h2, unique("b"), net)
    target = cluster.ip_of(h2, b)
    assert cluster.ping(h1, a, target)
    log = tmp_path / "ping.out"
    with open(log, "w") as out:
        pinger = subprocess.Popen(
            ["docker", "-H", f"unix://{h1.docker_sock}", "exec", a,
             "ping", "-i", "0.2", "-c", "75", "-W", "1", target],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: "bytes from" in log.read_text(), 20, "a's first ping answered by b")
        h2.stop_agent(signal.SIGKILL)
        try:
            # h2 drops out of the live hosts once its lease (host TTL 3 s) runs out unrefreshed.
            wait_for(
                lambda: not cluster.registered(h2), 30, "h2's registration expired in the store"
            )
            cluster.start_agent(h2)
        finally:
            cluster.ensure_agent(h2)
        pinger.wait(60)
    finally:
        stop_pid(pinger)
    out = log.read_text()
    m = re.search(r"(\d+) packets transmitted, (\d+) packets received", out)
    assert m, out
    assert int(m.group(1)) - int(m.group(2)) <= 1, out  # the datapath never stopped
    c = cluster.run(h2, unique("c"), net)  # and the restarted agent serves again
    assert cluster.ping(h1, a, cluster.ip_of(h2, c))


def test_etcd_restart_is_ridden_out(cluster: Cluster) -> None:
    h1, h2, _ = cluster.hosts
    net = network(cluster, "et", "10.68.0.0/24", [h1, h2])
    a, b = cluster.run(h1, unique("a"), net), cluster.run(h2, unique("b"), net)
    try:
        cluster.etcd.restart(down_for=3)
    finally:
        cluster.etcd.start()  # a no-op unless the restart failed half-way
    assert cluster.ping(h1, a, cluster.ip_of(h2, b))  # the datapath never depended on it
    # Watches resumed: a network made after the restart reaches every host's docker, and
    # new containers on it talk across hosts.
    after = unique("et")
    wait_for(
        lambda: (
            cluster.netctl("net", "create", "-s", "10.69.0.0/24", after, check=False).returncode
            == 0
        ),
        30,
        "netctl net create after the etcd restart",
        interval=1,
    )
    for h in (h1, h2):
        wait_docker_network(h, after, timeout=40)
    c, d = cluster.run(h1, unique("c"), after), cluster.run(h2, unique("d"), after)
    assert cluster.ping(h1, c, cluster.ip_of(h2, d))


def test_master_failover_during_docker_runs(cluster: Cluster) -> None:
    h1, h2, _ = cluster.hosts
    net = network(cluster, "fo", "10.70.0.0/24", [h1, h2])
    leader = next(m for m in cluster.masters if cluster.is_leader(m))
    results: list[subprocess.CompletedProcess[str]] = []

    def runs(host: SimHost) -> None:
        for _ in range(4):
            results.append(
                host.docker_res(
                    "run", "-d", "--label", TEST_LABEL, "--net", net, BUSYBOX_IMAGE, "sleep", "600"
                )
            )

    def booked() -> int:
        r = cluster.api("GET", f"inspect/networks/default:{net}")
        return len(r.json()["Oper"]["endpoints"]) if r.ok else 0

    threads = [threading.Thread(target=runs, args=(h,)) for h in (h1, h2)]
    for t in threads:
        t.start()
    try:
        # The leader dies while the runs are under way: once the first has its endpoint.
        wait_for(lambda: results or booked(), 60, f"the first docker run on {net} is booked")
        leader.kill()
        for t in threads:
            t.join(120)
        assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
        insp = cluster.api("GET", f"inspect/networks/default:{net}").json()
        addrs = [e["ipAddress"] for e in insp["Oper"]["endpoints"]]
        assert len(addrs) == 8 and len(set(addrs)) == 8  # none lost, none twice
    finally:
        for t in threads:
            t.join(120)
        cluster.ensure_master(leader)


def docker_networks(host: SimHost) -> list[str]:
    return host.docker("network", "ls", "--format", "{{.Name}}").split()


@pytest.mark.docker26
def test_restarted_agent_reconciles_its_docker_both_ways(cluster: Cluster) -> None:
    _, h2, _ = cluster.hosts
    old = network(cluster, "rc", "10.71.0.0/24", [h2])
    theirs = unique("theirs")
    h2.stop_agent()
    try:
        cluster.netctl("net", "rm", old)
        new = unique("rc")
        cluster.netctl("net", "create", "-s", "10.72.0.0/24", new)
        h2.docker("network", "create", "--label", TEST_LABEL, "-d", "bridge", theirs)
        cluster.start_agent(h2)
        wait_docker_network(h2, new)
        wait_for(lambda: old not in docker_networks(h2), 20, f"h2: stale {old} removed")
        assert theirs in docker_networks(h2)  # another driver's network is left alone
    finally:
        cluster.ensure_agent(h2)
        h2.docker_res("network", "rm", theirs)


def test_a_healed_partition_converges(cluster: Cluster) -> None:
    h1, h2, h3 = cluster.hosts
    dropped, made = network(cluster, "pt", "10.74.0.0/24", [h3]), unique("pt")
    cut = cluster.underlay_port(h3)
    sh("ip", "link", "set", cut, "down")
    try:
        # Cut off, h3's agent cannot refresh its lease: once the host TTL (3 s) has passed
        # the store drops its registration, and the others drop the tunnel to it.
        wait_for(lambda: h1.tunnels() == {h2.tunnel}, 30, "h1: tunnel to h3 gone", last=h1.tunnels)
        cluster.netctl("net", "rm", dropped)
        cluster.netctl("net", "create", "-s", "10.75.0.0/24", made)
    finally:
        sh("ip", "link", "set", cut, "up")
    cluster.wait_tunnels(timeout=40)
    wait_docker_network(h3, made, timeout=40)
    wait_for(lambda: dropped not in docker_networks(h3), 40, f"h3: {dropped} removed")
    a, c = cluster.run(h1, unique("a"), made), cluster.run(h3, unique("c"), made)
    assert cluster.ping(h3, c, cluster.ip_of(h1, a))


def container_net(host: SimHost, container: str) -> ContainerNet:
    pid = int(host.docker("inspect", "-f", "{{.State.Pid}}", container).strip())
    return ContainerNet(container, pid)


@pytest.mark.parametrize("encap", ["vxlan", "vlan"])
def test_policies_across_hosts(cluster: Cluster, encap: str) -> None:
    """An `in` rule is enforced on the destination's host, an `out` rule on the source's,
    for endpoints on different hosts; replies and established connections pass."""
    h1, h2, h3 = cluster.hosts
    opts = ("-e", "vlan", "-p", "310") if encap == "vlan" else ()
    subnet = "10.76.0.0/24" if encap == "vlan" else "10.77.0.0/24"
    on = [h1, h3] if encap == "vlan" else [h1, h2]
    far = on[1]
    net = network(cluster, "pol", subnet, on, *opts)
    web, app = unique("web"), unique("app")
    for g in (web, app):
        cluster.netctl("group", "create", net, g)
        for h in on:
            wait_docker_network(h, g)
    w = cluster.run(far, unique("w"), web)
    a = cluster.run(h1, unique("a"), app)
    a2 = cluster.run(far, unique("a"), app)  # app on web's own host
    nets = {c: container_net(h, c) for h, c in ((far, w), (h1, a), (far, a2))}
    servers = [EchoServer(nets[w], 80), EchoServer(nets[w], 81), EchoServer(nets[a], 80)]
    policy = unique("p")
    try:
        wip, aip = cluster.ip_of(far, w), cluster.ip_of(h1, a)
        # Each host learns of the other's new containers through the store: a moment.
        wait_for(lambda: tcp_opens(nets[a], wip, 81), 10, f"{a} reaches {w} across hosts")
        assert udp_answers(nets[a], wip, 81) and tcp_opens(nets[w], aip, 80)
        with tcp_session(nets[a], wip, 81) as before:
            cluster.netctl("policy", "create", policy)
            rules = [
                ("1", "-d", "in", "-l", "tcp", "-j", "deny"),
                ("2", "-d", "in", "-g", app, "-l", "tcp", "-P", "80", "-p", "10"),
                ("3", "-d", "out", "-s", aip, "-l", "udp", "-j", "deny"),
            ]
            for r in rules:
                cluster.netctl("policy", "rule-add", policy, *r)
            cluster.netctl("group", "update", "-p", policy, web)
            # in: judged on web's host for a connection from the other host.
            wait_for(lambda: not tcp_opens(nets[a], wip, 81), 10, "tcp/81 into web denied")
            assert echoes(before)  # established before the rule: not cut
        assert tcp_opens(nets[a], wip, 80)  # allowed from app, across hosts
        assert tcp_opens(nets[a2], wip, 80) and not tcp_opens(nets[a2], wip, 81)  # same host
        # out: judged on web's host for web's own connections to the other host.
        assert not udp_answers(nets[w], aip, 80)
        assert tcp_opens(nets[w], aip, 80) and udp_answers(nets[a], wip, 80)
    finally:
        for s in servers:
            s.close()
        for n in nets.values():
            n.close()
        for h, c in ((far, w), (h1, a), (far, a2)):
            h.docker("rm", "-f", c, check=False)
        for g in (web, app):
            cluster.netctl("group", "update", "--no-policy", g, check=False)
        cluster.netctl("policy", "rm", policy, check=False)
        for g in (web, app):
            cluster.netctl("group", "rm", g, check=False)
