"""Allocator and PoolSpec behaviour."""

from __future__ import annotations

import random
import re
import tracemalloc
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest

from ipam import (
    AddressInUse,
    AddressOutOfPool,
    Allocator,
    InvalidAddress,
    InvalidRange,
    PoolExhausted,
    PoolSpec,
    parse_range,
)


def ip(s: str) -> int:
    return int(ip_address(s))


def pool(net: str, rng: str | None = None, name: str = "default:net1") -> Allocator:
    network = ip_network(net)
    return Allocator(PoolSpec(name, network, parse_range(rng, network) if rng else None))


def test_spec_properties() -> None:
    net = ip_network("10.1.0.0/24")
    spec = PoolSpec("default:net1", net)
    assert spec.bounds == (ip("10.1.0.1"), ip("10.1.0.254"))
    assert spec.usable == spec.bounds
    assert spec.version == 4
    assert spec.describe() == "10.1.0.0/24"
    ranged = PoolSpec("default:net1", net, (ip("10.1.0.128"), ip("10.1.0.254")))
    assert ranged.bounds == (ip("10.1.0.128"), ip("10.1.0.254"))
    assert ranged.describe() == "10.1.0.0/24 range 10.1.0.128-10.1.0.254"
    assert PoolSpec("p", net, spec.bounds).describe() == "10.1.0.0/24"
    assert PoolSpec("p6", ip_network("fd00::/64")).version == 6
    assert PoolSpec("p", net, [ip("10.1.0.5"), ip("10.1.0.9")]).range == (  # type: ignore[arg-type]
        ip("10.1.0.5"),
        ip("10.1.0.9"),
    )


def test_spec_rejects_bad_ranges() -> None:
    net = ip_network("10.1.0.0/24")
    with pytest.raises(InvalidRange, match=r"ip-range 10\.1\.0\.0-10\.1\.0\.9 .*default:net1"):
        PoolSpec("default:net1", net, (ip("10.1.0.0"), ip("10.1.0.9")))
    outside = re.escape("outside the usable addresses 10.1.0.1-10.1.0.254")
    with pytest.raises(InvalidRange, match=outside):
        PoolSpec("default:net1", net, (ip("10.1.0.10"), ip("10.1.0.255")))
    with pytest.raises(InvalidRange, match="start is after end in pool default:net1"):
        PoolSpec("default:net1", net, (ip("10.1.0.9"), ip("10.1.0.5")))
    with pytest.raises(TypeError, match="network must be an IP network"):
        PoolSpec("default:net1", "10.1.0.0/24")  # type: ignore[arg-type]


def test_network_and_broadcast_never_handed_out() -> None:
    a = pool("10.1.0.0/30")
    assert [a.allocate(), a.allocate()] == [IPv4Address("10.1.0.1"), IPv4Address("10.1.0.2")]
    with pytest.raises(PoolExhausted) as exc:
        a.allocate()
    assert str(exc.value) == "pool default:net1 (10.1.0.0/30) has no free address"
    assert exc.value.pool == "default:net1"
    usable = re.escape("usable range 10.1.0.1-10.1.0.2 of 10.1.0.0/30")
    for bad in ("10.1.0.0", "10.1.0.3"):
        with pytest.raises(AddressOutOfPool, match=usable):
            a.reserve(bad)


@pytest.mark.parametrize(
    ("net", "expected"),
    [
        ("10.1.0.4/31", ["10.1.0.4", "10.1.0.5"]),
        ("10.1.0.7/32", ["10.1.0.7"]),
        ("fd00::6/127", ["fd00::6", "fd00::7"]),
        ("fd00::/126", ["fd00::1", "fd00::2", "fd00::3"]),
    ],
)
def test_point_to_point_pools(net: str, expected: list[str]) -> None:
    a = pool(net)
    assert [str(a.allocate()) for _ in expected] == expected
    with pytest.raises(PoolExhausted):
        a.allocate()


