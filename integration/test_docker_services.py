"""Service LBs on one host, end to end: netctl makes the network and the service, containers
started with `docker run --net NET --label app=web` become its providers (the agent reads
their labels from dockerd), and real TCP connections to the VIP reach them.

Run under the docker lock:

    flock /tmp/docker.lock env PYTHONPATH=$PWD \
        .venv/bin/pytest -q integration/test_docker_services.py
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from .master import MasterProcess
from .plugin import PluginProcess
from .probe import ContainerNet, NameServer, echoes, tcp_session, who_answers
from .test_docker_single_host import BIN, IMAGE, RUN, ip_of, restart_stopped, serve_stack, sh
from .wait import wait_for

SETTLE = 15.0  # how long a change may take to reach the switch here (bench measures it)


@dataclass
class Lab:
    master: MasterProcess
    prefix: str
    subnet: str
    network: str = ""
    containers: list[str] = field(default_factory=list)
    nets: dict[str, ContainerNet] = field(default_factory=dict)
    servers: list[NameServer] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh(str(BIN / "netctl"), "--netmaster", self.master.url, *args, check=check)

    def container(self, net: str, *labels: str, serve: int | None = 8080) -> str:
        name = f"{self.prefix}c{len(self.containers)}"
        label_flags = [f for lab in labels for f in ("--label", lab)]
        sh(*RUN, "--name", name, "--net", net, *label_flags, IMAGE, "sleep", "600")
        self.containers.append(name)
        self.nets[name] = ContainerNet(name)
        if serve is not None:
            self.servers.append(NameServer(self.nets[name], serve, name))
        return name

    def service(self, name: str, *opts: str) -> str:
        svc = f"{self.prefix}{name}"
        self.netctl("service", "create", "-s", self.network, *opts, svc)
        self.services.append(svc)
        return svc

    def inspect(self, svc: str) -> dict:  # type: ignore[type-arg]
        return json.loads(self.netctl("--json", "service", "inspect", svc).stdout)["Oper"]

    def providers(self, svc: str) -> set[str]:
        return {p["containerName"] for p in self.inspect(svc)["providers"]}

    def close(self) -> None:
        for s in self.servers:
            s.close()
        for n in self.nets.values():
            n.close()
        for c in self.containers:
            sh("docker", "rm", "-f", c, check=False)
        for s in self.services:
            self.netctl("service", "rm", s, check=False)
        for g in self.groups:
            self.netctl("group", "update", "--no-policy", g, check=False)
        for p in self.policies:
            self.netctl("policy", "rm", p, check=False)
        for g in self.groups:
            self.netctl("group", "rm", g, check=False)
        if self.network:
            self.netctl("net", "rm", self.network, check=False)


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
def lab(stack: tuple[MasterProcess, PluginProcess]) -> Iterator[Lab]:
    prefix = f"s{uuid.uuid4().hex[:4]}"
    lab = Lab(stack[0], prefix, f"10.244.{next(_SUBNETS)}.0/24")
    try:
        lab.network = f"{prefix}net"
        lab.netctl("net", "create", "-s", lab.subnet, lab.network)
        yield lab
    finally:
        lab.close()


def test_a_vip_spreads_connections_over_labelled_containers_as_they_come_and_go(lab: Lab) -> None:
    web1 = lab.container(lab.network, "app=web")
    web2 = lab.container(lab.network, "app=web", "tier=front")
    lab.container(lab.network, "app=db")  # not selected
    svc = lab.service("web", "-l", "app=web", "-p", "80:8080:TCP")
    oper = lab.inspect(svc)
    vip = oper["serviceVip"]
    assert vip.startswith(lab.subnet.rsplit(".", 1)[0])
    wait_for(lambda: lab.providers(svc) == {web1, web2}, SETTLE, "both web containers provide")
    client = lab.container(lab.network, serve=None)
    net = lab.nets[client]
    wait_for(lambda: who_answers(net, vip, 80, 1).get("error") is None, SETTLE, "the VIP answers")
    got = who_answers(net, vip, 80, 200)
    assert got.get("error") is None and min(got.get(web1, 0), got.get(web2, 0)) >= 60, got

    # An established connection to one provider stays while another one leaves.
    with tcp_session(net, vip, 80) as first, tcp_session(net, vip, 80) as second:
        mine = {first.recv(64).decode(): first, second.recv(64).decode(): second}
        kept = mine.get(web1)
        if kept is None:  # both went to web2: open one more until web1 answers
            kept = next(s for s in _sessions_to(net, vip, web1))
        sh("docker", "stop", "-t", "1", web2)
        wait_for(lambda: lab.providers(svc) == {web1}, SETTLE, f"{web2} no longer provides")
        wait_for(
            lambda: who_answers(net, vip, 80, 20) == {web1: 20},
            SETTLE,
            f"every new connection reaches {web1}",
        )
        assert echoes(kept)  # established before, to the provider that stayed: not cut

    # A new labelled container joins.
    web3 = lab.container(lab.network, "app=web")
    wait_for(lambda: lab.providers(svc) == {web1, web3}, SETTLE, f"{web3} provides")
    wait_for(
        lambda: who_answers(net, vip, 80, 40).get(web3, 0) > 0, SETTLE, f"{web3} gets connections"
    )
    assert lab.inspect(svc)["numProviders"] == 2


def _sessions_to(net: ContainerNet, vip: str, who: str) -> Iterator[object]:
    """Open connections to the VIP until one reaches ``who``; yields it (left open)."""
    import socket

    for _ in range(50):
        s = net.socket(socket.SOCK_STREAM)
        s.settimeout(2.0)
        s.connect((vip, 80))
        if s.recv(64).decode() == who:
            yield s
            return
        s.close()


def test_a_provider_reaches_its_own_vip(lab: Lab) -> None:
    web1 = lab.container(lab.network, "app=web")
    web2 = lab.container(lab.network, "app=web")
    svc = lab.service("hp", "-l", "app=web", "-p", "80:8080:tcp")
    vip = lab.inspect(svc)["serviceVip"]
    wait_for(lambda: lab.providers(svc) == {web1, web2}, SETTLE, "both provide")
    wait_for(
        lambda: who_answers(lab.nets[web1], vip, 80, 1).get("error") is None,
        SETTLE,
        "the VIP answers a provider",
    )
    got = who_answers(lab.nets[web1], vip, 80, 40)
    assert got.get("error") is None and got.get(web1, 0) > 0 and got.get(web2, 0) > 0, got


def test_a_policy_denying_the_providers_port_blocks_it_through_the_vip(lab: Lab) -> None:
    group = f"{lab.prefix}db"
    lab.netctl("group", "create", lab.network, group)
    lab.groups.append(group)
    wait_for(
        lambda: sh("docker", "network", "inspect", group, check=False).returncode == 0,
        SETTLE,
        f"docker network {group} appears",
    )
    db = lab.container(group, "app=db")
    svc = lab.service("db", "-l", "app=db", "-p", "5432:8080:TCP")
    vip = lab.inspect(svc)["serviceVip"]
    client = lab.nets[lab.container(lab.network, serve=None)]
    wait_for(lambda: who_answers(client, vip, 5432, 1) == {db: 1}, SETTLE, "the VIP reaches db")
    policy = f"{lab.prefix}dbin"
    lab.netctl("policy", "create", policy)
    lab.policies.append(policy)
    lab.netctl("policy", "rule-add", policy, "1", "-d", "in", "-l", "tcp", "-P", "8080",
               "-j", "deny")  # fmt: skip
    lab.netctl("group", "update", "-p", policy, group)
    wait_for(
        lambda: who_answers(client, vip, 5432, 1, timeout=1) == {"error": 1},
        SETTLE,
        "the rule on the provider's port blocks the VIP",
    )
    assert who_answers(client, ip_of(db), 8080, 1, timeout=1) == {"error": 1}


def test_bad_services_are_refused_and_book_nothing(lab: Lab) -> None:
    before = lab.netctl("--json", "net", "inspect", lab.network).stdout
    allocated = json.loads(before)["Oper"].get("allocatedAddresses", [])
    for args, says in (
        (["-s", lab.network, "-l", "a=b", "-p", "80:80:TCP", "--preferred-ip", "10.9.9.9"],
         "is outside network"),
        (["-s", lab.network, "-l", "a=b", "-p", "eighty"], "is not SERVICE_PORT"),
        (["-s", "nosuch", "-l", "a=b", "-p", "80:80:TCP"], "not found"),
        (["-s", lab.network, "-l", "a=b", "-p", "80:80:TCP", "--preferred-ip",
          lab.subnet.rsplit(".", 1)[0] + ".1"], "gateway"),
    ):  # fmt: skip
        res = lab.netctl("service", "create", *args, f"{lab.prefix}bad", check=False)
        assert res.returncode == 1 and says in res.stderr, res.stderr
    after = json.loads(lab.netctl("--json", "net", "inspect", lab.network).stdout)["Oper"]
    assert after.get("allocatedAddresses", []) == allocated
    assert lab.netctl("--json", "service", "ls").stdout.strip() in ("[]", "")


def test_a_plugin_restart_keeps_groups_meters_flows_and_connections(
    lab: Lab, stack: tuple[MasterProcess, PluginProcess]
) -> None:
    from .test_policy_single_host import RESYNCED, flow_table

    _, plugin = stack
    profile = f"{lab.prefix}gold"
    lab.netctl("netprofile", "create", "-b", "50mbps", "-d", "10", profile)
    group = f"{lab.prefix}web"
    lab.netctl("group", "create", "-n", profile, lab.network, group)
    lab.groups.append(group)
    wait_for(
        lambda: sh("docker", "network", "inspect", group, check=False).returncode == 0,
        SETTLE,
        f"docker network {group} appears",
    )
    web1, web2 = lab.container(group, "app=web"), lab.container(group, "app=web")
    svc = lab.service("rs", "-l", "app=web", "-p", "80:8080:TCP")
    vip = lab.inspect(svc)["serviceVip"]
    net = lab.nets[lab.container(lab.network, serve=None)]
    wait_for(lambda: lab.providers(svc) == {web1, web2}, SETTLE, "both provide")
    wait_for(lambda: who_answers(net, vip, 80, 4).get("error") is None, SETTLE, "VIP answers")

    def switch(what: str) -> str:
        return sh("ovs-ofctl", "-O", "OpenFlow13", what, "netplugin").stdout

    groups, meters, flows = switch("dump-groups"), switch("dump-meters"), flow_table()
    assert "type=select" in groups and "rate=50000" in meters
    try:
        with tcp_session(net, vip, 80) as session:
            who = session.recv(64)
            resyncs = plugin.log.read_text().count(RESYNCED)
            plugin.stop()
            assert echoes(session)  # the switch keeps forwarding while the agent is down
            plugin.start()
            wait_for(
                lambda: plugin.log.read_text().count(RESYNCED) > resyncs,
                SETTLE,
                "the plugin resynced",
            )
            assert echoes(session) and who in (web1.encode(), web2.encode())
        assert switch("dump-groups") == groups and switch("dump-meters") == meters
        after = flow_table()
        assert set(after) == set(flows) and all(after[f] >= flows[f] for f in flows)
        got = who_answers(net, vip, 80, 40)
        assert got.get("error") is None and got.get(web1, 0) and got.get(web2, 0), got
    finally:
        lab.netctl("service", "rm", svc, check=False)
        lab.services.remove(svc)
        for c in (web1, web2):
            sh("docker", "rm", "-f", c, check=False)
        lab.netctl("group", "rm", group, check=False)
        lab.netctl("netprofile", "rm", profile, check=False)
