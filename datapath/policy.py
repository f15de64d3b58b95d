"""Endpoint-group policy in the datapath: conntrack, group tags and rules, as pure flows.

Stateful, as the features doc measured (shared/spec/DATAPATH-FEATURES.md §1):

    conntrack 30   IP of a tracked network -> ct(zone=Z, table=service); ND passes untracked
    policy 50      the gate: +est, +rel -> forward; +inv -> drop; +new -> src_group
    src_group 52   source address -> reg5 = its group's tag (| LOCAL if on this host)
    dst_group 54   destination address -> reg6, the same way
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
matched without the LOCAL bit. A group's endpoints are found by a tag, not by address, so
one more endpoint adds its two tag flows per IP family, and one more rule adds one flow per
IP family (per peer CIDR) to each group that attaches it, whatever the number of endpoints.

Nothing here knows the desired state: builders take segments, zones and addresses.
"""

from __future__ import annotations

from datapath.flows import Action, Flow, flow
from datapath.tables import (
    CONNTRACK,
    FORWARD,
    POLICY,
    POLICY_IN,
    PRIO_EXCEPTION,
    PRIO_RULE,
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

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_IPV6 = 0x86DD
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


# ---------------------------------------------------------------- conntrack


def ct_flows(segment: int, zone: int) -> list[Flow]:
    """A tracked network's IP goes through conntrack in its zone and resumes in service."""
    return [
        flow(
            CONNTRACK.id,
            PRIO_RULE,
            [("ct", False, zone, SERVICE.id)],
            metadata=(segment, SEGMENT_MASK),
            eth_type=eth_type,
        )
        for eth_type in (ETH_TYPE_IPV4, ETH_TYPE_IPV6)
    ]


def _commit(zone: int) -> list[Action]:
    return [("ct", True, zone, None), POLICY_IN.goto(FORWARD)]


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
