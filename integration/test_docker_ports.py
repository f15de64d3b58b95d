"""Published ports with the real docker CLI, as users of Docker's bridge type them: -p CPORT,
-P, ranges, /udp, -p IP:HOSTPORT:CPORT; reached from outside, from the host itself on
127.0.0.1 and its own address, and from the container's own network; refusals of a taken
port that leave nothing behind; an agent restart that keeps every port and its number."""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from testbed.master import MasterProcess
from testbed.plugin import BIN, PluginProcess
from testbed.probe import ContainerNet, EchoServer, tcp_opens
from testbed.site import restart_stopped, serve_stack
from testbed.wait import wait_for

from .test_docker_single_host import IMAGE, RUN, network, remove, sh, unique

Stack = tuple[MasterProcess, PluginProcess]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from serve_stack(tmp_path_factory)


@pytest.fixture(autouse=True)
def stack_up(stack: Stack) -> None:
    restart_stopped(stack)


@pytest.fixture
def names(stack: Stack) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    remove(made)


@pytest.fixture
def servers() -> Iterator[list[EchoServer | ContainerNet]]:
    """Echo servers in containers, and the namespaces they were made in: closed after."""
    made: list[EchoServer | ContainerNet] = []
    yield made
    for s in reversed(made):
        s.close()


def host_ip() -> str:
    return sh("ip", "-4", "-o", "addr", "show", "scope", "global").stdout.split()[3].split("/")[0]


def run_echo(
    names: list[str],
    servers: list[EchoServer | ContainerNet],
    net: str,
    ports: list[int],
    *publish: str,
) -> str:
    """A container on ``net`` publishing ``publish``, echoing on TCP and UDP ``ports``."""
    name = unique(names, "c")
    sh(*RUN, "--name", name, "--net", net, *publish, IMAGE, "sleep", "600")
    container = ContainerNet(name)
    servers.append(container)
    servers.extend(EchoServer(container, port) for port in ports)
    return name


def container_ip(name: str) -> str:
    return sh("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
              name).stdout.strip()  # fmt: skip


def dnat(container: str) -> dict[tuple[str, int], tuple[str, int]]:
    """(proto, container port) -> (host address or "", host port) of the container's
    published ports, read where they live: our DNAT chain."""
    ip, out = container_ip(container), {}
    for rule in sh("iptables", "-w", "-t", "nat", "-S", "NETPLUGIN-DNAT").stdout.splitlines():
        m = re.search(
            r"(?:-d (?P<hip>[\d.]+)/32 )?-p (?P<proto>\w+) .*--dport (?P<hport>\d+) .*"
            rf"--to-destination {re.escape(ip)}:(?P<cport>\d+)$",
            rule,
        )
        if m:
            out[(m["proto"], int(m["cport"]))] = (m["hip"] or "", int(m["hport"]))
    return out


def tcp_echoes(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=2) as s:
            s.sendall(b"hello")
            return s.recv(16) == b"hello"
    except OSError:
        return False


