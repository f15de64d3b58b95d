"""iptables chains applied for real, inside a private netns: idempotent, atomic, exact."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from datapath.hostnat import (
    DNAT_CHAIN,
    FWD_CHAIN,
    NAT_CHAIN,
    GatewayNet,
    Iptables,
    dnat_rules,
    forward_rules,
    nat_rules,
)
from datapath.ports import PublishedPort


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"np-nat-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=False)


def test_sync_is_exact_and_idempotent(netns: str) -> None:
    ipt = Iptables(netns)
    nets = [
        GatewayNet("10.1.0.0/24", "npgw100"),
        GatewayNet("10.3.0.0/24", "npgw300", internal=True),
    ]
    maps = [
        PublishedPort("tcp", "", 8080, 80, "10.1.0.5"),
        PublishedPort("udp", "192.0.2.1", 5353, 53, "10.1.0.6"),
    ]
    assert ipt.sync(nets, maps)
    assert ipt.current("nat", NAT_CHAIN) == nat_rules(nets)
    assert ipt.current("nat", DNAT_CHAIN) == dnat_rules(maps)
    assert ipt.current("filter", FWD_CHAIN) == forward_rules(nets)
    assert not ipt.sync(nets, maps)  # a restart replays the same state: nothing changes

    jumps = subprocess.run(
        ["ip", "netns", "exec", netns, "iptables", "-t", "nat", "-S", "PREROUTING"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"-A PREROUTING -j {DNAT_CHAIN}" in jumps

    # Removing a network and the mapping removes exactly their rules.
    assert ipt.sync(nets[:1], [])
    assert ipt.current("nat", DNAT_CHAIN) == []
    assert ipt.current("filter", FWD_CHAIN) == forward_rules(nets[:1])


def test_ipv6_networks_get_isolation_from_ip6tables_and_no_nat(netns: str) -> None:
    ipt = Iptables(netns)
    v4 = GatewayNet("10.1.0.0/24", "npgw100", fabric_foreign=("10.9.0.0/24",))
    v6 = GatewayNet("fd01::/64", "npgw100", fabric_foreign=("fd09::/64",))
    assert ipt.sync([v4, v6], [])
    assert ipt.current("nat", NAT_CHAIN) == nat_rules([v4])
    assert ipt.current("filter", FWD_CHAIN) == forward_rules([v4])
    ip6 = Iptables(netns, "ip6tables")
    assert ip6.current("filter", FWD_CHAIN) == forward_rules([v6])
    assert "-A NETPLUGIN-FWD -s fd09::/64 -i npfabric -o npgw100 -j DROP" in forward_rules([v6])
    assert ip6.current("nat", NAT_CHAIN) is None  # IPv6 is not NATed
    jumps = subprocess.run(
        ["ip", "netns", "exec", netns, "ip6tables", "-S", "FORWARD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"-A FORWARD -j {FWD_CHAIN}" in jumps
    assert not ipt.sync([v4, v6], [])  # idempotent
    # The last IPv6 network gone: its rules go too.
    assert ipt.sync([v4], [])
    assert ip6.current("filter", FWD_CHAIN) == forward_rules([])
