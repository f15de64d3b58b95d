"""Reclaiming the endpoints of gone hosts: the pure plan, and the leader's pass on a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common import keys
from common.models import Endpoint, EndpointRequest, Network
from master.errors import Conflict
from master.reclaim import Reclaimer, default_interval, plan_reclaim
from master.state import ClusterState
from store import open_store


def ep(eid: str, host: str) -> Endpoint:
    return Endpoint(endpointID=eid, tenantName="default", networkName="n", host=host)


def ids(eps: list[Endpoint]) -> list[str]:
    return [e.endpointID for e in eps]


def test_registered_hosts_are_left_alone() -> None:
    plan = plan_reclaim({"h1"}, [ep("a", "h1")], {}, now=100, grace=10)
    assert plan.due == [] and plan.missing_since == {}


def test_clock_starts_when_first_seen_missing() -> None:
    plan = plan_reclaim({"h1"}, [ep("a", "h2"), ep("b", "h2")], {}, now=100, grace=10)
    assert plan.due == [] and plan.missing_since == {"h2": 100}
    plan = plan_reclaim({"h1"}, [ep("a", "h2")], plan.missing_since, now=109.9, grace=10)
    assert plan.due == [] and plan.missing_since == {"h2": 100}


def test_due_after_the_grace_period() -> None:
    eps = [ep("a", "h2"), ep("b", "h2"), ep("c", "h1")]
    plan = plan_reclaim({"h1"}, eps, {"h2": 100}, now=110, grace=10)
    assert ids(plan.due) == ["a", "b"]
    assert plan.missing_since == {"h2": 100}


def test_host_back_drops_its_clock() -> None:
    plan = plan_reclaim({"h1", "h2"}, [ep("a", "h2")], {"h2": 100}, now=500, grace=10)
    assert plan.due == [] and plan.missing_since == {}
    # Gone again later: the clock starts afresh.
    plan = plan_reclaim({"h1"}, [ep("a", "h2")], plan.missing_since, now=501, grace=10)
    assert plan.due == [] and plan.missing_since == {"h2": 501}


def test_clocks_of_hosts_without_endpoints_are_dropped() -> None:
    plan = plan_reclaim({"h1"}, [ep("a", "h1")], {"h2": 1, "h3": 2}, now=500, grace=10)
    assert plan.missing_since == {}


def test_endpoints_without_host_are_never_reclaimed() -> None:
    plan = plan_reclaim({"h1"}, [ep("a", "")], {"": 0}, now=10_000, grace=10)
    assert plan.due == [] and plan.missing_since == {}


def test_zero_grace_disables() -> None:
    plan = plan_reclaim({"h1"}, [ep("a", "h2")], {"h2": 0}, now=10_000, grace=0)
    assert plan.due == []


def test_default_interval() -> None:
    assert default_interval(1800) == 5.0
    assert default_interval(2) == 0.5
    assert default_interval(8) == 2.0


# --- the leader's pass on a real embedded store ---


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Leadership:
    def __init__(self) -> None:
        self.holder = True
        self.term = 1

    def __call__(self) -> tuple[bool, int]:
        return self.holder, self.term


@pytest.fixture
def state(tmp_path: Path) -> Iterator[ClusterState]:
    store = open_store(None, str(tmp_path))
    s = ClusterState(store)
    s.ensure_defaults()
    s.networks.put(Network(networkName="n", subnet="10.7.0.0/24"))
    yield s
    store.close()


def register(state: ClusterState, host: str) -> int:
    lease = state.store.lease_grant(600)
    state.store.put(keys.host(host), b'{"host": "%s"}' % host.encode(), lease=lease.id)
    return lease.id


def endpoint(state: ClusterState, eid: str, host: str) -> Endpoint:
    return state.endpoints.create(EndpointRequest(endpointID=eid, networkName="n", host=host))[0]


def allocated(state: ClusterState) -> set[str]:
    return {kv.key.rsplit("/", 1)[1] for kv in state.store.range(keys.ALLOC).kvs}


Setup = tuple[ClusterState, Reclaimer, Clock, Leadership, int]


@pytest.fixture
def setup(state: ClusterState) -> Setup:
    register(state, "alive")
    gone_lease = register(state, "gone")
    for i in range(3):
        endpoint(state, f"alive{i}", "alive")
        endpoint(state, f"gone{i}", "gone")
    endpoint(state, "nohost", "")
    clock, leadership = Clock(), Leadership()
    reclaimer = Reclaimer(state, leadership, grace=30, clock=clock)
    return state, reclaimer, clock, leadership, gone_lease


def test_reclaims_gone_host_after_grace(setup: Setup) -> None:
    state, reclaimer, clock, _, gone_lease = setup
    gone_addrs = {state.endpoints.get(f"gone{i}").ipAddress for i in range(3)}
    state.store.lease_revoke(gone_lease)
    assert reclaimer.tick() == []  # first seen missing: the clock starts
    clock.now = 29
    assert reclaimer.tick() == []
    clock.now = 30
    assert sorted(ids(reclaimer.tick())) == ["gone0", "gone1", "gone2"]
    left = {e.endpointID for e in state.endpoints.list()}
    assert left == {"alive0", "alive1", "alive2", "nohost"}
    assert not gone_addrs & allocated(state)  # the addresses are back in the pool
    # ...and can be handed out again.
    again = state.endpoints.create(
        EndpointRequest(
            endpointID="new", networkName="n", host="alive", ipAddress=sorted(gone_addrs)[0]
        )
    )[0]
    assert again.ipAddress == sorted(gone_addrs)[0]
    clock.now = 1000
    assert reclaimer.tick() == []


def test_followers_do_nothing_and_new_terms_start_afresh(setup: Setup) -> None:
    state, reclaimer, clock, leadership, gone_lease = setup
    state.store.lease_revoke(gone_lease)
    leadership.holder = False
    assert reclaimer.tick() == []
    clock.now = 1000
    assert reclaimer.tick() == []  # not the leader: nothing, however long
    leadership.holder, leadership.term = True, 2
    assert reclaimer.tick() == []  # the new leader starts its clock now
    clock.now = 1029
    assert reclaimer.tick() == []
    leadership.term = 3  # lost and regained the lead in between: afresh again
    clock.now = 1031
    assert reclaimer.tick() == []
    clock.now = 1061
    assert len(reclaimer.tick()) == 3


def test_nothing_is_reclaimed_while_no_host_registers(state: ClusterState) -> None:
    endpoint(state, "e1", "h1")
    clock = Clock()
    reclaimer = Reclaimer(state, Leadership(), grace=30, clock=clock)
    assert reclaimer.tick() == []
    clock.now = 10_000
    assert reclaimer.tick() == []
    assert [e.endpointID for e in state.endpoints.list()] == ["e1"]


def test_host_back_in_time_keeps_its_endpoints(setup: Setup) -> None:
    state, reclaimer, clock, _, gone_lease = setup
    state.store.lease_revoke(gone_lease)
    reclaimer.tick()
    register(state, "gone")  # the agent restarted within the grace period
    clock.now = 31
    assert reclaimer.tick() == []
    assert len(state.endpoints.list()) == 7


def test_reclaim_endpoint_refuses_a_registered_host(state: ClusterState) -> None:
    endpoint(state, "e1", "h1")
    register(state, "h1")
    with pytest.raises(Conflict, match="registered again"):
        state.endpoints.delete("e1", "h1")
    with pytest.raises(Conflict, match="belongs to host"):
        state.endpoints.delete("e1", "h2")
    assert state.endpoints.get("e1").host == "h1"
