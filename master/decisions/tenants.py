"""Tenants against the cluster state: when one may go."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import Conflict

DEFAULT = "default"


def check_deletable(name: str) -> None:
    """The default tenant always exists."""
    if name == DEFAULT:
        raise Conflict(f"tenant {name}", "the default tenant cannot be deleted")


def check_no_children(name: str, networks: Sequence[str], groups: Sequence[str]) -> None:
    """A tenant goes only once its networks (ids) and endpoint groups (names) are gone."""
    if not networks and not groups:
        return
    children = [f"network {n}" for n in networks] + [f"endpoint group {g}" for g in groups]
    raise Conflict(f"tenant {name}", f"it still has {', '.join(children)}; delete them first")
