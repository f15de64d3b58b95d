"""Endpoints: where their addresses come from, and who may take or free them. Pure
decisions, no store."""

from __future__ import annotations

import pytest

from common import owners
from common.models import Endpoint, EndpointGroup, EndpointRequest, Network
from common.records import AllocRecord, NetworkRecord
from master.decisions.endpoints import (
    Want,
    addresses_of,
    adoptable,
    check_reclaim,
    check_same_network,
    check_subnet,
    group_range,
    holds,
    new_endpoint,
    wants,
)
from master.errors import BadRequest, Conflict

NET = NetworkRecord(
    config=Network(tenantName="t", networkName="n", subnet="10.1.0.0/24"),
    encap="vxlan",
    pkt_tag=5000,
    ipv4_pool="t:10.1.0.0/24",
)


def req(**kw: object) -> EndpointRequest:
    return EndpointRequest.model_validate(
        {"endpointID": "e1", "tenantName": "t", "networkName": "n", **kw}
    )


def test_a_retry_finds_its_endpoint_in_the_same_network_only() -> None:
    ep = Endpoint(endpointID="e1", tenantName="t", networkName="n")
    check_same_network(ep, req())
    with pytest.raises(Conflict) as e:
        check_same_network(ep, req(networkName="m"))
    assert str(e.value) == "endpoint e1: already exists in network t:n"


def test_the_group_is_on_the_endpoints_network() -> None:
    g = EndpointGroup(tenantName="t", groupName="g", networkName="n", ipPool="10.1.0.10-10.1.0.20")
    assert group_range(req(groupName="g"), g, NET) == (0x0A01000A, 0x0A010014)
    assert group_range(req(groupName="g"), g.model_copy(update={"ipPool": ""}), NET) is None
    with pytest.raises(BadRequest) as e:
        group_range(req(groupName="g"), g.model_copy(update={"networkName": "m"}), NET)
    assert str(e.value) == "endpoint e1: endpoint group t:g belongs to network m, not n"


def test_one_address_per_subnet_the_group_range_for_ipv4() -> None:
    assert wants(req(ipAddress="10.1.0.9"), NET, (1, 2)) == [
        Want("t:10.1.0.0/24", "10.1.0.9", (1, 2), "ipAddress"),
        Want("", "", None, "ipv6Address"),
    ]
    assert [w.pool_field for w in wants(req(), NET, None)] == ["ipv4Pool", "ipv6Pool"]


def test_a_static_address_needs_a_subnet_of_its_family() -> None:
    for w in wants(req(ipAddress="10.1.0.9"), NET, None):
        check_subnet(req(), w, NET)
    v6 = wants(req(ipv6Address="fd00::9"), NET, None)[1]
    with pytest.raises(BadRequest) as e:
        check_subnet(req(), v6, NET)
    assert str(e.value) == (
        "endpoint e1: ipv6Address fd00::9 given but network t:n has no such subnet"
    )


def test_only_a_plain_request_may_be_adopted() -> None:
    assert adoptable(AllocRecord(owner=owners.docker_static("p", "10.1.0.9")))
    assert not adoptable(AllocRecord(owner=owners.endpoint("e2"), network="t:n"))
    assert not adoptable(AllocRecord(owner=owners.NETWORK_GATEWAY))


def test_the_new_endpoint_record() -> None:
    r = req(host="h1", macAddress="02:00:00:00:00:01", containerID="c", groupName="g")
    ep = new_endpoint(r, {"ipAddress": "10.1.0.2", "ipv4Pool": "t:10.1.0.0/24"})
    assert (ep.endpointID, ep.host, ep.groupName, ep.macAddress) == ("e1", "h1", "g", r.macAddress)
    assert (ep.ipAddress, ep.ipv4Pool, ep.ipv6Address) == ("10.1.0.2", "t:10.1.0.0/24", "")
    assert addresses_of(ep) == [("t:10.1.0.0/24", "10.1.0.2")]
    dual = ep.model_copy(update={"ipv6Address": "fd00::2", "ipv6Pool": "t:fd00::/64"})
    assert addresses_of(dual) == [("t:10.1.0.0/24", "10.1.0.2"), ("t:fd00::/64", "fd00::2")]


def test_deleting_releases_only_what_the_endpoint_still_holds() -> None:
    ep = Endpoint(endpointID="e1", tenantName="t", networkName="n")
    assert holds(ep, AllocRecord(owner=owners.endpoint("e1"), network="t:n"))
    assert not holds(ep, AllocRecord(owner=owners.endpoint("e2"), network="t:n"))
    assert not holds(ep, AllocRecord(owner="req-1"))


def test_reclaim_only_from_a_host_that_is_still_gone() -> None:
    ep = Endpoint(endpointID="e1", tenantName="t", networkName="n", host="h1")
    check_reclaim(ep, "h1", registered=False)
    with pytest.raises(Conflict) as e:
        check_reclaim(ep, "h1", registered=True)
    assert str(e.value) == "endpoint e1: host h1 is registered again"
    with pytest.raises(Conflict) as e:
        check_reclaim(ep, "h2", registered=False)
    assert str(e.value) == "endpoint e1: it belongs to host 'h1' now, not 'h2'"
