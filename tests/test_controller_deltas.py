"""FlowController between full reconciles: a delta sends only its flow-mods and a barrier,
diffed against what the controller knows the switch holds, in an order that never sends a
packet somewhere it would go neither before nor after; a full read-and-diff reconcile comes
back on a new connection, after an error reply and on resync(). The worker's loop is
driven by hand (_run_once) against the fake switch."""

from __future__ import annotations

from typing import Any

from datapath_states import (
    BROADCAST,
    E1,
    E2,
    GW_A_IP,
    GW_A_MAC,
    NET_A,
    R1,
    TUN_H2,
    VNI_A,
    arp_request,
    cluster,
    flows_only,
    from_tunnel,
    ipv4,
)
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as ofp_parser

from datapath.flowmodel import Change, FlowModel
from datapath.flows import Flow, FlowDiff
from datapath.ofapp import FlowController
from datapath.ofstate import ReconcileStats
from datapath.pipeline import EndpointState
from testbed.fakeoftable import walk
from testbed.fakeswitch import FakeSwitch

NEW = EndpointState("ep9", NET_A, "02:00:00:00:00:09", "10.1.0.9", ofport=9)


def connected(model: FlowModel) -> tuple[FlowController, FakeSwitch, ReconcileStats]:
    """A controller with a switch, fully reconciled to the model's flows."""
    ctl = FlowController()
    switch = FakeSwitch(ctl)
    ctl.switch_connected(switch)
    generation = ctl.set_desired(model.flows())
    first = run(ctl, generation)
    assert first.full and switch.flows == model.flows() and switch.stats_requests == 1
    return ctl, switch, first


def run(ctl: FlowController, generation: int) -> ReconcileStats:
    """One turn of the reconcile worker; the stats of the generation it reached."""
    ctl._run_once()
    stats = ctl.wait_reconciled(generation, timeout=0)
    assert stats is not None, ctl.snapshot()
    return stats


def _deletes(msg: Any) -> bool:
    if isinstance(msg, ofp_parser.OFPGroupMod):
        return msg.command == ofp.OFPGC_DELETE
    return msg.command == ofp.OFPFC_DELETE_STRICT


def test_a_delta_sends_its_flow_mods_and_a_barrier_and_reads_nothing() -> None:
    model = FlowModel()
    model.replace(cluster())
    ctl, switch, _ = connected(model)
    for change in (Change(endpoints={NEW.id: NEW}), Change(endpoints={NEW.id: None})):
        delta = model.apply(change)
        switch.flow_mods.clear()
        barriers = switch.barriers
        stats = run(ctl, ctl.apply(delta))
        assert not stats.full and not stats.errors
        assert switch.flows == model.flows()
        assert switch.stats_requests == 1  # still only the first reconcile's read
        assert switch.barriers == barriers + 1
        # Its 6 flows and its segment's flood group.
        assert len(switch.flow_mods) == len(delta.to_add) + len(delta.to_delete) == 6 + 1
        deletes = [m for m in switch.flow_mods if _deletes(m)]
        assert (stats.added, stats.deleted) == (len(switch.flow_mods) - len(deletes), len(deletes))
    assert stats.replaced == 1  # the segment's flood group, modified in place
    assert ctl.snapshot()["switch_known"] and ctl.reconcile_count == 3


def test_deltas_queued_before_the_worker_runs_go_out_as_one() -> None:
    model = FlowModel()
    model.replace(cluster())
    ctl, switch, _ = connected(model)
    ctl.apply(model.apply(Change(endpoints={NEW.id: NEW})))
    generation = ctl.apply(model.apply(Change(endpoints={NEW.id: None})))
    switch.flow_mods.clear()
    stats = run(ctl, generation)
    assert switch.flow_mods == [] and (stats.added, stats.deleted) == (0, 0)
    assert switch.flows == model.flows()
    # An empty delta is a generation too, reached without a word to the switch.
    barriers = switch.barriers
    stats = run(ctl, ctl.apply(FlowDiff(frozenset(), frozenset())))
    assert stats.generation == generation + 1 and switch.barriers == barriers


def test_an_error_reply_makes_the_next_turn_a_full_reconcile() -> None:
    model = FlowModel()
    model.replace(cluster())
    ctl, switch, _ = connected(model)
    delta = model.apply(Change(endpoints={NEW.id: NEW}))
    switch.refuse = {next(f for f in delta.to_add if isinstance(f, Flow))}
    generation = ctl.apply(delta)
    ctl._run_once()
    assert ctl.wait_reconciled(generation, timeout=0) is None  # not clean
    assert ctl.last_reconcile is not None and ctl.last_reconcile.errors
    assert not ctl.snapshot()["switch_known"]
    switch.refuse = set()
    stats = run(ctl, generation)  # the retry the worker's timer would trigger
    assert stats.full and switch.stats_requests == 2 and switch.flows == model.flows()


