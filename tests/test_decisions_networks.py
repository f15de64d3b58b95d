"""A network's tag and pools, and when it may change: pure decisions, no store."""

from __future__ import annotations

import re

import pytest

from common.models import EndpointGroup, GlobalSettings, Network
from common.records import GroupRecord, NetworkRecord, PoolRecord
from master.decisions.networks import (
    addressing,
    carried_groups,
    check_deletable,
    check_readdress,
    check_rename,
    choose_tag,
    plan_network,
    plan_pools,
    renamed,
    renamed_pool,
)
from master.errors import BadRequest, Conflict

SETTINGS = GlobalSettings(vlans="100-102", vxlans="5000-5001")


def net(name: str = "n", tenant: str = "t", **kw: object) -> Network:
    return Network.model_validate({"tenantName": tenant, "networkName": name, **kw})


def record(n: Network, tag: int, v4: str = "", v6: str = "") -> NetworkRecord:
    return NetworkRecord(config=n, encap=n.encap, pkt_tag=tag, ipv4_pool=v4, ipv6_pool=v6)


# --- choose_tag ---


def test_the_first_free_tag_of_the_global_range() -> None:
    assert choose_tag(net(), SETTINGS, {}) == 5000
    assert choose_tag(net(), SETTINGS, {5000: "t:other"}) == 5001
    assert choose_tag(net(encap="vlan"), SETTINGS, {100: "t:a", 102: "t:b"}) == 101


def test_no_free_tag_left() -> None:
    with pytest.raises(Conflict, match="network t:n: no free vxlan tag left in range 5000-5001"):
        choose_tag(net(), SETTINGS, {5000: "t:a", 5001: "t:b"})


def test_the_configured_tag() -> None:
    assert choose_tag(net(encap="vlan", pktTag=101), SETTINGS, {100: "t:a"}) == 101
    # A tag held by the very same network (its own key) is its own.
    assert choose_tag(net(encap="vlan", pktTag=100), SETTINGS, {100: "t:n"}) == 100


def test_the_configured_tag_must_be_in_range() -> None:
    with pytest.raises(BadRequest) as e:
        choose_tag(net(encap="vlan", pktTag=99), SETTINGS, {})
    assert str(e.value) == ("network t:n: pkt-tag 99 is outside the global vlans range 100-102")
    with pytest.raises(BadRequest, match="vxlans range 5000-5001"):
        choose_tag(net(pktTag=6000), SETTINGS, {})


def test_the_configured_tag_must_be_free() -> None:
    with pytest.raises(Conflict) as e:
        choose_tag(net(encap="vlan", pktTag=100), SETTINGS, {100: "u:web"})
    assert str(e.value) == "network t:n: vlan pkt-tag 100 is already used by network u:web"


def test_the_previous_tag_counts_as_free_for_the_same_encap_only() -> None:
    old = record(net(), 5000)
    assert choose_tag(net(subnet="10.2.0.0/24"), SETTINGS, {5000: "t:n"}, old) == 5000
    full = {5000: "t:n", 5001: "t:b"}
    assert choose_tag(net(), SETTINGS, full, old) == 5000
    old_vlan = record(net(encap="vlan"), 5000)
    with pytest.raises(Conflict, match="no free vxlan tag"):
        choose_tag(net(), SETTINGS, full, old_vlan)


# --- pools ---


def test_new_pools_for_each_subnet() -> None:
    n = net(subnet="10.1.0.0/24", gateway="10.1.0.1", ipv6Subnet="fd00:1::/64")
    planned, adopted = plan_pools(n, {})
    assert adopted == []
    assert planned == {
        4: (
            "t:10.1.0.0/24",
            PoolRecord(cidr="10.1.0.0/24", range="", network="t:n", gateway="10.1.0.1", name="t:n"),
        ),
        6: (
            "t:fd00:1::/64",
            PoolRecord(cidr="fd00:1::/64", range="", network="t:n", gateway="", name="t:n"),
        ),
    }


