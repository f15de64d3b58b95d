"""Endpoint-group policies on one host, end to end: netctl makes the network, the groups
(which appear in docker), the policies and their rules; containers started with
`docker run --net GROUP` talk real TCP, UDP and ICMP, and the switch enforces the rules."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from testbed.lab import NetctlLab
from testbed.master import MasterProcess
from testbed.plugin import PluginProcess
from testbed.probe import (
    ContainerNet,
    NamespaceNet,
    echoes,
    tcp_opens,
    tcp_session,
    udp_answers,
)
from testbed.site import restart_stopped, serve_stack
from testbed.wait import wait_for

from .test_docker_single_host import (
    ip_of,
    outside_namespace,
    ping,
    sh,
)

BRIDGE = "netplugin"
RESYNCED = "resynced with the cluster"
# test_docker_single_host's outside namespace: the host is 198.51.100.1 to it.
OUTSIDE_HOST, OUTSIDE_CLIENT, PUBLISHED = "198.51.100.1", "198.51.100.2", 18090
# How long a test waits for a change to reach the switch. The 1 s is measured by
# `make bench` (bench/policy.py); tests never assert on timings.
SETTLE = 10.0


class PolicyLab(NetctlLab):
    def member(self, group: str, port: int | None = 80, *extra: str) -> tuple[str, ContainerNet]:
        """A container of ``group``, serving TCP and UDP echo on ``port``; its name and net."""
        name = self.container(group, docker_args=extra)
        if port is not None:
            self.echo(name, port)
        return name, self.net(name)


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, PluginProcess]]:
    yield from serve_stack(tmp_path_factory)


@pytest.fixture(autouse=True)
def stack_up(stack: tuple[MasterProcess, PluginProcess]) -> None:
    restart_stopped(stack)


@pytest.fixture
def outside() -> Iterator[str]:
    yield from outside_namespace()


_SUBNETS = iter(range(100, 200))


@pytest.fixture
def lab(stack: tuple[MasterProcess, PluginProcess]) -> Iterator[PolicyLab]:
    with PolicyLab(stack[0].url, f"10.243.{next(_SUBNETS)}.0/24") as lab:
        yield lab


def test_in_rules_by_group_port_and_protocol(lab: PolicyLab) -> None:
    web, app, db = lab.group("web"), lab.group("app"), lab.group("db")
    w, w_net = lab.member(web)
    lab.echo(w, 81)
    a, a_net = lab.member(app)
    d, d_net = lab.member(db)
    wip = ip_of(w)
    # No policy: every group talks to every other (Contiv's default).
    assert tcp_opens(a_net, wip, 81) and tcp_opens(d_net, wip, 80) and udp_answers(a_net, wip, 81)
    p = lab.policy("webin")
    lab.netctl("policy", "rule-add", p, "1", "-d", "in", "-l", "tcp", "-j", "deny")
    lab.netctl("policy", "rule-add", p, "2", "-d", "in", "-g", app, "-l", "tcp", "-P", "80",
               "-p", "10", "-j", "allow")  # fmt: skip
    lab.netctl("group", "update", "-p", p, web)
    wait_for(lambda: not tcp_opens(a_net, wip, 81), SETTLE, "tcp/81 from app is denied")
    assert tcp_opens(a_net, wip, 80)  # the higher-priority allow
    assert not tcp_opens(d_net, wip, 80)  # ... is for app only
    assert udp_answers(a_net, wip, 81) and udp_answers(d_net, wip, 80)  # only TCP is denied
    assert ping(a, wip)
    # web's own new connections are not "in" for web: they pass.
    assert tcp_opens(w_net, ip_of(a), 80)
    # ICMP by a rule added to the running policy; removing it opens ICMP again.
    lab.netctl("policy", "rule-add", p, "3", "-d", "in", "-l", "icmp", "-p", "5", "-j", "deny")
    wait_for(lambda: not ping(a, wip, count=1), SETTLE, "ping to web is denied")
    assert not ping(d, wip, count=1)
    lab.netctl("policy", "rule-rm", p, "3")
    wait_for(lambda: ping(a, wip, count=1), SETTLE, "ping to web is allowed again")
    # A policy in use cannot go; detached, it can, and web is open again.
    refused = lab.netctl("policy", "rm", p, check=False)
    assert refused.returncode != 0 and web in refused.stderr + refused.stdout
    lab.netctl("group", "update", "--no-policy", web)
    wait_for(lambda: tcp_opens(d_net, wip, 81), SETTLE, "web is open without its policy")


def test_out_rules_by_address_and_network(lab: PolicyLab) -> None:
    web, app, db = lab.group("web"), lab.group("app"), lab.group("db")
    w, w_net = lab.member(web)
    lab.echo(w, 81)
    a, a_net = lab.member(app)
    _, d_net = lab.member(db)
    wip = ip_of(w)
    p = lab.policy("appout")
    lab.netctl("policy", "rule-add", p, "1", "-d", "out", "-s", wip, "-l", "udp", "-j", "deny")
    lab.netctl("policy", "rule-add", p, "2", "-d", "out", "-o", lab.network, "-l", "tcp",
               "-P", "81", "-j", "deny")  # fmt: skip
    lab.netctl("group", "update", "-p", p, app)
    wait_for(lambda: not udp_answers(a_net, wip, 80), SETTLE, "udp from app to web is denied")
    assert not tcp_opens(a_net, wip, 81)
    assert tcp_opens(a_net, wip, 80)
    assert udp_answers(d_net, wip, 80) and tcp_opens(d_net, wip, 81)  # db has no policy
    # Replies to app's allowed connections pass; connections into app are not "out".
    assert tcp_opens(w_net, ip_of(a), 80) and udp_answers(w_net, ip_of(a), 80)


def test_established_connections_stay_and_new_containers_are_covered_at_once(
    lab: PolicyLab,
) -> None:
    web, app = lab.group("web"), lab.group("app")
    w, _ = lab.member(web)
    lab.echo(w, 81)
    _, a_net = lab.member(app)
    wip = ip_of(w)
    p = lab.policy("deny")
    with tcp_session(a_net, wip, 80) as session:
        assert echoes(session)
        lab.netctl("policy", "rule-add", p, "1", "-d", "in", "-l", "tcp", "-P", "80", "-j", "deny")
        lab.netctl("group", "update", "-p", p, web)
        wait_for(lambda: not tcp_opens(a_net, wip, 80), SETTLE, "new tcp to web is denied")
        assert echoes(session)  # the connection made before the rule is not cut
    # Conntrack forgetting a connection (an ovs-vswitchd restart, or an upgrade from a
    # netplugin without conntrack) does not cut it either when the rules allow it anew:
    # userspace conntrack picks a TCP stream up mid-way, as a new connection.
    with tcp_session(a_net, wip, 81) as session:
        assert echoes(session)
        sh("ovs-appctl", "dpctl/flush-conntrack")
        assert echoes(session)
    # A container started in the group now is covered from its first packet.
    w2, _ = lab.member(web)
    assert not tcp_opens(a_net, ip_of(w2), 80)
    assert udp_answers(a_net, ip_of(w2), 80)


def test_traffic_from_the_host_is_judged_by_from_address_rules(lab: PolicyLab) -> None:
    web = lab.group("web")
    w, _ = lab.member(web)
    wip = ip_of(w)
    gateway = lab.subnet.replace(".0/24", ".1")  # the host reaches the network from it
    host = HostNet()
    assert tcp_opens(host, wip, 80)
    p = lab.policy("nohost")
    lab.netctl("policy", "rule-add", p, "1", "-d", "in", "-i", gateway, "-l", "tcp", "-j", "deny")
    lab.netctl("group", "update", "-p", p, web)
    wait_for(lambda: not tcp_opens(host, wip, 80), SETTLE, "tcp from the host is denied")
    assert ping(w, gateway)  # web's own traffic to the gateway is not "in"


def test_published_ports_clients_are_judged_by_their_own_address(
    lab: PolicyLab, outside: str
) -> None:
    """A client outside the host reaches a published port with its own address as the
    source (DNAT, no SNAT): a `fromIpAddress` rule judges it, and only it."""
    web = lab.group("web")
    w, _ = lab.member(web, 80, "-p", f"{OUTSIDE_HOST}:{PUBLISHED}:80")
    client = NamespaceNet(outside)
    try:
        wait_for(lambda: tcp_opens(client, OUTSIDE_HOST, PUBLISHED), SETTLE, "published port")
        p = lab.policy("noout")
        lab.netctl("policy", "rule-add", p, "1", "-d", "in", "-i", OUTSIDE_CLIENT, "-j", "deny")
        lab.netctl("group", "update", "-p", p, web)
        wait_for(lambda: not tcp_opens(client, OUTSIDE_HOST, PUBLISHED), SETTLE, "outside denied")
        assert tcp_opens(HostNet(), ip_of(w), 80)  # the host, from the gateway: not that CIDR
    finally:
        client.close()


class HostNet:
    """The test process's own namespace, shaped like ContainerNet for the probes."""

    def socket(self, kind: int) -> object:
        import socket

        return socket.socket(socket.AF_INET, kind)


