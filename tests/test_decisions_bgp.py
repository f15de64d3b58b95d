"""Bgp objects' decisions (master/decisions/bgp.py): every field checked alone, each refusal
naming the object and the field; one router IP per host; the inspect view."""

from __future__ import annotations

from typing import Any

import pytest

from common.models import Bgp
from common.records import HostRecord
from master.decisions.bgp import MAX_AS, check_router_ip_free, normalize_bgp
from master.decisions.views import BgpSession, bgp_view
from master.errors import BadRequest, Conflict

GOOD = {
    "hostname": "host1",
    "routerip": "50.1.1.1/24",
    "as": "65002",
    "neighbor-as": "500",
    "neighbor": "50.1.1.2",
}


def bgp(**changes: Any) -> Bgp:
    fields = {**GOOD, **{k.replace("_", "-"): v for k, v in changes.items()}}
    return Bgp.model_validate(fields)


def test_a_good_object_is_stored_canonically() -> None:
    b = normalize_bgp(bgp(**{"as": " 065002", "neighbor_as": 500, "routerip": " 50.1.1.1/024"}))
    assert b.dump() == {
        "key": "host1",
        "hostname": "host1",
        "routerip": "50.1.1.1/24",
        "as": "65002",
        "neighbor-as": "500",
        "neighbor": "50.1.1.2",
    }


