"""Tenants against the cluster state: their tags, and when one may go."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..errors import Conflict

DEFAULT = "default"

# Tenant tags are 1..2**14-1. In routing mode a tenant's tag names two things on every host:
# its VRF, the datapath segment VRF_SEGMENT_BASE | tag (VRF_SEGMENT_BASE = 1 << 25, above
# VNIs (< 1 << 24) and VLAN segments (1 << 24 | vlan), inside the 32-bit segment field), and
# its conntrack zone, 0x4000 | tag, with 0x8000 | that for its services' hairpin zone: ct
# zones are 16 bits, so 14 bits of tag (16,383 tenants) is what fits.
MAX_TENANT_TAG = 2**14 - 1


def choose_tenant_tag(name: str, used: Collection[int], limit: int = MAX_TENANT_TAG) -> int:
    """The first free tag for tenant ``name`` (``used``: the tags tenants hold; ``limit``:
    the highest tag there is)."""
    tag = next(t for t in range(1, len(used) + 2) if t not in used)
    if tag > limit:
        raise Conflict(f"tenant {name}", f"no free tenant tag left (1-{limit})")
    return tag


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
