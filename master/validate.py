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
    Rule,
)
from ipam import check_ownable, parse_address, parse_network, parse_range
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
            net4 = check_ownable(parse_network(n.subnet, "subnet", version=4))
            update["subnet"] = str(net4)
            gw = _gateway(obj, n.gateway, net4, "gateway")
            update["gateway"] = str(gw) if gw else ""
        elif n.gateway:
            raise BadRequest(obj, "gateway given without a subnet")
        if n.ipv6Subnet:
            net6 = check_ownable(
                parse_network(n.ipv6Subnet, "ipv6-subnet", version=6), "ipv6-subnet"
            )
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
    """Validate ``g`` against its network: the ip-pool must lie inside the network's subnet.
    Its policies are names, each once (the first mention keeps its place)."""
    obj = f"endpoint group {g.id}"
    check_name("endpoint group", g.groupName)
    for p in g.policies:
        if not NAME_RE.match(p):
            raise BadRequest(obj, f"field 'policies': {p!r} is not a policy name; use {NAME_RULE}")
    if len(set(g.policies)) != len(g.policies):
        g = g.model_copy(update={"policies": list(dict.fromkeys(g.policies))})
    if not g.ipPool:
        return g
    if not net.subnet:
        raise BadRequest(obj, f"ip-pool given but network {net.id} has no IPv4 subnet")
    try:
        lo, hi = parse_range(g.ipPool, parse_network(net.subnet, "subnet"), "ip-pool")
    except IpamError as e:
        raise BadRequest(obj, str(e)) from None
    return g.model_copy(update={"ipPool": f"{ipaddress.ip_address(lo)}-{ipaddress.ip_address(hi)}"})


# --- policy rules ---

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1}
PROTOCOL_NAMES = {n: name for name, n in PROTOCOLS.items()}
GROUP_FIELDS = ("fromEndpointGroup", "toEndpointGroup")
NETWORK_FIELDS = ("fromNetwork", "toNetwork")
IP_FIELDS = ("fromIpAddress", "toIpAddress")
# The fields that select the far side of a rule; the near side is the groups the policy is
# attached to: traffic *to* them for an in rule, *from* them for an out rule.
PEER_FIELDS = {
    "in": ("fromEndpointGroup", "fromNetwork", "fromIpAddress"),
    "out": ("toEndpointGroup", "toNetwork", "toIpAddress"),
}


def _protocol(obj: str, value: str) -> str:
    """ "" (any), tcp, udp, icmp, or an IP protocol number as decimal (6, 17, 1 are named)."""
    p = value.strip().lower()
    if p in ("", *PROTOCOLS):
        return p
    if p.isdigit() and int(p) <= 255:
        return PROTOCOL_NAMES.get(int(p), str(int(p)))
    raise BadRequest(
        obj,
        f"field 'protocol': {value!r} is not a protocol; use tcp, udp, icmp or an IP protocol "
        "number (0-255)",
    )


def _cidr(obj: str, field: str, value: str) -> str:
    """An address or CIDR as a canonical CIDR (an address is /32 or /128)."""
    v = value.strip()
    if not v:
        return ""
    try:
        return str(ipaddress.ip_network(v, strict=True))
    except ValueError:
        pass
    try:
        loose = ipaddress.ip_network(v, strict=False)
    except ValueError:
        raise BadRequest(obj, f"field {field!r}: {value!r} is not an address or CIDR") from None
    raise BadRequest(obj, f"field {field!r}: {v} has host bits set; did you mean {loose}?")


def normalize_rule(r: Rule) -> Rule:
    """Check a rule on its own, each failure a 400 naming the field, and return it as stored:
    protocol named or a decimal number, IP fields canonical CIDRs."""
    obj = f"rule {r.id}"
    check_name("tenant", r.tenantName)
    check_name("policy", r.policyName)
    check_name("rule", r.ruleId)
    for field in (*GROUP_FIELDS, *NETWORK_FIELDS):
        value = getattr(r, field)
        if value and not NAME_RE.match(value):
            raise BadRequest(obj, f"field {field!r}: {value!r} is not a name; use {NAME_RULE}")
    protocol = _protocol(obj, r.protocol)
    if r.port and protocol not in ("tcp", "udp"):
        raise BadRequest(obj, "field 'port': a port needs protocol tcp or udp")
    update = {"protocol": protocol, **{f: _cidr(obj, f, getattr(r, f)) for f in IP_FIELDS}}
    other = "out" if r.direction == "in" else "in"
    for field in PEER_FIELDS[other]:
        if getattr(r, field):
            side = "source" if r.direction == "in" else "destination"
            near = "to" if r.direction == "in" else "from"
            raise BadRequest(
                obj,
                f"field {field!r}: an {r.direction} rule matches traffic {near} the groups its "
                f"policy is attached to; select the {side} with the "
                f"{'from' if r.direction == 'in' else 'to'}* fields",
            )
    return r.model_copy(update=update)
