"""A fake switch for FlowController: it answers flow, meter and group stats, their mods and
barriers at once, in the caller's thread, without os-ken's server (which would leave
non-daemon threads in the pytest process). Meters and groups behave as OVS's do: ADD of
one that exists and MODIFY of one that does not are errors, and deleting one deletes the
flows that name it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as ofp_parser

from datapath.flows import Entry, Flow, Group, Meter
from datapath.ofapp import FlowController, ReconcileStats
from datapath.ofcodec import (
    from_ofp_flow,
    from_ofp_group,
    from_ofp_meter,
    group_mod,
    meter_mod,
    to_ofp_instructions,
    to_ofp_match,
)


class FakeSwitch:
    """A datapath that answers flow stats, flow-mods and barriers at once, in-thread."""

    def __init__(
        self,
        controller: FlowController,
        flows: Iterable[Entry] = (),
        after_flow_mod: Callable[[set[Entry]], None] | None = None,
    ) -> None:
        self.controller = controller
        self.table: dict[tuple[Any, ...], Entry] = {f.identity: f for f in flows}
        self.flow_mods: list[Any] = []
        self.stats_requests = 0  # flow-stats reads: a full reconcile makes one
        self.barriers = 0
        self.refuse: set[Flow] = set()
        # Called with the flow table after each flow-mod: what packets meet mid-reconcile.
        self.after_flow_mod = after_flow_mod
        self.id = 0xAB
        self.address = ("127.0.0.1", 1)
        self._xid = 0
        # A slow switch: flow-stats reply parts come from a thread of their own, this many
        # seconds apart; with stall_after set, the parts after that many never come.
        self.part_interval = 0.0
        self.stall_after: int | None = None

    @property
    def flows(self) -> set[Entry]:
        """The flow table, meters and groups (one per identity, as on a switch)."""
        return set(self.table.values())

    @flows.setter
    def flows(self, flows: Iterable[Entry]) -> None:
        self.table = {f.identity: f for f in flows}

    def set_xid(self, msg: Any) -> None:
        self._xid += 1
        msg.xid = self._xid

    def send_msg(self, msg: Any) -> bool:
        if msg.xid is None:
            self.set_xid(msg)
        if isinstance(msg, ofp_parser.OFPFlowDescStatsRequest):
            self._stats(msg)
        elif isinstance(msg, ofp_parser.OFPMeterDescStatsRequest):
            body = [_meter_stats(m) for m in self.table.values() if isinstance(m, Meter)]
            self.controller.switch_reply(self._reply(msg.xid, body=body))
        elif isinstance(msg, ofp_parser.OFPGroupDescStatsRequest):
            body = [_group_stats(g) for g in self.table.values() if isinstance(g, Group)]
            self.controller.switch_reply(self._reply(msg.xid, body=body))
        elif isinstance(msg, ofp_parser.OFPFlowMod):
            self._flow_mod(msg)
        elif isinstance(msg, ofp_parser.OFPMeterMod | ofp_parser.OFPGroupMod):
            self._entry_mod(msg)
        elif isinstance(msg, ofp_parser.OFPBarrierRequest):
            self.barriers += 1
            self.controller.switch_reply(self._reply(msg.xid))
        return True

    def _reply(self, xid: int, **fields: Any) -> Any:
        return type("Reply", (), {"xid": xid, "datapath": self, "flags": 0, **fields})()

    def _stats(self, msg: Any) -> None:
        self.stats_requests += 1
        mine = sorted(
            (
                f
                for f in self.table.values()
                if isinstance(f, Flow)
                and f.cookie & msg.cookie_mask == msg.cookie & msg.cookie_mask
            ),
            key=str,
        )
        body = [
            ofp_parser.OFPFlowDesc(
                table_id=f.table,
                priority=f.priority,
                cookie=f.cookie,
                match=to_ofp_match(f),
                instructions=to_ofp_instructions(f),
            )
            for f in mine
        ]
        chunks = [body[i : i + 3] for i in range(0, len(body), 3)] or [[]]
        parts = [
            self._reply(msg.xid, flags=ofp.OFPMPF_REPLY_MORE if i < len(chunks) - 1 else 0, body=c)
            for i, c in enumerate(chunks)
        ][: self.stall_after]
        if not self.part_interval:
            for part in parts:
                self.controller.switch_reply(part)
            return

        def trickle() -> None:
            for part in parts:
                time.sleep(self.part_interval)
                self.controller.switch_reply(part)

        threading.Thread(target=trickle, daemon=True).start()

    def _flow_mod(self, msg: Any) -> None:
        self.flow_mods.append(msg)
        f = from_ofp_flow(msg.table_id, msg.priority, msg.cookie, msg.match, msg.instructions)
        if msg.command == ofp.OFPFC_ADD:
            if f in self.refuse:
                error = self._reply(msg.xid, type=ofp.OFPET_BAD_ACTION, code=0)
                self.controller.switch_error(error)
                return
            self.table[f.identity] = f
        elif msg.command == ofp.OFPFC_DELETE_STRICT:
            assert (msg.out_port, msg.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
            held = self.table.get(f.identity)
            if held is not None and held.cookie & msg.cookie_mask == msg.cookie:
                del self.table[f.identity]
        if self.after_flow_mod is not None:
            self.after_flow_mod(self.flows)

    def _entry_mod(self, msg: Any) -> None:
        self.flow_mods.append(msg)
        meter = isinstance(msg, ofp_parser.OFPMeterMod)
        ident = ("meter", msg.meter_id) if meter else ("group", msg.group_id)
        add, modify = (
            (ofp.OFPMC_ADD, ofp.OFPMC_MODIFY) if meter else (ofp.OFPGC_ADD, ofp.OFPGC_MODIFY)
        )
        if msg.command in (add, modify):
            if (msg.command == add) == (ident in self.table):
                error = ofp.OFPET_METER_MOD_FAILED if meter else ofp.OFPET_GROUP_MOD_FAILED
                self.controller.switch_error(self._reply(msg.xid, type=error, code=0))
                return
            self.table[ident] = from_ofp_meter(msg) if meter else from_ofp_group(msg)
        else:
            self.table.pop(ident, None)
            kind = "meter" if meter else "group"
            for f in list(self.table.values()):
                if isinstance(f, Flow) and any(a[:2] == (kind, ident[1]) for a in f.actions):
                    del self.table[f.identity]
        if self.after_flow_mod is not None:
            self.after_flow_mod(self.flows)


def _meter_stats(m: Meter) -> Any:
    mod = meter_mod(None, m)
    return ofp_parser.OFPMeterDescStats(flags=mod.flags, meter_id=m.id, bands=mod.bands)


def _group_stats(g: Group) -> Any:
    mod = group_mod(None, g)
    return ofp_parser.OFPGroupDescStats(
        type_=mod.type, group_id=g.id, buckets=mod.buckets, properties=mod.properties
    )


def reconcile(switch: FakeSwitch, desired: set[Flow]) -> ReconcileStats:
    """Connect the switch to its controller and run one reconcile toward ``desired``."""
    ctl = switch.controller
    ctl.switch_connected(switch)
    switch.flow_mods.clear()
    return ctl._reconcile(switch, 1, frozenset(desired), 1)
