"""Endpoint-group policy in the datapath: conntrack, group tags and rules, as pure flows.

Stateful, as the features doc measured (shared/spec/DATAPATH-FEATURES.md §1):

    conntrack 30   IP of a tracked network -> ct(zone=Z, table=service); ND passes untracked
    policy 50      the gate: +est, +rel -> forward; +inv -> drop; +new -> src_group
    src_group 52   source MAC -> reg5 = its endpoint's group's tag (| LOCAL if on this host)
    dst_group 54   destination MAC -> reg6, the same way
    policy_out 56  out rules of reg5's group, if local: allow -> policy_in, deny -> drop
    policy_in 58   in rules of reg6's group, if local: allow -> ct(commit), deny -> drop;
                   none matching: the network's default allow, ct(commit)

A network is tracked when it has a zone: its gateway port's ofport on this host (unique per
bridge, stable while the port lives, below 0xff00; datapath.desired refuses one over 16
bits). Only new connections meet the rules: replies are +est, so an allowed connection's
replies pass and a rule added later never cuts a running one. Each direction is a stage:
a new connection passes the source group's out rules on the source's host and then the
destination group's in rules on the destination's host (LOCAL says which host is which);
nothing matched means allow. Inside a stage the higher priority wins and deny wins a tie:
flow priority = PRIO_POLICY_RULE + 2 * rule priority + (1 for deny). The peer group is
matched without the LOCAL bit. A group's endpoints are found by a tag, set by their MAC (the
network switches, it does not route: every address an endpoint uses, link-local included,
is judged), so one more endpoint adds two tag flows, and one more rule adds one flow per
IP family (per peer CIDR) to each group that attaches it, whatever the number of endpoints.

Nothing here knows the desired state: builders take segments, zones and addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from datapath.flows import ETH_TYPE_IPV4, ETH_TYPE_IPV6, Action, Flow, flow
from datapath.qos import QosState, check_qos
from datapath.tables import (
    CONNTRACK,
    DST_GROUP,
    FORWARD,
    FROM_GATEWAY,
    FROM_REMOTE,
    POLICY,
    POLICY_IN,
    POLICY_OUT,
    PRIO_EXCEPTION,
    PRIO_POLICY_RULE,
    PRIO_RULE,
    SEGMENT_AND_ORIGIN,
    SEGMENT_MASK,
    SERVICE,
    SRC_GROUP,
)

# Registers: the source and destination groups' tags. Tag flows of endpoints plugged into
# this host OR in LOCAL; a rule matches its own group with it, the peer group without it.
SRC_REG = "reg5"
DST_REG = "reg6"
LOCAL = 1 << 31
TAG_MAX = LOCAL - 1
PEER_MASK = TAG_MAX

PRIORITY_MIN, PRIORITY_MAX = 1, 100
PRIO_DEFAULT_ALLOW = 1

# ct_state bits (Nicira): the gate matches them.
CT_NEW = 0x01
CT_ESTABLISHED = 0x02
CT_RELATED = 0x04
CT_INVALID = 0x10
CT_TRACKED = 0x20

_ETH_TYPE = {4: ETH_TYPE_IPV4, 6: ETH_TYPE_IPV6}
IP_PROTO_ICMP = 1
IP_PROTO_ICMPV6 = 58
IP_PROTO_TCP = 6
IP_PROTO_UDP = 17
_PORT_FIELD = {IP_PROTO_TCP: "tcp_dst", IP_PROTO_UDP: "udp_dst"}
# ICMPv6 neighbour discovery (router/neighbour solicitation and advertisement, redirect)
# stays out of conntrack, as in OVN: it is not a connection, and userspace conntrack calls
# it invalid.
ND_TYPES = (133, 134, 135, 136, 137)


@dataclass(frozen=True)
class RuleState:
    """One rule of a policy attached to a group, resolved: no names, only tags and CIDRs."""

    direction: str  # "in" | "out"
    priority: int  # 1..100, higher wins; deny wins ties
    action: str  # "allow" | "deny"
    peer_tag: int = 0  # the from/to group's tag; 0 = any group
    peer_cidrs: tuple[str, ...] = ()  # OR of canonical CIDRs (v4 and/or v6); () = any address
    protocol: int | None = None  # IP protocol number (1 = ICMP of either family); None = any
    port: int = 0  # L4 destination port, only with protocol 6/17; 0 = any


@dataclass(frozen=True)
class GroupState:
    """An endpoint group of a network of this host, with the rules of its policies and its
    netprofile (what its endpoints may send, their DSCP)."""

    id: str  # "TENANT:GROUP"
    network_id: str  # NetworkState.id of the group's network
    tag: int  # 1..2**31-1; 0: not tagged yet (its endpoints get no tag, its rules no flows)
    rules: tuple[RuleState, ...] = ()  # sorted, deduplicated
    qos: QosState | None = None


def _rule_key(rule: RuleState) -> tuple[Any, ...]:
    return (
        rule.direction,
        -rule.priority,
        rule.action,
        rule.peer_tag,
        rule.peer_cidrs,
        -1 if rule.protocol is None else rule.protocol,
        rule.port,
    )


def sorted_rules(rules: Iterable[RuleState]) -> tuple[RuleState, ...]:
    """Rules in GroupState's order, each once: equal policies give equal GroupStates."""
    return tuple(sorted(set(rules), key=_rule_key))


