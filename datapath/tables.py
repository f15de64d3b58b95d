"""The OpenFlow table pipeline of a host's bridge, declared as data with its graph.

Each TableSpec says what its flows may match, which tables they may go to (goto, always
forward) or resume in after conntrack (ct(table=N) recirculates, so it may name any table),
where a packet that no flow matches goes (its miss), and whether its flows may use meters
or groups. Pipeline checks the declaration once at import (ids ascending, every table
reachable, misses among the next tables), and Pipeline.check() holds every compiled flow
to it: an undeclared jump, recirculation, match field, meter or group raises a ValueError
naming the table and the flow, as faucet's ValveTable.goto() refuses an undeclared jump.

A new table: declare a TableSpec below with a free id between its neighbours' (never a
retired one: write_plan tells an older layout's tables by their ids), add it to PIPELINE,
and name it in the next_tables (and the miss) of the tables that lead to it. Its flows are
built in datapath.pipeline, or a module of their own for a new concern, and compile_flows
checks them against the declaration.

Also here, because they follow from the table order: the order reconcile writes flows in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from datapath.flows import Action, Entry, Flow, FlowDiff, Group, Identity, Meter, flow

DROP = "drop"

# Priorities inside a table: specific rules above catch-alls, the miss flow at 0.
PRIO_MISS = 0
PRIO_FLOOD = 10
PRIO_RULE = 100
PRIO_EXCEPTION = 110
# Policy rules: 1000 + 2 * rule priority (1-100), + 1 for deny, so deny wins a tie.
PRIO_POLICY_RULE = 1000

# Metadata: the segment in the low 32 bits, where the packet came from in two bits above.
SEGMENT_MASK = 0xFFFF_FFFF
FROM_REMOTE = 1 << 32
FROM_GATEWAY = 1 << 33
ORIGIN_MASK = FROM_REMOTE | FROM_GATEWAY
SEGMENT_AND_ORIGIN = SEGMENT_MASK | ORIGIN_MASK


@dataclass(frozen=True)
class TableSpec:
    """One table: its id, its job, and the part of the graph its flows may use."""

    name: str
    id: int
    doc: str
    miss: str = DROP  # DROP, or the next table a packet no flow matches goes to
    next_tables: tuple[str, ...] = ()  # goto targets
    recirculate: tuple[str, ...] = ()  # ct(table=N) targets, its own and its groups' buckets'
    match: frozenset[str] | None = None  # the match fields its flows may use; None: any
    meters: bool = False  # its flows may pass packets through a meter
    groups: bool = False  # its flows may send packets to a group

    def goto(self, target: TableSpec) -> Action:
        """The goto from this table to ``target``; refused unless declared."""
        if target.name not in self.next_tables:
            raise ValueError(
                f"table {self.name} may not go to table {target.name}: declare it in "
                f"its next_tables {self.next_tables}"
            )
        return ("goto", target.id)


class Pipeline:
    """The tables in packet order, their graph checked when declared."""

    def __init__(self, tables: Iterable[TableSpec]) -> None:
        self.tables = tuple(tables)
        self._by_name = {t.name: t for t in self.tables}
        self._by_id = {t.id: t for t in self.tables}
        if len(self._by_name) != len(self.tables) or len(self._by_id) != len(self.tables):
            raise ValueError("two tables share a name or an id")
        ids = [t.id for t in self.tables]
        if not ids or ids[0] != 0 or ids != sorted(ids) or ids[-1] > 254:
            raise ValueError(f"table ids must ascend from 0 to at most 254: {ids}")
        for t in self.tables:
            for target in t.next_tables:
                if target not in self._by_name or self._by_name[target].id <= t.id:
                    raise ValueError(f"table {t.name}: next table {target} is not a later table")
            for target in t.recirculate:
                if target not in self._by_name:
                    raise ValueError(f"table {t.name}: recirculates to unknown table {target}")
            if t.miss != DROP and t.miss not in t.next_tables:
                raise ValueError(f"table {t.name}: its miss {t.miss} is not one of its next tables")
        reached = {self.tables[0].name}
        todo = [self.tables[0]]
        while todo:
            t = todo.pop()
            for target in (*t.next_tables, *t.recirculate):
                if target not in reached:
                    reached.add(target)
                    todo.append(self._by_name[target])
        unreached = [t.name for t in self.tables if t.name not in reached]
        if unreached:
            raise ValueError(f"no table leads to {', '.join(unreached)}")

    def __iter__(self) -> Iterator[TableSpec]:
        return iter(self.tables)

    def __len__(self) -> int:
        return len(self.tables)

    def __getitem__(self, index: int) -> TableSpec:
        return self.tables[index]

    def __contains__(self, table_id: object) -> bool:
        """True if the pipeline has a table with this id."""
        return table_id in self._by_id

    def table(self, name: str) -> TableSpec:
        """The table named ``name``."""
        return self._by_name[name]

    def pass_on(self, spec: TableSpec) -> Action:
        """The goto that leaves ``spec`` the way its miss does (for a flow that only exempts
        some packets from the table's rules)."""
        if spec.miss == DROP:
            raise ValueError(f"table {spec.name} drops what it does not match")
        return spec.goto(self.table(spec.miss))

    def miss_flow(self, spec: TableSpec) -> Flow:
        """The flow that realises the table's declared miss."""
        return flow(spec.id, PRIO_MISS, [] if spec.miss == DROP else [self.pass_on(spec)])

    def check(self, f: Flow) -> None:
        """Refuse a flow that does what its table does not declare."""
        spec = self._by_id.get(f.table)
        if spec is None:
            raise ValueError(f"no table {f.table} in the pipeline: {f}")

        def refuse(why: str) -> ValueError:
            return ValueError(f"table {spec.name}: {why}: {f}")

        if spec.match is not None:
            extra = sorted({name for name, _ in f.match} - spec.match)
            if extra:
                raise refuse(f"match field(s) {', '.join(extra)} not declared for it")
        if f.priority == PRIO_MISS and not f.match and f != self.miss_flow(spec):
            raise refuse(f"its miss is declared as {spec.miss}")
        for action in f.actions:
            kind = action[0]
            if kind == "goto":
                target = self._by_id.get(action[1])
                if target is None or target.name not in spec.next_tables:
                    raise refuse(f"goto {_name(target, action[1])} is not declared")
            elif kind == "ct" and action[3] is not None:
                target = self._by_id.get(action[3])
                if target is None or target.name not in spec.recirculate:
                    raise refuse(f"ct recirculation to {_name(target, action[3])} is not declared")
            elif kind == "meter" and not spec.meters:
                raise refuse("meters are not declared for it")
            elif kind == "group" and not spec.groups:
                raise refuse("groups are not declared for it")

    def check_all(self, flows: Iterable[Entry]) -> None:
        """check() every flow, and every group's buckets against the tables that may send
        packets to groups."""
        for f in flows:
            if isinstance(f, Flow):
                self.check(f)
            elif isinstance(f, Group):
                self.check_group(f)

    def check_group(self, g: Group) -> None:
        """A bucket may recirculate only where a table that uses groups declares it."""
        allowed = {
            self._by_name[name].id for t in self.tables if t.groups for name in t.recirculate
        }
        for bucket in g.buckets:
            for action in bucket:
                if action[0] == "goto":
                    raise ValueError(f"group {g.id}: a bucket cannot goto: {g}")
                if action[0] == "ct" and action[3] is not None and action[3] not in allowed:
                    raise ValueError(
                        f"group {g.id}: ct recirculation to {action[3]} is not declared"
                    )


def _name(spec: TableSpec | None, table_id: int) -> str:
    return f"table {spec.name}" if spec is not None else f"undeclared table {table_id}"


# Table ids leave gaps (10 between stages, 2 between policy's tables): a table added later
# (the post-DNAT MAC fix-up of services, say, at 45) takes a free id, and the flows of the
# tables around it keep theirs. Renumbering makes an upgraded agent replace every flow once
# (see write_plan), and OVS costs nothing for the ids in between.
CLASSIFY = TableSpec(
    "classify",
    0,
    "port, VNI or VLAN -> segment and origin; an endpoint's meter limits what it sends and "
    "its netprofile's DSCP marks its IP packets",
    next_tables=("ingress", "arp"),  # what other hosts send skips ingress
    match=frozenset({"in_port", "tunnel_id", "vlan_vid", "eth_type"}),
    meters=True,
)
INGRESS = TableSpec(
    "ingress",
    10,
    "source MAC/IP must be the endpoint's (anti-spoofing)",
    next_tables=("arp",),
    match=frozenset(
        {"in_port", "eth_src", "eth_type", "arp_spa", "arp_sha", "ipv4_src", "ipv6_src"}
    ),
)
ARP = TableSpec(
    "arp",
    20,
    "ARP request for a known address: answer or direct it; in routing mode, IP sent to the "
    "router MAC goes to route",
    miss="conntrack",
    next_tables=("route", "conntrack"),
    match=frozenset(
        {"metadata", "in_port", "eth_type", "arp_op", "arp_tpa", "eth_dst"}
        | {"ip_proto", "icmpv6_type", "ipv6_nd_target"}  # routing mode's ND answers
    ),
)
# Routing mode (issue 25, datapath.routing). Its miss flow is bridge mode's only flow here,
# and nothing goes to it in bridge mode (arp's miss still goes to conntrack), so bridge
# mode's packets take the path they took before the table existed.
ROUTE = TableSpec(
    "route",
    25,
    "routing mode: IP to the router MAC from this host, by destination: an endpoint of the "
    "VRF (its MAC, TTL - 1), a gateway address, nowhere (inside a subnet of this host but no "
    "endpoint's), else out through the sender's network's gateway port",
    miss="conntrack",
    next_tables=("conntrack",),
    match=frozenset(
        {"metadata", "eth_dst", "eth_type", "ipv4_dst", "ipv6_dst", "ipv4_src", "ipv6_src"}
    ),
)
CONNTRACK = TableSpec(
    "conntrack",
    30,
    "IP of a tracked network through conntrack (and NAT) in its zone, resuming in service; "
    "a local packet to a VIP meets the hairpin zone first, resuming here; neighbour "
    "discovery and untracked networks pass untracked",
    miss="service",
    next_tables=("service",),
    recirculate=("service", "conntrack"),
    match=frozenset(
        {"metadata", "eth_type", "ip_proto", "icmpv6_type", "ct_state", "ct_zone", "ipv4_dst"}
    ),
)
SERVICE = TableSpec(
    "service",
    40,
    "a new connection to a VIP:port -> its select group, whose bucket DNATs it to a provider; "
    "a DNATed packet gets its provider's MAC, a reply from a VIP the VIP's",
    miss="policy",
    next_tables=("policy",),
    recirculate=("policy",),  # the group's buckets: ct(commit, nat, table=policy)
    groups=True,
)
POLICY = TableSpec(
    "policy",
    50,
    "the conntrack gate: established and related pass, invalid drop, new go to the rules; "
    "untracked pass",
    miss="forward",
    next_tables=("src_group", "forward"),
    match=frozenset({"ct_state"}),
)
SRC_GROUP = TableSpec(
    "src_group",
    52,
    "a new connection's source MAC -> its endpoint group's tag in reg5 (LOCAL if on "
    "this host); else reg5 stays 0",
    miss="dst_group",
    next_tables=("dst_group",),
    # by address: routing mode's endpoints of other hosts behind the fabric's router
    match=frozenset({"metadata", "eth_src", "eth_type", "ipv4_src", "ipv6_src"}),
)
DST_GROUP = TableSpec(
    "dst_group",
    54,
    "its destination MAC (after service DNAT and MAC fix-up) -> the group's tag in reg6, "
    "the same way",
    miss="policy_out",
    next_tables=("policy_out",),
    match=frozenset({"metadata", "eth_dst", "eth_type", "ipv4_dst", "ipv6_dst"}),
)
POLICY_OUT = TableSpec(
    "policy_out",
    56,
    "the out rules of the source's group, on the source's host: allow -> the in rules, "
    "deny -> drop; none matching: allow",
    miss="policy_in",
    next_tables=("policy_in",),
    match=frozenset(
        {"reg5", "reg6", "eth_type", "ip_proto", "ipv4_dst", "ipv6_dst", "tcp_dst", "udp_dst"}
    ),
)
POLICY_IN = TableSpec(
    "policy_in",
    58,
    "the in rules of the destination's group, on its host: allow -> commit; deny -> drop; "
    "none matching: the network's default allow, committed",
    miss="forward",
    next_tables=("forward",),
    match=frozenset(
        {
            "reg5",
            "reg6",
            "metadata",
            "eth_type",
            "ip_proto",
            "ipv4_src",
            "ipv6_src",
            "tcp_dst",
            "udp_dst",
        }
    ),
)
FORWARD = TableSpec(
    "forward",
    60,
    "known eth_dst -> port or host; else flood; a provider's connection to itself through a "
    "VIP (hairpin) goes back out of its port, SNATed",
    match=frozenset({"metadata", "eth_dst", "reg7", "eth_type", "ipv4_src", "ipv4_dst"}),
    meters=True,
    groups=True,  # a segment's flood group (datapath.flood)
)

PIPELINE = Pipeline(
    (
        CLASSIFY,
        INGRESS,
        ARP,
        ROUTE,
        CONNTRACK,
        SERVICE,
        POLICY,
        SRC_GROUP,
        DST_GROUP,
        POLICY_OUT,
        POLICY_IN,
        FORWARD,
    )
)


def install_order(flows: Iterable[Flow]) -> list[Flow]:
    """Adds from the last table back to the first, so a packet admitted by a new classify
    flow already finds the flows downstream of it."""
    return sorted(flows, key=lambda f: (-f.table, -f.priority, repr(f.match), repr(f.actions)))


def removal_order(flows: Iterable[Flow]) -> list[Flow]:
    """Deletes from the first table on, so traffic stops entering before its path goes."""
    return sorted(flows, key=lambda f: (f.table, -f.priority, repr(f.match), repr(f.actions)))


@dataclass(frozen=True)
class WritePlan:
    """The messages of one reconcile, in the order they are sent: stale flows of the
    pipeline's tables, then meters and groups (ADD, or MODIFY of the ones in ``present``),
    then the flows to add, then stale flows of tables the pipeline no longer has, and last
    the stale meters and groups (deleting one deletes the flows that name it)."""

    delete_first: tuple[Flow, ...]
    add: tuple[Flow, ...]
    delete_last: tuple[Flow, ...]
    entries: tuple[Meter | Group, ...] = ()
    delete_entries: tuple[Meter | Group, ...] = ()
    present: frozenset[Identity] = frozenset()  # identities of entries the switch holds

    def modifies(self, entry: Meter | Group) -> bool:
        """Whether ``entry`` replaces one the switch holds (MODIFY rather than ADD)."""
        return entry.identity in self.present


def _chains(entry: Meter | Group) -> bool:
    """Whether a group's buckets name other groups (a flood group split in parts)."""
    return isinstance(entry, Group) and any(a[0] == "group" for b in entry.buckets for a in b)


def _entries(items: Iterable[Entry], deleting: bool = False) -> tuple[Meter | Group, ...]:
    """The meters and groups among ``items``, in a fixed order: meters first, by id, then
    groups; a group naming others after them when written and before them when deleted
    (OVS refuses a bucket naming a missing group)."""
    found = [e for e in items if not isinstance(e, Flow)]
    return tuple(sorted(found, key=lambda e: (isinstance(e, Group), _chains(e) != deleting, e.id)))


def write_plan(
    flow_diff: FlowDiff, pipeline: Pipeline, present: Iterable[Identity] = ()
) -> WritePlan:
    """Stale flows of the pipeline's tables go first (entry points before their paths), then
    the adds (last table first); flows in tables the pipeline no longer has (an older
    layout's) go last, once the replaced classify flows no longer lead to them. So an
    upgrade that renumbers the tables moves each port to the new path in one flow-mod.
    Meters and groups are written before every flow add and deleted after every flow
    delete; ``present``: the identities of those the switch holds now."""
    stale = [f for f in flow_diff.to_delete if isinstance(f, Flow)]
    current = [f for f in stale if f.table in pipeline]
    leftover = [f for f in stale if f.table not in pipeline]
    adds = [f for f in flow_diff.to_add if isinstance(f, Flow)]
    return WritePlan(
        tuple(removal_order(current)),
        tuple(install_order(adds)),
        tuple(removal_order(leftover)),
        _entries(flow_diff.to_add),
        _entries(flow_diff.to_delete, deleting=True),
        frozenset(present),
    )
