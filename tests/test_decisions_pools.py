"""Docker's pools and addresses: which pool a request gets, which address is handed out or
freed. Pure decisions, no store."""

from __future__ import annotations

import ipaddress
import re

import pytest

from common import owners
from common.models import AddressRequest, EndpointGroup, PoolRequest
from common.records import AllocRecord, OwnerRecord, PoolRecord
from ipam.defaults import DEFAULT_V4_POOLS
from master.decisions.pools import (
    PoolGrant,
    check_pool_request,
    granted_before,
    group_pool_range,
    network_gateway,
    plan_pool_request,
    pool_id_for,
    pool_network,
    pool_spec,
    should_release,
    split_group_pool,
)
from master.errors import BadRequest, Conflict, NotFound


def req(**kw: object) -> PoolRequest:
    return PoolRequest.model_validate(kw)


def test_a_pool_asked_for_is_created_in_its_address_space() -> None:
    grant = plan_pool_request(req(addressSpace="blue", pool="10.1.0.0/16"), {})
    assert grant == PoolGrant(
        "blue:10.1.0.0/16", "10.1.0.0/16", PoolRecord(cidr="10.1.0.0/16", name="blue:10.1.0.0/16")
    )
    assert grant.to_json() == {"poolID": "blue:10.1.0.0/16", "pool": "10.1.0.0/16", "data": {}}
    assert plan_pool_request(req(pool="10.1.0.0/16"), {}).pool_id == "default:10.1.0.0/16"


def test_a_sub_pool_needs_a_pool_and_must_lie_inside_it() -> None:
    check_pool_request(req(pool="10.1.0.0/16", subPool="10.1.5.0/24"))
    with pytest.raises(BadRequest) as e:
        check_pool_request(req(subPool="10.1.5.0/24"))
    assert str(e.value) == (
        "pool request in address space default: a sub-pool (--ip-range) needs a pool (--subnet)"
    )
    grant = plan_pool_request(req(pool="10.1.0.0/16", subPool="10.1.5.0/24"), {})
    assert grant.record is not None and grant.record.range == "10.1.5.0/24"
    with pytest.raises(
        BadRequest, match=re.escape("sub-pool 10.2.0.0/24 is not inside pool 10.1.0.0/16")
    ):
        plan_pool_request(req(pool="10.1.0.0/16", subPool="10.2.0.0/24"), {})


@pytest.mark.parametrize(
    "fields",
    [{"pool": "10.1.0.0/33"}, {"pool": "nonsense"}, {"pool": "10.1.0.0/16", "subPool": "x"}],
)
def test_bad_cidrs_are_bad_requests(fields: dict) -> None:
    with pytest.raises(BadRequest, match="pool request in address space default"):
        plan_pool_request(req(**fields), {})


def test_the_default_pool_avoids_every_pool_of_every_space() -> None:
    assert plan_pool_request(req(), {}, []).pool == "10.200.0.0/24"
    taken = [PoolRecord(cidr="10.200.0.0/24", network="t:a"), PoolRecord(cidr="10.200.1.0/25")]
    grant = plan_pool_request(req(addressSpace="other"), {}, taken)
    assert grant == PoolGrant(
        "other:10.200.2.0/24", "10.200.2.0/24", PoolRecord(cidr="10.200.2.0/24", name=grant.pool_id)
    )
    v6 = plan_pool_request(req(v6=True), {}, taken)
    assert ipaddress.ip_network(v6.pool).version == 6 and v6.pool_id == f"default:{v6.pool}"


def test_no_default_pool_left() -> None:
    full = [PoolRecord(cidr=cidr) for cidr, _ in DEFAULT_V4_POOLS]
    with pytest.raises(Conflict) as e:
        plan_pool_request(req(), {}, full)
    assert str(e.value) == (
        "pool request in address space default: no free default pool left; pass --subnet"
    )


