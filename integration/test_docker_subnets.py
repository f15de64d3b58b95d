"""Subnets no network may own (ipam.subnets), refused where users give them: `docker network
create --subnet` (Docker's RequestPool) and `netctl net create`, with the reason, and nothing
left behind in docker or the cluster store. Real docker CLI, dockerd, netmaster, netplugin.
"""

from __future__ import annotations

import uuid

import pytest

from common import keys
from master.decisions.consistency import check_state
from store.embedded import EmbeddedStore
from testbed.host import CREATE_NETWORK
from testbed.master import MasterProcess
from testbed.plugin import PluginProcess
from testbed.site import stack, stack_up  # noqa: F401 (fixtures)

from .test_docker_single_host import BIN, sh


def scan(master: MasterProcess) -> dict[str, bytes]:
    """The master's whole store, read beside it (SQLite WAL is safe across processes)."""
    with EmbeddedStore(str(master.data_dir / "state.db")) as store:
        return {kv.key: kv.value for kv in store.range(keys.ROOT).kvs}


def booked(master: MasterProcess) -> dict[str, bytes]:
    """What a refused network could have left: networks, pools, addresses, owners, tags."""
    kinds = (keys.NETWORKS, keys.POOLS, keys.ALLOC, keys.OWNERS, keys.TAGS)
    return {k: v for k, v in scan(master).items() if k.startswith(kinds)}


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (
            ("--subnet", "0.0.0.0/0"),
            "subnet 0.0.0.0/0 is too wide: it is every IPv4 address: every host would "
            "masquerade all the traffic it sends or forwards",
        ),
        (
            ("--subnet", "10.97.0.0/24", "--ipv6", "--subnet", "::/0"),
            "subnet ::/0 is too wide: it is every IPv6 address: every host would route all its "
            "IPv6 traffic to this network's gateway port, ahead of its default route",
        ),
        (
            ("--subnet", "127.0.0.0/8"),
            "subnet 127.0.0.0/8 lies in 127.0.0.0/8, the loopback range",
        ),
        (
            ("--subnet", "169.254.0.0/16"),
            "subnet 169.254.0.0/16 lies in 169.254.0.0/16, link-local (RFC 3927)",
        ),
    ],
)
def test_docker_network_create_refuses_a_subnet_no_network_may_own(
    stack: tuple[MasterProcess, PluginProcess],  # noqa: F811
    args: tuple[str, ...],
    reason: str,
) -> None:
    master, _ = stack
    before = booked(master)
    name = f"np-{uuid.uuid4().hex[:6]}"
    res = sh(*CREATE_NETWORK, *args, name, check=False)
    if res.returncode == 0:  # accepted after all: remove it before failing
        sh("docker", "network", "rm", name, check=False)
    assert res.returncode != 0
    assert "IpamDriver.RequestPool: pool request in address space" in res.stderr, res.stderr
    assert reason in res.stderr, res.stderr
    assert "a network's IPv" in res.stderr or "choose a subnet outside it" in res.stderr
    assert sh("docker", "network", "inspect", name, check=False).returncode != 0
    assert booked(master) == before
    assert check_state(scan(master)) == []


def test_netctl_net_create_refuses_it_too(stack: tuple[MasterProcess, PluginProcess]) -> None:  # noqa: F811
    master, _ = stack
    before = booked(master)
    name = f"pn-{uuid.uuid4().hex[:6]}"
    netctl = (str(BIN / "netctl"), "--netmaster", master.url, "net", "create")
    res = sh(*netctl, "-s", "0.0.0.0/0", name, check=False)
    if res.returncode == 0:
        sh(str(BIN / "netctl"), "--netmaster", master.url, "net", "rm", name, check=False)
    assert res.returncode != 0
    assert res.stderr.startswith(
        f"netctl: network default:{name}: subnet 0.0.0.0/0 is too wide: it is every IPv4 address: "
    ), res.stderr
    assert booked(master) == before