@pytest.mark.parametrize(
    "changes",
    [
        {"hostname": "node-1.rack2.example.com"},
        {"hostname": "A" * 63},
        {"as": "1", "neighbor_as": str(MAX_AS)},
        {"as": 4200000000, "neighbor_as": 65000},  # 4-byte AS numbers, as JSON numbers too
        {"as": "65000", "neighbor_as": "65000"},  # iBGP
        {"routerip": "50.1.1.1/32"},
        {"routerip": "10.0.0.0/31", "neighbor": "10.0.0.1"},  # a /31 link has no broadcast
        {"neighbor": "192.0.2.1"},  # a router outside the subnet (multi-hop) is the speaker's
    ],
)
def test_accepted(changes: dict[str, Any]) -> None:
    normalize_bgp(bgp(**changes))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        # routerip: IPv4 with a prefix length
        (
            {"routerip": ""},
            "field 'routerip' is required: this host's address on its router's link, with its "
            "prefix length (e.g. 50.1.1.1/24)",
        ),
        (
            {"routerip": "50.1.1.1"},
            "field 'routerip': '50.1.1.1' has no prefix length; give the address with its "
            "subnet's prefix length, e.g. 50.1.1.1/24",
        ),
        (
            {"routerip": "50.1.1.300/24"},
            "field 'routerip': '50.1.1.300/24' is not an IPv4 address with a prefix length "
            "(e.g. 50.1.1.1/24)",
        ),
        (
            {"routerip": "fd00::1/64"},
            "field 'routerip': 'fd00::1/64' is not an IPv4 address with a prefix length "
            "(e.g. 50.1.1.1/24)",
        ),
        ({"routerip": "50.1.1.1/33"}, "field 'routerip': prefix length '33' is not in 1-32"),
        ({"routerip": "50.1.1.1/0"}, "field 'routerip': prefix length '0' is not in 1-32"),
        ({"routerip": "50.1.1.1/x"}, "field 'routerip': prefix length 'x' is not in 1-32"),
        (  # digits of another script are no prefix length
            {"routerip": "50.1.1.1/\uff12\uff14"},
            "field 'routerip': prefix length '\uff12\uff14' is not in 1-32",
        ),
        (
            {"routerip": "50.1.1.0/24"},
            "field 'routerip': 50.1.1.0 is the network address of 50.1.1.0/24; give a host "
            "address in it",
        ),
        (
            {"routerip": "50.1.1.255/24"},
            "field 'routerip': 50.1.1.255 is the broadcast address of 50.1.1.0/24; give a host "
            "address in it",
        ),
        ({"routerip": "127.0.0.2/8"}, "field 'routerip': 127.0.0.2 is a loopback address"),
        ({"routerip": "0.0.0.0/8"}, "field 'routerip': 0.0.0.0 is the unspecified address"),
        ({"routerip": "224.0.0.5/24"}, "field 'routerip': 224.0.0.5 is a multicast address"),
        (
            {"routerip": "250.1.1.1/24"},
            "field 'routerip': 250.1.1.1 is a reserved address (240.0.0.0/4)",
        ),
        # as, neighbor-as: 1-4294967295
        ({"as": ""}, "field 'as' is required: an AS number (1-4294967295)"),
        ({"as": "0"}, "field 'as': AS 0 is out of 1-4294967295"),
        ({"as": 0}, "field 'as': AS 0 is out of 1-4294967295"),
        ({"as": "4294967296"}, "field 'as': AS 4294967296 is out of 1-4294967295"),
        (
            {"as": "-1"},
            "field 'as': '-1' is not an AS number; give 1-4294967295 in decimal",
        ),
        (
            {"as": "1.10"},  # asdot
            "field 'as': '1.10' is not an AS number; give 1-4294967295 in decimal",
        ),
        (
            {"as": "\uff16\uff15\uff10\uff10\uff10"},  # fullwidth 65000
            "field 'as': '\uff16\uff15\uff10\uff10\uff10' is not an AS number; give "
            "1-4294967295 in decimal",
        ),
        ({"neighbor_as": ""}, "field 'neighbor-as' is required: an AS number (1-4294967295)"),
        ({"neighbor_as": "0"}, "field 'neighbor-as': AS 0 is out of 1-4294967295"),
        ({"neighbor_as": 2**32}, "field 'neighbor-as': AS 4294967296 is out of 1-4294967295"),
        (
            {"neighbor_as": "AS65000"},
            "field 'neighbor-as': 'AS65000' is not an AS number; give 1-4294967295 in decimal",
        ),
        # neighbor: the router's bare IPv4 address, not this host's
        (
            {"neighbor": ""},
            "field 'neighbor' is required: the router's IPv4 address (e.g. 50.1.1.2)",
        ),
        (
            {"neighbor": "50.1.1.2/24"},
            "field 'neighbor': '50.1.1.2/24' is not an IPv4 address; give the router's address "
            "without a prefix length (e.g. 50.1.1.2)",
        ),
        (
            {"neighbor": "router1"},
            "field 'neighbor': 'router1' is not an IPv4 address; give the router's address "
            "(e.g. 50.1.1.2)",
        ),
        (
            {"neighbor": "50.1.1.1"},
            "field 'neighbor': 50.1.1.1 is this host's own router IP; give the router's address",
        ),
        (
            {"neighbor": "50.1.1.255"},
            "field 'neighbor': 50.1.1.255 is the broadcast address of 50.1.1.0/24",
        ),
        (
            {"neighbor": "50.1.1.0"},
            "field 'neighbor': 50.1.1.0 is the network address of 50.1.1.0/24",
        ),
        ({"neighbor": "0.0.0.0"}, "field 'neighbor': 0.0.0.0 is the unspecified address"),
        ({"neighbor": "127.0.0.1"}, "field 'neighbor': 127.0.0.1 is a loopback address"),
        ({"neighbor": "239.1.1.1"}, "field 'neighbor': 239.1.1.1 is a multicast address"),
        (
            {"neighbor": "255.255.255.255"},
            "field 'neighbor': 255.255.255.255 is a reserved address (240.0.0.0/4)",
        ),
    ],
)
def test_refused(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadRequest) as e:
        normalize_bgp(bgp(**changes))
    assert (e.value.obj, e.value.reason) == ("bgp host1", reason)


@pytest.mark.parametrize(
    "hostname",
    ["-host", "host-", "a..b", ".a", "a.", "a_b", "a:b", "a b", "A" * 64, "a." * 126 + "ab", ""],
)
def test_a_bad_hostname_is_refused(hostname: str) -> None:
    with pytest.raises(BadRequest) as e:
        normalize_bgp(bgp().model_copy(update={"hostname": hostname}))
    assert e.value.obj == f"bgp {hostname!r}"
    assert e.value.reason.startswith("field 'hostname': invalid; use a host name:")


