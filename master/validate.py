"""The control plane's rules for objects: names, addressing, tag ranges, request bodies.

Pure functions: each raises BadRequest naming the object and the reason, or returns the
normalised object.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from common.models import (
    MAX_VLAN,
    MAX_VXLAN,
    NAME_RE,
    NAME_RULE,
    EndpointGroup,
    GlobalSettings,
    Network,
)
from ipam import parse_address, parse_network, parse_range
from ipam.errors import IpamError
from ipam.parse import usable_bounds

from .errors import BadRequest

M = TypeVar("M", bound=BaseModel)


def check_name(kind: str, value: str) -> str:
    if not NAME_RE.match(value or ""):
        raise BadRequest(f"{kind} {value!r}", f"invalid name; use {NAME_RULE}")
    return value


def parse_body(model: type[M], body: Any, obj: str) -> M:
    """Validate a JSON body into ``model``; a failure names ``obj`` and each bad field."""
    if not isinstance(body, dict):
        raise BadRequest(obj, "request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = ".".join(str(p) for p in err["loc"]) or "body"
            msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
            problems.append(f"field {field!r}: {msg}")
        raise BadRequest(obj, "; ".join(problems)) from None


def parse_tag_range(value: str, what: str, limit: int) -> tuple[int, int]:
    """Contiv ranges are "lo-hi" (a single number is accepted too)."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value or "")
    if not m:
        raise BadRequest(f"global {what}", f"{value!r} is not a range like 1-4094")
    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
    if not 1 <= lo <= hi <= limit:
        raise BadRequest(
            f"global {what}", f"range {value!r} must satisfy 1 <= start <= end <= {limit}"
        )
    return lo, hi


def validate_global(g: GlobalSettings) -> None:
    parse_tag_range(g.vlans, "vlans", MAX_VLAN)
    parse_tag_range(g.vxlans, "vxlans", MAX_VXLAN)
    try:
        parse_network(g.pvtSubnet, "pvtSubnet", version=4)
    except IpamError as e:
        raise BadRequest("global", str(e)) from None


def tag_range(g: GlobalSettings, encap: str) -> tuple[int, int]:
    if encap == "vlan":
        return parse_tag_range(g.vlans, "vlans", MAX_VLAN)
    return parse_tag_range(g.vxlans, "vxlans", MAX_VXLAN)


def normalize_network(n: Network) -> Network:
    """Validate the addressing of ``n`` and fill defaults (gateway = first usable address)."""
    obj = f"network {n.id}"
    check_name("tenant", n.tenantName)
    check_name("network", n.networkName)
    if n.encap == "vlan" and n.pktTag > MAX_VLAN:
        raise BadRequest(obj, f"pkt-tag {n.pktTag} is not a valid VLAN id (1-{MAX_VLAN})")
    if not n.subnet and not n.ipv6Subnet:
        raise BadRequest(obj, "a subnet is required (e.g. -s 10.1.1.0/24)")
    update: dict[str, str] = {}
    try:
        if n.subnet:
            net4 = parse_network(n.subnet, "subnet", version=4)
            update["subnet"] = str(net4)
            gw = _gateway(obj, n.gateway, net4, "gateway")
            update["gateway"] = str(gw) if gw else ""
        elif n.gateway:
            raise BadRequest(obj, "gateway given without a subnet")
        if n.ipv6Subnet:
            net6 = parse_network(n.ipv6Subnet, "ipv6-subnet", version=6)
            update["ipv6Subnet"] = str(net6)
            gw6 = _gateway(obj, n.ipv6Gateway, net6, "ipv6-gateway")
            update["ipv6Gateway"] = str(gw6) if gw6 else ""
        elif n.ipv6Gateway:
            raise BadRequest(obj, "ipv6-gateway given without an ipv6-subnet")
    except IpamError as e:
        raise BadRequest(obj, str(e)) from None
    return n.model_copy(update=update)


def _gateway(obj: str, value: str, net: Any, what: str) -> Any:
    lo, hi = usable_bounds(net)
    if not value:
        return ipaddress.ip_address(lo)
    gw = parse_address(value, what, version=net.version)
    if not lo <= int(gw) <= hi:
        raise BadRequest(obj, f"{what} {gw} is not a usable address of {net}")
    return gw


def normalize_group(g: EndpointGroup, net: Network) -> EndpointGroup:
    """Validate ``g`` against its network: the ip-pool must lie inside the network's subnet."""
    obj = f"endpoint group {g.id}"
    check_name("endpoint group", g.groupName)
    if not g.ipPool:
        return g
    if not net.subnet:
        raise BadRequest(obj, f"ip-pool given but network {net.id} has no IPv4 subnet")
    try:
        lo, hi = parse_range(g.ipPool, parse_network(net.subnet, "subnet"), "ip-pool")
    except IpamError as e:
        raise BadRequest(obj, str(e)) from None
    return g.model_copy(update={"ipPool": f"{ipaddress.ip_address(lo)}-{ipaddress.ip_address(hi)}"})