def test_an_identical_pool_is_shared() -> None:
    mine = {"default:10.1.0.0/16": PoolRecord(cidr="10.1.0.0/16", range="10.1.5.0/24")}
    for fields in ({"pool": "10.1.0.0/16"}, {"pool": "10.1.0.0/16", "subPool": "10.1.5.0/24"}):
        grant = plan_pool_request(req(**fields), mine)
        assert grant == PoolGrant("default:10.1.0.0/16", "10.1.0.0/16", None)
    with pytest.raises(Conflict) as e:
        plan_pool_request(req(pool="10.1.0.0/16", subPool="10.1.6.0/24"), mine)
    assert str(e.value) == (
        "pool request in address space default: "
        "pool 10.1.0.0/16 already exists with a different sub-pool"
    )


def test_an_overlapping_pool_is_refused() -> None:
    web = PoolRecord(cidr="10.1.0.0/16", network="default:web")
    with pytest.raises(
        Conflict, match=re.escape("pool 10.1.2.0/24 overlaps pool 10.1.0.0/16 of default:web")
    ):
        plan_pool_request(req(pool="10.1.2.0/24"), {"default:10.1.0.0/16": web})
    with pytest.raises(Conflict, match=re.escape("overlaps pool 10.1.0.0/16 of another network")):
        plan_pool_request(req(pool="10.0.0.0/8"), {"default:x": PoolRecord(cidr="10.1.0.0/16")})
    assert (
        plan_pool_request(req(pool="10.2.0.0/16"), {"default:10.1.0.0/16": web}).record is not None
    )


def test_pool_spec_reads_the_sub_pool() -> None:
    spec = pool_spec("p", PoolRecord(cidr="10.1.0.0/16", range="10.1.5.0/24"))
    assert spec.name == "p" and str(spec.network) == "10.1.0.0/16"
    assert spec.range == (
        int(ipaddress.ip_address("10.1.5.0")),
        int(ipaddress.ip_address("10.1.5.255")),
    )
    assert pool_spec("p", PoolRecord(cidr="10.1.0.0/16", name="t:n")).name == "t:n"
    assert pool_id_for("t", ipaddress.ip_network("10.1.0.0/16")) == "t:10.1.0.0/16"


# --- addresses ---


def test_a_retried_request_gets_what_its_owner_holds() -> None:
    r = AddressRequest(poolID="p", owner="r1")
    assert granted_before(r, OwnerRecord(pool="p", address="10.1.0.7"), 24) == "10.1.0.7/24"
    with pytest.raises(Conflict) as e:
        granted_before(r, OwnerRecord(pool="q", address="10.2.0.7"), 24)
    assert str(e.value) == "address request in pool p: owner r1 already holds an address in pool q"


def test_the_networks_own_gateway_is_granted_to_every_host() -> None:
    pool = PoolRecord(cidr="10.1.0.0/24", network="t:n", gateway="10.1.0.1")
    gw = AddressRequest(poolID="p", owner="gw-h1", kind="gateway")
    assert network_gateway(gw, pool, 24) == "10.1.0.1/24"
    assert network_gateway(gw.model_copy(update={"address": "10.1.0.1"}), pool, 24) == "10.1.0.1/24"
    # Another address, another kind, or a pool without a gateway: an ordinary allocation.
    assert network_gateway(gw.model_copy(update={"address": "10.1.0.9"}), pool, 24) is None
    assert network_gateway(AddressRequest(poolID="p", owner="x"), pool, 24) is None
    assert network_gateway(gw, PoolRecord(cidr="10.1.0.0/24"), 24) is None


def test_release_refuses_an_endpoints_address_and_keeps_the_gateway() -> None:
    obj = "address 10.1.0.5 in pool p"
    with pytest.raises(Conflict) as e:
        should_release(obj, AllocRecord(owner=owners.endpoint("e1"), network="t:n"))
    assert str(e.value) == f"{obj}: it belongs to endpoint e1; delete the endpoint"
    assert should_release(obj, AllocRecord(owner=owners.NETWORK_GATEWAY)) is False
    assert should_release(obj, AllocRecord(owner=owners.docker_static("p", "10.1.0.5"))) is True


