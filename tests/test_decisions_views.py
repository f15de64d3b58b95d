"""The inspect views, built from what was read: pure, no store."""

from __future__ import annotations

import ipaddress

import pytest

from common.models import Endpoint, EndpointGroup, GlobalSettings, Network, Policy, Rule, Tenant
from common.records import NetworkRecord
from master.decisions.settings import TagUse
from master.decisions.views import (
    count,
    global_view,
    group_view,
    network_view,
    policy_view,
    pool_view,
    ranges,
    tenant_view,
)


@pytest.mark.parametrize(
    ("values", "text"),
    [
        ([], ""),
        ([7], "7"),
        ([1, 2], "1-2"),
        ([1, 2, 3, 7], "1-3,7"),
        ([1, 3, 5], "1,3,5"),
        ([1, 3, 4, 5, 9, 10], "1,3-5,9-10"),
        ([4094], "4094"),
    ],
)
def test_ranges(values: list[int], text: str) -> None:
    assert ranges(values) == text


def test_global_view() -> None:
    g = GlobalSettings(vlans="100-199", vxlans="1-10")
    tags = [TagUse("vlan", 101, "t:a"), TagUse("vxlan", 3, "t:b"), TagUse("vlan", 100, "t:c")]
    view = global_view(g, "etcd", 3, tags)
    assert view["Config"] == g.dump()
    assert view["Oper"] == {
        "clusterMode": "etcd",
        "numNetworks": 3,
        "vlansInUse": "100-101",
        "vxlansInUse": "3",
        "freeVLANs": 98,
        "freeVXLANs": 9,
    }
    assert count((5, 5)) == 1


def test_tenant_view() -> None:
    view = tenant_view(Tenant(tenantName="blue"), ["web"], ["front", "back"], 4, 3)
    assert view["Config"]["tenantName"] == "blue"
    assert view["Oper"] == {
        "tenantTag": 3,
        "networks": ["web"],
        "endpointGroups": ["front", "back"],
        "numNetworks": 1,
        "numEndpointGroups": 2,
        "numEndpoints": 4,
    }


def test_pool_views_sort_addresses_numerically() -> None:
    v4 = pool_view(4, ipaddress.ip_network("10.1.0.0/24"), ["10.1.0.10", "10.1.0.9", "10.1.0.1"])
    assert v4 == {
        "allocatedAddresses": ["10.1.0.1", "10.1.0.9", "10.1.0.10"],
        "allocatedAddressesCount": 3,
        "availableAddressesCount": 254 - 3,
    }
    v6 = pool_view(6, ipaddress.ip_network("fd00::/64"), ["fd00::10", "fd00::2"])
    assert v6 == {
        "allocatedIPv6Addresses": ["fd00::2", "fd00::10"],
        "allocatedIPv6AddressesCount": 2,
    }


def test_network_view() -> None:
    net = Network(tenantName="blue", networkName="web", subnet="10.1.0.0/24", gateway="10.1.0.1")
    rec = NetworkRecord(config=net, encap="vlan", pkt_tag=100, ipv4_pool="blue:10.1.0.0/24")
    ep = Endpoint(endpointID="e1", tenantName="blue", networkName="web", ipAddress="10.1.0.2")
    pools = [pool_view(4, ipaddress.ip_network("10.1.0.0/24"), ["10.1.0.1", "10.1.0.2"])]
    view = network_view(rec, [ep], pools)
    assert view["Config"] == net.dump()
    assert view["Oper"] == {
        "pktTag": 100,
        "dockerName": "web/blue",
        "numEndpoints": 1,
        "endpoints": [ep.dump()],
        "ipv4Pool": "blue:10.1.0.0/24",
        "ipv6Pool": "",
        "allocatedAddresses": ["10.1.0.1", "10.1.0.2"],
        "allocatedAddressesCount": 2,
        "availableAddressesCount": 252,
    }


def test_group_view() -> None:
    g = EndpointGroup(groupName="front", networkName="web")
    ep = Endpoint(endpointID="e1", tenantName="default", networkName="web", groupName="front")
    assert group_view(g, [ep], 7) == {
        "Config": g.dump(),
        "Oper": {
            "dockerName": "front",
            "groupTag": 7,
            "numEndpoints": 1,
            "endpoints": [ep.dump()],
        },
    }


def test_policy_view() -> None:
    p = Policy(tenantName="t", policyName="web")
    ep = Endpoint(endpointID="e1", tenantName="t", networkName="n", groupName="front")
    rules = [Rule(tenantName="t", policyName="web", ruleId=r) for r in ("1", "2")]
    assert policy_view(p, ["front", "back"], [ep], rules) == {
        "Config": {"key": "t:web", "tenantName": "t", "policyName": "web"},
        "Oper": {
            "endpointGroups": ["front", "back"],
            "numEndpoints": 1,
            "endpoints": [ep.dump()],
            "numRules": 2,
            "rules": ["1", "2"],
        },
    }
    assert policy_view(p, [], [], [])["Oper"]["numEndpoints"] == 0
