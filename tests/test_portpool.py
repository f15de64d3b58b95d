"""datapath.portpool: ports plugged ahead of demand, taken and given back without OVSDB."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from datapath.portpool import EXT_POOL, PoolPort, PortPool, pool_names


class Links:
    def __init__(self) -> None:
        self.pairs: set[tuple[str, str]] = set()
        self.claimed: dict[str, tuple[str, str, int]] = {}  # host -> (endpoint, mac, mtu)
        self.away: set[str] = set()  # container ends not back in the host's namespace
        self.claim_error: OSError | None = None

    def create_pool_veth(self, host: str, container: str) -> None:
        self.pairs.add((host, container))

    def claim(self, port: PoolPort, endpoint_id: str, mac: str, mtu: int) -> None:
        if self.claim_error is not None:
            raise self.claim_error
        self.claimed[port.host] = (endpoint_id, mac, mtu)

    def release(self, port: PoolPort) -> bool:
        self.claimed.pop(port.host, None)
        return port.container not in self.away


class Ovs:
    def __init__(self) -> None:
        self.transactions: list[list[str]] = []
        self.ext: dict[str, dict[str, str]] = {}
        self.next = 100

    def add_ports(
        self, bridge: str, names: list[str], external_ids: Mapping[str, str]
    ) -> dict[str, int]:
        self.transactions.append(list(names))
        out = {}
        for n in names:
            self.next += 1
            out[n] = self.next
            self.ext[n] = dict(external_ids)
        return out


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pool(size: int = 4, batch: int = 3) -> tuple[PortPool, Ovs, Links, Clock]:
    ovs, links, clock = Ovs(), Links(), Clock()
    keys = iter(f"{i:011x}" for i in range(1, 1000))
    p = PortPool(ovs, links, "netplugin", size, batch, 0.5, lambda: next(keys), clock)
    return p, ovs, links, clock


def test_refill_makes_a_batch_in_one_transaction_up_to_the_size() -> None:
    p, ovs, links, _ = pool(size=4, batch=3)
    assert p.refill() == 3 and p.refill() == 1 and p.refill() == 0
    assert [len(t) for t in ovs.transactions] == [3, 1]
    assert all(ext == {EXT_POOL: "1"} for ext in ovs.ext.values())
    assert pool_names("00000000001") in links.pairs and len(links.pairs) == 4
    assert p.state()["free"] == 4 and p.state()["made"] == 4


def test_a_taken_port_is_readied_by_netlink_and_none_is_made_meanwhile() -> None:
    p, ovs, links, clock = pool()
    p.refill()
    port = p.take("ab" * 32, "02:42:0a:00:00:02", 1450)
    assert port is not None and port.ofport == 101 and port.host == "vq00000000001"
    assert links.claimed[port.host] == ("ab" * 32, "02:42:0a:00:00:02", 1450)
    transactions = len(ovs.transactions)
    assert p.missing() == 0 and p.refill() == 0  # a take just now: no reconfiguration
    clock.now += 0.6
    assert p.missing() == 2 and p.refill() == 2 and len(ovs.transactions) == transactions + 1


def test_an_empty_pool_says_so_and_counts_the_miss() -> None:
    p, _, _, _ = pool()
    assert p.take("e1", "02:00:00:00:00:01", 1500) is None
    assert p.state()["missed"] == 1 and p.state()["taken"] == 0


def test_a_port_that_cannot_be_readied_is_dropped_for_the_caller_to_plug_its_own() -> None:
    p, _, links, _ = pool()
    p.refill()
    links.claim_error = OSError("No such device")
    assert p.take("e1", "02:00:00:00:00:01", 1500) is None
    assert p.state()["free"] == 2 and p.state()["taken"] == 0


def test_a_port_given_back_serves_again_only_if_its_container_end_came_home() -> None:
    p, _, links, _ = pool(size=2, batch=2)
    p.refill()
    a = p.take("e1", "02:00:00:00:00:01", 1500)
    b = p.take("e2", "02:00:00:00:00:02", 1500)
    assert a is not None and b is not None
    links.away.add(b.container)  # e.g. a CNI pod's namespace went with it
    assert p.give_back(a) and not p.give_back(b)
    assert a.host not in links.claimed and p.state()["reused"] == 1
    assert p.take("e3", "02:00:00:00:00:03", 1400) == a  # the same switch port, ofport
    assert links.claimed[a.host] == ("e3", "02:00:00:00:00:03", 1400)


def test_a_full_pool_does_not_keep_what_is_given_back() -> None:
    p, _, _, _ = pool(size=1, batch=1)
    extra = PoolPort(*pool_names("fffffffffff"), 7)
    p.refill()
    assert not p.give_back(extra)


def test_adopt_keeps_up_to_the_size_and_drain_empties() -> None:
    p, _, _, _ = pool(size=2)
    found = [PoolPort(*pool_names(f"{i:011x}"), i) for i in (7, 8, 9)]
    assert p.adopt(found) == found[2:]
    assert p.drain() == found[:2] and p.state()["free"] == 0


@pytest.mark.parametrize("key", ["00000000001", "abcdef01234"])
def test_pool_names_fit_the_kernels_fifteen_characters(key: str) -> None:
    host, container = pool_names(key)
    assert len(host) <= 15 and len(container) <= 15 and host != container
