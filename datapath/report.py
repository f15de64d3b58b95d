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

from .flows import Flow, diff, replaced
from .local import LocalEndpoint, LocalNetwork
from .tables import PIPELINE

if TYPE_CHECKING:
    from .agent import DatapathAgent

DEFAULT_CAP = 20  # flows listed per kind of difference


@dataclass(frozen=True)
class LocalSnapshot:
    """The agent's local state at one moment."""

    ready: bool
    bridge: str
    datapath_type: str
    endpoints: dict[str, LocalEndpoint]
    networks: dict[str, LocalNetwork]
    gateway_ofports: dict[str, int]
    tunnels: dict[str, int]  # peer host -> ofport of its VXLAN port
    vlan_uplink: str
    uplink_ofport: int | None


def snapshot(agent: DatapathAgent) -> LocalSnapshot:
    """A copy of the agent's local state, taken under its lock (as its writers hold it)."""
    with agent._lock:
        s = agent._state
        return LocalSnapshot(
            ready=agent.ready,
            bridge=agent.config.bridge,
            datapath_type=agent.datapath_type,
            endpoints=dict(s.endpoints),
            networks=dict(s.networks),
            gateway_ofports=dict(s.gateway_ofports),
            tunnels=dict(s.tunnels),
            vlan_uplink=agent.config.vlan_uplink,
            uplink_ofport=s.uplink_ofport,
        )


def counts(agent: DatapathAgent) -> tuple[int, int]:
    """(local endpoints, tunnels) without the lock: for a metrics scrape, which must never
    wait behind a Docker call (each len() is atomic; the pair may be a moment apart)."""
    s = agent._state
    return len(s.endpoints), len(s.tunnels)


def table_name(table: int) -> str:
    for t in PIPELINE.tables:
        if t.id == table:
            return t.name
    return f"table{table}"


def flow_report(
    desired: Iterable[Flow], actual: Iterable[Flow], cap: int = DEFAULT_CAP
) -> dict[str, Any]:
    """Per table, how many flows are desired and how many of ours the switch holds; and
    the differences the next full reconcile would repair: missing (no flow of that
    identity on the switch), changed (same identity, other actions) and extra (an identity
    no longer desired), each listed up to ``cap`` flows."""
    want, have = frozenset(desired), frozenset(actual)
    d = diff(want, have)
    changed = replaced(d, have)
    missing = d.to_add - changed
    tables: dict[int, dict[str, Any]] = {}

    def row(table: int) -> dict[str, Any]:
        return tables.setdefault(
            table,
            {
                "table": table,
                "name": table_name(table),
                "expected": 0,
                "onSwitch": 0,
                "missing": 0,
                "changed": 0,
                "extra": 0,
            },
        )

    for f in want:
        row(f.table)["expected"] += 1
    for f in have:
        row(f.table)["onSwitch"] += 1
    for kind, flows in (("missing", missing), ("changed", changed), ("extra", d.to_delete)):
        for f in flows:
            row(f.table)[kind] += 1

    def listed(flows: frozenset[Flow]) -> list[str]:
        return [str(f) for f in sorted(flows, key=lambda f: (f.table, -f.priority, str(f)))[:cap]]

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
