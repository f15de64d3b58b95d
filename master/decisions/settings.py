"""Global settings against the cluster state: what a change may not break."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from common.models import MAX_VLAN, MAX_VXLAN, GlobalSettings
from ipam import parse_network
from ipam.errors import IpamError

from ..errors import BadRequest, Conflict


def parse_tag_range(value: str, what: str, limit: int) -> tuple[int, int]:
    """Contiv ranges are "lo-hi" (a single number is accepted too)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value or "")
    if not m:
        raise BadRequest(f"global {what}", f"{value!r} is not a range like 1-4094")
    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
    if not 1 <= lo <= hi <= limit:
        raise BadRequest(
            f"global {what}", f"range {value!r} must satisfy 1 <= start <= end <= {limit}"
        )
    return lo, hi


def validate_global(g: GlobalSettings) -> None:
    parse_tag_range(g.vlans, "vlans", MAX_VLAN)
    parse_tag_range(g.vxlans, "vxlans", MAX_VXLAN)
    try:
        parse_network(g.pvtSubnet, "pvtSubnet", version=4)
    except IpamError as e:
        raise BadRequest("global", str(e)) from None


def tag_range(g: GlobalSettings, encap: str) -> tuple[int, int]:
    if encap == "vlan":
        return parse_tag_range(g.vlans, "vlans", MAX_VLAN)
    return parse_tag_range(g.vxlans, "vxlans", MAX_VXLAN)


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
