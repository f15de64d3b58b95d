"""Tenant decisions, pure: which tag a new tenant gets, when tags run out, when a tenant
may go."""

from __future__ import annotations

import pytest

from datapath.local import VLAN_SEGMENT_BASE, VRF_SEGMENT_BASE
from datapath.tables import SEGMENT_MASK
from master.decisions.tenants import (
    MAX_TENANT_TAG,
    check_deletable,
    check_no_children,
    choose_tenant_tag,
)
from master.errors import Conflict


@pytest.mark.parametrize(
    ("used", "tag"),
    [(set(), 1), ({1}, 2), ({2}, 1), ({1, 2, 4}, 3), ({1, 2, 3}, 4), ({5, 9}, 1)],
)
def test_the_first_free_tenant_tag(used: set[int], tag: int) -> None:
    assert choose_tenant_tag("blue", used) == tag


def test_tenant_tags_run_out_with_a_reason_naming_the_tenant() -> None:
    assert choose_tenant_tag("blue", {1, 2}, limit=3) == 3
    with pytest.raises(Conflict) as e:
        choose_tenant_tag("blue", {1, 2, 3}, limit=3)
    assert str(e.value) == "tenant blue: no free tenant tag left (1-3)"
    assert e.value.status == 409
    with pytest.raises(Conflict, match=rf"no free tenant tag left \(1-{MAX_TENANT_TAG}\)"):
        choose_tenant_tag("blue", range(1, MAX_TENANT_TAG + 1))


def test_a_vrf_segment_never_meets_a_vni_or_vlan_segment() -> None:
    assert MAX_TENANT_TAG == 2**14 - 1
    highest_vni, highest_vlan = 2**24 - 1, VLAN_SEGMENT_BASE | 4095
    assert max(highest_vni, highest_vlan) < VRF_SEGMENT_BASE
    assert VRF_SEGMENT_BASE | MAX_TENANT_TAG <= SEGMENT_MASK
    assert VRF_SEGMENT_BASE & MAX_TENANT_TAG == 0  # the tag is the segment's low bits


def test_the_default_tenant_stays_and_a_tenant_goes_only_when_empty() -> None:
    with pytest.raises(Conflict, match="the default tenant cannot be deleted"):
        check_deletable("default")
    check_deletable("blue")
    check_no_children("blue", [], [])
    with pytest.raises(Conflict, match="it still has network blue:n, endpoint group g"):
        check_no_children("blue", ["blue:n"], ["g"])


def test_every_tenant_tag_names_a_conntrack_zone_of_its_own() -> None:
    """Routing mode's zones: VRF_ZONE_BASE | tag, below the services' hairpin bit."""
    from datapath.desired import VRF_ZONE_BASE
    from datapath.flows import CT_ZONE_MAX
    from datapath.services import HAIRPIN_ZONE_BIT

    assert VRF_ZONE_BASE & MAX_TENANT_TAG == 0
    assert VRF_ZONE_BASE | MAX_TENANT_TAG < HAIRPIN_ZONE_BIT
    assert HAIRPIN_ZONE_BIT | VRF_ZONE_BASE | MAX_TENANT_TAG <= CT_ZONE_MAX