def test_a_new_connection_and_resync_reconcile_in_full() -> None:
    model = FlowModel()
    model.replace(cluster())
    ctl, switch, _ = connected(model)
    lost = next(f for f in flows_only(switch.flows) if f.table == 0 and f.priority > 0)
    switch.flows = switch.flows - {lost}  # something else deleted one of our flows
    stats = run(ctl, ctl.apply(model.apply(Change(endpoints={NEW.id: NEW}))))
    assert not stats.full and lost not in switch.flows  # a delta does not read
    ctl.resync()
    stats = run(ctl, ctl.resync())
    assert stats.full and (stats.added, stats.deleted) == (1, 0)
    assert switch.flows == model.flows()
    # A reconnect (an ovs-vswitchd restart: the userspace datapath keeps no flows).
    restarted = FakeSwitch(ctl)
    ctl.switch_connected(restarted)
    generation = ctl.apply(model.apply(Change(endpoints={NEW.id: None})))
    stats = run(ctl, generation)
    assert stats.full and stats.connection == 2 and restarted.flows == model.flows()


def test_before_set_desired_a_delta_never_touches_the_switch() -> None:
    """A restarted agent's controller connects before resync; apply() alone must not make
    the worker program a partial set."""
    running = FlowModel()
    running.replace(cluster())
    ctl = FlowController()
    switch = FakeSwitch(ctl, running.flows())
    ctl.switch_connected(switch)
    model = FlowModel()
    generation = ctl.apply(model.apply(Change(networks={NET_A: cluster().networks[0]})))
    ctl._run_once()
    assert switch.flow_mods == [] and switch.stats_requests == 0
    assert ctl.wait_reconciled(generation, timeout=0) is None


# ---------------------------------------------------------------- the order of a delta

PACKETS: list[dict[str, Any]] = [
    ipv4(E1, E2.mac, E2.ipv4),
    ipv4(E2, E1.mac, E1.ipv4),
    ipv4(E1, BROADCAST, "10.1.0.255"),
    ipv4(E1, R1.mac, R1.ipv4),
    ipv4(E1, GW_A_MAC, "8.8.8.8"),
    arp_request(E1, E2.ipv4),
    arp_request(E1, GW_A_IP),
    from_tunnel(TUN_H2, VNI_A, R1.mac, E2.mac),
    from_tunnel(TUN_H2, VNI_A, R1.mac, BROADCAST),
]
FROM_NEW: list[dict[str, Any]] = [
    ipv4(NEW, E1.mac, E1.ipv4),
    ipv4(NEW, BROADCAST, "10.1.0.255"),
    arp_request(NEW, E1.ipv4),
    ipv4(NEW, GW_A_MAC, "8.8.8.8"),
]


def outcome(flows: set[Flow], pkt: dict[str, Any]) -> list[tuple[int, Any]]:
    w = walk(flows, pkt)
    return sorted((o, tuple(sorted(p.items()))) for o, p in zip(w.outputs, w.packets, strict=True))


def test_a_delta_never_sends_a_packet_where_it_goes_neither_before_nor_after() -> None:
    """At every flow-mod of adding and of removing an endpoint, the other endpoints'
    packets go where they went before or where they go after (a broadcast gains or loses
    the port, atomically); the endpoint's own packets are dropped until its last flow-mod
    when it comes, and from its first when it goes."""
    model = FlowModel()
    model.replace(cluster())
    ctl, switch, _ = connected(model)
    for change, coming in (
        (Change(endpoints={NEW.id: NEW}), True),
        (Change(endpoints={NEW.id: None}), False),
    ):
        before = set(switch.flows)
        delta = model.apply(change)
        after = set(model.flows())
        seen: list[set[Flow]] = []
        switch.after_flow_mod = seen.append
        run(ctl, ctl.apply(delta))
        switch.after_flow_mod = None
        assert seen[-1] == after and len(seen) == 6 + 1
        for pkt in PACKETS:
            allowed = (outcome(before, pkt), outcome(after, pkt))
            assert all(outcome(s, pkt) in allowed for s in seen), pkt
        for pkt in FROM_NEW:
            assert outcome(after if coming else before, pkt), pkt  # it does go somewhere
            mid = seen[:-1] if coming else seen
            assert all(outcome(s, pkt) == [] for s in mid), pkt
