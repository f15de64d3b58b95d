"""A tiny OpenFlow switch model (faucet's fakeoftable idea): where does this packet go?

walk(flows, packet) sends a packet (its in_port and header fields, as a dict) through a set
of canonical Flows from table 0, the way OVS would, and returns the ports it left on, each
with the packet as it left, and the flows it hit. It models what netplugin's flows use:
priorities (two best matches at one priority are an error, not a coin toss), masked
matches, metadata, goto (forward only), the miss flows the pipeline declares (no flow
matching in a table is OpenFlow's default since 1.3: drop), output (never back out of the
in_port; OFPP_IN_PORT sends it there), set_field, move, push/pop VLAN, a meter (passes the
packet: rates are not modelled) and ct(table=N), which recirculates to table N with
ct_state, ct_zone, ct_mark and ct_label set, and dec_ttl (ip_ttl or ipv6_hlimit, 64
unless the packet gives one; at 0 or 1 the packet is dropped, where OVS would send it to a
controller that does not listen for it). Registers (reg0..reg15) are header fields
like any other: set_field writes them, a match reads them, and they and the metadata
survive recirculation; they, and the ct fields of a packet that has not been through ct,
read 0 until set.

ct_state comes from the caller (walk's ct_state: the state of every connection), or, given
a FakeConntrack, from its table of committed connections: a packet can then be played as
the SYN, the reply and the next packet of one connection, with the table kept in between.
The FakeConntrack also does NAT: ct(commit, nat(dst|src=...)) binds a new connection, and
a ct() with nat translates the packets of a bound connection (un-NATs its replies), with
+dnat/+snat set, as OVS does. A group action takes one bucket of a select group (chosen
as OVS would by the group's selection method, see ovs_select, or by walk's ``choose``) and
runs it on a copy of the packet; an all group runs every bucket, each on its own copy
(an output to the in_port skipped as anywhere else, a bucket naming a group chained).
Anything else raises, so a test never passes by silently ignoring an action.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datapath.flows import OFPP_MAX, REGISTERS, Action, Entry, Flow, Group

OFPP_IN_PORT = 0xFFFFFFF8
OFPP_CONTROLLER = 0xFFFFFFFD  # an output like any other: the walk lists it
OFPVID_PRESENT = 0x1000
MAX_RECIRCULATIONS = 8

# Conntrack state bits (the ct_state match field).
CT_NEW = 0x01
CT_ESTABLISHED = 0x02
CT_RELATED = 0x04
CT_REPLY = 0x08
CT_INVALID = 0x10
CT_TRACKED = 0x20
CT_SNAT = 0x40
CT_DNAT = 0x80

_MAC_FIELDS = frozenset({"eth_src", "eth_dst", "arp_sha", "arp_tha", "ipv6_nd_sll", "ipv6_nd_tll"})
_IP_FIELDS = frozenset(
    {"ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa", "ipv6_src", "ipv6_dst", "ipv6_nd_target"}
)
# Fields of the packet's metadata rather than its headers: 0 until something sets them.
ZERO_UNTIL_SET = REGISTERS | {"ct_state", "ct_zone", "ct_mark", "ct_label"}
_PLAIN_NAT = ("nat", "", None, None, None, None, ())


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


def header(headers: Mapping[str, Any], name: str) -> Any:
    """A field of a packet: None if it has no such header, 0 for an unset register and
    for the VLAN id of an untagged packet (OpenFlow's OFPVID_NONE)."""
    return headers.get(name, 0 if name in ZERO_UNTIL_SET or name == "vlan_vid" else None)


FiveTuple = tuple[int, int, int, int, int]  # source, destination, protocol, ports


@dataclass
class Connection:
    """A committed connection: what ct(commit, ...) left on it. ``reply``: the 5-tuple its
    replies have (after NAT); ``nat``: (kind, address, port) it was bound with, if any."""

    original: FiveTuple = (0, 0, 0, 0, 0)
    reply: FiveTuple = (0, 0, 0, 0, 0)
    nat: tuple[str, int, int | None] | None = None
    mark: int = 0
    label: int = 0
    replied: bool = False  # a packet of the other direction has been through ct


def _reverse(t: FiveTuple) -> FiveTuple:
    src, dst, proto, sport, dport = t
    return (dst, src, proto, dport, sport)


@dataclass
class FakeConntrack:
    """Conntrack as netplugin's flows see it: committed connections by (zone, 5-tuple), each
    found by its original tuple or its (NATed) reply tuple.

    A packet that is no connection's is +trk+new; one of a committed connection is
    +trk+est, or +trk+new while it goes the first packet's way and nothing has come back
    yet (as OVS's conntrack keeps a retransmitted SYN +new); one going the other way is
    +trk+est+rpl. Not IP: +trk+inv. ct(commit) commits (once per connection, with its
    nested set_field ct_mark/ct_label and its nat binding).
    """

    connections: dict[tuple[int, FiveTuple], Connection] = field(default_factory=dict)
    replies: dict[tuple[int, FiveTuple], Connection] = field(default_factory=dict)

    @staticmethod
    def five_tuple(headers: Mapping[str, Any]) -> FiveTuple | None:
        """The packet's 5-tuple (ports 0 for ICMP and the rest), or None if not IP."""
        family = {0x0800: "ipv4", 0x86DD: "ipv6"}.get(headers.get("eth_type", 0))
        src, dst = headers.get(f"{family}_src"), headers.get(f"{family}_dst")
        if family is None or src is None or dst is None:
            return None
        proto = int(headers.get("ip_proto", 0))
        l4 = {6: "tcp", 17: "udp"}.get(proto)
        sport = int(headers.get(f"{l4}_src", 0)) if l4 else 0
        dport = int(headers.get(f"{l4}_dst", 0)) if l4 else 0
        return (as_int(f"{family}_src", src), as_int(f"{family}_dst", dst), proto, sport, dport)

    def find(self, zone: int, headers: Mapping[str, Any]) -> tuple[Connection, bool] | None:
        """The packet's connection and whether the packet is a reply, or None. A packet that
        met its connection in this zone earlier in its walk (its ct_conn) is that
        connection's, translated or not, as OVS keeps the connection with the packet."""
        key = self.five_tuple(headers)
        if key is None:
            return None
        seen = headers.get("ct_conn")
        if seen is not None and seen[0] == zone:
            return seen[1], seen[2]
        if (zone, key) in self.connections:
            return self.connections[(zone, key)], False
        found = self.replies.get((zone, key))
        return None if found is None else (found, True)

    def track(self, zone: int, headers: Mapping[str, Any]) -> tuple[int, Connection | None]:
        """What ct() sees: the packet's ct_state and its connection, if committed."""
        if self.five_tuple(headers) is None:
            return CT_TRACKED | CT_INVALID, None
        found = self.find(zone, headers)
        if found is None:
            return CT_TRACKED | CT_NEW, None
        conn, reply = found
        if reply:
            conn.replied = True
            return CT_TRACKED | CT_ESTABLISHED | CT_REPLY, conn
        return CT_TRACKED | (CT_ESTABLISHED if conn.replied else CT_NEW), conn

    def commit(
        self, zone: int, headers: Mapping[str, Any], nat: Action | None = None
    ) -> Connection | None:
        """Commit the packet's connection (a no-op if it is one already), bound by ``nat``
        (a ("nat", kind, address, ...) with arguments) if given; None if not IP."""
        found = self.find(zone, headers)
        if found is not None:
            return found[0]
        key = self.five_tuple(headers)
        if key is None:
            return None
        binding = None
        reply = _reverse(key)
        if nat is not None and nat[1]:
            _, kind, addr, _, port, _, _ = nat
            binding = (kind, as_int("ipv4_src", addr), port)
            src, dst, proto, sport, dport = key
            if kind == "dst":
                reply = _reverse((src, binding[1], proto, sport, port or dport))
            else:
                reply = _reverse((binding[1], dst, proto, port or sport, dport))
        conn = Connection(key, reply, binding)
        self.connections[(zone, key)] = conn
        self.replies[(zone, reply)] = conn
        return conn

    @staticmethod
    def translate(conn: Connection, reply: bool, headers: dict[str, Any]) -> int:
        """Apply the connection's binding to a packet of it (its reply un-NATed); the
        ct_state bits that says so."""
        if conn.nat is None:
            return 0
        family = "ipv4" if headers.get("eth_type") == 0x0800 else "ipv6"
        l4 = {6: "tcp", 17: "udp"}.get(int(headers.get("ip_proto", 0)))
        src, dst, _, sport, dport = _reverse(conn.reply) if not reply else conn.original
        if not reply:  # the original direction, translated
            values = {"src": src, "dst": dst, "sport": sport, "dport": dport}
        else:  # a reply: addressed as the original's reverse
            values = {"src": dst, "dst": src, "sport": dport, "dport": sport}
        headers[f"{family}_src"] = str(ipaddress.ip_address(values["src"]))
        headers[f"{family}_dst"] = str(ipaddress.ip_address(values["dst"]))
        if l4:
            headers[f"{l4}_src"], headers[f"{l4}_dst"] = values["sport"], values["dport"]
        dnat = conn.nat[0] == "dst"
        return CT_DNAT if dnat != reply else CT_SNAT


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


Chooser = Callable[[Group, Mapping[str, Any]], int]


def ovs_select(g: Group, headers: Mapping[str, Any]) -> int:
    """The bucket OVS 3.1 picks, by the group's selection method: dp_hash with algorithm 0
    hashes the 5-tuple; with no method it hashes symmetrically and, on the userspace
    datapath, without UDP ports (flow_hash_symmetric_l3l4(..., false)), so every UDP flow
    between two addresses takes one bucket. Other methods are not modelled."""
    key = FakeConntrack.five_tuple(headers)
    if g.selection == ("", 0) and key is not None:
        src, dst, proto, sport, dport = key
        key = (src ^ dst, proto, sport ^ dport if proto in (6, 132) else 0, 0, 0)
    elif g.selection != ("dp_hash", 0):
        raise NotModelled(f"group {g.id}: selection method {g.selection}")
    return zlib.crc32(repr(key).encode()) % len(g.buckets)


class FakeOFTable:
    """The flows (and meters and groups) of one bridge, indexed by table, ready to walk
    packets through."""

    def __init__(self, flows: Iterable[Entry]) -> None:
        self.tables: dict[int, list[Flow]] = {}
        self.groups: dict[int, Group] = {}
        for f in flows:
            if isinstance(f, Flow):
                self.tables.setdefault(f.table, []).append(f)
            elif isinstance(f, Group):
                self.groups[f.id] = f

    def lookup(self, table: int, headers: Mapping[str, Any]) -> Flow | None:
        """The flow a packet with these headers (metadata included) hits in ``table``."""
        hits = [
            f
            for f in self.tables.get(table, ())
            if all(field_matches(k, v, header(headers, k)) for k, v in f.match)
        ]
        if not hits:
            return None
        top = max(f.priority for f in hits)
        best = [f for f in hits if f.priority == top]
        if len(best) > 1:
            raise NotModelled(f"overlapping flows at one priority: {[str(f) for f in best]}")
        return best[0]

    def walk(
        self,
        packet: Mapping[str, Any],
        ct_state: int = CT_TRACKED | CT_NEW,
        conntrack: FakeConntrack | None = None,
        choose: Chooser = ovs_select,
    ) -> Walk:
        """Send ``packet`` from table 0. After a ct(), the packet's ct_state is what
        ``conntrack`` says, or without one ``ct_state``; a select group takes the bucket
        ``choose`` picks."""
        self.choose = choose
        result = Walk()
        headers = {"tunnel_id": 0, **packet}
        if "in_port" not in headers:
            raise ValueError("a packet needs its in_port")
        queue = [_Packet(headers, 0, 0)]
        recirculations = 0
        while queue:
            pkt = queue.pop(0)
            more = self._run(pkt, result, ct_state, conntrack)
            recirculations += len(more)
            if recirculations > MAX_RECIRCULATIONS:
                raise NotModelled(f"more than {MAX_RECIRCULATIONS} recirculations: a loop?")
            queue.extend(more)
        return result

    def _run(
        self, pkt: _Packet, result: Walk, ct_state: int, conntrack: FakeConntrack | None
    ) -> list[_Packet]:
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
            current = self._actions(
                hit, hit.actions, headers, in_port, result, ct_state, conntrack, recirculated
            )
            metadata = headers.pop("_metadata", metadata)
        return recirculated

    def _actions(
        self,
        hit: Flow,
        actions: Iterable[Action],
        headers: dict[str, Any],
        in_port: int,
        result: Walk,
        ct_state: int,
        conntrack: FakeConntrack | None,
        recirculated: list[_Packet],
    ) -> int | None:
        """Run a flow's (or a bucket's) actions on ``headers``; the table it goes to next."""
        table = hit.table
        metadata = headers["metadata"]
        current: int | None = None
        for action in actions:
            kind = action[0]
            if kind == "output":
                port = in_port if action[1] == OFPP_IN_PORT else action[1]
                if action[1] not in (OFPP_IN_PORT, OFPP_CONTROLLER) and action[1] >= OFPP_MAX:
                    raise NotModelled(f"output to reserved port {action[1]:#x}")
                if action[1] != in_port:
                    result.outputs.append(port)
                    result.packets.append(
                        {k: v for k, v in headers.items() if k not in ("metadata", "ct_conn")}
                    )
            elif kind == "set_field":
                if action[1] == "vlan_vid" and "vlan_vid" not in headers:
                    raise NotModelled(f"{hit}: set_field vlan_vid on an untagged packet")
                headers[action[1]] = action[2]
            elif kind == "move":
                headers[action[2]] = header(headers, action[1])
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
            elif kind == "dec_ttl":
                if not _dec_ttl(hit, headers, result):
                    return None
            elif kind == "ct":
                copy = _conntrack(action, headers, result, ct_state, conntrack)
                if copy is not None:
                    recirculated.append(_Packet(copy, metadata, action[3]))
            elif kind == "group":
                g = self.groups.get(action[1])
                if g is None:
                    raise NotModelled(f"{hit}: group {action[1]} does not exist")
                if g.kind == "all":
                    chosen = list(g.buckets)
                else:
                    chosen = [g.buckets[self.choose(g, headers)]] if g.buckets else []
                for bucket in chosen:
                    copy = {**headers}
                    self._actions(
                        hit, bucket, copy, in_port, result, ct_state, conntrack, recirculated
                    )
            elif kind == "write_metadata":
                metadata = (metadata & ~action[2]) | (action[1] & action[2])
            elif kind == "goto":
                if action[1] <= table:
                    raise NotModelled(f"{hit}: goto must go forward")
                current = action[1]
            else:
                raise NotModelled(f"the walker does not model {action}")
        headers["_metadata"] = metadata
        return current


def _dec_ttl(hit: Flow, headers: dict[str, Any], result: Walk) -> bool:
    """Decrement the IPv4 TTL (ip_ttl) or IPv6 hop limit (ipv6_hlimit, 64 unless given);
    False: it was 0 or 1, so the packet goes no further (OVS sends it to the controller,
    which netplugin does not listen to: modelled as dropped in the flow's table)."""
    name = {0x0800: "ip_ttl", 0x86DD: "ipv6_hlimit"}.get(headers.get("eth_type", 0))
    if name is None:
        raise NotModelled(f"{hit}: dec_ttl on a packet that is not IP")
    ttl = int(headers.get(name, 64))
    if ttl <= 1:
        result.dropped_in.append(hit.table)
        return False
    headers[name] = ttl - 1
    return True


def _conntrack(
    action: Action,
    headers: dict[str, Any],
    result: Walk,
    ct_state: int,
    conntrack: FakeConntrack | None,
) -> dict[str, Any] | None:
    """Do a ct() action; returns the packet it recirculates (with its ct fields), if any."""
    _, commit, zone, recirc, nested = action
    if isinstance(zone, tuple):
        _, reg, ofs, nbits = zone
        zone = (header(headers, reg) >> ofs) & ((1 << nbits) - 1)
    conn: Connection | None = None
    reply = False
    nats = [sub for sub in nested if sub[0] == "nat"]
    if conntrack is not None:
        ct_state, conn = conntrack.track(zone, headers)
        reply = bool(ct_state & CT_REPLY)
    if commit:
        result.committed.append(zone)
        if conntrack is not None:
            conn = conntrack.commit(zone, headers, nats[0] if nats and nats[0][1] else None)
    elif nats and nats[0] != _PLAIN_NAT:
        raise NotModelled(f"{action}: nat with arguments needs commit")
    if conn is not None:
        headers["ct_conn"] = (zone, conn, reply)
    if nats and conn is not None and conntrack is not None:
        ct_state |= conntrack.translate(conn, reply, headers)
    ct_fields = {"ct_mark": conn.mark, "ct_label": conn.label} if conn else {}
    for sub in nested:
        if sub[0] == "nat":
            continue
        if sub[0] != "set_field":
            raise NotModelled(f"the walker does not model {sub} in ct()")
        ct_fields[sub[1]] = sub[2]
        if conn is not None:
            setattr(conn, sub[1].removeprefix("ct_"), sub[2])
    if recirc is None:
        return None
    return {**headers, **ct_fields, "ct_state": ct_state, "ct_zone": zone}


def walk(
    flows: Iterable[Entry],
    packet: Mapping[str, Any],
    ct_state: int = CT_TRACKED | CT_NEW,
    conntrack: FakeConntrack | None = None,
    choose: Chooser = ovs_select,
) -> Walk:
    """Where ``packet`` goes through ``flows``: see FakeOFTable.walk."""
    return FakeOFTable(flows).walk(packet, ct_state, conntrack, choose)
