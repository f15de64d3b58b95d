"""Tenants against the cluster state: their tags, and when one may go."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..errors import Conflict

DEFAULT = "default"

# Tenant tags are 1..2**20-1. In routing mode a tenant's VRF is the datapath segment
# VRF_SEGMENT_BASE | tag, VRF_SEGMENT_BASE = 1 << 25, in the 32-bit segment field
# (datapath.tables.SEGMENT_MASK): VNIs are below 1 << 24 and VLAN segments are
# VLAN_SEGMENT_BASE (1 << 24, datapath.local) | vlan, below 1 << 25, so any tag below 1 << 25
# keeps VRFs apart from both; 20 bits (a million tenants, far more than a cluster holds)
# leave bits 20-24 and 26-31 free for segment kinds yet to come.
MAX_TENANT_TAG = 2**20 - 1


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
