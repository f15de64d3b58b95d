"""FlowController's reconcile against a fake switch, without os-ken's server: starting that
in the pytest process would leave non-daemon threads behind (see datapath.ofapp)."""

from __future__ import annotations

import pytest
from datapath_states import flows_only, world
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as ofp_parser

from datapath.flows import Flow, Group, flow
from datapath.ofapp import FlowController
from datapath.ofwire import ReconcileError
from datapath.pipeline import FORWARD, compile_flows
from testbed.fakeswitch import FakeSwitch, reconcile

F1 = flow(0, 10, [("goto", 1)], in_port=1)


def test_reconcile_converges_then_sends_nothing() -> None:
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController())
    first = reconcile(switch, desired)
    assert switch.flows == desired
    assert (first.found, first.added, first.deleted) == (0, len(desired), 0)
    # The segments' flood groups first, then the flows from the last table back, so
    # classify flows come last.
    groups = [m.group_id for m in switch.flow_mods if isinstance(m, ofp_parser.OFPGroupMod)]
    assert groups == sorted(g.id for g in desired if isinstance(g, Group)) and len(groups) == 2
    assert [m.table_id for m in switch.flow_mods[len(groups) :]] == sorted(
        (f.table for f in flows_only(desired)), reverse=True
    )
    again = reconcile(switch, desired)
    assert (again.found, again.added, again.deleted, again.replaced) == (len(desired), 0, 0, 0)
    assert switch.flow_mods == []


def test_reconcile_deletes_stale_replaces_changed_and_leaves_foreign_flows() -> None:
    desired = compile_flows(world())
    foreign = flow(0, 500, [("output", 9)], cookie=0, in_port=9)
    stale = flow(0, 100, [("goto", 1)], in_port=77)
    victim = next(f for f in flows_only(desired) if f.table == FORWARD.id and f.priority == 10)
    changed = Flow(victim.table, victim.priority, victim.match, (("output", 42),), victim.cookie)
    switch = FakeSwitch(FlowController(), (desired - {victim}) | {foreign, stale, changed})
    stats = reconcile(switch, desired)
    assert switch.flows == desired | {foreign}
    assert (stats.added, stats.replaced, stats.deleted) == (1, 1, 1)
    assert [m.command for m in switch.flow_mods] == [ofp.OFPFC_DELETE_STRICT, ofp.OFPFC_ADD]


def test_reconcile_reports_flows_the_switch_refuses() -> None:
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController())
    switch.refuse = {next(iter(flows_only(desired)))}  # the fake refuses flow-mods only
    stats = reconcile(switch, desired)
    assert len(stats.errors) == 1 and "OFPET_BAD_ACTION" in stats.errors[0]
    assert switch.flows == desired - switch.refuse


def test_dead_event_of_an_old_connection_is_ignored() -> None:
    ctl = FlowController()
    old, new = FakeSwitch(ctl), FakeSwitch(ctl)
    ctl.switch_connected(old)
    ctl.switch_connected(new)  # the switch reconnected before the old DEAD arrived
    ctl.switch_disconnected(old)
    assert ctl.connected and ctl.wait_connected(0)
    ctl.switch_disconnected(new)
    assert not ctl.connected


def test_set_desired_refuses_two_flows_with_one_identity() -> None:
    with pytest.raises(ValueError, match="one identity"):
        FlowController().set_desired({F1, flow(0, 10, [("goto", 2)], in_port=1)})


def test_no_reconcile_before_desired_state_is_known() -> None:
    """A restarted agent connects before it has re-read its state: the switch keeps its flows."""
    import time

    running = compile_flows(world())
    ctl = FlowController()
    switch = FakeSwitch(ctl, running)
    ctl._worker.start()  # the reconcile loop alone: no os-ken
    try:
        ctl.switch_connected(switch)
        time.sleep(0.3)  # give a wrongly eager worker the chance to act
        assert switch.flow_mods == [] and switch.flows == running
        generation = ctl.set_desired(running)
        stats = ctl.wait_reconciled(generation, timeout=5)
        assert stats is not None
        assert (stats.found, stats.added, stats.deleted) == (len(running), 0, 0)
        assert switch.flows == running
    finally:
        ctl._worker.stop()
        ctl._worker.join(5)


def test_a_long_flow_read_that_keeps_coming_is_waited_for() -> None:
    """The reply timeout bounds silence, not the whole read: thousands of flows on a loaded
    host take longer than it to arrive, and giving up then made every re-read fail (the
    reconnect loop seen at ~700 endpoints in a TCG guest)."""
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController(reply_timeout=0.5), desired)
    switch.part_interval = 0.5 * 3 / ((len(desired) + 2) // 3)  # the whole read: 3 timeouts
    stats = reconcile(switch, desired)
    assert (stats.found, stats.added, stats.deleted) == (len(desired), 0, 0)


def test_a_flow_read_that_stops_coming_fails_and_says_where() -> None:
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController(reply_timeout=0.2), desired)
    switch.part_interval, switch.stall_after = 0.01, 2
    with pytest.raises(ReconcileError, match=r"stopped after 2 part\(s\); nothing more within"):
        reconcile(switch, desired)
    switch.stall_after = 0
    with pytest.raises(ReconcileError, match=r"no reply to OFPFlowDescStatsRequest within 0\.2s"):
        reconcile(switch, desired)