def test_exhaustion_within_names_window() -> None:
    a = pool("10.1.0.0/24")
    window = (ip("10.1.0.10"), ip("10.1.0.11"))
    a.allocate(window)
    a.allocate(window)
    with pytest.raises(PoolExhausted) as exc:
        a.allocate(window)
    assert str(exc.value) == (
        "pool default:net1 (10.1.0.0/24) has no free address in 10.1.0.10-10.1.0.11"
    )
    with pytest.raises(PoolExhausted):
        a.peek(window)


def test_cursor_rotates_and_wraps() -> None:
    a = pool("10.1.0.0/29")  # usable .1-.6
    assert [str(a.allocate()) for _ in range(3)] == ["10.1.0.1", "10.1.0.2", "10.1.0.3"]
    assert a.release("10.1.0.1")
    assert str(a.allocate()) == "10.1.0.4"  # a just-released address is not reused at once
    assert [str(a.allocate()) for _ in range(2)] == ["10.1.0.5", "10.1.0.6"]
    assert str(a.allocate()) == "10.1.0.1"  # wrapped
    with pytest.raises(PoolExhausted):
        a.allocate()
    assert a.release(IPv4Address("10.1.0.4"))
    assert not a.release("10.1.0.4")
    assert str(a.allocate()) == "10.1.0.4"


def test_cursor_persist_restore_and_load() -> None:
    a = pool("10.1.0.0/24")
    for _ in range(5):
        a.allocate()
    assert a.cursor == ip("10.1.0.6")
    b = Allocator.load(a.spec, ["10.1.0.1", ip("10.1.0.2"), IPv4Address("10.1.0.3")], a.cursor)
    assert str(b.allocate()) == "10.1.0.6"
    b.cursor = ip("10.1.0.1")
    assert str(b.peek()) == "10.1.0.4"
    b.cursor = 0  # out-of-range cursors restart at the start of the range
    assert str(b.peek()) == "10.1.0.4"


def test_peek_then_conflict_flow() -> None:
    a = pool("10.1.0.0/24")
    first = a.peek()
    assert first == a.peek()
    assert a.allocated == 0
    a.mark(first)  # another writer won the CAS for this address
    second = a.peek()
    assert second != first
    assert a.allocate() == second


def test_within_may_lie_outside_range_but_not_outside_network() -> None:
    a = pool("10.1.0.0/24", "10.1.0.128-10.1.0.254")
    assert str(a.allocate()) == "10.1.0.128"
    epg = parse_range("10.1.0.10-10.1.0.12", a.spec.network)
    assert [str(a.allocate(epg)) for _ in range(3)] == ["10.1.0.10", "10.1.0.11", "10.1.0.12"]
    with pytest.raises(InvalidRange, match=re.escape("allocation range 10.1.0.0-10.1.0.5")):
        a.allocate((ip("10.1.0.0"), ip("10.1.0.5")))
    with pytest.raises(InvalidRange, match="in pool default:net1"):
        a.allocate((ip("10.1.0.200"), ip("10.1.1.5")))
    with pytest.raises(InvalidRange):
        a.allocate((ip("10.1.0.9"), ip("10.1.0.5")))


def test_dynamic_allocation_stays_in_range() -> None:
    a = pool("10.1.0.0/24", "10.1.0.250-10.1.0.254")
    got = {str(a.allocate()) for _ in range(5)}
    assert got == {f"10.1.0.{i}" for i in range(250, 255)}
    with pytest.raises(PoolExhausted, match=r"10\.1\.0\.0/24 range 10\.1\.0\.250-10\.1\.0\.254"):
        a.allocate()


