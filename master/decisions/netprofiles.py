"""Netprofiles: their fields checked alone (Contiv's bandwidth strings, burst in KB, DSCP),
and which endpoint groups name one (the guard of its delete)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from common.models import EndpointGroup, NetProfile

from ..errors import BadRequest, Conflict, NotFound

# Contiv's spelling: a number and a unit, "10kbps", "100mbps", "1gbps" (case and a space
# between them do not matter; "bps" alone is bits per second).
_BANDWIDTH = re.compile(r"\s*(\d+)\s*([kmg]?)bps\s*", re.IGNORECASE)
_KBPS = {"": 0.001, "k": 1, "m": 1000, "g": 1_000_000}
MAX_KBPS = 0xFFFF_FFFF  # an OpenFlow meter band's rate is 32 bits
MAX_BURST_KB = 0xFFFF_FFFF // 8  # ... and so is its burst, in kbit
MAX_DSCP = 63


def bandwidth_kbps(value: str) -> int:
    """Contiv's bandwidth string in kbit/s (0: none given, unlimited); ValueError if it is
    not one, is 0, or rounds to less than 1 kbit/s."""
    if not value.strip():
        return 0
    m = _BANDWIDTH.fullmatch(value)
    if m is None:
        raise ValueError(
            f"{value!r} is not a rate; write it as Contiv does: 10kbps, 100mbps, 1gbps"
        )
    kbps = int(m.group(1)) * _KBPS[m.group(2).lower()]
    if kbps < 1:
        raise ValueError(f"{value!r} is below the smallest limit, 1kbps")
    if kbps > MAX_KBPS:
        raise ValueError(f"{value!r} is above the largest limit, {MAX_KBPS}kbps")
    return int(kbps)


def normalize_profile(p: NetProfile) -> NetProfile:
    """Check a profile's fields, each failure a 400 naming the field; the profile as stored
    (the bandwidth spelled canonically, e.g. "10mbps")."""
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


def spell_kbps(kbps: int) -> str:
    """A rate in Contiv's spelling, in the largest unit that keeps it whole."""
    for unit, scale in (("g", 1_000_000), ("m", 1000)):
        if kbps % scale == 0:
            return f"{kbps // scale}{unit}bps"
    return f"{kbps}kbps"


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
