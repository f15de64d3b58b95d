"""Service LBs on one host, end to end: netctl makes the network and the service, containers
started with `docker run --net NET --label app=web` become its providers (the agent reads
their labels from dockerd), and real TCP connections and UDP flows to the VIP reach them.

Run under the docker lock:

    flock /tmp/docker.lock env PYTHONPATH=$PWD \
        .venv/bin/pytest -q integration/test_docker_services.py
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from testbed.lab import SETTLE, NetctlLab, ip_of, run
from testbed.master import MasterProcess
from testbed.plugin import PluginProcess
from testbed.probe import ContainerNet, echoes, tcp_session, who_answers
from testbed.site import restart_stopped, serve_stack
from testbed.wait import wait_for


class Lab(NetctlLab):
    def provider(self, net: str, *labels: str) -> str:
        """A container on ``net`` with ``labels``, answering its name on TCP 8080."""
        name = self.container(net, labels=labels)
        self.names(name, 8080)
        return name

    def vip(self, svc: str) -> str:
        return str(self.inspect("service", svc)["serviceVip"])

    def providers(self, svc: str) -> set[str]:
        return {p["containerName"] for p in self.inspect("service", svc)["providers"]}


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
    with Lab(stack[0].url, f"10.244.{next(_SUBNETS)}.0/24") as lab:
        yield lab


def test_a_vip_spreads_connections_over_labelled_containers_as_they_come_and_go(lab: Lab) -> None:
    web1 = lab.provider(lab.network, "app=web")
    web2 = lab.provider(lab.network, "app=web", "tier=front")
    lab.provider(lab.network, "app=db")  # not selected
    svc = lab.service("web", "-l", "app=web", "-p", "80:8080:TCP")
    vip = lab.vip(svc)
    assert vip.startswith(lab.subnet.rsplit(".", 1)[0])
    wait_for(lambda: lab.providers(svc) == {web1, web2}, SETTLE, "both web containers provide")
    net = lab.net(lab.container(lab.network))
    wait_for(lambda: who_answers(net, vip, 80, 1).get("error") is None, SETTLE, "the VIP answers")
    got = who_answers(net, vip, 80, 200)
    assert got.get("error") is None and min(got.get(web1, 0), got.get(web2, 0)) >= 60, got

    # An established connection to one provider stays while another one leaves.
    with tcp_session(net, vip, 80) as first, tcp_session(net, vip, 80) as second:
        mine = {first.recv(64).decode(): first, second.recv(64).decode(): second}
        kept = mine.get(web1)
        if kept is None:  # both went to web2: open one more until web1 answers
            kept = next(s for s in _sessions_to(net, vip, web1))
        run("docker", "stop", "-t", "1", web2)
        wait_for(lambda: lab.providers(svc) == {web1}, SETTLE, f"{web2} no longer provides")
        wait_for(
            lambda: who_answers(net, vip, 80, 20) == {web1: 20},
            SETTLE,
            f"every new connection reaches {web1}",
        )
        assert echoes(kept)  # established before, to the provider that stayed: not cut

    # A new labelled container joins.
    web3 = lab.provider(lab.network, "app=web")
    wait_for(lambda: lab.providers(svc) == {web1, web3}, SETTLE, f"{web3} provides")
    wait_for(
        lambda: who_answers(net, vip, 80, 40).get(web3, 0) > 0, SETTLE, f"{web3} gets connections"
    )
    assert lab.inspect("service", svc)["numProviders"] == 2


def test_each_clients_tcp_connections_and_udp_flows_spread_over_the_providers(lab: Lab) -> None:
    """Per client and per protocol: each new UDP flow (a fresh source port) picks a provider
    as a TCP connection does, so one client's UDP is not stuck to one provider."""
    web1 = lab.provider(lab.network, "app=web")
    web2 = lab.provider(lab.network, "app=web")
    svc = lab.service("mix", "-l", "app=web", "-p", "80:8080:TCP", "-p", "53:8080:UDP")
    vip = lab.vip(svc)
    wait_for(lambda: lab.providers(svc) == {web1, web2}, SETTLE, "both web containers provide")
    clients = [lab.net(lab.container(lab.network)) for _ in range(3)]
    for udp, port in ((False, 80), (True, 53)):
        wait_for(
            lambda port=port, udp=udp: (
                who_answers(clients[0], vip, port, 1, udp=udp).get("error") is None
            ),
            SETTLE,
            f"the VIP answers on {port}",
        )
        for net in clients:
            got = who_answers(net, vip, port, 100, udp=udp)
            assert set(got) == {web1, web2}, (net.container, port, got)
            assert min(got.values()) >= 30, (net.container, port, got)


def _sessions_to(net: ContainerNet, vip: str, who: str) -> Iterator[object]:
    """Open connections to the VIP until one reaches ``who``; yields it (left open)."""
    for _ in range(50):
        s = net.socket(socket.SOCK_STREAM)
        s.settimeout(2.0)
        s.connect((vip, 80))
        if s.recv(64).decode() == who:
            yield s
            return
        s.close()