def udp_echoes(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        try:
            s.sendto(b"hello", (ip, port))
            return s.recv(16) == b"hello"
        except OSError:
            return False


def ephemeral() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        lo, hi = (int(v) for v in f.read().split())
    return lo, hi


def test_random_ranged_udp_ports_answer_on_the_host_address_and_localhost(
    stack: Stack, names: list[str], servers: list[EchoServer | ContainerNet]
) -> None:
    net = network(names, "10.71.0.0/24")
    c = run_echo(
        names, servers, net, [80, 81, 82, 53],
        "-p", "80", "-p", "18100-18110:81", "-p", "18200-18201:82-83", "-p", "18353:53/udp",
    )  # fmt: skip
    ports = dnat(c)
    lo, hi = ephemeral()
    assert lo <= ports[("tcp", 80)][1] <= hi
    assert ports[("tcp", 81)] == ("", 18100) and ports[("tcp", 82)] == ("", 18200)
    assert ports[("tcp", 83)] == ("", 18201) and ports[("udp", 53)] == ("", 18353)
    me = host_ip()
    for address in (me, "127.0.0.1"):
        assert tcp_echoes(address, ports[("tcp", 80)][1]), address
        assert tcp_echoes(address, 18100) and tcp_echoes(address, 18200), address
        assert udp_echoes(address, 18353), address
    # -P publishes every exposed port on a random one.
    p = unique(names, "c")
    sh(*RUN, "--name", p, "--net", net, "-P", "--expose", "90", "--expose", "91/udp", IMAGE,
       "sleep", "600")  # fmt: skip
    random_ports = dnat(p)
    assert set(random_ports) == {("tcp", 90), ("udp", 91)}
    assert all(lo <= port <= hi and not ip for ip, port in random_ports.values())
    assert random_ports[("tcp", 90)][1] != ports[("tcp", 80)][1]
    # Docker shows no remote driver's ports (test_docker_single_host: on 20.10 and 26 alike).
    assert sh("docker", "port", c).stdout == ""


def test_a_port_bound_to_one_host_address_answers_only_there(
    stack: Stack, names: list[str], servers: list[EchoServer | ContainerNet]
) -> None:
    net = network(names, "10.72.0.0/24")
    c = run_echo(names, servers, net, [80], "-p", "127.0.0.1:18300:80", "-p", f"{host_ip()}::80")
    ports = dnat(c)
    assert tcp_echoes("127.0.0.1", 18300) and not tcp_echoes(host_ip(), 18300)
    [(address, port)] = [v for v in ports.values() if v[1] != 18300]
    assert address == host_ip() and tcp_echoes(host_ip(), port)
    assert not tcp_echoes("127.0.0.1", port)
    # The agent's table lists them, as the README says (issue 22: only --json did).
    wanted = {"127.0.0.1:18300->80/tcp", f"{host_ip()}:{port}->80/tcp"}
    wait_for(lambda: wanted <= published_in_table(container_ip(c)), 15, "the table lists them")


def published_in_table(ip: str) -> set[str]:
    """The published ports `netctl host inspect endpoints` shows for the endpoint of ``ip``."""
    table = sh(str(BIN / "netctl"), "host", "inspect", "endpoints").stdout.splitlines()
    column = table[0].index("Published ports")
    rows = [line for line in table[2:] if ip in line.split()]
    return {p for row in rows for p in row[column:].split(", ") if p}


def test_containers_reach_published_ports_through_the_host_address(
    stack: Stack, names: list[str], servers: list[EchoServer | ContainerNet]
) -> None:
    """Its own (hairpin), from its own network and from another network."""
    net, other = network(names, "10.73.0.0/24"), network(names, "10.74.0.0/24")
    c = run_echo(names, servers, net, [80], "-p", "18400:80")
    neighbour = unique(names, "c")
    sh(*RUN, "--name", neighbour, "--net", net, IMAGE, "sleep", "600")
    stranger = unique(names, "c")
    sh(*RUN, "--name", stranger, "--net", other, IMAGE, "sleep", "600")
    for name in (c, neighbour, stranger):
        client = ContainerNet(name)
        servers.append(client)
        assert tcp_opens(client, host_ip(), 18400, timeout=2), name


def test_a_taken_port_is_refused_naming_its_holder_and_nothing_remains(
    stack: Stack, names: list[str], servers: list[EchoServer | ContainerNet]
) -> None:
    net, other = network(names, "10.75.0.0/24"), network(names, "10.76.0.0/24")
    run_echo(names, servers, net, [80], "-p", "18500:80")

    def refused(*publish: str) -> str:
        name = unique(names, "c")
        res = sh(*RUN, "--name", name, "--net", other, *publish, IMAGE, "sleep", "600",
                 check=False)  # fmt: skip
        assert res.returncode != 0, f"{publish} was not refused"
        return res.stderr

    before = sh("iptables", "-w", "-t", "nat", "-S", "NETPLUGIN-DNAT").stdout
    err = refused("-p", "18501:81", "-p", "18500:80")  # another network: one host
    assert "NetworkDriver.ProgramExternalConnectivity: -p 18500:80/tcp: host port 18500/tcp " \
           "on every host address is already used by container endpoint" in err, err  # fmt: skip
    with socket.create_server(("0.0.0.0", 18502)):  # a process on the host
        err = refused("-p", "18502:80")
        assert "host port 18502/tcp on every host address is already used by a process" in err
    bridged = unique(names, "bridged")  # Docker's own bridge: docker-proxy holds the port
    sh(*RUN, "--name", bridged, "-p", "18503:80", IMAGE, "sleep", "600")
    assert "18503/tcp on every host address is already used by a process" in refused(
        "-p", "18503:80"
    )
    assert "198.51.100.7 is not an address of this host" in refused("-p", "198.51.100.7:18504:80")
    assert sh("iptables", "-w", "-t", "nat", "-S", "NETPLUGIN-DNAT").stdout == before
    run_echo(names, servers, other, [80], "-p", "18501:80")  # what the refusal asked is free


def test_two_containers_asking_for_one_port_at_once_one_wins(
    stack: Stack, names: list[str]
) -> None:
    net = network(names, "10.77.0.0/24")
    racers = [unique(names, "race") for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda n: sh(
                    *RUN,
                    "--name",
                    n,
                    "--net",
                    net,
                    "-p",
                    "18600:80",
                    IMAGE,
                    "sleep",
                    "600",
                    check=False,
                ),
                racers,
            )
        )
    assert sorted(r.returncode == 0 for r in results) == [False, True]
    loser = next(r for r in results if r.returncode)
    assert "18600/tcp on every host address is already used by container endpoint" in loser.stderr
    assert (
        sh("iptables", "-w", "-t", "nat", "-S", "NETPLUGIN-DNAT").stdout.count("--dport 18600 ")
        == 1
    )


def test_an_agent_restart_keeps_every_published_port_and_its_number(
    stack: Stack, names: list[str], servers: list[EchoServer | ContainerNet]
) -> None:
    _, plugin = stack
    net = network(names, "10.78.0.0/24")
    c = run_echo(names, servers, net, [80, 81], "-p", "80", "-p", "18700:81")
    ports = dnat(c)
    plugin.stop()
    try:
        logged = len(plugin.log.read_bytes())
        plugin.start()
        wait_for(
            lambda: b"resynced with the cluster" in plugin.log.read_bytes()[logged:],
            30,
            "the restarted agent resyncs",
        )
        assert dnat(c) == ports
        random_port = ports[("tcp", 80)][1]
        assert tcp_echoes(host_ip(), random_port) and tcp_echoes("127.0.0.1", 18700)
        name = unique(names, "c")
        res = sh(*RUN, "--name", name, "--net", net, "-p", f"{random_port}:80", IMAGE, "sleep",
                 "600", check=False)  # fmt: skip
        assert res.returncode != 0 and f"host port {random_port}/tcp" in res.stderr, res.stderr
    finally:
        with contextlib.suppress(Exception):
            restart_stopped(stack)
