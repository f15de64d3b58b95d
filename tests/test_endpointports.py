"""Endpoints on pool ports (datapath.endpointports with datapath.portpool) in HostDatapath:
no OVSDB change on an endpoint's path, reuse, removal, restart, audit and stop."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.plugcost import WINDOW
from datapath.portpool import EXT_POOL, PortPool, Shape, container_end, pool_names
from datapath.veth import Into, veth_names
from testbed.fakes_datapath import FakeController, FakeHostPorts, FakeIptables, FakeLinks, FakeOvs

NET = NetworkState(id="default:n1", tag=7, subnet="10.1.0.0/24", gateway="10.1.0.1")


def ep(n: int) -> EndpointState:
    return EndpointState(f"{n:02x}" * 32, NET.id, f"02:42:0a:01:00:{n:02x}", f"10.1.0.{n}")


class Host:
    """One host's agent on fakes that outlive it (a restart builds another on them)."""

    def __init__(self, size: int = 3, batch: int = 2) -> None:
        self.ovs, self.links = FakeOvs(), FakeLinks()
        self.size, self.batch = size, batch
        self.keys = iter(f"{i:011x}" for i in range(1, 10_000))
        self.agent = self.start()

    def start(self, endpoints: list[EndpointState] | None = None) -> HostDatapath:
        pool = PortPool(
            self.ovs,
            self.links,
            "netplugin",
            self.size,
            self.batch,
            0.0,
            keys=lambda: next(self.keys),
        )
        config = HostConfig(datapath_type="netdev", tunnels=True)
        agent = HostDatapath(
            config, self.ovs, FakeController(), FakeIptables(), self.links, FakeHostPorts(), pool
        )
        agent.ready_timeout = 5
        self.report = agent.resync([NET], endpoints or [])
        self.pool = pool
        return agent

    def create(self, e: EndpointState) -> EndpointState:
        return self.create_in(e, None)

    def create_in(self, e: EndpointState, into: Into | None) -> EndpointState:
        self.agent.create_endpoint_port(e, into)
        return next(x for x in self.agent.desired().endpoints if x.id == e.id)

    def delete(self, e: EndpointState, container_home: bool = True) -> None:
        mine = next(x for x in self.agent.desired().endpoints if x.id == e.id)
        if not container_home:  # a pod's namespace holds it, or took it away
            self.links.links.discard(container_end(mine.port))
        self.agent.delete_endpoint_port(e.id)
        assert self.agent.settle(5) == 0


def test_a_pooled_endpoint_costs_ovsdb_nothing() -> None:
    h = Host()
    assert h.pool.refill() == 2
    before = h.ovs.transactions
    mine = h.create(ep(2))
    assert h.ovs.transactions == before  # no ovs-vswitchd reconfiguration on its path
    assert mine.port.startswith("vq") and mine.ofport == h.ovs.ports[mine.port].ofport
    assert h.links.serving[mine.port] == ep(2).id  # how a restarted agent finds it
    assert container_end(mine.port) in h.links.checksum_off  # netdev without TSO
    assert h.agent.endpoint_oper(ep(2).id)["hostInterface"] == mine.port
    assert veth_names(ep(2).id)[0] not in h.links.links


def test_an_empty_pool_makes_a_batch_in_one_transaction() -> None:
    h = Host(size=3, batch=3)
    before = h.ovs.transactions
    ports = [h.create(ep(n)).port for n in (2, 3, 4)]
    assert h.ovs.transactions == before + 1 and len(set(ports)) == 3
    assert all(p.startswith("vq") for p in ports)


def test_a_deleted_endpoints_port_serves_the_next_one() -> None:
    h = Host(size=1, batch=1)
    first = h.create(ep(2))
    before = h.ovs.transactions
    h.delete(ep(2))
    assert first.port in h.ovs.ports and first.port not in h.links.serving
    second = h.create(ep(3))
    assert (second.port, second.ofport) == (first.port, first.ofport)
    assert h.ovs.transactions == before and h.links.claimed[first.port][0] == ep(3).id
    assert [e.id for e in h.agent.desired().endpoints] == [ep(3).id]


def test_a_port_whose_container_end_stayed_away_is_removed() -> None:
    h = Host()
    mine = h.create(ep(2))
    h.delete(ep(2), container_home=False)
    assert mine.port not in h.ovs.ports and mine.port not in h.links.links
    assert mine.port not in {p.host for p in h.pool.free()}


