"""Policy rules on their own: the protocol named or a number, IP fields canonical CIDRs, and
the peer fields that fit the rule's direction."""

from __future__ import annotations

import ipaddress

from common.models import NAME_RE, NAME_RULE, Rule

from ..errors import BadRequest
from ..validate import check_name

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