def test_reserve_outside_range_allowed_outside_network_refused() -> None:
    a = pool("10.1.0.0/24", "10.1.0.128-10.1.0.254")
    a.reserve("10.1.0.1", owner="gateway")
    a.reserve(ip("10.1.0.5"), owner="ep-5")
    assert a.is_allocated("10.1.0.1") and a.owner("10.1.0.1") == "gateway"
    assert a.allocated == 2
    assert a.free_count() == 127  # reservations outside the dynamic range do not count there
    with pytest.raises(AddressInUse) as exc:
        a.reserve("10.1.0.5", owner="ep-other")
    assert str(exc.value) == "address 10.1.0.5 in pool default:net1 is already allocated to ep-5"
    with pytest.raises(AddressOutOfPool) as out:
        a.reserve("10.2.0.1")
    assert str(out.value) == (
        "address 10.2.0.1 is outside pool default:net1 (usable range 10.1.0.1-10.1.0.254 of "
        "10.1.0.0/24)"
    )
    with pytest.raises(AddressOutOfPool, match="address fd00::1 is outside pool default:net1"):
        a.reserve("fd00::1")
    with pytest.raises(AddressOutOfPool, match=re.escape("address 10.1.1.0 is outside")):
        a.reserve(ip("10.1.1.0"))
    with pytest.raises(AddressOutOfPool, match="address -1 is outside"):
        a.reserve(-1)
    with pytest.raises(InvalidAddress, match="address nope is not a valid address"):
        a.reserve("nope")
    a.reserve("10.1.0.128")
    assert str(a.allocate()) == "10.1.0.129"


def test_mark_is_idempotent_and_validated() -> None:
    a = pool("10.1.0.0/24")
    a.mark("10.1.0.7")
    a.mark("10.1.0.7/24")
    a.mark(IPv4Address("10.1.0.7"), owner="ep-7")
    assert a.allocated == 1
    assert a.owner("10.1.0.7") == "ep-7"
    with pytest.raises(AddressOutOfPool):
        a.mark("10.1.0.255")
    assert a.release("10.1.0.7")
    assert a.owner("10.1.0.7") is None
    assert not a.is_allocated("10.1.0.7")


def test_other_family_is_never_allocated() -> None:
    a = pool("10.1.0.0/24")
    assert not a.is_allocated("fd00::1")
    assert not a.release("fd00::1")
    assert a.owner(IPv6Address("fd00::1")) is None


def test_ipv6_64_and_48() -> None:
    a = pool("fd00:1::/64", name="default:v6")
    got = [a.allocate() for _ in range(1000)]
    assert got[0] == IPv6Address("fd00:1::1")
    assert len(set(got)) == 1000
    assert a.allocated == 1000
    assert a.free_count() == (1 << 64) - 1 - 1000
    a.reserve("fd00:1::ffff:ffff:ffff:ffff")
    with pytest.raises(AddressOutOfPool):
        a.reserve("fd00:1::")  # subnet-router anycast
    b = pool("fd00:2::/48")
    b.cursor = ip("fd00:2:0:1:ffff:ffff:ffff:ffff")
    assert str(b.allocate()) == "fd00:2:0:1:ffff:ffff:ffff:ffff"
    assert str(b.allocate()) == "fd00:2:0:2::"  # crosses /64 boundaries freely
    b.cursor = ip("fd00:2:0:ffff:ffff:ffff:ffff:ffff")
    assert str(b.allocate()) == "fd00:2:0:ffff:ffff:ffff:ffff:ffff"  # no v6 broadcast
    assert str(b.allocate()) == "fd00:2::1"  # wrapped past the end; fd00:2:: is excluded
    assert b.free_count() == (1 << 80) - 1 - 4


def test_slash8_100k_allocations_small_memory() -> None:
    a = pool("10.0.0.0/8", name="default:big")
    n = 100_000
    tracemalloc.start()
    try:
        prev = -1
        for _ in range(n):
            x = int(a.allocate())
            assert x > prev  # fresh pool allocates serially, so increasing means distinct
            prev = x
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert a.allocated == n
    assert a.free_count() == (1 << 24) - 2 - n
    assert a.allocated_intervals() == [(ip("10.0.0.1"), ip("10.0.0.1") + n - 1)]
    assert peak < 20 * 1024 * 1024


def test_slash8_fragmented_memory() -> None:
    a = pool("10.0.0.0/8", name="default:big")
    rnd = random.Random(1)
    tracemalloc.start()
    try:
        lo, hi = a.spec.bounds
        reserved = set()
        while len(reserved) < 50_000:
            x = rnd.randint(lo, hi)
            if x not in reserved:
                a.reserve(x)
                reserved.add(x)
        got = {int(a.allocate()) for _ in range(50_000)}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(got) == 50_000
    assert not got & reserved
    assert a.allocated == 100_000
    assert peak < 20 * 1024 * 1024
