"""Pure parsing and validation of subnets, addresses and address ranges."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

from ipam.errors import InvalidAddress, InvalidCidr, InvalidRange

Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address

_EXAMPLE_CIDR = {4: "10.1.0.0/24", 6: "fd00:1::/64", None: "10.1.0.0/24"}


def _check_version(version: int | None) -> None:
    """Reject a version argument other than None, 4 or 6 (a programming error)."""
    if version not in (None, 4, 6):
        raise ValueError(f"IP version must be 4, 6 or None, not {version!r}")


def _family(version: int | None) -> str:
    """'IPv4', 'IPv6' or 'IPv4 or IPv6'."""
    return f"IPv{version}" if version else "IPv4 or IPv6"


def _plain_address(text: str, version: int | None) -> Address | str:
    """Parse a bare address; on failure return the reason instead of raising."""
    if "%" in text:
        return "zone/scope ids (%...) are not allowed"
    try:
        addr = ip_address(text)
    except ValueError:
        return f"{text!r} is not an {_family(version)} address" if text else "empty address"
    if version is not None and addr.version != version:
        return f"expected an IPv{version} address, got IPv{addr.version}"
    return addr


def _prefixlen(text: str, max_prefixlen: int, version: int) -> int | str:
    """Parse a decimal prefix length; on failure return the reason instead of raising."""
    if not (text.isascii() and text.isdigit()) or len(text) > 3:
        return f"prefix length {text!r} is not a number 0-{max_prefixlen}"
    plen = int(text)
    if plen > max_prefixlen:
        return f"prefix length {plen} is out of range for IPv{version} (0-{max_prefixlen})"
    return plen


def parse_network(value: str, what: str = "subnet", version: int | None = None) -> Network:
    """Parse a strict CIDR (no host bits) such as 10.1.0.0/24 or fd00::/64."""
    _check_version(version)
    if isinstance(value, IPv4Network | IPv6Network):
        if version is not None and value.version != version:
            raise InvalidCidr(what, str(value), f"expected an IPv{version} network")
        return value
    if not isinstance(value, str):
        raise InvalidCidr(what, repr(value), f"expected a string like {_EXAMPLE_CIDR[version]}")
    text = value.strip()
    if not text:
        raise InvalidCidr(what, value, f"empty value (expected e.g. {_EXAMPLE_CIDR[version]})")
    addr_text, sep, plen_text = text.partition("/")
    if not sep:
        raise InvalidCidr(
            what, value, f"missing /prefix-length (expected e.g. {_EXAMPLE_CIDR[version]})"
        )
    addr = _plain_address(addr_text, None)
    if isinstance(addr, str):
        raise InvalidCidr(what, value, addr)
    if version is not None and addr.version != version:
        raise InvalidCidr(what, value, f"expected an IPv{version} network, got IPv{addr.version}")
    plen = _prefixlen(plen_text, addr.max_prefixlen, addr.version)
    if isinstance(plen, str):
        raise InvalidCidr(what, value, plen)
    net_cls = IPv4Network if addr.version == 4 else IPv6Network
    net = net_cls((int(addr), plen), strict=False)
    if net.network_address != addr:
        raise InvalidCidr(what, value, f"host bits are set (did you mean {net}?)")
    return net


def parse_address(value: str, what: str, version: int | None = None) -> Address:
    """Parse an address, also accepting Docker's "a.b.c.d/len" form (the prefix is dropped)."""
    _check_version(version)
    if isinstance(value, IPv4Address | IPv6Address):
        if version is not None and value.version != version:
            raise InvalidAddress(what, str(value), f"expected an IPv{version} address")
        return value
    if not isinstance(value, str):
        raise InvalidAddress(what, repr(value), f"expected a string like {_example_addr(version)}")
    text = value.strip()
    if not text:
        raise InvalidAddress(what, value, f"empty value (expected e.g. {_example_addr(version)})")
    addr_text, sep, plen_text = text.partition("/")
    addr = _plain_address(addr_text, version)
    if isinstance(addr, str):
        raise InvalidAddress(what, value, addr)
    if sep:
        plen = _prefixlen(plen_text, addr.max_prefixlen, addr.version)
        if isinstance(plen, str):
            raise InvalidAddress(what, value, plen)
    return addr


def _example_addr(version: int | None) -> str:
    """An example address of the given family for messages."""
    return "fd00:1::5" if version == 6 else "10.1.0.5"


def usable_bounds(network: Network) -> tuple[int, int]:
    """First and last assignable address of a network, as integers.

    IPv4 excludes the network and broadcast addresses except on /31 and /32 (RFC 3021);
    IPv6 excludes only the subnet-router anycast (network) address except on /127 and /128
    (RFC 6164).
    """
    first = int(network.network_address)
    last = int(network.broadcast_address)
    if network.version == 4:
        return (first, last) if network.prefixlen >= 31 else (first + 1, last - 1)
    return (first, last) if network.prefixlen >= 127 else (first + 1, last)


def int_to_address(value: int, version: int) -> Address:
    """The address object of an integer in the given family."""
    return IPv4Address(value) if version == 4 else IPv6Address(value)


def format_range(lo: int, hi: int, version: int) -> str:
    """Render an inclusive integer range as "a-b" (or "a" when lo == hi)."""
    first = int_to_address(lo, version)
    return str(first) if lo == hi else f"{first}-{int_to_address(hi, version)}"


def parse_range(value: str, network: Network, what: str = "ip-pool") -> tuple[int, int]:
    """Parse "START-END" (inclusive) or a CIDR into absolute ints inside network's usable bounds.

    A CIDR means all of its addresses clipped to the network's usable bounds (Docker's
    --ip-range semantics: 10.1.1.0 is assignable from 10.1.1.0/28 inside 10.1.0.0/16, but the
    subnet's own network/broadcast addresses never are).
    """
    if not isinstance(value, str):
        raise InvalidRange(what, repr(value), "expected START-END or a CIDR")
    text = value.strip()
    version = network.version
    lo_u, hi_u = usable_bounds(network)
    usable = f"usable addresses {format_range(lo_u, hi_u, version)} of subnet {network}"
    if not text:
        raise InvalidRange(what, value, "empty value (expected START-END or a CIDR)")
    if "/" in text:
        try:
            sub = parse_network(text, what, version)
        except InvalidCidr as e:
            raise InvalidRange(what, value, e.reason) from None
        if not sub.subnet_of(network):  # type: ignore[arg-type]
            raise InvalidRange(what, value, f"not inside subnet {network}")
        lo = max(int(sub.network_address), lo_u)
        hi = min(int(sub.broadcast_address), hi_u)
        if lo > hi:
            raise InvalidRange(what, value, f"contains none of the {usable}")
        return lo, hi
    start_text, sep, end_text = text.partition("-")
    if not sep:
        example = "fd00:1::10-fd00:1::20" if version == 6 else "10.1.1.10-10.1.1.20"
        raise InvalidRange(what, value, f"expected START-END (e.g. {example}) or a CIDR")
    bounds: list[int] = []
    for label, part in (("start", start_text.strip()), ("end", end_text.strip())):
        addr = _plain_address(part, version)
        if isinstance(addr, str):
            raise InvalidRange(what, value, f"{label}: {addr}")
        n = int(addr)
        if not lo_u <= n <= hi_u:
            raise InvalidRange(what, value, f"{label} {addr} is outside the {usable}")
        bounds.append(n)
    lo, hi = bounds
    if lo > hi:
        raise InvalidRange(
            what,
            value,
            f"start {int_to_address(lo, version)} is after end {int_to_address(hi, version)}",
        )
    return lo, hi