def test_request_owners_are_the_plain_requests_among_the_holders() -> None:
    from common.records import AllocRecord
    from master.decisions.pools import request_owners

    held = [
        AllocRecord(owner="gateway"),
        AllocRecord(owner="ep:e1"),
        AllocRecord(owner="addr:p:10.0.0.5", kind="aux"),
        AllocRecord(owner="req:1"),
        AllocRecord(owner="req:1"),
    ]
    assert request_owners(held) == ["addr:p:10.0.0.5", "req:1"]


# --- the pool of an endpoint group's docker network: "<pool id>@<group>" ---


@pytest.mark.parametrize(
    ("pool_id", "split"),
    [
        ("blue:10.7.0.0/24@front", ("blue:10.7.0.0/24", "front")),
        ("default:fd00:5::/64@web.v6-1", ("default:fd00:5::/64", "web.v6-1")),
        ("blue:10.7.0.0/24", ("blue:10.7.0.0/24", "")),
        ("default:fd00:5::/64", ("default:fd00:5::/64", "")),
        # An address space (docker's -o tenant) with an "@": still a plain pool, whose
        # id ends in a prefix length, never in a name.
        ("a@b:10.7.0.0/24", ("a@b:10.7.0.0/24", "")),
        ("a@b:10.7.0.0/24@front", ("a@b:10.7.0.0/24", "front")),
        ("blue:10.7.0.0/24@", ("blue:10.7.0.0/24@", "")),
        ("@front", ("@front", "")),
        ("blue:10.7.0.0/24@-bad", ("blue:10.7.0.0/24@-bad", "")),
    ],
)
def test_a_pool_id_names_its_group_after_an_at(pool_id: str, split: tuple[str, str]) -> None:
    assert split_group_pool(pool_id) == split


NET_POOL = PoolRecord(cidr="10.7.0.0/24", network="blue:web", gateway="10.7.0.1")
OBJ = "address request in pool blue:10.7.0.0/24@front"


def group(**kw: object) -> EndpointGroup:
    fields: dict[str, object] = {"tenantName": "blue", "groupName": "front", "networkName": "web"}
    return EndpointGroup.model_validate({**fields, **kw})


def test_a_group_pool_is_its_networks_pool() -> None:
    assert pool_network(OBJ, "blue:10.7.0.0/24", NET_POOL, "front") == ("blue", "web")
    with pytest.raises(BadRequest, match=re.escape("pool default:10.9.0.0/24 is no network's")):
        pool_network(OBJ, "default:10.9.0.0/24", PoolRecord(cidr="10.9.0.0/24"), "front")


def test_a_group_pool_draws_from_the_groups_ip_pool() -> None:
    g = group(ipPool="10.7.0.100-10.7.0.110")
    lo, hi = group_pool_range(OBJ, "blue", "web", "front", g, NET_POOL)
    assert (ipaddress.ip_address(lo), ipaddress.ip_address(hi)) == (
        ipaddress.ip_address("10.7.0.100"),
        ipaddress.ip_address("10.7.0.110"),
    )
    # Without an ip-pool: the whole pool; the IPv6 pool of the network is not the group's.
    assert group_pool_range(OBJ, "blue", "web", "front", group(), NET_POOL) is None
    v6 = PoolRecord(cidr="fd00:7::/64", network="blue:web")
    assert group_pool_range(OBJ, "blue", "web", "front", g, v6) is None


def test_a_group_pool_needs_the_group_on_the_pools_network() -> None:
    with pytest.raises(NotFound, match="endpoint group blue:front: not found"):
        group_pool_range(OBJ, "blue", "web", "front", None, NET_POOL)
    with pytest.raises(BadRequest, match="blue:front belongs to network db, not web"):
        group_pool_range(OBJ, "blue", "web", "front", group(networkName="db"), NET_POOL)
