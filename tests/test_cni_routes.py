"""Which routes a CNI interface gets (plugin.cni_routes, pure): the configuration's
"routes", or a default route per family the pod has none of yet; and CHECK's comparison of
a result's routes with the namespace's."""

from __future__ import annotations

from typing import Any

import pytest

from common import cni
from common.models import Network
from datapath.netns import NetnsRoute
from plugin.cni_routes import absent_routes, plan_routes, requested_routes, taken

DUAL = Network(
    networkName="d", subnet="10.7.0.0/24", gateway="10.7.0.1", ipv6Subnet="fd07::/64",
    ipv6Gateway="fd07::1",
)  # fmt: skip
V4 = Network(networkName="v4", subnet="10.8.0.0/24", gateway="10.8.0.1")
ETH0 = {"0.0.0.0/0": "eth0", "10.8.0.0/24": "eth0"}  # what a first interface left


@pytest.mark.parametrize(
    ("net", "have", "routes"),
    [
        (DUAL, {}, (("0.0.0.0/0", "10.7.0.1"), ("::/0", "fd07::1"))),  # the first interface
        (DUAL, ETH0, (("::/0", "fd07::1"),)),  # per family: eth0 had no IPv6 default
        (DUAL, {**ETH0, "::/0": "eth0"}, ()),  # a second interface: none
        (V4, {"::/0": "eth0"}, (("0.0.0.0/0", "10.8.0.1"),)),
        (DUAL.model_copy(update={"internal": True}), {}, ()),  # no way out: no default route
    ],
)
def test_without_routes_asked_only_a_first_interface_gets_default_routes(
    net: Network, have: dict[str, str], routes: tuple[tuple[str, str], ...]
) -> None:
    assert plan_routes(None, net, have) == routes


def test_routes_asked_for_are_installed_as_asked_with_the_networks_gateway_by_default() -> None:
    asked = requested_routes(
        {"routes": [{"dst": "10.99.1.0/16"}, {"dst": "::/0", "gw": "fd07:0::fe"}]}
    )
    assert asked == (("10.99.0.0/16", ""), ("::/0", "fd07::fe"))
    assert plan_routes(asked, DUAL, ETH0) == (("10.99.0.0/16", "10.7.0.1"), ("::/0", "fd07::fe"))
    assert plan_routes((), DUAL, {}) == ()  # "routes": [] asks for none, eth0 or not
    assert plan_routes(requested_routes({"routes": [{"dst": "0.0.0.0/0"}]}), DUAL, {}) == (
        ("0.0.0.0/0", "10.7.0.1"),
    )
    assert requested_routes({"ipam": {"type": "host-local"}}) is None


@pytest.mark.parametrize(
    ("config", "says"),
    [
        ({"routes": {"dst": "0.0.0.0/0"}}, "must be a list"),
        ({"routes": ["0.0.0.0/0"]}, 'each route is {"dst": CIDR}'),
        ({"routes": [{"dst": "10.1.0.0/33"}]}, "dst is not a CIDR"),
        ({"routes": [{"dst": "0.0.0.0/0", "gw": "gateway"}]}, "gw 'gateway' is not an IP"),
        ({"routes": [{"dst": "0.0.0.0/0", "gw": 5}]}, "gw 5 is not an IP"),
        ({"routes": [{"dst": "::/0", "gw": "10.7.0.1"}]}, "is not an IPv6 address"),
        ({"routes": [{"dst": "::/0", "gw": "fd07::1"}, {"dst": "::/0", "gw": "fd07::2"}]}, "twice"),
        ({"ipam": {"routes": [{"dst": "0.0.0.0/0"}]}}, 'put "routes" at the top'),
    ],
)
def test_a_malformed_routes_is_refused_before_anything_is_made(
    config: dict[str, Any], says: str
) -> None:
    with pytest.raises(cni.CniError) as e:
        requested_routes(config)
    assert e.value.code == cni.INVALID_CONFIG and says in e.value.msg


@pytest.mark.parametrize(
    ("routes", "net", "have", "code", "says"),
    [
        ((("::/0", ""),), V4, {}, cni.INVALID_CONFIG, "network default:v4 has no IPv6 subnet"),
        ((("10.9.0.0/16", "10.1.0.1"),), V4, {}, cni.INVALID_CONFIG, "not in network"),
        (
            (("0.0.0.0/0", ""),), V4, ETH0, cni.DATAPATH_FAILURE,
            "route 0.0.0.0/0: the pod has it already via eth0",
        ),
    ],
)  # fmt: skip
def test_routes_the_network_or_the_pod_cannot_take_are_refused(
    routes: tuple[tuple[str, str], ...], net: Network, have: dict[str, str], code: int, says: str
) -> None:
    with pytest.raises(cni.CniError) as e:
        plan_routes(routes, net, have)
    assert e.value.code == code and says in e.value.msg


def test_check_finds_each_route_of_the_result_via_the_interface() -> None:
    table = {
        NetnsRoute("0.0.0.0/0", "10.7.0.1", "eth0"),
        NetnsRoute("::/0", "fd07::1", "eth0"),
        NetnsRoute("10.7.0.0/24", "", "eth0"),
        NetnsRoute("10.99.0.0/16", "10.6.0.1", "net1"),
    }
    assert taken(table, "net1") == {"0.0.0.0/0": "eth0", "::/0": "eth0", "10.7.0.0/24": "eth0"}
    eth0 = {"routes": [{"dst": "0.0.0.0/0", "gw": "10.7.0.1"}, {"dst": "::0/0", "gw": "fd07::1"}]}
    assert absent_routes(eth0, table, "eth0") == []
    assert absent_routes({"routes": [{"dst": "10.99.0.0/16"}]}, table, "net1") == []  # any gw
    assert absent_routes({}, table, "net1") == []
    assert absent_routes(eth0, table, "net1") == ["0.0.0.0/0 via 10.7.0.1", "::/0 via fd07::1"]