def test_a_restart_adopts_pooled_endpoints_by_record_and_keeps_whole_spares() -> None:
    h = Host(size=3, batch=3)
    kept = h.create(ep(2))
    gone = h.create(ep(3))  # deleted while the agent was down: its record names no endpoint
    assert h.pool.state()["free"] == 1
    stray = pool_names("fffffffffff")  # a batch that failed half-way: a pair, no port
    h.links.create_pool_veth(*stray, Shape(1500))
    h.agent = h.start([ep(2)])
    mine = next(x for x in h.agent.desired().endpoints if x.id == ep(2).id)
    assert (mine.port, mine.ofport) == (kept.port, kept.ofport)
    assert h.report["endpoints"] == 1 and h.report["missing"] == 0
    assert gone.port in {p.host for p in h.pool.free()}  # whole: kept for the pool
    assert stray[0] not in h.links.links and h.report["removed"] >= 1
    # The adopted endpoint's port goes back to the pool when it is deleted.
    h.delete(ep(2))
    assert kept.port in {p.host for p in h.pool.free()}


def test_a_restart_removes_spares_beyond_the_pool_size() -> None:
    h = Host(size=3, batch=3)
    h.pool.refill()
    h.size = 1
    h.agent = h.start()
    spare = sorted(n for n, i in h.ovs.ports.items() if EXT_POOL in i.external_ids)
    assert len(spare) == 1 and h.pool.state()["free"] == 1


def test_the_audit_removes_pool_ports_nobody_has() -> None:
    h = Host()
    mine = h.create(ep(2))
    free = {p.host for p in h.pool.free()}
    orphan = pool_names("eeeeeeeeeee")
    h.links.create_pool_veth(*orphan, Shape(1500))
    h.ovs.add_ports("netplugin", [orphan[0]], {EXT_POOL: "1"})
    h.agent.audit()
    assert orphan[0] not in h.ovs.ports and orphan[0] not in h.links.links
    assert mine.port in h.ovs.ports and free <= set(h.ovs.ports)


def test_another_agents_pool_ports_are_left_alone() -> None:
    """Several agents on one host (simulated hosts, the test suite): a stopped agent keeps
    its spare pool ports on its own bridge for its next start; the pairs are in the same
    namespace, and another agent's start and audit must neither adopt nor remove them
    (a landing CI run's agent tried to remove one from its own bridge, and its cluster
    sync failed on that until the test gave up)."""
    h = Host()
    theirs = pool_names("ddddddddddd")
    h.links.create_pool_veth(*theirs, Shape(1500))
    h.ovs.elsewhere.add(theirs[0])
    h.agent = h.start()
    assert h.report["removed"] == 0 and set(theirs) <= h.links.links
    assert theirs[0] not in {p.host for p in h.pool.free()}
    h.agent.audit()
    assert set(theirs) <= h.links.links


def test_a_restart_keeps_the_spare_ports_and_adopts_them() -> None:
    h = Host(size=3, batch=3)
    h.pool.refill()
    mine = h.create(ep(2))
    spare = {p.host for p in h.pool.free()}
    ports = dict(h.ovs.ports)
    assert h.agent.ports.stop(5) == 0
    h.agent = h.start([ep(2)])
    assert h.ovs.ports == ports  # no port made or removed: none of OVSDB's reconfigurations
    assert {p.host for p in h.pool.free()} == spare and h.pool.refill() == 1
    assert next(x for x in h.agent.desired().endpoints).port == mine.port


@pytest.mark.parametrize("tso", [False, True])
def test_offloads_follow_the_network_through_reuse(tso: bool) -> None:
    h = Host(size=1, batch=1)
    h.agent.switch_tso = tso
    net2 = replace(NET, id="default:n2", tag=8, subnet="10.2.0.0/24", gateway="10.2.0.1")
    h.agent.ensure_network(replace(net2, encap="vlan"))
    mine = h.create(ep(2))
    h.delete(ep(2))
    other = replace(ep(3), network_id="default:n2")
    again = h.create(other)
    assert again.port == mine.port
    # VLAN networks keep offloads when ovs-vswitchd has userspace TSO.
    assert (container_end(again.port) in h.links.checksum_off) is (not tso)


def busy(h: Host) -> None:
    """Port adds cost what they do beside 1,000 ports (userspace datapath), every time."""
    for _ in range(WINDOW):
        h.pool.costs.added(0.300)


