"""FlowController's reconcile against a fake switch, without os-ken's server: starting that
in the pytest process would leave non-daemon threads behind (see datapath.ofapp)."""

from __future__ import annotations

from typing import Any

import pytest
from datapath_states import world
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofp_parser

from datapath.flows import Flow, flow
from datapath.ofapp import FlowController
from datapath.ofcodec import from_ofp_flow, to_ofp_instructions, to_ofp_match
from datapath.pipeline import compile_flows

F1 = flow(0, 10, [("goto", 1)], in_port=1)


class FakeSwitch:
    """A datapath that answers flow stats, flow-mods and barriers at once, in-thread."""

    def __init__(self, controller: FlowController, flows: set[Flow] = frozenset()) -> None:
        self.controller = controller
        self.flows = set(flows)
        self.flow_mods: list[Any] = []
        self.refuse: set[Flow] = set()
        self.id = 0xAB
        self.address = ("127.0.0.1", 1)
        self._xid = 0

    def set_xid(self, msg: Any) -> None:
        self._xid += 1
        msg.xid = self._xid

    def send_msg(self, msg: Any) -> bool:
        if msg.xid is None:
            self.set_xid(msg)
        if isinstance(msg, ofp_parser.OFPFlowStatsRequest):
            self._stats(msg)
        elif isinstance(msg, ofp_parser.OFPFlowMod):
            self._flow_mod(msg)
        elif isinstance(msg, ofp_parser.OFPBarrierRequest):
            self.controller._on_reply(self._reply(msg.xid))
        return True

    def _reply(self, xid: int, **fields: Any) -> Any:
        return type("Reply", (), {"xid": xid, "datapath": self, "flags": 0, **fields})()

    def _stats(self, msg: Any) -> None:
        mine = sorted(
            (f for f in self.flows if f.cookie & msg.cookie_mask == msg.cookie & msg.cookie_mask),
            key=str,
        )
        body = [
            ofp_parser.OFPFlowStats(
                table_id=f.table,
                priority=f.priority,
                cookie=f.cookie,
                match=to_ofp_match(f),
                instructions=to_ofp_instructions(f),
            )
            for f in mine
        ]
        chunks = [body[i : i + 3] for i in range(0, len(body), 3)] or [[]]
        for i, chunk in enumerate(chunks):
            more = ofp.OFPMPF_REPLY_MORE if i < len(chunks) - 1 else 0
            self.controller._on_reply(self._reply(msg.xid, flags=more, body=chunk))

    def _flow_mod(self, msg: Any) -> None:
        self.flow_mods.append(msg)
        f = from_ofp_flow(msg.table_id, msg.priority, msg.cookie, msg.match, msg.instructions)
        if msg.command == ofp.OFPFC_ADD:
            if f in self.refuse:
                error = self._reply(msg.xid, type=ofp.OFPET_BAD_ACTION, code=0)
                self.controller._on_error(error)
                return
            self.flows = {g for g in self.flows if g.identity != f.identity} | {f}
        elif msg.command == ofp.OFPFC_DELETE_STRICT:
            assert (msg.out_port, msg.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
            self.flows = {
                g
                for g in self.flows
                if not (g.identity == f.identity and g.cookie & msg.cookie_mask == msg.cookie)
            }


def _reconcile(switch: FakeSwitch, desired: set[Flow]) -> Any:
    ctl = switch.controller
    ctl._on_connect(switch)
    switch.flow_mods.clear()
    return ctl._reconcile(switch, 1, frozenset(desired), 1)


def test_reconcile_converges_then_sends_nothing() -> None:
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController())
    first = _reconcile(switch, desired)
    assert switch.flows == desired
    assert (first.found, first.added, first.deleted) == (0, len(desired), 0)
    # Flows added from the last table back, so classify flows come last.
    assert [m.table_id for m in switch.flow_mods] == sorted(
        (f.table for f in desired), reverse=True
    )
    again = _reconcile(switch, desired)
    assert (again.found, again.added, again.deleted, again.replaced) == (len(desired), 0, 0, 0)
    assert switch.flow_mods == []


def test_reconcile_deletes_stale_replaces_changed_and_leaves_foreign_flows() -> None:
    desired = compile_flows(world())
    foreign = flow(0, 500, [("output", 9)], cookie=0, in_port=9)
    stale = flow(0, 100, [("goto", 1)], in_port=77)
    victim = next(f for f in desired if f.table == 4 and f.priority == 10)
    changed = Flow(victim.table, victim.priority, victim.match, (("output", 42),), victim.cookie)
    switch = FakeSwitch(FlowController(), (desired - {victim}) | {foreign, stale, changed})
    stats = _reconcile(switch, desired)
    assert switch.flows == desired | {foreign}
    assert (stats.added, stats.replaced, stats.deleted) == (1, 1, 1)
    assert [m.command for m in switch.flow_mods] == [ofp.OFPFC_DELETE_STRICT, ofp.OFPFC_ADD]


def test_reconcile_reports_flows_the_switch_refuses() -> None:
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController())
    switch.refuse = {next(iter(desired))}
    stats = _reconcile(switch, desired)
    assert len(stats.errors) == 1 and "OFPET_BAD_ACTION" in stats.errors[0]
    assert switch.flows == desired - switch.refuse


def test_dead_event_of_an_old_connection_is_ignored() -> None:
    ctl = FlowController()
    old, new = FakeSwitch(ctl), FakeSwitch(ctl)
    ctl._on_connect(old)
    ctl._on_connect(new)  # the switch reconnected before the old DEAD arrived
    ctl._on_disconnect(old)
    assert ctl.connected and ctl.wait_connected(0)
    ctl._on_disconnect(new)
    assert not ctl.connected


def test_set_desired_refuses_two_flows_with_one_identity() -> None:
    with pytest.raises(ValueError, match="one identity"):
        FlowController().set_desired({F1, flow(0, 10, [("goto", 2)], in_port=1)})


def test_no_reconcile_before_desired_state_is_known() -> None:
    """A restarted agent connects before it has re-read its state: the switch keeps its flows."""
    import threading
    import time

    running = compile_flows(world())
    ctl = FlowController()
    switch = FakeSwitch(ctl, running)
    worker = threading.Thread(target=ctl._work, daemon=True)
    worker.start()
    try:
        ctl._on_connect(switch)
        time.sleep(0.3)  # give a wrongly eager worker the chance to act
        assert switch.flow_mods == [] and switch.flows == running
        generation = ctl.set_desired(running)
        stats = ctl.wait_reconciled(generation, timeout=5)
        assert stats is not None
        assert (stats.found, stats.added, stats.deleted) == (len(running), 0, 0)
        assert switch.flows == running
    finally:
        ctl._stopping.set()
        ctl._wake.set()
        worker.join(5)
