"""The OpenFlow messages of one reconcile: read our flows, send flow-mods in a plan's order
and a barrier, and match the switch's replies and error replies to what was sent.

FlowController (datapath.ofapp) decides what to send; SwitchWire sends it on the current
connection and waits for the answers. os-ken's event thread hands replies and errors to
on_reply() and on_error().
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from datapath.flows import COOKIE, COOKIE_MASK, Entry, Flow, Group, Meter
from datapath.ofcodec import (
    flow_mod,
    from_ofp_flow,
    from_ofp_group,
    from_ofp_meter,
    group_mod,
    meter_mod,
)
from datapath.tables import WritePlan


class ReconcileError(RuntimeError):
    """The switch refused a flow or did not answer in time."""


class Disconnected(Exception):
    """The connection went away while a reconcile was using it."""


@dataclass
class _Pending:
    datapath: Any
    done: threading.Event = field(default_factory=threading.Event)
    replies: list[Any] = field(default_factory=list)
    error: str | None = None
    disconnected: bool = False


class SwitchWire:
    """Requests and flow-mods to a switch connection, with their replies and errors.

    ``lock`` is the controller's; ``current`` returns the connection in use (a request on
    any other one fails as Disconnected).
    """

    def __init__(
        self, lock: threading.Lock, reply_timeout: float, current: Callable[[], Any]
    ) -> None:
        self._lock = lock
        self.reply_timeout = reply_timeout
        self._current = current
        self._pending: dict[int, _Pending] = {}
        self._flow_mods: dict[int, tuple[str, Entry]] = {}  # xid -> what it did, to what
        self._flow_mod_errors: list[str] = []

    def on_reply(self, msg: Any) -> None:
        with self._lock:
            pending = self._pending.get(msg.xid)
            if pending is None or pending.datapath is not msg.datapath:
                return
            pending.replies.append(msg)
            if not getattr(msg, "flags", 0) & ofp.OFPMPF_REPLY_MORE:
                pending.done.set()

    def on_error(self, msg: Any) -> str | None:
        """Record an error reply; returns its text unless it answers one of our flow-mods
        (those are reported by send_plan)."""
        text = (
            f"switch error {ofp.ofp_error_type_to_str(msg.type)}"
            f"/{ofp.ofp_error_code_to_str(msg.type, msg.code)}"
        )
        with self._lock:
            pending = self._pending.get(msg.xid)
            if pending is not None:
                pending.error = text
                pending.done.set()
            elif msg.xid in self._flow_mods:
                verb, flow = self._flow_mods[msg.xid]
                self._flow_mod_errors.append(f"{text} for {verb} {flow}")
                return None
        return text

    def fail_pending(self) -> None:
        """The connection is gone: wake every request waiting on it (call with the lock)."""
        for pending in self._pending.values():
            pending.disconnected = True
            pending.done.set()

    def read_flows(self, dp: Any) -> set[Flow]:
        """Our flows on the switch (those carrying our cookie)."""
        request = parser.OFPFlowDescStatsRequest(
            dp,
            table_id=ofp.OFPTT_ALL,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            cookie=COOKIE,
            cookie_mask=COOKIE_MASK,
        )
        flows: set[Flow] = set()
        for reply in self.request(dp, request):
            for stat in reply.body:
                flows.add(
                    from_ofp_flow(
                        stat.table_id, stat.priority, stat.cookie, stat.match, stat.instructions
                    )
                )
        return flows

    def read_entries(self, dp: Any) -> set[Entry]:
        """Our flows, and the bridge's meters and groups (the bridge is netplugin's: every
        meter and group on it is ours)."""
        found: set[Entry] = set(self.read_flows(dp))
        for reply in self.request(dp, parser.OFPMeterDescStatsRequest(dp, 0, ofp.OFPM_ALL)):
            found.update(from_ofp_meter(stat) for stat in reply.body)
        for reply in self.request(dp, parser.OFPGroupDescStatsRequest(dp, 0, ofp.OFPG_ALL)):
            found.update(from_ofp_group(stat) for stat in reply.body)
        return found

    def send_plan(self, dp: Any, plan: WritePlan) -> tuple[str, ...]:
        """Send a plan's messages in its order, then a barrier; the switch's error replies
        to them (they arrive before the barrier's reply)."""
        with self._lock:
            self._flow_mods.clear()
            self._flow_mod_errors.clear()
        try:
            for f in plan.delete_first:
                self._send_flow_mod(dp, f, ofp.OFPFC_DELETE_STRICT)
            for e in plan.entries:
                self._send_entry(dp, e, "modify" if plan.modifies(e) else "add")
            for f in plan.add:
                self._send_flow_mod(dp, f, ofp.OFPFC_ADD)
            for f in plan.delete_last:
                self._send_flow_mod(dp, f, ofp.OFPFC_DELETE_STRICT)
            for e in plan.delete_entries:
                self._send_entry(dp, e, "delete")
            self.request(dp, parser.OFPBarrierRequest(dp))
        finally:
            with self._lock:
                errors = tuple(self._flow_mod_errors)
                self._flow_mods.clear()
        return errors

    def _send_flow_mod(self, dp: Any, flow: Flow, command: int) -> None:
        verb = "delete" if command == ofp.OFPFC_DELETE_STRICT else "add"
        self._send(dp, flow_mod(dp, flow, command), verb, flow)

    def _send(self, dp: Any, msg: Any, verb: str, entry: Entry) -> None:
        dp.set_xid(msg)
        with self._lock:
            self._flow_mods[msg.xid] = (verb, entry)
        if not dp.send_msg(msg):
            raise Disconnected

    def _send_entry(self, dp: Any, entry: Meter | Group, verb: str) -> None:
        if isinstance(entry, Meter):
            command = {"add": ofp.OFPMC_ADD, "modify": ofp.OFPMC_MODIFY}.get(verb, ofp.OFPMC_DELETE)
            msg = meter_mod(dp, entry, command)
        else:
            command = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY}.get(verb, ofp.OFPGC_DELETE)
            msg = group_mod(dp, entry, command)
        self._send(dp, msg, verb, entry)

    def request(self, dp: Any, msg: Any) -> list[Any]:
        """Send a request and wait for its whole reply."""
        pending = _Pending(dp)
        dp.set_xid(msg)
        with self._lock:
            if self._current() is not dp:
                raise Disconnected
            self._pending[msg.xid] = pending
        try:
            if not dp.send_msg(msg):
                raise Disconnected
            self._wait(pending, type(msg).__name__)
            if pending.disconnected:
                raise Disconnected
            if pending.error:
                raise ReconcileError(f"{type(msg).__name__} failed: {pending.error}")
            return pending.replies
        finally:
            with self._lock:
                self._pending.pop(msg.xid, None)

    def _wait(self, pending: _Pending, what: str) -> None:
        """Wait for the end of a reply. reply_timeout bounds the silence, not the whole: a
        multipart reply of thousands of flows may take longer than that to arrive and parse
        on a loaded host, and is progressing while its parts come in."""
        seen = -1
        while not pending.done.wait(self.reply_timeout):
            with self._lock:
                parts = len(pending.replies)
            if parts == 0:
                raise ReconcileError(f"no reply to {what} within {self.reply_timeout}s")
            if parts == seen:
                raise ReconcileError(
                    f"{what}: the reply stopped after {parts} part(s); nothing more within "
                    f"{self.reply_timeout}s"
                )
            seen = parts