def test_into_a_namespace_a_pod_gets_its_own_pair_while_a_port_add_is_cheaper() -> None:
    """CNI on a quiet switch: a port add (measured when the pool made its batch) costs less
    than a move, so the pod's own pair is made with its end in the pod's namespace; the
    pool is left as it was. The add is measured too."""
    h = Host(size=1, batch=1)
    assert h.pool.refill() == 1 and h.pool.costs.port_add.samples == 1
    into = Into("/run/netns/pod1", "eth0")
    made_first, add = [], h.ovs.add_port

    def add_port(*args: Any, **kwargs: Any) -> int:
        made_first.append(into.made.is_set())
        return add(*args, **kwargs)

    h.ovs.add_port = add_port  # type: ignore[method-assign]
    assert h.agent.plug(ep(3).id, NET.id, ep(3).mac, into) == ""  # nothing to move here
    assert made_first == [True]  # said before the port was added: the pod may be configured
    assert (h.pool.made, h.pool.missed, h.pool.taken, len(h.pool.free())) == (1, 0, 0, 1)
    assert h.pool.costs.port_add.samples == 2
    host = veth_names(ep(3).id)[0]
    assert h.links.made_in[host] == (into, False)  # netdev without TSO: checksums off there
    assert h.ovs.ports[host].ofport > 0 and veth_names(ep(3).id)[1] not in h.links.links
    mine = h.create(ep(3))  # its flows on that port
    assert (mine.port, mine.ofport) == ("", h.ovs.ports[host].ofport)
    assert h.agent.endpoint_oper(ep(3).id)["hostInterface"] == host
    h.agent.delete_endpoint_port(ep(3).id)
    assert h.agent.settle(5) == 0
    assert host not in h.ovs.ports and host not in h.links.links  # removed, not pooled


def test_into_a_namespace_a_pool_port_is_moved_in_while_a_port_add_costs_more() -> None:
    """CNI beside many ports: a port add costs more than a move, so a free pool port is
    taken; its end is moved into the pod's namespace (renamed there) once the flows are
    sent, and the move is measured. With the pool empty, the pod's own pair, made there
    (the pool makes nothing for it)."""
    h = Host(size=1, batch=1)
    assert h.pool.refill() == 1
    busy(h)  # as beside 1,000 ports on the userspace datapath
    into = Into("/run/netns/pod1", "eth0")
    port = h.pool.free()[0]
    assert h.agent.plug(ep(2).id, NET.id, ep(2).mac, into) == port.container  # still here
    assert h.links.moved == {} and h.pool.taken == 1  # a refused booking gives it back whole
    assert not into.made.is_set()
    assert h.agent.create_endpoint_port(ep(2), into) == ""  # moved there
    assert into.made.is_set()
    assert h.links.moved == {port.container: into} and port.container not in h.links.links
    assert h.pool.costs.move.samples == 1
    mine = next(x for x in h.agent.desired().endpoints if x.id == ep(2).id)
    assert (mine.port, mine.ofport) == (port.host, port.ofport)
    made = h.pool.made
    assert h.agent.plug(ep(3).id, NET.id, ep(3).mac, into) == ""
    assert h.pool.made == made and h.pool.missed == 1
    assert h.links.made_in[veth_names(ep(3).id)[0]] == (into, False)


def test_a_pool_port_that_cannot_move_in_goes_back_and_the_error_says_where() -> None:
    h = Host(size=1, batch=1)
    assert h.pool.refill() == 1
    busy(h)
    port = h.pool.free()[0]
    h.links.move_error = OSError(17, "File exists")  # the pod has an eth0 already
    into = Into("/run/netns/pod1", "eth0")
    h.agent.plug(ep(2).id, NET.id, ep(2).mac, into)
    moving = f"cannot move {port.container} into /run/netns/pod1 as eth0: File exists"
    with pytest.raises(OSError, match=moving):
        h.agent.create_endpoint_port(ep(2), into)
    assert not into.made.is_set()
    assert not h.agent.has_endpoint(ep(2).id) and h.agent.settle(5) == 0  # no flows left
    back = h.pool.free()  # whole, to serve (readied for the endpoint's shape)
    assert [p.host for p in back] == [port.host] and port.container in h.links.links


def test_an_add_retried_after_a_restart_finds_the_end_moved_and_keeps_the_endpoint() -> None:
    """The agent restarted after a pool port's end was moved into the pod: the adopted
    port's end is not here, which counts as moved, and the endpoint keeps its port and
    flows."""
    h = Host(size=1, batch=1)
    assert h.pool.refill() == 1
    busy(h)
    into = Into("/run/netns/pod1", "eth0")
    h.agent.plug(ep(2).id, NET.id, ep(2).mac, into)
    mine = h.create_in(ep(2), into)
    h.agent = h.start([mine])
    assert h.agent.create_endpoint_port(ep(2), into) == ""
    again = next(x for x in h.agent.desired().endpoints if x.id == ep(2).id)
    assert (again.port, again.ofport) == (mine.port, mine.ofport) and h.agent.settle(5) == 0
    assert mine.port in h.ovs.ports


def test_a_port_made_in_a_namespace_is_adopted_after_a_restart() -> None:
    h = Host(size=0)
    h.agent.plug(ep(3).id, NET.id, ep(3).mac, Into("/run/netns/pod1", "eth0"))
    made = h.create(ep(3))
    h.agent = h.start([ep(3)])
    again = next(x for x in h.agent.desired().endpoints if x.id == ep(3).id)
    assert again.ofport == made.ofport and h.report["missing"] == 0
    host = veth_names(ep(3).id)[0]
    assert host in h.ovs.ports and host in h.links.links  # kept: the pod's traffic goes on