def test_two_hosts_may_not_share_a_router_ip() -> None:
    one = normalize_bgp(bgp())
    other = normalize_bgp(bgp(hostname="host2", routerip="50.1.1.3/24"))
    check_router_ip_free(one, [one, other])  # its own object is no clash
    same_address = normalize_bgp(bgp(hostname="host3", routerip="50.1.1.3/25"))
    with pytest.raises(Conflict) as e:
        check_router_ip_free(same_address, [one, other])
    assert (e.value.obj, e.value.reason) == (
        "bgp host3",
        "field 'routerip': 50.1.1.3 is already host host2's router IP (50.1.1.3/24); "
        "give each host its own address",
    )
    check_router_ip_free(normalize_bgp(bgp(hostname="host3", routerip="50.1.1.4/24")), [one])


def test_an_ipv6_router_ip_is_optional_and_stored_canonically() -> None:
    assert "routeripv6" not in normalize_bgp(bgp()).dump()  # Contiv's shape without it
    b = normalize_bgp(bgp(routeripv6=" FD00:0:0::0001/064 "))
    assert b.routeripv6 == "fd00::1/64" and b.dump()["routeripv6"] == "fd00::1/64"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("fd00::1", "'fd00::1' has no prefix length; give the address with its subnet's "
         "prefix length, e.g. 2001:db8::1/64"),
        ("50.1.1.1/24", "'50.1.1.1/24' is not an IPv6 address with a prefix length "
         "(e.g. 2001:db8::1/64)"),
        ("fd00::1/129", "prefix length '129' is not in 1-128"),
        ("fd00::1/x", "prefix length 'x' is not in 1-128"),
        ("fe80::1/64", "fe80::1 is link-local: give a global or unique local address"),
        ("ff02::1/64", "ff02::1 is a multicast address"),
        ("::/64", ":: is the unspecified address"),
        ("::1/128", "::1 is the loopback address"),
        ("::ffff:10.0.0.1/96", "::ffff:a00:1 is an IPv4-mapped address"),
    ],
)  # fmt: skip
def test_a_bad_ipv6_router_ip_is_refused(value: str, reason: str) -> None:
    with pytest.raises(BadRequest) as e:
        normalize_bgp(bgp(routeripv6=value))
    assert (e.value.obj, e.value.reason) == ("bgp host1", f"field 'routeripv6': {reason}")


def test_two_hosts_may_not_share_an_ipv6_router_ip() -> None:
    one = normalize_bgp(bgp(routeripv6="fd00::1/64"))
    other = normalize_bgp(bgp(hostname="host2", routerip="50.1.1.3/24"))  # none: no clash
    check_router_ip_free(other, [one, other])
    clash = normalize_bgp(bgp(hostname="host2", routerip="50.1.1.3/24", routeripv6="fd00::1/80"))
    with pytest.raises(Conflict) as e:
        check_router_ip_free(clash, [one])
    assert e.value.reason == (
        "field 'routeripv6': fd00::1 is already host host1's router IP (fd00::1/64); "
        "give each host its own address"
    )


def test_inspect_shows_what_the_cluster_knows_and_nothing_more() -> None:
    b = normalize_bgp(bgp())
    unregistered = bgp_view(b, None, "bridge")
    assert unregistered == {
        "Config": b.dump(),
        "Oper": {"hostRegistered": False, "fwdMode": "bridge"},
    }
    registered = bgp_view(b, HostRecord(host="host1", vtep_ip="192.0.2.1"), "routing")
    assert registered["Oper"] == {"hostRegistered": True, "fwdMode": "routing"}


def test_inspect_shows_a_reported_session() -> None:
    session = BgpSession(
        "Established", ("10.1.0.2/32", "10.1.0.3/32"), {"0.0.0.0/0": "10.200.0.254"}
    )
    view = bgp_view(normalize_bgp(bgp()), None, "routing", session)
    assert view["Oper"] == {
        "hostRegistered": False,
        "fwdMode": "routing",
        "neighborState": "Established",
        "announcedRoutes": ["10.1.0.2/32", "10.1.0.3/32"],
        "learnedRoutes": ["0.0.0.0/0 via 10.200.0.254"],
        "numAnnouncedRoutes": 2,
        "numLearnedRoutes": 1,
    }
