"""One booking per address with the real docker CLI: `docker network create -o tenant=T`
(and `-o network=N`) without the matching --ipam-opt books each container address once, in
the network's pool; a combination that cannot be honoured is refused with what to type, and
leaves the store as it was. Run under the docker lock:

    flock /tmp/docker.lock env PYTHONPATH=$PWD \
        .venv/bin/pytest -q integration/test_docker_booking.py
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator

import pytest

from common import keys
from common.records import PoolRecord
from testbed.host import CREATE_NETWORK
from testbed.master import MasterProcess
from testbed.plugin import PluginProcess
from testbed.site import restart_stopped, serve_stack

from .test_docker_single_host import (
    BIN,
    IMAGE,
    RUN,
    ip_of,
    ping,
    sh,
)

Stack = tuple[MasterProcess, PluginProcess]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from serve_stack(tmp_path_factory)


@pytest.fixture(autouse=True)
def stack_up(stack: Stack) -> None:
    restart_stopped(stack)


def state(master: MasterProcess) -> dict[str, bytes]:
    """The cluster state as the master's embedded store holds it (read only)."""
    db = master.data_dir / "state.db"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute("SELECT key, value FROM kv").fetchall()
    finally:
        conn.close()
    return {bytes(k).decode(): bytes(v) for k, v in rows}


def ipam(master: MasterProcess) -> dict[str, bytes]:
    """Pools, allocations and owner records: what Docker's calls book."""
    return {
        k: v
        for k, v in state(master).items()
        if k.startswith((keys.POOLS, keys.ALLOC, keys.OWNERS))
    }


def bookings(master: MasterProcess, address: str) -> list[str]:
    return sorted(
        k for k in state(master) if k.startswith(keys.ALLOC) and k.endswith(f"/{address}")
    )


@pytest.fixture
def made(stack: Stack) -> Iterator[list[tuple[str, str]]]:
    """(kind, name) of what a test made: removed after it, containers first."""
    things: list[tuple[str, str]] = []
    yield things
    for kind, name in things:
        if kind == "container":
            sh("docker", "rm", "-f", name, check=False)
    for kind, name in things:
        if kind == "network":
            sh("docker", "network", "rm", name, check=False)
    for kind, name in reversed(things):
        if kind == "netctl-group":
            tenant, _, group = name.partition(":")
            netctl(stack[0], "group", "rm", "-t", tenant, group, check=False)
        if kind == "netctl-net":
            tenant, _, net = name.partition(":")
            netctl(stack[0], "net", "rm", "-t", tenant, net, check=False)
        if kind == "tenant":
            netctl(stack[0], "tenant", "rm", name, check=False)


def netctl(master: MasterProcess, *args: str, check: bool = True) -> str:
    res = sh(str(BIN / "netctl"), "--netmaster", master.url, *args, check=check)
    return res.stdout + res.stderr


def name(made: list[tuple[str, str]], kind: str, prefix: str) -> str:
    got = f"{prefix}-{uuid.uuid4().hex[:6]}"
    made.append((kind, got))
    return got


def tenant(master: MasterProcess, made: list[tuple[str, str]]) -> str:
    t = name(made, "tenant", "t")
    netctl(master, "tenant", "create", t)
    return t


def test_o_tenant_alone_books_each_address_once_and_rm_frees_it_all(
    stack: Stack, made: list[tuple[str, str]]
) -> None:
    master, _ = stack
    t = tenant(master, made)
    before = ipam(master)
    net = name(made, "network", "np")
    sh(*CREATE_NETWORK, "-o", f"tenant={t}", "--subnet", "10.231.0.0/24", net)
    docker_pool = keys.pool("default:10.231.0.0/24")
    alias = PoolRecord.decode(state(master)[docker_pool])
    assert alias.alias == f"{t}:10.231.0.0/24"  # Docker's pool id stands for the tenant's pool
    a, b = name(made, "container", "c"), name(made, "container", "c")
    for c in (a, b):
        sh(*RUN, "--name", c, "--net", net, IMAGE, "sleep", "600")
    ip_a, ip_b = ip_of(a), ip_of(b)
    assert ping(a, ip_b)
    for ip in ("10.231.0.1", ip_a, ip_b):  # the gateway and both containers: once each
        assert bookings(master, ip) == [keys.alloc(f"{t}:10.231.0.0/24", ip)]
    shown = json.loads(netctl(master, "--json", "net", "inspect", "-t", t, net))
    assert sorted(shown["Oper"]["allocatedAddresses"]) == sorted(["10.231.0.1", ip_a, ip_b])
    sh("docker", "rm", "-f", a, b)
    sh("docker", "network", "rm", net)
    assert ipam(master) == before


def test_a_tenant_mismatch_is_refused_with_what_to_type_and_leaves_nothing(
    stack: Stack, made: list[tuple[str, str]]
) -> None:
    master, _ = stack
    t, other = tenant(master, made), tenant(master, made)
    before = ipam(master)
    net = name(made, "network", "np")
    res = sh(
        *CREATE_NETWORK,
        "-o",
        f"tenant={t}",
        "--ipam-opt",
        f"tenant={other}",
        "--subnet",
        "10.232.0.0/24",
        net,
        check=False,
    )
    assert res.returncode != 0
    assert f"--ipam-opt tenant={other} is not -o's tenant ({t})" in res.stderr
    assert f"pass -o tenant={t} alone, or with the same --ipam-opt (--ipam-opt tenant={t})" in (
        res.stderr
    )
    assert ipam(master) == before  # docker's rollback released its pool and gateway
    assert net not in sh("docker", "network", "ls", "--format", "{{.Name}}").stdout.split()


