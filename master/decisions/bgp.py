"""Bgp objects (one host's peering with its router): their fields checked alone, and the
guard that no two hosts claim one router IP.

Contiv's fields and spellings: ``routerip`` is the host's address on the router's link
WITH its prefix length ("50.1.1.1/24"), ``as`` and ``neighbor-as`` are AS numbers
(1-4294967295, sent as strings or numbers), ``neighbor`` the router's bare address. The
router need not be inside the router IP's subnet (a multi-hop session is the speaker's
business), but it cannot be the host's own address. ``routeripv6`` (optional, not Contiv's) is the
host's IPv6 address on the same link, with its prefix length: the next hop of the /128s it
announces (an IPv4 next hop cannot carry them).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from common.models import Bgp

from ..errors import BadRequest, Conflict

MAX_AS = 4294967295  # 4-byte AS numbers (RFC 6793)
MAX_HOSTNAME = 253
HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
HOSTNAME_RULE = (
    "a host name: dot-separated labels of 1-63 letters, digits or '-', not starting or "
    "ending with '-' (253 characters at most)"
)
ROUTER_IP_EXAMPLE = "50.1.1.1/24"
ROUTER_IPV6_EXAMPLE = "2001:db8::1/64"


def _obj(b: Bgp) -> str:
    return f"bgp {b.hostname}"


def check_hostname(hostname: str) -> str:
    """A host's name as the cluster knows it (an agent's --host), refused naming the field."""
    labels = hostname.split(".") if hostname else [""]
    if len(hostname) > MAX_HOSTNAME or not all(HOST_LABEL_RE.match(x) for x in labels):
        raise BadRequest(f"bgp {hostname!r}", f"field 'hostname': invalid; use {HOSTNAME_RULE}")
    return hostname


def _unusable(ip: ipaddress.IPv4Address) -> str:
    """Why ``ip`` can be no host's or router's address ("" if it can be one)."""
    if ip.is_unspecified:
        return "is the unspecified address"
    if ip.is_loopback:
        return "is a loopback address"
    if ip.is_multicast:
        return "is a multicast address"
    if ip.is_reserved:
        return "is a reserved address (240.0.0.0/4)"
    return ""


def _with_prefix(
    obj: str, field: str, value: str, version: int, example: str
) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """An address of IP ``version`` with its prefix length, each failure naming ``field``."""
    address, slash, prefix = value.strip().partition("/")
    if not slash:
        raise BadRequest(
            obj,
            f"{field}: {value!r} has no prefix length; give the address with its subnet's "
            f"prefix length, e.g. {example}",
        )
    try:
        ip = ipaddress.ip_address(address)
        if ip.version != version:
            raise ValueError(address)
    except ValueError:
        raise BadRequest(
            obj,
            f"{field}: {value!r} is not an IPv{version} address with a prefix length "
            f"(e.g. {example})",
        ) from None
    bits = ip.max_prefixlen
    if not (prefix.isascii() and prefix.isdigit()) or not 1 <= int(prefix) <= bits:
        raise BadRequest(obj, f"{field}: prefix length {prefix!r} is not in 1-{bits}")
    return ipaddress.ip_interface(f"{ip}/{int(prefix)}")


def parse_router_ip(obj: str, value: str) -> ipaddress.IPv4Interface:
    """``routerip``: an IPv4 address with its prefix length, the host's own on the link."""
    field = "field 'routerip'"
    if not value.strip():
        raise BadRequest(
            obj,
            f"{field} is required: this host's address on its router's link, with its "
            f"prefix length (e.g. {ROUTER_IP_EXAMPLE})",
        )
    iface = _with_prefix(obj, field, value, 4, ROUTER_IP_EXAMPLE)
    assert isinstance(iface, ipaddress.IPv4Interface)
    ip, net = iface.ip, iface.network
    if why := _unusable(ip):
        raise BadRequest(obj, f"{field}: {ip} {why}")
    if net.prefixlen <= 30 and ip in (net.network_address, net.broadcast_address):
        which = "network" if ip == net.network_address else "broadcast"
        raise BadRequest(
            obj, f"{field}: {ip} is the {which} address of {net}; give a host address in it"
        )
    return iface


