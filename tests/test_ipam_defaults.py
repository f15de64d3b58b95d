"""Default pools and the free-pool search."""

from __future__ import annotations

import random
from ipaddress import IPv4Network, IPv6Network, ip_network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipam import (
    DEFAULT_V4_POOLS,
    DEFAULT_V6_POOLS,
    InvalidCidr,
    first_overlap,
    next_free_pool,
    overlaps,
)
from ipam.parse import Network

DOCKER_DEFAULTS = [ip_network(f"172.{i}.0.0/16") for i in range(17, 32)] + [
    ip_network("192.168.0.0/16"),
    ip_network("10.0.0.0/16"),  # the first part of swarm's default address pool
]


def test_defaults_are_private_and_avoid_docker() -> None:
    for base, plen in DEFAULT_V4_POOLS:
        net = ip_network(base)
        assert net.is_private
        assert net.prefixlen <= plen <= 30
        assert first_overlap(net, DOCKER_DEFAULTS) is None
        assert not overlaps(net, ip_network("100.64.0.0/10"))
    for base, plen in DEFAULT_V6_POOLS:
        net = ip_network(base)
        assert net.subnet_of(ip_network("fc00::/7"))  # type: ignore[arg-type]
        assert plen == 64
    bases = [ip_network(b) for b, _ in DEFAULT_V4_POOLS]
    assert not any(overlaps(a, b) for i, a in enumerate(bases) for b in bases[i + 1 :])


def test_overlaps_helper() -> None:
    a = ip_network("10.1.0.0/16")
    assert overlaps(a, ip_network("10.1.2.0/24"))
    assert overlaps(ip_network("10.1.2.0/24"), a)
    assert overlaps(a, a)
    assert not overlaps(a, ip_network("10.2.0.0/16"))
    assert not overlaps(ip_network("::/0"), a)
    assert first_overlap(a, [ip_network("10.0.0.0/16"), ip_network("10.0.0.0/8")]) == ip_network(
        "10.0.0.0/8"
    )


def test_first_pools() -> None:
    assert next_free_pool([]) == ip_network("10.200.0.0/24")
    assert next_free_pool([], DEFAULT_V6_POOLS) == ip_network("fd6e:6574:706c::/64")
    assert next_free_pool(["10.200.0.0/24", "10.200.1.7/24"]) == ip_network("10.200.2.0/24")
    assert next_free_pool([ip_network("10.200.0.0/13")]) == ip_network("10.208.0.0/24")
    assert next_free_pool([ip_network("10.0.0.0/8")]) is None
    # Networks of the other family never block.
    assert next_free_pool([ip_network("::/0")]) == ip_network("10.200.0.0/24")


def test_coarse_used_network_skips_arithmetically() -> None:
    used = [ip_network("10.200.0.0/22"), ip_network("10.200.4.128/25")]
    assert next_free_pool(used) == ip_network("10.200.5.0/24")
    assert next_free_pool([ip_network("10.200.0.5/32")]) == ip_network("10.200.1.0/24")


def test_successive_calls_give_distinct_pools() -> None:
    used: list[Network] = []
    seen = []
    for _ in range(300):
        net = next_free_pool(used)
        assert net is not None and net not in seen
        seen.append(net)
        used.append(net)
    assert seen[:3] == [ip_network(f"10.200.{i}.0/24") for i in range(3)]


def test_thousands_of_used_networks_v4_and_v6() -> None:
    rnd = random.Random(7)
    used4: list[Network] = [ip_network(f"10.{200 + i // 256}.{i % 256}.0/24") for i in range(6000)]
    rnd.shuffle(used4)
    assert next_free_pool(used4) == ip_network("10.223.112.0/24")
    base = int(ip_network("fd6e:6574:706c::/48").network_address)
    used6: list[Network] = [IPv6Network((base + (i << 64), 64)) for i in range(5000)]
    used6 += [
        IPv6Network((base + (rnd.randrange(5001, 1 << 16) << 64) + 5, 128)) for _ in range(3000)
    ]
    rnd.shuffle(used6)
    got = next_free_pool(used6, DEFAULT_V6_POOLS)
    assert isinstance(got, IPv6Network)
    assert first_overlap(got, used6) is None
    assert int(got.network_address) >= base + (5000 << 64)


def test_all_used_returns_none() -> None:
    pools = [("10.0.0.0/30", 31)]
    assert next_free_pool([], pools) == ip_network("10.0.0.0/31")
    assert next_free_pool(["10.0.0.0/31", "10.0.0.2/31"], pools) is None


def test_bad_pool_definitions() -> None:
    with pytest.raises(InvalidCidr, match=r"address pool 10\.0\.0\.0/16 .*subnet size /8"):
        next_free_pool([], [("10.0.0.0/16", 8)])
    with pytest.raises(InvalidCidr, match="host bits are set"):
        next_free_pool([], [("10.0.0.1/16", 24)])


SMALL_POOLS = [("10.0.0.0/22", 26), ("10.0.8.0/23", 25), ("10.0.4.0/24", 28)]


def brute_force(used: list[Network], pools: list[tuple[str, int]]) -> list[Network]:
    out = []
    for base, plen in pools:
        for cand in ip_network(base).subnets(new_prefix=plen):
            if first_overlap(cand, used) is None:
                out.append(cand)
    return out


used_networks = st.builds(
    lambda addr, plen: IPv4Network((addr, plen), strict=False),
    st.integers(int(ip_network("10.0.0.0/8").network_address), 0x0A000FFF),
    st.integers(16, 32),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(used_networks, max_size=30))
def test_next_free_pool_matches_brute_force(used: list[Network]) -> None:
    expected = brute_force(used, SMALL_POOLS)
    got = next_free_pool(used, SMALL_POOLS)
    assert got == (expected[0] if expected else None)
    if got is not None:
        assert first_overlap(got, used) is None


@settings(max_examples=50, deadline=None)
@given(st.lists(used_networks, max_size=20))
def test_successive_calls_exhaust_the_free_candidates(used: list[Network]) -> None:
    expected = brute_force(used, SMALL_POOLS)
    grown = list(used)
    results = []
    while (net := next_free_pool(grown, SMALL_POOLS)) is not None:
        assert first_overlap(net, grown) is None
        results.append(net)
        grown.append(net)
    assert len(set(results)) == len(results)
    # Candidates from different bases may overlap each other, so the successive results are the
    # brute-force free candidates minus those overlapping an earlier result.
    remaining = list(expected)
    for net in results:
        assert net == remaining[0]
        remaining = [c for c in remaining[1:] if not overlaps(c, net)]
    assert remaining == []