def test_o_network_alone_books_in_the_networks_pool(
    stack: Stack, made: list[tuple[str, str]]
) -> None:
    master, _ = stack
    t = tenant(master, made)
    cluster = name(made, "netctl-net", "pn")
    made[-1] = ("netctl-net", f"{t}:{cluster}")
    netctl(master, "net", "create", "-t", t, "-s", "10.233.0.0/24", cluster)
    net = name(made, "network", "np")
    wrong = sh(*CREATE_NETWORK, "-o", f"tenant={t}", "-o", f"network={cluster}", net, check=False)
    assert wrong.returncode != 0 and "pass --subnet 10.233.0.0/24" in wrong.stderr
    sh(*CREATE_NETWORK, "-o", f"tenant={t}", "-o", f"network={cluster}",
       "--subnet", "10.233.0.0/24", net)  # fmt: skip
    c = name(made, "container", "c")
    sh(*RUN, "--name", c, "--net", net, IMAGE, "sleep", "600")
    ip = ip_of(c)
    assert bookings(master, ip) == [keys.alloc(f"{t}:10.233.0.0/24", ip)]
    sh("docker", "rm", "-f", c)
    assert bookings(master, ip) == []


def test_o_group_alone_books_in_the_groups_ip_pool(
    stack: Stack, made: list[tuple[str, str]]
) -> None:
    master, _ = stack
    t = tenant(master, made)
    cluster = name(made, "netctl-net", "pn")
    made[-1] = ("netctl-net", f"{t}:{cluster}")
    netctl(master, "net", "create", "-t", t, "-s", "10.234.0.0/24", cluster)
    group = f"g-{uuid.uuid4().hex[:6]}"
    made.append(("netctl-group", f"{t}:{group}"))
    netctl(master, "group", "create", "-t", t, "-r", "10.234.0.100-10.234.0.110", cluster, group)
    net = name(made, "network", "np")
    sh(*CREATE_NETWORK, "-o", f"tenant={t}", "-o", f"network={cluster}", "-o", f"group={group}",
       "--subnet", "10.234.0.0/24", net)  # fmt: skip
    c = name(made, "container", "c")
    sh(*RUN, "--name", c, "--net", net, IMAGE, "sleep", "600")
    ip = ip_of(c)
    assert ip.startswith("10.234.0.1") and 100 <= int(ip.rsplit(".", 1)[1]) <= 110
    assert bookings(master, ip) == [keys.alloc(f"{t}:10.234.0.0/24", ip)]
    sh("docker", "rm", "-f", c)
    sh("docker", "network", "rm", net)  # deletes the group; the alias goes with the pool id
    assert not [k for k in ipam(master) if k.startswith(keys.pool("default:10.234.0.0/24"))]


def test_one_subnet_in_two_tenants_both_book_once(
    stack: Stack, made: list[tuple[str, str]]
) -> None:
    master, _ = stack
    t = tenant(master, made)
    before = ipam(master)
    mine, plain = name(made, "network", "np"), name(made, "network", "np")
    sh(*CREATE_NETWORK, "-o", f"tenant={t}", "--subnet", "10.235.0.0/24", mine)
    sh(*CREATE_NETWORK, "--subnet", "10.235.0.0/24", plain)  # the default tenant's
    a, b = name(made, "container", "c"), name(made, "container", "c")
    sh(*RUN, "--name", a, "--net", mine, IMAGE, "sleep", "600")
    sh(*RUN, "--name", b, "--net", plain, IMAGE, "sleep", "600")
    assert ip_of(a) == ip_of(b) == "10.235.0.2"
    assert bookings(master, "10.235.0.2") == sorted(
        [keys.alloc(f"{t}:10.235.0.0/24", "10.235.0.2"),
         keys.alloc("default:10.235.0.0/24~2", "10.235.0.2")]
    )  # fmt: skip
    sh("docker", "rm", "-f", a, b)
    sh("docker", "network", "rm", mine, plain)
    assert ipam(master) == before


def test_o_encap_and_pkt_tag_alone_book_once_in_the_networks_pool(
    stack: Stack, made: list[tuple[str, str]]
) -> None:
    master, _ = stack
    before = ipam(master)
    net = name(made, "network", "np")
    sh(*CREATE_NETWORK, "-o", "encap=vlan", "-o", "pkt-tag=3071",
       "--subnet", "10.236.0.0/24", net)  # fmt: skip
    a, b = name(made, "container", "c"), name(made, "container", "c")
    for c in (a, b):
        sh(*RUN, "--name", c, "--net", net, IMAGE, "sleep", "600")
    # By its docker name once it has endpoints: that name reaches the master a moment after
    # `docker network create` returns (issue 22; README, "Known limitations").
    shown = json.loads(netctl(master, "--json", "net", "inspect", net))
    assert (shown["Config"]["encap"], shown["Config"]["pktTag"]) == ("vlan", 3071)
    ip_a, ip_b = ip_of(a), ip_of(b)
    assert ping(a, ip_b)
    pools = {k for k in state(master) if k.startswith(keys.POOLS)}
    for ip in ("10.236.0.1", ip_a, ip_b):  # the gateway and both containers: once each
        (booked,) = bookings(master, ip)
        assert keys.pool(booked[len(keys.ALLOC) :].rsplit("/", 1)[0]) in pools
    sh("docker", "rm", "-f", a, b)
    sh("docker", "network", "rm", net)
    assert ipam(master) == before
