"""A tiny OpenFlow 1.3 switch model (faucet's fakeoftable idea): where does this packet go?

walk(flows, packet) sends a packet (its in_port and header fields, as a dict) through a set
of canonical Flows from table 0, the way OVS would, and returns the ports it left on, each
with the packet as it left, and the flows it hit. It models what netplugin's flows use:
priorities (two best matches at one priority are an error, not a coin toss), masked
matches, metadata, goto (forward only), the miss flows the pipeline declares (no flow
matching in a table is OpenFlow 1.3's default: drop), output (never back out of the
in_port; OFPP_IN_PORT sends it there), set_field, move, push/pop VLAN, a meter (passes the
packet: rates are not modelled) and ct(table=N), which recirculates to table N with the
conntrack state the caller says the connection is in. Anything else raises, so a test
never passes by silently ignoring an action.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datapath.flows import OFPP_MAX, Flow

OFPP_IN_PORT = 0xFFFFFFF8
OFPVID_PRESENT = 0x1000
MAX_RECIRCULATIONS = 8

# Conntrack state bits (the ct_state match field).
CT_NEW = 0x01
CT_ESTABLISHED = 0x02
CT_RELATED = 0x04
CT_REPLY = 0x08
CT_INVALID = 0x10
CT_TRACKED = 0x20

_MAC_FIELDS = frozenset({"eth_src", "eth_dst", "arp_sha", "arp_tha", "ipv6_nd_sll", "ipv6_nd_tll"})
_IP_FIELDS = frozenset(
    {"ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa", "ipv6_src", "ipv6_dst", "ipv6_nd_target"}
)


class NotModelled(Exception):
    """The flows do something this model does not know; extend it rather than guess."""


def as_int(name: str, value: Any) -> int:
    """A header or match value as an integer (MACs and addresses by their bits)."""
    if isinstance(value, int):
        return value
    text = str(value)
    if name in _MAC_FIELDS:
        return int(text.replace(":", "").replace("-", ""), 16)
    if name in _IP_FIELDS:
        return int(ipaddress.ip_address(text))
    return int(text, 0)


def field_matches(name: str, want: Any, have: Any) -> bool:
    """True if a header value ``have`` matches a flow's match value (a value or (value, mask))."""
    if have is None:
        return False
    if isinstance(want, tuple):
        value, mask = (as_int(name, v) for v in want)
        return as_int(name, have) & mask == value
    return as_int(name, have) == as_int(name, want)


@dataclass
class Walk:
    """Where a packet went: the ports it was output to (with the packet as it left), the
    flows it hit in order, the meters it passed and the ct zones it was committed in."""

    outputs: list[int] = field(default_factory=list)
    packets: list[dict[str, Any]] = field(default_factory=list)
    path: list[Flow] = field(default_factory=list)
    meters: list[int] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    dropped_in: list[int] = field(default_factory=list)  # tables where no flow matched

    @property
    def ports(self) -> set[int]:
        return set(self.outputs)

    @property
    def tables(self) -> list[int]:
        """The tables the packet went through, in order."""
        return [f.table for f in self.path]

    def sent(self, port: int) -> dict[str, Any]:
        """The packet as it left on ``port`` (exactly once)."""
        (pkt,) = [p for o, p in zip(self.outputs, self.packets, strict=True) if o == port]
        return pkt


@dataclass
class _Packet:
    headers: dict[str, Any]
    metadata: int
    table: int


