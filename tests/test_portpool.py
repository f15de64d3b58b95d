"""datapath.portpool: ports plugged ahead of demand, taken and given back without OVSDB."""

from __future__ import annotations

import pytest

from datapath.portpool import EXT_POOL, PoolPort, PortPool, Shape, pool_names
from testbed.fakes_datapath import FakeLinks, FakeOvs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pool(size: int = 4, batch: int = 3) -> tuple[PortPool, FakeOvs, FakeLinks, Clock]:
    ovs, links, clock = FakeOvs(), FakeLinks(), Clock()
    keys = iter(f"{i:011x}" for i in range(1, 1000))
    p = PortPool(
        ovs, links, "netplugin", size, batch, 0.5, Shape(1500), keys=lambda: next(keys), clock=clock
    )
    return p, ovs, links, clock


def test_refill_makes_a_batch_in_one_transaction_up_to_the_size() -> None:
    p, ovs, links, _ = pool(size=4, batch=3)
    assert p.refill() == 3 and p.refill() == 1 and p.refill() == 0
    assert ovs.transactions == 2
    assert all(info.external_ids == {EXT_POOL: "1"} for info in ovs.ports.values())
    assert set(pool_names("00000000001")) <= links.links and len(links.links) == 8
    assert p.state()["free"] == 4 and p.state()["made"] == 4


def test_a_taken_port_is_readied_by_netlink_and_none_is_made_meanwhile() -> None:
    p, ovs, links, clock = pool()
    p.refill()
    port = p.take("ab" * 32, Shape(1450, True))
    assert port is not None and port.host == "vq00000000001"
    assert port.ofport == ovs.ports[port.host].ofport and port.offloads_off
    assert links.claimed[port.host] == ("ab" * 32, Shape(1450, True))
    assert links.serving[port.host] == "ab" * 32 and port.container in links.checksum_off
    transactions = ovs.transactions
    assert p.missing() == 0 and p.refill() == 0  # a take just now: no reconfiguration
    clock.now += 0.6
    assert p.missing() == 2 and p.refill() == 2 and ovs.transactions == transactions + 1


def test_an_empty_pool_makes_a_batch_at_once_and_counts_the_miss() -> None:
    p, ovs, _, _ = pool(size=4, batch=3)
    first = p.take("e1", Shape(1500))
    assert first is not None and ovs.transactions == 1
    assert p.state() == {"free": 2, "size": 4, "taken": 1, "missed": 1, "reused": 0, "made": 3}
    # The batch serves the next ones: no transaction each.
    assert p.take("e2", Shape(1500)) and p.take("e3", Shape(1500))
    assert ovs.transactions == 1


def test_a_pool_that_cannot_make_ports_leaves_nothing_and_says_none() -> None:
    p, ovs, links, _ = pool()
    ovs.add_port_error = "could not open network device vq... (No such device)"
    assert p.take("e1", Shape(1500)) is None
    assert links.links == set() and ovs.ports == {} and p.state()["missed"] == 1


def test_a_port_that_cannot_be_readied_is_dropped_for_the_caller_to_plug_its_own() -> None:
    p, _, links, _ = pool()
    p.refill()
    links.claim_error = OSError("No such device")
    assert p.take("e1", Shape(1500)) is None
    assert p.state()["free"] == 2 and p.state()["taken"] == 0


def test_a_port_given_back_serves_again_only_if_its_container_end_came_home() -> None:
    p, _, links, _ = pool(size=2, batch=2)
    p.refill()
    a = p.take("e1", Shape(1500))
    b = p.take("e2", Shape(1500))
    assert a is not None and b is not None
    links.links.discard(b.container)  # e.g. a CNI pod's namespace holds it
    assert p.give_back(a) and not p.give_back(b)
    assert a.host not in links.serving and p.state()["reused"] == 1
    again = p.take("e3", Shape(1400))
    assert again is not None and (again.host, again.ofport) == (a.host, a.ofport)
    assert links.claimed[a.host] == ("e3", Shape(1400))


def test_a_pool_keeps_what_is_given_back_up_to_twice_its_size() -> None:
    p, _, links, _ = pool(size=1, batch=1)
    p.refill()
    extra = [PoolPort(*pool_names(f"f{i:010x}"), 7 + i) for i in range(2)]
    for port in extra:
        links.create_pool_veth(port.host, port.container, Shape(1500))
    assert p.give_back(extra[0]) and not p.give_back(extra[1])
    assert p.state()["free"] == 2


def test_offloads_follow_each_endpoint_through_reuse() -> None:
    p, _, links, _ = pool(size=1, batch=1)
    a = p.take("e1", Shape(1500, True))
    assert a is not None and a.container in links.checksum_off and p.give_back(a)
    b = p.take("e2", Shape(1500, False))
    assert b is not None and b.host == a.host and b.container not in links.checksum_off


def test_a_port_of_the_endpoints_shape_is_taken_without_a_link_change() -> None:
    """ovs-vswitchd reconfigures every port on any link change in the host's namespace:
    the pool makes its ports as the last one was taken, so the next take changes nothing;
    a port given back keeps its shape."""
    p, _, links, clock = pool(size=2, batch=2)
    p.refill()
    a = p.take("e1", Shape(1500))
    assert a is not None and links.link_changes == []
    b = p.take("e2", Shape(1450, True))  # made at 1,500 with offloads: both change
    assert b is not None and (b.mtu, b.offloads_off) == (1450, True)
    assert sorted(kind for _, kind in links.link_changes) == ["mtu", "mtu", "tx-checksumming"]
    links.link_changes.clear()
    assert p.give_back(b)
    clock.now += 0.6
    assert p.refill() == 1  # made as the last one was taken
    c, d = p.take("e3", Shape(1450, True)), p.take("e4", Shape(1450, True))
    assert c is not None and d is not None and c.host == b.host and d.host not in (a.host, b.host)
    assert links.link_changes == []


def test_adopt_keeps_up_to_the_size_and_drain_empties() -> None:
    p, _, _, _ = pool(size=2)
    found = [PoolPort(*pool_names(f"{i:011x}"), i) for i in (7, 8, 9)]
    assert p.adopt(found) == found[2:]
    assert p.drain() == found[:2] and p.state()["free"] == 0


@pytest.mark.parametrize("key", ["00000000001", "abcdef01234"])
def test_pool_names_fit_the_kernels_fifteen_characters(key: str) -> None:
    host, container = pool_names(key)
    assert len(host) <= 15 and len(container) <= 15 and host != container