# ---------------------------------------------------------------- validation


def _cidr_family(owner: str, cidr: Any) -> int:
    try:
        return ipaddress.ip_network(str(cidr), strict=True).version
    except ValueError as e:
        raise ValueError(f"{owner}: {cidr!r} is not a CIDR (address/prefix, no host bits)") from e


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_rule(owner: str, rule: RuleState) -> None:
    """Refuse a rule with a value out of its range, naming the field."""
    if rule.direction not in ("in", "out"):
        raise ValueError(f"{owner}: direction {rule.direction!r} is not in or out")
    if not _is_int(rule.priority) or not PRIORITY_MIN <= rule.priority <= PRIORITY_MAX:
        raise ValueError(f"{owner}: priority {rule.priority!r} is out of 1-100")
    if rule.action not in ("allow", "deny"):
        raise ValueError(f"{owner}: action {rule.action!r} is not allow or deny")
    if not _is_int(rule.peer_tag) or not 0 <= rule.peer_tag <= TAG_MAX:
        raise ValueError(f"{owner}: peer tag {rule.peer_tag!r} is out of 0-{TAG_MAX}")
    if not isinstance(rule.peer_cidrs, tuple):
        raise ValueError(f"{owner}: peer CIDRs must be a tuple, not {rule.peer_cidrs!r}")
    for cidr in rule.peer_cidrs:
        _cidr_family(owner, cidr)
    if rule.protocol is not None and (not _is_int(rule.protocol) or not 0 <= rule.protocol <= 255):
        raise ValueError(f"{owner}: protocol {rule.protocol!r} is out of 0-255")
    if not _is_int(rule.port) or not 0 <= rule.port <= 0xFFFF:
        raise ValueError(f"{owner}: port {rule.port!r} is out of 0-65535")
    if rule.port and rule.protocol not in _PORT_FIELD:
        raise ValueError(f"{owner}: port {rule.port} needs protocol tcp (6) or udp (17)")


def check_group(group: GroupState) -> None:
    """Refuse a group that is wrong by itself (its network is datapath.desired's to check)."""
    owner = f"group {group.id}"
    if not isinstance(group.id, str) or not group.id:
        raise ValueError(f"group {group.id!r}: the ID must be a non-empty string")
    if not _is_int(group.tag) or not 0 <= group.tag <= TAG_MAX:
        raise ValueError(f"{owner}: tag {group.tag!r} is out of 0-{TAG_MAX}")
    if not isinstance(group.rules, tuple):
        raise ValueError(f"{owner}: rules must be a tuple of RuleState")
    for rule in group.rules:
        if not isinstance(rule, RuleState):
            raise ValueError(f"{owner}: {rule!r} is not a RuleState")
        check_rule(f"{owner}: {rule.direction} rule at priority {rule.priority}", rule)
    if group.qos is not None:
        check_qos(f"{owner}: netprofile", group.qos)