def test_a_docker_pool_for_the_same_subnet_is_adopted_with_its_sub_pool() -> None:
    docker = PoolRecord(cidr="10.1.0.0/16", range="10.1.5.0/24", name="t:10.1.0.0/16")
    elsewhere = PoolRecord(cidr="10.9.0.0/24", network="t:other", name="t:other")
    n = net(subnet="10.1.0.0/16", gateway="10.1.5.0")
    planned, adopted = plan_pools(n, {"t:10.1.0.0/16": docker, "t:10.9.0.0/24": elsewhere})
    assert adopted == ["t:10.1.0.0/16"]
    assert planned[4] == (
        "t:10.1.0.0/16",
        PoolRecord(
            cidr="10.1.0.0/16", range="10.1.5.0/24", network="t:n", gateway="10.1.5.0", name="t:n"
        ),
    )


@pytest.mark.parametrize(
    ("existing", "words"),
    [
        (PoolRecord(cidr="10.1.0.0/16", network="t:big"), "overlaps 10.1.0.0/16 of network t:big"),
        (PoolRecord(cidr="10.1.0.128/25"), "overlaps 10.1.0.128/25 of network a docker pool"),
        # A pool of the same subnet that another network owns is an overlap, not adoptable.
        (
            PoolRecord(cidr="10.1.0.0/24", network="t:twin"),
            "overlaps 10.1.0.0/24 of network t:twin",
        ),
    ],
)
def test_overlapping_pools_are_refused(existing: PoolRecord, words: str) -> None:
    with pytest.raises(Conflict) as e:
        plan_pools(net(subnet="10.1.0.0/24"), {"t:x": existing})
    assert str(e.value) == f"network t:n: subnet 10.1.0.0/24 {words} in tenant t"


def test_pools_of_another_family_never_overlap() -> None:
    planned, _ = plan_pools(
        net(ipv6Subnet="fd00::/64"), {"t:10.0.0.0/8": PoolRecord(cidr="10.0.0.0/8")}
    )
    assert list(planned) == [6]


def test_the_previous_pools_do_not_count() -> None:
    old = record(net(subnet="10.1.0.0/24"), 5000, v4="t:10.1.0.0/24")
    mine = {"t:10.1.0.0/24": PoolRecord(cidr="10.1.0.0/24", network="t:n", name="t:n")}
    planned, adopted = plan_pools(net(subnet="10.1.0.0/25"), mine, old)
    assert planned[4][0] == "t:10.1.0.0/25" and adopted == []
    with pytest.raises(Conflict, match=re.escape("overlaps 10.1.0.0/24 of network t:n")):
        plan_pools(net(subnet="10.1.0.0/25"), mine)


def test_plan_of_a_new_network() -> None:
    n = net(subnet="10.1.0.0/24", gateway="10.1.0.1", ipv6Subnet="fd00:1::/64")
    plan = plan_network(n, SETTINGS, {5000: "t:a"}, {})
    assert plan.record == record(n, 5001, v4="t:10.1.0.0/24", v6="t:fd00:1::/64")
    assert plan.new_tag and plan.stale == () and plan.adopted == []
    assert set(plan.pools) == {4, 6}


def test_plan_of_a_readdressed_network() -> None:
    old = record(net(subnet="10.1.0.0/24"), 5000, v4="t:10.1.0.0/24")
    plan = plan_network(net(subnet="10.2.0.0/24"), SETTINGS, {5000: "t:n"}, {}, old)
    # It keeps its tag (no new tag key to claim) and drops its old pool.
    assert plan.record.pkt_tag == 5000 and not plan.new_tag
    assert plan.record.ipv4_pool == "t:10.2.0.0/24" and plan.stale == ("t:10.1.0.0/24",)
    moved = plan_network(net(subnet="10.1.0.0/24", encap="vlan"), SETTINGS, {}, {}, old)
    assert moved.record.encap == "vlan" and moved.record.pkt_tag == 100 and moved.new_tag


