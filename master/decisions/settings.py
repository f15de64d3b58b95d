"""Global settings against the cluster state: what a change may not break."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from common.models import GlobalSettings

from ..errors import Conflict
from ..validate import tag_range


@dataclass(frozen=True)
class TagUse:
    """A VLAN or VXLAN tag held by a network (keys.tag)."""

    encap: str  # "vlan" or "vxlan"
    tag: int
    network: str  # TENANT:NAME


def check_fwd_mode_change(
    old: GlobalSettings, new: GlobalSettings, networks: Sequence[str]
) -> None:
    """The forwarding mode may change only while no network exists (``networks``: their ids)."""
    if new.fwdMode == old.fwdMode or not networks:
        return
    names = ", ".join(networks[:5])
    raise Conflict(
        "global",
        f"fwd-mode cannot change from {old.fwdMode} to {new.fwdMode} while "
        f"{len(networks)} network(s) exist ({names}); delete them first",
    )


def check_tag_ranges(new: GlobalSettings, in_use: Iterable[TagUse]) -> None:
    """The tag ranges may not shrink below a tag a network holds."""
    for use in in_use:
        lo, hi = tag_range(new, use.encap)
        if not lo <= use.tag <= hi:
            field = "vlans" if use.encap == "vlan" else "vxlans"
            raise Conflict(
                "global",
                f"{field} range {getattr(new, field)} would exclude {use.encap} tag {use.tag} "
                f"in use by network {use.network}",
            )