def parse_router_ipv6(obj: str, value: str) -> ipaddress.IPv6Interface | None:
    """``routeripv6``: an IPv6 address with its prefix length, or nothing."""
    field = "field 'routeripv6'"
    if not value.strip():
        return None
    iface = _with_prefix(obj, field, value, 6, ROUTER_IPV6_EXAMPLE)
    assert isinstance(iface, ipaddress.IPv6Interface)
    ip = iface.ip
    why = (
        "is the unspecified address" if ip.is_unspecified
        else "is the loopback address" if ip.is_loopback
        else "is a multicast address" if ip.is_multicast
        else "is link-local: give a global or unique local address" if ip.is_link_local
        else "is an IPv4-mapped address" if ip.ipv4_mapped is not None
        else ""
    )  # fmt: skip
    if why:
        raise BadRequest(obj, f"{field}: {ip} {why}")
    return iface


def parse_as(obj: str, field: str, value: str) -> int:
    """An AS number, 1-4294967295, given as decimal digits."""
    text = value.strip()
    if not text:
        raise BadRequest(obj, f"field {field!r} is required: an AS number (1-{MAX_AS})")
    if not text.isascii() or not text.isdigit():
        raise BadRequest(
            obj, f"field {field!r}: {value!r} is not an AS number; give 1-{MAX_AS} in decimal"
        )
    number = int(text)
    if not 1 <= number <= MAX_AS:
        raise BadRequest(obj, f"field {field!r}: AS {number} is out of 1-{MAX_AS}")
    return number


def parse_neighbor(obj: str, value: str, router: ipaddress.IPv4Interface) -> ipaddress.IPv4Address:
    """``neighbor``: the router's IPv4 address, bare, and not this host's own."""
    field = "field 'neighbor'"
    text = value.strip()
    if not text:
        raise BadRequest(obj, f"{field} is required: the router's IPv4 address (e.g. 50.1.1.2)")
    try:
        ip = ipaddress.IPv4Address(text)
    except ValueError:
        hint = " without a prefix length" if "/" in text else ""
        raise BadRequest(
            obj,
            f"{field}: {value!r} is not an IPv4 address; give the router's address{hint} "
            "(e.g. 50.1.1.2)",
        ) from None
    if why := _unusable(ip):
        raise BadRequest(obj, f"{field}: {ip} {why}")
    if ip == router.ip:
        raise BadRequest(
            obj, f"{field}: {ip} is this host's own router IP; give the router's address"
        )
    net = router.network
    if net.prefixlen <= 30 and ip in (net.network_address, net.broadcast_address):
        which = "network" if ip == net.network_address else "broadcast"
        raise BadRequest(obj, f"{field}: {ip} is the {which} address of {net}")
    return ip


def normalize_bgp(b: Bgp) -> Bgp:
    """Check a Bgp object's fields, each failure a 400 naming it; the object as stored
    (the router IP as ipaddress spells it, AS numbers in plain decimal)."""
    check_hostname(b.hostname)
    obj = _obj(b)
    router = parse_router_ip(obj, b.routerip)
    local_as = parse_as(obj, "as", b.as_)
    neighbor_as = parse_as(obj, "neighbor-as", b.neighbor_as)
    neighbor = parse_neighbor(obj, b.neighbor, router)
    router6 = parse_router_ipv6(obj, b.routeripv6)
    return b.model_copy(
        update={
            "routerip": str(router),
            "routeripv6": str(router6) if router6 else "",
            "as_": str(local_as),
            "neighbor_as": str(neighbor_as),
            "neighbor": str(neighbor),
        }
    )


def router_address(b: Bgp) -> str:
    """The address of a stored (normalized) object's router IP, without its prefix length."""
    return b.routerip.split("/", 1)[0]


def router_address6(b: Bgp) -> str:
    """The address of a stored object's IPv6 router IP ("" without one)."""
    return b.routeripv6.split("/", 1)[0]


def check_router_ip_free(b: Bgp, others: Iterable[Bgp]) -> None:
    """No other host peers from the same address, IPv4 or IPv6 (``others``: every stored
    Bgp object; the host's own is skipped). Two hosts with one address would each answer
    for the other's routes on the router's link."""
    for field, address in (("routerip", router_address), ("routeripv6", router_address6)):
        mine = address(b)
        for other in others:
            if mine and other.hostname != b.hostname and address(other) == mine:
                raise Conflict(
                    _obj(b),
                    f"field {field!r}: {mine} is already host {other.hostname}'s router IP "
                    f"({getattr(other, field)}); give each host its own address",
                )
