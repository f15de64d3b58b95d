"""Service LBs and netprofiles across hosts (network namespaces with their own OVS, dockerd
and agent, one etcd, two masters): a client on one host reaches providers on two others
through a VIP; a netprofile limits what a container sends across the VXLAN underlay and its
DSCP mark is on both the inner and the outer IP header."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from testbed.capture import capture, ipv4_tos
from testbed.host import IPERF_IMAGE, TEST_LABEL
from testbed.multihost import Cluster, SimHost
from testbed.probe import ContainerNet, NameServer, who_answers
from testbed.require import require_etcd
from testbed.wait import wait_for

from .test_docker_netprofiles import within
from .test_multihost import container_net, network, unique, wait_docker_network

pytestmark = pytest.mark.usefixtures("root")

SETTLE = 20.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_etcd()
    c = Cluster(tmp_path_factory.mktemp("multihost-svc")).start()
    try:
        for h in c.hosts[:2]:
            h.load_image(IPERF_IMAGE)
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(lab: Cluster) -> Iterator[Cluster]:
    lab.heal()
    before = lab.snapshot()
    yield lab
    lab.heal()
    lab.remove_made_since(before)


def providers(cluster: Cluster, svc: str) -> set[str]:
    shown = json.loads(cluster.netctl("--json", "service", "inspect", svc).stdout)
    return {p["containerName"] for p in shown["Oper"]["providers"]}


def test_a_vip_reaches_providers_on_other_hosts(cluster: Cluster) -> None:
    h1, h2, h3 = cluster.hosts
    net = network(cluster, "svc", "10.78.0.0/24", [h1, h2, h3])
    web2 = cluster.run(h2, unique("web"), net, "--label", "app=web")
    web3 = cluster.run(h3, unique("web"), net, "--label", "app=web")
    client = cluster.run(h1, unique("cl"), net)
    nets: dict[str, ContainerNet] = {
        c: container_net(h, c) for h, c in ((h2, web2), (h3, web3), (h1, client))
    }
    servers = [NameServer(nets[web2], 8080, web2), NameServer(nets[web3], 8080, web3)]
    svc = unique("web")
    try:
        cluster.netctl("service", "create", "-s", net, "-l", "app=web", "-p", "80:8080:TCP", svc)
        vip = json.loads(cluster.netctl("--json", "service", "inspect", svc).stdout)["Oper"][
            "serviceVip"
        ]
        wait_for(lambda: providers(cluster, svc) == {web2, web3}, SETTLE, "both provide")
        wait_for(
            lambda: who_answers(nets[client], vip, 80, 10).get("error") is None,
            SETTLE,
            "the VIP answers across hosts",
        )
        got = who_answers(nets[client], vip, 80, 200)
        assert got.get("error") is None and min(got.get(web2, 0), got.get(web3, 0)) >= 60, got
        h3.docker("stop", "-t", "1", web3)
        wait_for(lambda: providers(cluster, svc) == {web2}, SETTLE, f"{web3} left")
        wait_for(
            lambda: who_answers(nets[client], vip, 80, 20) == {web2: 20},
            SETTLE,
            f"every new connection reaches {web2} on {h2.name}",
        )
    finally:
        for s in servers:
            s.close()
        for n in nets.values():
            n.close()
        cluster.netctl("service", "rm", svc, check=False)


def iperf(host: SimHost, sender: str, server_ip: str, udp: bool = False) -> float:
    extra = ["-u", "-b", "20M"] if udp else []
    out = host.docker(
        "exec", sender, "iperf3", "-J", "-c", server_ip, "-t", "4", *extra, timeout=60
    )
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def test_a_netprofile_limits_and_marks_across_the_underlay(cluster: Cluster) -> None:
    h1, h2, _ = cluster.hosts
    net = network(cluster, "qos", "10.79.0.0/24", [h1, h2])
    profile, group = unique("p"), unique("g")
    cluster.netctl("netprofile", "create", "-b", "10mbps", "-d", "46", profile)
    cluster.netctl("group", "create", "-n", profile, net, group)
    containers: list[tuple[SimHost, str]] = []
    try:
        wait_docker_network(h1, group)
        server = unique("srv")
        h2.docker("run", "-d", "--label", TEST_LABEL, "--name", server, "--net", net,
                  IPERF_IMAGE, "iperf3", "-s")  # fmt: skip
        sender = unique("snd")
        h1.docker("run", "-d", "--label", TEST_LABEL, "--name", sender, "--net", group,
                  IPERF_IMAGE, "sleep", "600")  # fmt: skip
        containers += [(h2, server), (h1, sender)]
        sip = cluster.ip_of(h2, server)
        wait_for(lambda: cluster.ping(h1, sender, sip, 1), SETTLE, "the sender reaches the server")
        tcp, udp = iperf(h1, sender, sip), iperf(h1, sender, sip, udp=True)
        assert within(tcp, 10) and within(udp, 10), (tcp, udp)

        def pings() -> None:
            cluster.ping(h1, sender, sip, 3)

        pid = h2.docker("inspect", "-f", "{{.State.Pid}}", server).strip()
        inner = ["nsenter", "-t", pid, "-n", "tcpdump", "-l", "-nn", "-v", "-c", "3",
                 "-i", "eth0", "icmp[icmptype] = icmp-echo"]  # fmt: skip
        outer = ["ip", "netns", "exec", h2.netns, "tcpdump", "-l", "-nn", "-v", "-c", "3",
                 "-i", "eth1", "udp port 4789"]  # fmt: skip
        assert ipv4_tos(capture(inner, pings)) == {"0xb8"}
        # The VXLAN packet's own (outer, UDP) header inherits the inner DSCP.
        assert ipv4_tos(capture(outer, pings), "proto UDP") == {"0xb8"}
    finally:
        for h, c in containers:
            h.docker("rm", "-f", c, check=False)
        cluster.netctl("group", "rm", group, check=False)
        cluster.netctl("netprofile", "rm", profile, check=False)