class FakeOFTable:
    """The flows of one bridge, indexed by table, ready to walk packets through."""

    def __init__(self, flows: Iterable[Flow]) -> None:
        self.tables: dict[int, list[Flow]] = {}
        for f in flows:
            self.tables.setdefault(f.table, []).append(f)

    def lookup(self, table: int, headers: Mapping[str, Any]) -> Flow | None:
        """The flow a packet with these headers (metadata included) hits in ``table``."""
        hits = [
            f
            for f in self.tables.get(table, ())
            if all(field_matches(k, v, headers.get(k)) for k, v in f.match)
        ]
        if not hits:
            return None
        top = max(f.priority for f in hits)
        best = [f for f in hits if f.priority == top]
        if len(best) > 1:
            raise NotModelled(f"overlapping flows at one priority: {[str(f) for f in best]}")
        return best[0]

    def walk(self, packet: Mapping[str, Any], ct_state: int = CT_TRACKED | CT_NEW) -> Walk:
        """Send ``packet`` from table 0; ``ct_state`` is what conntrack says after a ct()."""
        result = Walk()
        headers = {"tunnel_id": 0, **packet}
        if "in_port" not in headers:
            raise ValueError("a packet needs its in_port")
        queue = [_Packet(headers, 0, 0)]
        recirculations = 0
        while queue:
            pkt = queue.pop(0)
            more = self._run(pkt, result, ct_state)
            recirculations += len(more)
            if recirculations > MAX_RECIRCULATIONS:
                raise NotModelled(f"more than {MAX_RECIRCULATIONS} recirculations: a loop?")
            queue.extend(more)
        return result

    def _run(self, pkt: _Packet, result: Walk, ct_state: int) -> list[_Packet]:
        """One pass through the tables; returns the copies ct(table=N) recirculates."""
        headers, metadata, table = pkt.headers, pkt.metadata, pkt.table
        in_port = headers["in_port"]
        recirculated: list[_Packet] = []
        current: int | None = table
        while current is not None:
            table, current = current, None
            headers["metadata"] = metadata
            hit = self.lookup(table, headers)
            if hit is None:
                result.dropped_in.append(table)
                break
            result.path.append(hit)
            for action in hit.actions:
                kind = action[0]
                if kind == "output":
                    port = in_port if action[1] == OFPP_IN_PORT else action[1]
                    if action[1] != OFPP_IN_PORT and action[1] >= OFPP_MAX:
                        raise NotModelled(f"output to reserved port {action[1]:#x}")
                    if action[1] != in_port:
                        result.outputs.append(port)
                        result.packets.append({k: v for k, v in headers.items() if k != "metadata"})
                elif kind == "set_field":
                    if action[1] == "vlan_vid" and "vlan_vid" not in headers:
                        raise NotModelled(f"{hit}: set_field vlan_vid on an untagged packet")
                    headers[action[1]] = action[2]
                elif kind == "move":
                    headers[action[2]] = headers.get(action[1])
                elif kind == "push_vlan":
                    if "vlan_vid" in headers:
                        raise NotModelled(f"{hit}: a second VLAN tag")
                    headers["vlan_vid"] = OFPVID_PRESENT
                elif kind == "pop_vlan":
                    if "vlan_vid" not in headers:
                        raise NotModelled(f"{hit}: pop_vlan on an untagged packet")
                    del headers["vlan_vid"]
                elif kind == "meter":
                    result.meters.append(action[1])
                elif kind == "ct":
                    _, commit, zone, recirc, nested = action
                    if nested or isinstance(zone, tuple):
                        raise NotModelled(f"the walker does not model {action} yet")
                    if commit:
                        result.committed.append(zone)
                    if recirc is not None:
                        copy = {**headers, "ct_state": ct_state, "ct_zone": zone}
                        recirculated.append(_Packet(copy, metadata, recirc))
                elif kind == "write_metadata":
                    metadata = (metadata & ~action[2]) | (action[1] & action[2])
                elif kind == "goto":
                    if action[1] <= table:
                        raise NotModelled(f"{hit}: goto must go forward")
                    current = action[1]
                else:
                    raise NotModelled(f"the walker does not model {action}")
        return recirculated


def walk(
    flows: Iterable[Flow], packet: Mapping[str, Any], ct_state: int = CT_TRACKED | CT_NEW
) -> Walk:
    """Where ``packet`` goes through ``flows``: see FakeOFTable.walk."""
    return FakeOFTable(flows).walk(packet, ct_state)