def test_a_refused_plan_names_the_tag_before_the_pools() -> None:
    taken = {"t:x": PoolRecord(cidr="10.1.0.0/24", network="t:x")}
    with pytest.raises(Conflict, match="pkt-tag 5000 is already used"):
        plan_network(net(subnet="10.1.0.0/24", pktTag=5000), SETTINGS, {5000: "t:x"}, taken)


# --- guards ---


def test_addressing_is_what_endpoints_depend_on() -> None:
    base = net(subnet="10.1.0.0/24")
    assert addressing(base) == addressing(base.model_copy(update={"nwType": "infra"}))
    for change in (
        {"subnet": "10.2.0.0/24"},
        {"gateway": "10.1.0.9"},
        {"ipv6Subnet": "fd00::/64"},
        {"ipv6Gateway": "fd00::9"},
        {"encap": "vlan"},
        {"pktTag": 7},
    ):
        assert addressing(base) != addressing(base.model_copy(update=change)), change


def test_readdress_needs_no_endpoints() -> None:
    check_readdress(net(), 0)
    with pytest.raises(Conflict) as e:
        check_readdress(net(), 2)
    assert str(e.value) == (
        "network t:n: subnet, gateway, encap and pkt-tag cannot change while 2 endpoint(s) exist"
    )


def test_delete_names_the_hosts_of_its_endpoints() -> None:
    check_deletable("t:n", [], [])
    with pytest.raises(Conflict) as e:
        check_deletable("t:n", ["host-b", "host-a", "host-b", ""], ["g"])
    assert str(e.value) == (
        "network t:n: it still has 4 endpoint(s) on host(s) ?, host-a, host-b; "
        "remove the containers first"
    )


def test_delete_needs_no_group_on_it() -> None:
    with pytest.raises(Conflict) as e:
        check_deletable("t:n", [], ["front", "back"])
    assert str(e.value) == "network t:n: endpoint group(s) front, back use it; delete them first"


def test_rename_guards() -> None:
    check_rename("t:abc", "t:web", taken=False, endpoints=0)
    with pytest.raises(Conflict, match="network t:abc: cannot rename: network t:web already"):
        check_rename("t:abc", "t:web", taken=True, endpoints=0)
    with pytest.raises(Conflict, match="network t:abc: cannot rename while 1 endpoint"):
        check_rename("t:abc", "t:web", taken=False, endpoints=1)


def test_rename_carries_the_tag_and_the_pools() -> None:
    old = record(net("abc", subnet="10.1.0.0/24"), 5000, v4="t:10.1.0.0/24")
    new = renamed(old, "web")
    assert new.id == "t:web" and new.config.subnet == "10.1.0.0/24"
    assert (new.encap, new.pkt_tag, new.pools) == ("vxlan", 5000, ("t:10.1.0.0/24",))
    pool = PoolRecord(
        cidr="10.1.0.0/24", range="10.1.0.128/25", network="t:abc", gateway="10.1.0.1", name="t:abc"
    )
    assert renamed_pool(pool, new) == PoolRecord(
        cidr="10.1.0.0/24", range="10.1.0.128/25", network="t:web", gateway="10.1.0.1", name="t:web"
    )


def test_rename_carries_the_groups_of_the_network_only() -> None:
    def group(name: str, network: str, **kw: object) -> GroupRecord:
        g = {"tenantName": "t", "groupName": name, "networkName": network, **kw}
        return GroupRecord(config=EndpointGroup.model_validate(g), tag=len(name))

    web = group("web", "abc", ipPool="10.1.0.10-10.1.0.20", policies=["p"], netProfile="gold")
    groups = [web, group("db", "other"), group("app", "abc")]
    carried = carried_groups(groups, "abc", "web2")
    assert [(g.config.groupName, g.config.networkName, g.tag) for g in carried] == [
        ("web", "web2", 3),
        ("app", "web2", 3),
    ]
    assert carried[0].config.model_copy(update={"networkName": "abc"}) == web.config
    assert carried_groups(groups, "nothing", "x") == []
