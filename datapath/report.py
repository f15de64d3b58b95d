"""What an operator is shown of a host's datapath (the agent's inspect API): a consistent
copy of the agent's local state, and how the switch's flows compare with the desired ones.

The comparison is the reconcile's own (datapath.flows.diff and replaced): a report shows
what the next full reconcile (an audit) would send. Pure, except ``snapshot``, which takes
the agent's lock for a moment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .flows import Entry, Flow, Meter, diff, replaced
from .local import EndpointState, NetworkState
from .tables import PIPELINE

if TYPE_CHECKING:
    from .host import HostDatapath

DEFAULT_CAP = 20  # flows listed per kind of difference


@dataclass(frozen=True)
class LocalSnapshot:
    """The agent's local state at one moment."""

    ready: bool
    bridge: str
    datapath_type: str
    endpoints: dict[str, EndpointState]
    networks: dict[str, NetworkState]
    tunnels: dict[str, int]  # peer host -> ofport of its VXLAN port
    vlan_uplink: str
    uplink_ofport: int | None


def snapshot(agent: HostDatapath) -> LocalSnapshot:
    """A copy of the agent's local state, taken under its lock (as its writers hold it)."""
    with agent._lock:
        s = agent._state
        return LocalSnapshot(
            ready=agent.ready,
            bridge=agent.config.bridge,
            datapath_type=agent.datapath_type,
            endpoints=dict(s.endpoints),
            networks=dict(s.networks),
            tunnels=dict(s.tunnels),
            vlan_uplink=agent.config.vlan_uplink,
            uplink_ofport=s.uplink_ofport,
        )


def counts(agent: HostDatapath) -> tuple[int, int]:
    """(local endpoints, tunnels) without the lock: for a metrics scrape, which must never
    wait behind a Docker call (each len() is atomic; the pair may be a moment apart)."""
    s = agent._state
    return len(s.endpoints), len(s.tunnels)


def table_name(table: int) -> str:
    for t in PIPELINE.tables:
        if t.id == table:
            return t.name
    return f"table{table}"


def _slot(e: Entry) -> tuple[int, str]:
    """Where an entry is counted: its table, or the bridge's meters or groups (after them)."""
    if isinstance(e, Flow):
        return e.table, table_name(e.table)
    return (1000, "meters") if isinstance(e, Meter) else (1001, "groups")


def flow_report(
    desired: Iterable[Entry], actual: Iterable[Entry], cap: int = DEFAULT_CAP
) -> dict[str, Any]:
    """Per table (and for the meters and the groups), how many entries are desired and how
    many of ours the switch holds; and the differences the next full reconcile would
    repair: missing (nothing of that identity on the switch), changed (same identity, other
    actions) and extra (an identity no longer desired), each listed up to ``cap``."""
    want, have = frozenset(desired), frozenset(actual)
    d = diff(want, have)
    changed = replaced(d, have)
    missing = d.to_add - changed
    tables: dict[tuple[int, str], dict[str, Any]] = {}

    def row(e: Entry) -> dict[str, Any]:
        slot = _slot(e)
        return tables.setdefault(
            slot,
            {
                "table": slot[0] if slot[0] < 1000 else None,
                "name": slot[1],
                "expected": 0,
                "onSwitch": 0,
                "missing": 0,
                "changed": 0,
                "extra": 0,
            },
        )

    for f in want:
        row(f)["expected"] += 1
    for f in have:
        row(f)["onSwitch"] += 1
    for kind, flows in (("missing", missing), ("changed", changed), ("extra", d.to_delete)):
        for f in flows:
            row(f)[kind] += 1

    def order(e: Entry) -> tuple[int, int, str]:
        return (_slot(e)[0], -e.priority if isinstance(e, Flow) else e.id, str(e))

    def listed(flows: frozenset[Entry]) -> list[str]:
        return [str(f) for f in sorted(flows, key=order)[:cap]]

    return {
        "expected": len(want),
        "onSwitch": len(have),
        "inSync": not (d.to_add or d.to_delete),
        "tables": [tables[t] for t in sorted(tables)],
        "missing": listed(missing),
        "changed": listed(changed),
        "extra": listed(d.to_delete),
        "listedUpTo": cap,
    }
