"""Tenants against the cluster state: when one may go."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import Conflict

DEFAULT = "default"


def check_deletable(name: str) -> None:
    """The default tenant always exists."""
    if name == DEFAULT:
        raise Conflict(f"tenant {name}", "the default tenant cannot be deleted")


def check_no_children(
    name: str,
    networks: Sequence[str],
    groups: Sequence[str],
    policies: Sequence[str] = (),
    netprofiles: Sequence[str] = (),
    services: Sequence[str] = (),
) -> None:
    """A tenant goes only once its networks (ids), endpoint groups, policies, netprofiles
    and service LBs (names) are gone (a policy's rules go with it)."""
    children = (
        [f"network {n}" for n in networks]
        + [f"endpoint group {g}" for g in groups]
        + [f"policy {p}" for p in policies]
        + [f"netprofile {p}" for p in netprofiles]
        + [f"service {s}" for s in services]
    )
    if children:
        raise Conflict(f"tenant {name}", f"it still has {', '.join(children)}; delete them first")