# ---------------------------------------------------------------- conntrack


PLAIN_NAT = ("nat", "", None, None, None, None, ())


def ct_flows(segment: int, zone: int) -> list[Flow]:
    """A tracked network's IP goes through conntrack in its zone and resumes in service;
    with NAT, so a service's connections are DNATed and their replies un-DNATed."""
    return [
        flow(
            CONNTRACK.id,
            PRIO_RULE,
            [("ct", False, zone, SERVICE.id, (PLAIN_NAT,))],
            metadata=(segment, SEGMENT_MASK),
            eth_type=eth_type,
        )
        for eth_type in (ETH_TYPE_IPV4, ETH_TYPE_IPV6)
    ]


def _commit(zone: int) -> list[Action]:
    return [("ct", True, zone, None, ()), POLICY_IN.goto(FORWARD)]


def default_allow_flows(segment: int, zone: int) -> list[Flow]:
    """What no in rule decides is allowed, and committed in the network's zone."""
    return [
        flow(
            POLICY_IN.id,
            PRIO_DEFAULT_ALLOW,
            _commit(zone),
            metadata=(segment, SEGMENT_MASK),
            eth_type=eth_type,
        )
        for eth_type in (ETH_TYPE_IPV4, ETH_TYPE_IPV6)
    ]


def _state(*bits: int) -> tuple[int, int]:
    value = CT_TRACKED
    for bit in bits:
        value |= bit
    return (value, value)


def static_flows() -> list[Flow]:
    """The gate and the ND bypass: the same on every host, whatever its state."""
    to_forward = [POLICY.goto(FORWARD)]
    flows = [
        flow(POLICY.id, PRIO_EXCEPTION, [], ct_state=_state(CT_INVALID)),
        flow(POLICY.id, PRIO_RULE, to_forward, ct_state=_state(CT_ESTABLISHED)),
        # Below established: +est+rel is one of the two, +new+rel (an ICMP error) passes.
        flow(POLICY.id, PRIO_RULE - 10, to_forward, ct_state=_state(CT_RELATED)),
        flow(POLICY.id, PRIO_RULE - 20, [POLICY.goto(SRC_GROUP)], ct_state=_state(CT_NEW)),
    ]
    flows += [
        flow(
            CONNTRACK.id,
            PRIO_EXCEPTION,
            [CONNTRACK.goto(SERVICE)],
            eth_type=ETH_TYPE_IPV6,
            ip_proto=IP_PROTO_ICMPV6,
            icmpv6_type=nd_type,
        )
        for nd_type in ND_TYPES
    ]
    return flows


# ---------------------------------------------------------------- tags


def tag_flows(segment: int, mac: str, tag: int, local: bool) -> list[Flow]:
    """An endpoint's group tag: in reg5 when it sends, in reg6 when it receives, found by
    its MAC in its segment (netplugin switches, it does not route, so the MAC is the
    endpoint whatever address family or address it uses, link-local ones included; the
    ingress table has already refused a local endpoint's spoofed addresses). ``local``:
    plugged into this host, so its tag carries LOCAL and its frames must come from a local
    port (a remote one's from another host)."""
    if not tag:
        return []
    value = tag | LOCAL if local else tag
    origin = 0 if local else FROM_REMOTE
    return [
        flow(
            SRC_GROUP.id,
            PRIO_RULE,
            [("set_field", SRC_REG, value), SRC_GROUP.goto(DST_GROUP)],
            metadata=(segment | origin, SEGMENT_AND_ORIGIN),
            eth_src=mac,
        ),
        flow(
            DST_GROUP.id,
            PRIO_RULE,
            [("set_field", DST_REG, value), DST_GROUP.goto(POLICY_OUT)],
            metadata=(segment, SEGMENT_MASK),
            eth_dst=mac,
        ),
    ]