def test_a_provider_reaches_its_own_vip(lab: Lab) -> None:
    web1 = lab.provider(lab.network, "app=web")
    web2 = lab.provider(lab.network, "app=web")
    svc = lab.service("hp", "-l", "app=web", "-p", "80:8080:tcp")
    vip = lab.vip(svc)
    wait_for(lambda: lab.providers(svc) == {web1, web2}, SETTLE, "both provide")
    wait_for(
        lambda: who_answers(lab.net(web1), vip, 80, 1).get("error") is None,
        SETTLE,
        "the VIP answers a provider",
    )
    got = who_answers(lab.net(web1), vip, 80, 40)
    assert got.get("error") is None and got.get(web1, 0) > 0 and got.get(web2, 0) > 0, got


def test_creating_a_service_again_changes_it_in_place(lab: Lab) -> None:
    """The README's way to change a service: `netctl service create` with its name again and
    the whole new spec. The VIP stays; selectors and ports apply at once."""
    web = lab.provider(lab.network, "app=web")
    api = lab.provider(lab.network, "app=api")
    svc = lab.service("chg", "-l", "app=web", "-p", "80:8080:TCP")
    vip = lab.vip(svc)
    client = lab.net(lab.container(lab.network))
    wait_for(lambda: who_answers(client, vip, 80, 1) == {web: 1}, SETTLE, f"the VIP reaches {web}")
    lab.service("chg", "-l", "app=api", "-p", "81:8080:TCP")
    assert lab.vip(svc) == vip
    wait_for(lambda: lab.providers(svc) == {api}, SETTLE, f"{api} is the only provider")
    wait_for(lambda: who_answers(client, vip, 81, 1) == {api: 1}, SETTLE, f"port 81 reaches {api}")
    assert who_answers(client, vip, 80, 1, timeout=1) == {"error": 1}  # no longer served
    assert who_answers(client, vip, 81, 20) == {api: 20}
    # The provider port too (README: `-p 80:9090:TCP`): a provider that listens on 9090 only.
    api9 = lab.container(lab.network, labels=("app=api9",))
    lab.names(api9, 9090)
    lab.service("chg", "-l", "app=api9", "-p", "81:9090:TCP")
    assert lab.vip(svc) == vip
    wait_for(
        lambda: who_answers(client, vip, 81, 1) == {api9: 1}, SETTLE, f"port 81 reaches {api9}:9090"
    )


def test_a_policy_denying_the_providers_port_blocks_it_through_the_vip(lab: Lab) -> None:
    group = lab.group("db")
    db = lab.provider(group, "app=db")
    svc = lab.service("db", "-l", "app=db", "-p", "5432:8080:TCP")
    vip = lab.vip(svc)
    client = lab.net(lab.container(lab.network))
    wait_for(lambda: who_answers(client, vip, 5432, 1) == {db: 1}, SETTLE, "the VIP reaches db")
    policy = lab.policy("dbin", ("1", "-d", "in", "-l", "tcp", "-P", "8080", "-j", "deny"))
    lab.netctl("group", "update", "-p", policy, group)
    wait_for(
        lambda: who_answers(client, vip, 5432, 1, timeout=1) == {"error": 1},
        SETTLE,
        "the rule on the provider's port blocks the VIP",
    )
    assert who_answers(client, ip_of(db), 8080, 1, timeout=1) == {"error": 1}


def test_bad_services_are_refused_and_book_nothing(lab: Lab) -> None:
    allocated = lab.inspect("net", lab.network).get("allocatedAddresses", [])
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
    assert lab.inspect("net", lab.network).get("allocatedAddresses", []) == allocated
    assert lab.netctl("--json", "service", "ls").stdout.strip() in ("[]", "")


def test_a_plugin_restart_keeps_groups_meters_flows_and_connections(
    lab: Lab, stack: tuple[MasterProcess, PluginProcess]
) -> None:
    from .test_policy_single_host import RESYNCED, flow_table

    _, plugin = stack
    group = lab.group("web", "-n", lab.profile("gold", "-b", "50mbps", "-d", "10"))
    web1, web2 = lab.provider(group, "app=web"), lab.provider(group, "app=web")
    svc = lab.service("rs", "-l", "app=web", "-p", "80:8080:TCP")
    vip = lab.vip(svc)
    net = lab.net(lab.container(lab.network))
    wait_for(lambda: lab.providers(svc) == {web1, web2}, SETTLE, "both provide")
    wait_for(lambda: who_answers(net, vip, 80, 4).get("error") is None, SETTLE, "VIP answers")

    def switch(what: str) -> str:
        return run("ovs-ofctl", "-O", "OpenFlow13", what, "netplugin").stdout

    groups, meters, flows = switch("dump-groups"), switch("dump-meters"), flow_table()
    assert "type=select" in groups and "rate=50000" in meters
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
