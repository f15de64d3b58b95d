"""Match and set_field values in the canonical form OVS reports them back in: MACs in
lower case, addresses and prefixes normalised, a full mask dropped, integers checked
against their field's width. datapath.flows builds flows from them."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

Match = tuple[tuple[str, Any], ...]

REG_FIELDS = tuple(f"reg{n}" for n in range(16))
_MAC_FIELDS = frozenset({"eth_src", "eth_dst", "arp_sha", "arp_tha", "ipv6_nd_sll", "ipv6_nd_tll"})
_IPV4_FIELDS = frozenset({"ipv4_src", "ipv4_dst", "arp_spa", "arp_tpa"})
_IPV6_FIELDS = frozenset({"ipv6_src", "ipv6_dst", "ipv6_nd_target"})
_INT_FIELD_BITS = {
    **dict.fromkeys(("in_port", "ct_state", "ct_mark", "conj_id", *REG_FIELDS), 32),
    **dict.fromkeys(("metadata", "tunnel_id"), 64),
    **dict.fromkeys(("eth_type", "arp_op", "tcp_src", "tcp_dst", "udp_src", "udp_dst"), 16),
    **dict.fromkeys(("ip_proto", "icmpv4_type", "icmpv4_code", "icmpv6_type", "icmpv6_code"), 8),
    "vlan_vid": 13,
    "vlan_pcp": 3,
    "ip_dscp": 6,
    "ct_zone": 16,
    "ct_label": 128,
}
OFPVID_PRESENT = 0x1000


def _mac(value: Any) -> str:
    text = str(value).strip().lower().replace("-", ":")
    parts = text.split(":")
    if len(parts) != 6 or not all(len(p) in (1, 2) for p in parts):
        raise ValueError(f"{value!r} is not a MAC address (expected aa:bb:cc:dd:ee:ff)")
    return ":".join(f"{int(p, 16):02x}" for p in parts)


def _mac_int(mac: str) -> int:
    return int(mac.replace(":", ""), 16)


def _ip_field(field: str, value: Any, version: int) -> Any:
    cls = ipaddress.IPv4Address if version == 4 else ipaddress.IPv6Address
    full = (1 << (32 if version == 4 else 128)) - 1
    if isinstance(value, tuple):
        addr, mask = str(value[0]), str(value[1])
    elif "/" in str(value):
        addr, mask = str(value).split("/", 1)
    else:
        addr, mask = str(value), ""
    try:
        addr_int = int(cls(addr))
        if not mask:
            mask_int = full
        elif mask.isdigit():
            mask_int = full ^ (full >> int(mask))
        else:
            mask_int = int(cls(mask))
    except ValueError as e:
        raise ValueError(f"{field}: {value!r} is not an IPv{version} address or prefix") from e
    if mask_int == full:
        return str(cls(addr_int))
    return (str(cls(addr_int & mask_int)), str(cls(mask_int)))


def _int_field(field: str, value: Any) -> Any:
    bits = _INT_FIELD_BITS.get(field, 64)
    full = (1 << bits) - 1
    if isinstance(value, tuple):
        val, mask = (int(v) for v in value)
        if mask & full == full:
            return val & full
        return (val & mask, mask)
    number = int(value)
    if not 0 <= number <= full:
        raise ValueError(f"{field}: {number:#x} does not fit in {bits} bits")
    return number


def canonical_value(field: str, value: Any) -> Any:
    """Normalise one match or set_field value the way OVS reports it back."""
    if field in _MAC_FIELDS:
        if isinstance(value, tuple):
            mac, mask = _mac(value[0]), _mac(value[1])
            if mask == "ff:ff:ff:ff:ff:ff":
                return mac
            masked = _mac_int(mac) & _mac_int(mask)
            return (_mac(":".join(f"{b:02x}" for b in masked.to_bytes(6, "big"))), mask)
        return _mac(value)
    if field in _IPV4_FIELDS:
        return _ip_field(field, value, 4)
    if field in _IPV6_FIELDS:
        return _ip_field(field, value, 6)
    return _int_field(field, value)


def canonical_match(match: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> Match:
    """A match as a tuple of (field, value) sorted by field name, values normalised."""
    items = match.items() if isinstance(match, Mapping) else match
    result = {}
    for field, value in items:
        if field in result:
            raise ValueError(f"match field {field} given twice")
        result[field] = canonical_value(field, value)
    return tuple(sorted(result.items()))