def address_tag_flows(segment: int, addresses: Iterable[str], tag: int) -> list[Flow]:
    """Another host's endpoint reached through the fabric's router (routing mode with BGP):
    its packets arrive from the host kernel, with the gateway's MAC, not its own, so its
    group tag is found by its address instead, from a gateway port when it sends, and to
    it when it receives. Below the MAC flows: a MAC always wins."""
    if not tag:
        return []
    flows = []
    for address in addresses:
        ip = ipaddress.ip_address(address.split("/")[0])
        family, eth_type = f"ipv{ip.version}", _ETH_TYPE[ip.version]
        flows += [
            flow(
                SRC_GROUP.id,
                PRIO_RULE - 1,
                [("set_field", SRC_REG, tag), SRC_GROUP.goto(DST_GROUP)],
                metadata=(segment | FROM_GATEWAY, SEGMENT_AND_ORIGIN),
                eth_type=eth_type,
                **{f"{family}_src": str(ip)},
            ),
            flow(
                DST_GROUP.id,
                PRIO_RULE - 1,
                [("set_field", DST_REG, tag), DST_GROUP.goto(POLICY_OUT)],
                metadata=(segment, SEGMENT_MASK),
                eth_type=eth_type,
                **{f"{family}_dst": str(ip)},
            ),
        ]
    return flows


# ---------------------------------------------------------------- rules


def rule_priority(rule: RuleState) -> int:
    """The flow priority of a rule: higher rule priority first, deny before allow."""
    return PRIO_POLICY_RULE + 2 * rule.priority + (1 if rule.action == "deny" else 0)


def _selectors(
    rule: RuleState,
) -> list[tuple[int, ipaddress.IPv4Network | ipaddress.IPv6Network | None]]:
    """(IP version, peer network or None) for each flow of a rule: one per peer CIDR, or
    one per family if it names none."""
    if not rule.peer_cidrs:
        return [(4, None), (6, None)]
    nets = sorted(
        (ipaddress.ip_network(c) for c in set(rule.peer_cidrs)),
        key=lambda n: (n.version, int(n.network_address), n.prefixlen),
    )
    return [(n.version, n) for n in nets]


def rule_flows(group: GroupState, zone: int) -> list[Flow]:
    """The flows of a group's rules (``zone``: its network's, for the in rules' commit)."""
    if not group.tag:
        return []
    own = group.tag | LOCAL
    flows = []
    for rule in group.rules:
        out = rule.direction == "out"
        table = POLICY_OUT if out else POLICY_IN
        own_reg, peer_reg, peer_side = (
            (SRC_REG, DST_REG, "dst") if out else (DST_REG, SRC_REG, "src")
        )
        if rule.action == "deny":
            actions: list[Action] = []
        else:
            actions = [POLICY_OUT.goto(POLICY_IN)] if out else _commit(zone)
        for version, peer in _selectors(rule):
            match: dict[str, Any] = {own_reg: own, "eth_type": _ETH_TYPE[version]}
            if rule.peer_tag:
                match[peer_reg] = (rule.peer_tag, PEER_MASK)
            if peer is not None and peer.prefixlen:  # a /0 is the family alone
                match[f"ipv{version}_{peer_side}"] = str(peer)
            if rule.protocol is not None:
                icmp = rule.protocol == IP_PROTO_ICMP and version == 6
                match["ip_proto"] = IP_PROTO_ICMPV6 if icmp else rule.protocol
            if rule.port:
                match[_PORT_FIELD[rule.protocol]] = rule.port  # type: ignore[index]
            flows.append(flow(table.id, rule_priority(rule), actions, **match))
    return flows
