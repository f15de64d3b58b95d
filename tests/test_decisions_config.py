"""Tenants, endpoint groups and the global settings against the cluster state: pure
decisions, no store."""

from __future__ import annotations

import pytest

from common.models import Endpoint, EndpointGroup, GlobalSettings
from master.decisions import groups, tenants
from master.decisions.settings import TagUse, check_fwd_mode_change, check_tag_ranges
from master.errors import Conflict

# --- tenants ---


def test_the_default_tenant_stays() -> None:
    tenants.check_deletable("blue")
    with pytest.raises(Conflict) as e:
        tenants.check_deletable("default")
    assert str(e.value) == "tenant default: the default tenant cannot be deleted"


def test_a_tenant_with_children_stays() -> None:
    tenants.check_no_children("blue", [], [])
    with pytest.raises(Conflict) as e:
        tenants.check_no_children("blue", ["blue:web", "blue:db"], ["front"])
    assert str(e.value) == (
        "tenant blue: it still has network blue:web, network blue:db, endpoint group front; "
        "delete them first"
    )
    with pytest.raises(Conflict, match="it still has endpoint group front;"):
        tenants.check_no_children("blue", [], ["front"])


# --- global settings ---


def test_fwd_mode_changes_only_without_networks() -> None:
    bridge, routing = GlobalSettings(), GlobalSettings(fwdMode="routing")
    check_fwd_mode_change(bridge, routing, [])
    check_fwd_mode_change(bridge, bridge.model_copy(update={"arpMode": "flood"}), ["t:n"])
    with pytest.raises(Conflict) as e:
        check_fwd_mode_change(bridge, routing, [f"t:n{i}" for i in range(7)])
    assert str(e.value) == (
        "global: fwd-mode cannot change from bridge to routing while 7 network(s) exist "
        "(t:n0, t:n1, t:n2, t:n3, t:n4); delete them first"
    )


def test_tag_ranges_may_not_exclude_a_tag_in_use() -> None:
    in_use = [TagUse("vlan", 10, "t1:n1"), TagUse("vxlan", 5000, "t1:n2")]
    check_tag_ranges(GlobalSettings(vlans="10-20", vxlans="5000-5000"), in_use)
    with pytest.raises(Conflict) as e:
        check_tag_ranges(GlobalSettings(vlans="1-9"), in_use)
    assert (
        str(e.value) == "global: vlans range 1-9 would exclude vlan tag 10 in use by network t1:n1"
    )
    with pytest.raises(Conflict, match="vxlans range 1-4999 would exclude vxlan tag 5000"):
        check_tag_ranges(GlobalSettings(vxlans="1-4999"), in_use)


# --- endpoint groups ---


def group(name: str = "g", network: str = "n", ip_pool: str = "") -> EndpointGroup:
    return EndpointGroup(tenantName="t", groupName=name, networkName=network, ipPool=ip_pool)


def endpoint(eid: str, group_name: str) -> Endpoint:
    return Endpoint(endpointID=eid, tenantName="t", networkName="n", groupName=group_name)


def test_pool_bounds() -> None:
    assert groups.pool_bounds("10.1.0.10-10.1.0.20") == (0x0A01000A, 0x0A010014)


def test_members_are_the_endpoints_in_the_group() -> None:
    eps = [endpoint("a", "g"), endpoint("b", ""), endpoint("c", "other"), endpoint("d", "g")]
    assert [e.endpointID for e in groups.members(group(), eps)] == ["a", "d"]


def test_network_and_ip_pool_stay_while_the_group_has_members() -> None:
    old = group(ip_pool="10.1.0.10-10.1.0.20")
    assert not groups.moves(old, old.model_copy(update={"policies": ["p"]}))
    groups.check_change(old, old.model_copy(update={"netProfile": "gold"}), 3)
    for moved in (group(network="m", ip_pool=old.ipPool), group(ip_pool="10.1.0.30-10.1.0.40")):
        assert groups.moves(old, moved)
        groups.check_change(old, moved, 0)
        with pytest.raises(Conflict) as e:
            groups.check_change(old, moved, 2)
        assert str(e.value) == (
            "endpoint group t:g: network and ip-pool cannot change while 2 endpoint(s) are in "
            "the group"
        )


def test_ip_pools_of_one_network_are_disjoint() -> None:
    others = [
        group("a", ip_pool="10.1.0.10-10.1.0.20"),
        group("b", network="m", ip_pool="10.1.0.15-10.1.0.16"),  # another network
        group("c"),  # no ip-pool
        group("g", ip_pool="10.1.0.10-10.1.0.20"),  # the group itself, before the change
    ]
    groups.check_pool_overlap(group(ip_pool="10.1.0.21-10.1.0.30"), others)
    groups.check_pool_overlap(group(), others)
    with pytest.raises(Conflict) as e:
        groups.check_pool_overlap(group(ip_pool="10.1.0.20-10.1.0.30"), others)
    assert str(e.value) == (
        "endpoint group t:g: ip-pool 10.1.0.20-10.1.0.30 overlaps 10.1.0.10-10.1.0.20 of group t:a"
    )
    with pytest.raises(Conflict, match="of group t:a"):
        groups.check_pool_overlap(group(ip_pool="10.1.0.1-10.1.0.10"), others)


def test_a_group_with_members_stays() -> None:
    groups.check_deletable("t:g", 0)
    with pytest.raises(Conflict) as e:
        groups.check_deletable("t:g", 1)
    assert str(e.value) == "endpoint group t:g: it still has 1 endpoint(s); remove them first"


def test_groups_using_a_network() -> None:
    gs = [group("a"), group("b", network="m"), group("c")]
    assert groups.using("n", gs) == ["a", "c"] and groups.using("z", gs) == []
