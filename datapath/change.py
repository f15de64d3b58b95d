"""What a change of a host's desired state says, and the bookkeeping that undoes it.

A Change names the objects to put (a new value) or remove (None) by ID; datapath.flowmodel
applies it and recompiles only the flows it touches. change_to-style helpers (by_key,
changes) turn a whole DesiredState into the Change that reaches it. Journal records the
undo steps of a change in progress, so a refused change leaves the model as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from datapath.desired import ArpMode, EndpointState, FwdMode, NetworkState
from datapath.policy import GroupState
from datapath.services import ServiceState


class Keep:
    """The uplink is left as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep()


@dataclass(frozen=True)
class Change:
    """Objects to put (a new value) or remove (None), by ID (tunnels: by host, to ofport)."""

    networks: Mapping[str, NetworkState | None] = field(default_factory=dict)
    endpoints: Mapping[str, EndpointState | None] = field(default_factory=dict)
    remotes: Mapping[str, EndpointState | None] = field(default_factory=dict)
    tunnels: Mapping[str, int | None] = field(default_factory=dict)
    uplink: int | Keep | None = KEEP
    arp_mode: ArpMode | None = None
    groups: Mapping[str, GroupState | None] = field(default_factory=dict)
    services: Mapping[str, ServiceState | None] = field(default_factory=dict)
    fwd_mode: FwdMode | None = None  # None: left as it is
    fabric: int | Keep | None = KEEP  # the router port (routing mode with BGP)


class Journal:
    """Undo steps of a change in progress, replayed backwards if it fails."""

    def __init__(self) -> None:
        self.steps: list[Callable[[], None]] = []

    def put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        """table[key] = value, or del table[key] if value is None."""
        had, old = key in table, table.get(key)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
        self.steps.append(lambda: table.__setitem__(key, old) if had else table.pop(key, None))

    def undo(self) -> None:
        for step in reversed(self.steps):
            step()
        self.steps.clear()


def index_member(table: dict[str, set[Any]], key: str, member: Any, add: bool) -> None:
    members = table.setdefault(key, set())
    if add:
        members.add(member)
    else:
        members.discard(member)
        if not members:
            del table[key]


def by_key(items: Iterable[Any], key: Callable[[Any], str], twice: str) -> dict[str, Any]:
    """Items by key; ``twice`` (formatted with the key) is the error for a repeated one."""
    out: dict[str, Any] = {}
    for item in items:
        k = key(item)
        if k in out:
            raise ValueError(twice.format(k))
        out[k] = item
    return out


def changes(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """What a Change must put (new or different values) and remove (None) to turn
    ``current`` into ``wanted``."""
    out: dict[str, Any] = {k: None for k in current if k not in wanted}
    out.update({k: v for k, v in wanted.items() if current.get(k) != v})
    return out
