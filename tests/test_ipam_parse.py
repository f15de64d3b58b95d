"""Parsing and validation of subnets, addresses and ranges."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest

from ipam import (
    InvalidAddress,
    InvalidCidr,
    InvalidRange,
    format_range,
    parse_address,
    parse_network,
    parse_range,
    usable_bounds,
)


def ip(s: str) -> int:
    return int(ip_address(s))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.1.0.0/24", "10.1.0.0/24"),
        (" 10.1.0.0/24\n", "10.1.0.0/24"),
        ("0.0.0.0/0", "0.0.0.0/0"),
        ("10.1.0.6/31", "10.1.0.6/31"),
        ("10.1.0.7/32", "10.1.0.7/32"),
        ("fd00:1::/64", "fd00:1::/64"),
        ("FD00:1:0::/64", "fd00:1::/64"),
        ("fd00::6/127", "fd00::6/127"),
        ("fd00::7/128", "fd00::7/128"),
    ],
)
def test_parse_network_ok(text: str, expected: str) -> None:
    assert parse_network(text) == ip_network(expected)


@pytest.mark.parametrize(
    ("text", "version", "fragment"),
    [
        ("10.1.0.0/33", None, "prefix length 33 is out of range for IPv4 (0-32)"),
        ("fd00::/129", None, "prefix length 129 is out of range for IPv6 (0-128)"),
        ("10.1.0.5/24", None, "host bits are set (did you mean 10.1.0.0/24?)"),
        ("fd00::1/64", None, "did you mean fd00::/64?"),
        ("10.1.0.0", None, "missing /prefix-length"),
        ("", None, "empty value"),
        ("garbage", None, "missing /prefix-length"),
        ("garbage/24", None, "'garbage' is not an IPv4 or IPv6 address"),
        ("10.1.0/24", None, "is not an IPv4 or IPv6 address"),
        ("10.1.0.0/24/5", None, "prefix length '24/5' is not a number"),
        ("10.1.0.0/", None, "prefix length '' is not a number"),
        ("10.1.0.0/-1", None, "is not a number"),
        ("10.1.0.0/255.255.255.0", None, "is not a number"),
        ("010.1.0.0/24", None, "is not an IPv4 or IPv6 address"),
        ("fe80::%eth0/64", None, "zone/scope ids"),
        ("10.1.0.0/24", 6, "expected an IPv6 network, got IPv4"),
        ("fd00::/64", 4, "expected an IPv4 network, got IPv6"),
    ],
)
def test_parse_network_errors(text: str, version: int | None, fragment: str) -> None:
    with pytest.raises(InvalidCidr) as exc:
        parse_network(text, "subnet", version)
    message = str(exc.value)
    assert fragment in message
    assert message.startswith("subnet ")
    assert exc.value.what == "subnet"


def test_parse_network_names_field_and_rejects_non_strings() -> None:
    with pytest.raises(InvalidCidr, match=r"^ipv6-subnet 10\.0\.0\.0/8 is not a valid CIDR"):
        parse_network("10.0.0.0/8", "ipv6-subnet", 6)
    with pytest.raises(InvalidCidr, match="expected a string"):
        parse_network(None, "subnet")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="IP version"):
        parse_network("10.0.0.0/8", version=5)


def test_parse_network_passes_network_objects() -> None:
    net = ip_network("10.0.0.0/8")
    assert parse_network(net) is net  # type: ignore[arg-type]
    with pytest.raises(InvalidCidr, match="expected an IPv6 network"):
        parse_network(net, version=6)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "version", "expected"),
    [
        ("10.1.0.5", None, IPv4Address("10.1.0.5")),
        ("10.1.0.5/24", 4, IPv4Address("10.1.0.5")),
        ("10.1.0.0/24", None, IPv4Address("10.1.0.0")),
        ("fd00::5", 6, IPv6Address("fd00::5")),
        ("fd00::5/64", None, IPv6Address("fd00::5")),
        ("::ffff:10.0.0.1", 6, IPv6Address("::ffff:10.0.0.1")),
    ],
)
def test_parse_address_ok(text: str, version: int | None, expected: object) -> None:
    assert parse_address(text, "address", version) == expected


@pytest.mark.parametrize(
    ("text", "version", "fragment"),
    [
        ("10.1.0.300", None, "'10.1.0.300' is not an IPv4 or IPv6 address"),
        ("", None, "empty value"),
        ("10.1.0.5/33", None, "prefix length 33 is out of range"),
        ("10.1.0.5/x", None, "is not a number"),
        ("10.1.0.5", 6, "expected an IPv6 address, got IPv4"),
        ("fd00::1", 4, "expected an IPv4 address, got IPv6"),
        ("fe80::1%eth0", None, "zone/scope ids"),
        ("hello", 4, "'hello' is not an IPv4 address"),
    ],
)
def test_parse_address_errors(text: str, version: int | None, fragment: str) -> None:
    with pytest.raises(InvalidAddress) as exc:
        parse_address(text, "gateway", version)
    assert fragment in str(exc.value)
    assert str(exc.value).startswith("gateway ")


@pytest.mark.parametrize(
    ("net", "lo", "hi"),
    [
        ("10.1.0.0/24", "10.1.0.1", "10.1.0.254"),
        ("10.1.0.0/30", "10.1.0.1", "10.1.0.2"),
        ("10.1.0.4/31", "10.1.0.4", "10.1.0.5"),
        ("10.1.0.7/32", "10.1.0.7", "10.1.0.7"),
        ("10.0.0.0/8", "10.0.0.1", "10.255.255.254"),
        ("fd00::/64", "fd00::1", "fd00::ffff:ffff:ffff:ffff"),
        ("fd00::/126", "fd00::1", "fd00::3"),
        ("fd00::6/127", "fd00::6", "fd00::7"),
        ("fd00::7/128", "fd00::7", "fd00::7"),
    ],
)
def test_usable_bounds(net: str, lo: str, hi: str) -> None:
    assert usable_bounds(ip_network(net)) == (ip(lo), ip(hi))


NET16 = ip_network("10.1.0.0/16")


@pytest.mark.parametrize(
    ("text", "lo", "hi"),
    [
        ("10.1.1.10-10.1.1.20", "10.1.1.10", "10.1.1.20"),
        (" 10.1.1.10 - 10.1.1.20 ", "10.1.1.10", "10.1.1.20"),
        ("10.1.1.10-10.1.1.10", "10.1.1.10", "10.1.1.10"),
        ("10.1.0.1-10.1.255.254", "10.1.0.1", "10.1.255.254"),
        # A sub-CIDR keeps all its addresses: only the subnet's own ends are clipped.
        ("10.1.1.0/28", "10.1.1.0", "10.1.1.15"),
        ("10.1.0.0/28", "10.1.0.1", "10.1.0.15"),
        ("10.1.255.240/28", "10.1.255.240", "10.1.255.254"),
        ("10.1.0.0/16", "10.1.0.1", "10.1.255.254"),
        ("10.1.1.7/32", "10.1.1.7", "10.1.1.7"),
    ],
)
def test_parse_range_ok(text: str, lo: str, hi: str) -> None:
    assert parse_range(text, NET16) == (ip(lo), ip(hi))


def test_parse_range_v6() -> None:
    net = ip_network("fd00:1::/64")
    assert parse_range("fd00:1::10-fd00:1::20", net) == (ip("fd00:1::10"), ip("fd00:1::20"))
    assert parse_range("fd00:1::/120", net) == (ip("fd00:1::1"), ip("fd00:1::ff"))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("10.1.1.20-10.1.1.10", "start 10.1.1.20 is after end 10.1.1.10"),
        ("10.1.1.10", "expected START-END (e.g. 10.1.1.10-10.1.1.20) or a CIDR"),
        ("", "empty value"),
        ("10.2.0.1-10.2.0.9", "start 10.2.0.1 is outside the usable addresses"),
        ("10.1.0.0-10.1.0.9", "start 10.1.0.0 is outside the usable addresses 10.1.0.1-"),
        ("10.1.0.1-10.1.255.255", "end 10.1.255.255 is outside the usable addresses"),
        ("10.1.0.1-bogus", "end: 'bogus' is not an IPv4 address"),
        ("fd00::1-fd00::2", "start: expected an IPv4 address, got IPv6"),
        ("10.1.1.5/28", "host bits are set (did you mean 10.1.1.0/28?)"),
        ("10.2.0.0/24", "not inside subnet 10.1.0.0/16"),
        ("10.0.0.0/8", "not inside subnet 10.1.0.0/16"),
        ("10.1.0.0/33", "prefix length 33 is out of range"),
        ("fd00::/64", "expected an IPv4 network, got IPv6"),
    ],
)
def test_parse_range_errors(text: str, fragment: str) -> None:
    with pytest.raises(InvalidRange) as exc:
        parse_range(text, NET16, "ip-pool")
    assert fragment in str(exc.value)
    assert str(exc.value).startswith("ip-pool ")


def test_parse_range_cidr_with_no_usable_address() -> None:
    with pytest.raises(InvalidRange, match="contains none of the usable addresses"):
        parse_range("10.1.0.0/32", NET16, "ip-range")


def test_format_range() -> None:
    assert format_range(ip("10.0.0.1"), ip("10.0.0.9"), 4) == "10.0.0.1-10.0.0.9"
    assert format_range(ip("10.0.0.1"), ip("10.0.0.1"), 4) == "10.0.0.1"
    assert format_range(ip("fd00::1"), ip("fd00::2"), 6) == "fd00::1-fd00::2"