_COUNTERS = re.compile(r"\b(duration|n_packets|n_bytes|idle_age|hard_age)=[^,\s]+,?\s*")


def flow_table() -> dict[str, float]:
    """The bridge's flows: {flow without counters: its age in seconds}."""
    out = sh("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", BRIDGE).stdout.splitlines()
    table = {}
    for line in out:
        m = re.search(r"duration=([\d.]+)s", line)
        if m:
            table[_COUNTERS.sub("", line).strip()] = float(m.group(1))
    return table


def test_plugin_restart_changes_no_flow_and_keeps_enforcing(
    lab: PolicyLab, stack: tuple[MasterProcess, PluginProcess]
) -> None:
    _, plugin = stack
    web, app = lab.group("web"), lab.group("app")
    w, _ = lab.member(web)
    lab.echo(w, 81)
    _, a_net = lab.member(app)
    wip = ip_of(w)
    p = lab.policy("only80")
    lab.netctl("policy", "rule-add", p, "1", "-d", "in", "-l", "tcp", "-j", "deny")
    lab.netctl("policy", "rule-add", p, "2", "-d", "in", "-l", "tcp", "-P", "80", "-p", "2")
    lab.netctl("group", "update", "-p", p, web)
    wait_for(lambda: not tcp_opens(a_net, wip, 81), SETTLE, "tcp/81 to web is denied")
    before = flow_table()
    assert any("ct_state" in f for f in before) and any("reg6" in f for f in before)
    resyncs = plugin.log.read_text().count(RESYNCED)
    plugin.stop()
    plugin.start()
    wait_for(
        lambda: plugin.log.read_text().count(RESYNCED) > resyncs, SETTLE, "the plugin resynced"
    )
    # Every flow is still there and none was re-added (its age kept growing).
    after = flow_table()
    assert set(after) == set(before)
    assert all(after[f] >= before[f] for f in before)
    assert tcp_opens(a_net, wip, 80) and not tcp_opens(a_net, wip, 81)
