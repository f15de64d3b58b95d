"""The pure rules of netprofiles and service LBs: Contiv's bandwidth strings, port and
selector spellings, and which endpoints provide a service."""

from __future__ import annotations

import pytest

from common.models import Endpoint, ServiceLB
from common.profiles import bandwidth_kbps, spell_kbps
from common.services import group_ids, matches, parse_port, parse_selector, providers


@pytest.mark.parametrize(
    ("text", "kbps"),
    [
        ("", 0),
        ("10kbps", 10),
        ("10 Kbps", 10),
        ("100mbps", 100_000),
        ("1gbps", 1_000_000),
        ("1GBPS", 1_000_000),
        ("5000bps", 5),
        ("1000bps", 1),
    ],
)
def test_contiv_bandwidths(text: str, kbps: int) -> None:
    assert bandwidth_kbps(text) == kbps


@pytest.mark.parametrize(
    "text", ["10", "10mb", "mbps", "-5mbps", "1.5mbps", "0kbps", "999bps", "1500bps"]
)
def test_what_is_not_a_bandwidth(text: str) -> None:
    with pytest.raises(ValueError):
        bandwidth_kbps(text)


def test_rates_are_spelled_in_the_largest_whole_unit() -> None:
    assert [spell_kbps(k) for k in (10, 1000, 1500, 2_000_000)] == [
        "10kbps",
        "1mbps",
        "1500kbps",
        "2gbps",
    ]


def test_port_specs() -> None:
    p = parse_port("80:8080:tcp")
    assert (p.service, p.provider, p.protocol, p.ip_proto, p.spec) == (
        80,
        8080,
        "TCP",
        6,
        "80:8080:TCP",
    )
    assert parse_port("53:5353:UDP").ip_proto == 17
    assert parse_port("443:8443").protocol == "TCP"
    for bad in ("80", "80:8080:TCP:x", "0:80:TCP", "80:65536:TCP", "a:b:TCP", "80:80:ICMP"):
        with pytest.raises(ValueError):
            parse_port(bad)


def test_selectors() -> None:
    assert parse_selector(" app = web ") == ("app", "web")
    assert parse_selector("io.contiv/tier=") == ("io.contiv/tier", "")
    for bad in ("app", "=web", "-app=web", "a b=c"):
        with pytest.raises(ValueError):
            parse_selector(bad)
    assert matches({"app": "web", "x": "y"}, {"app": "web"})
    assert not matches({"app": "web"}, {"app": "web", "tier": "front"})
    assert not matches({"app": "web"}, {})  # no selector selects nothing


def ep(
    eid: str, ip: str, labels: dict[str, str], network: str = "n", tenant: str = "t"
) -> Endpoint:
    return Endpoint(
        endpointID=eid, tenantName=tenant, networkName=network, ipAddress=ip, labels=labels
    )


def test_providers_match_every_selector_on_the_services_network_only() -> None:
    svc = ServiceLB(
        tenantName="t", serviceName="s", networkName="n", selectors=["app=web"], ports=["80:80"]
    )
    eps = [
        ep("a", "10.0.0.10", {"app": "web"}),
        ep("b", "10.0.0.9", {"app": "web", "v": "2"}),
        ep("c", "10.0.0.8", {"app": "db"}),
        ep("d", "10.0.0.7", {"app": "web"}, network="other"),
        ep("e", "10.0.0.6", {"app": "web"}, tenant="u"),
        ep("f", "", {"app": "web"}),  # no IPv4 address: the VIP cannot reach it
    ]
    assert [e.endpointID for e in providers(svc, eps)] == ["b", "a"]  # by address


def test_a_services_groups_are_named_by_its_tag() -> None:
    assert list(group_ids(3, 2)) == [48, 49]
    assert set(group_ids(3, 16)).isdisjoint(group_ids(4, 16))
