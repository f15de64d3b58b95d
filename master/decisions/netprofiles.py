"""Netprofiles: their fields checked alone (Contiv's bandwidth strings, burst in KB, DSCP),
and which endpoint groups name one (the guard of its delete)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from common.models import EndpointGroup, NetProfile
from common.profiles import MAX_BURST_KB, MAX_DSCP, bandwidth_kbps, spell_kbps

from ..errors import BadRequest, Conflict, NotFound
from ..validate import check_name


def normalize_profile(p: NetProfile) -> NetProfile:
    """Check a profile's names and fields, each failure a 400 naming it; the profile as stored
    (the bandwidth spelled canonically, e.g. "10mbps")."""
    check_name("tenant", p.tenantName)
    check_name("netprofile", p.profileName)
    obj = f"netprofile {p.id}"
    try:
        kbps = bandwidth_kbps(p.bandwidth)
    except ValueError as e:
        raise BadRequest(obj, f"field 'bandwidth': {e}") from None
    if p.burst < 0 or p.burst > MAX_BURST_KB:
        raise BadRequest(obj, f"field 'burst': {p.burst} is not a size in KB (0-{MAX_BURST_KB})")
    if p.burst and not kbps:
        raise BadRequest(obj, "field 'burst': a burst needs a bandwidth to limit")
    if not 0 <= p.DSCP <= MAX_DSCP:
        raise BadRequest(obj, f"field 'DSCP': {p.DSCP} is out of 0-{MAX_DSCP}")
    return p.model_copy(update={"bandwidth": spell_kbps(kbps) if kbps else ""})


def using(profile_name: str, groups: Iterable[EndpointGroup]) -> list[str]:
    """The names of the groups (of the profile's tenant) that name netprofile ``profile_name``."""
    return [g.groupName for g in groups if g.netProfile == profile_name]


def check_deletable(profile_id: str, groups: Collection[str]) -> None:
    """A netprofile goes only once no group names it (``groups``: the names of those that do)."""
    if groups:
        raise Conflict(
            f"netprofile {profile_id}",
            f"it is used by endpoint group(s) {', '.join(sorted(groups))}; "
            "give them another profile (or none) first",
        )


def check_profile_exists(group: EndpointGroup, exists: bool) -> None:
    """The netprofile a group names exists in its tenant."""
    if group.netProfile and not exists:
        raise NotFound(
            f"endpoint group {group.id}",
            f"netprofile {group.tenantName}:{group.netProfile} not found; create it first",
        )
