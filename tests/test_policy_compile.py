"""The policy compiler, judged by where packets go: rules compiled into a host's flows, and
new connections, replies and unsolicited packets walked through them with the fake
switch and its conntrack, on one host and across two (VXLAN and VLAN)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from datapath_states import flows_only
from policy_states import (
    APP,
    APP1,
    DB,
    DB1,
    GATEWAY,
    GW_PORT,
    LONER,
    TAGS,
    TUN,
    UPLINK,
    WEB,
    WEB1,
    WEB2,
    Ep,
    Host,
    arrival,
    groups,
    icmp,
    ip,
    one_host,
    reply,
    rule,
    tcp,
    two_hosts,
    udp,
)
from test_ofcodec import _over_the_wire

from datapath.desired import NetworkState
from datapath.flows import Entry, Flow
from datapath.pipeline import compile_flows
from datapath.policy import RuleState
from datapath.tables import DST_GROUP, POLICY_IN, POLICY_OUT, SRC_GROUP
from testbed.fakeoftable import CT_INVALID, CT_TRACKED, walk

Rules = Mapping[str, Sequence[RuleState]]

DENY_TCP_IN = rule("in", 1, "deny", protocol=6)
ALLOW_80_IN = rule("in", 10, "allow", protocol=6, port=80)
ONLY_80 = {WEB: [DENY_TCP_IN, ALLOW_80_IN]}
DENY_ALL_IN = rule("in", 1, "deny")
FROM_APP = {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_tag=TAGS[APP])]}
FROM_APP_V4 = {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_cidrs=("10.1.0.3/32",))]}
FROM_APP_V6 = {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_cidrs=("fd00::3/128",))]}
OUT_NOT_DB = {APP: [rule("out", 5, "deny", peer_tag=TAGS[DB])]}
OUT_CIDRS = ("192.0.2.0/24", "2001:db8::/32")
OUT_NOT_NET = {WEB: [rule("out", 5, "deny", peer_cidrs=OUT_CIDRS)]}


LINK_LOCAL = {"ipv6_src": "fe80::3", "ipv6_dst": "fe80::1"}


def allowed(rules: Rules, pkt: Mapping[str, Any], to: Ep | int) -> bool:
    """Whether ``pkt``, a new connection on one host, reaches ``to``; an allowed one is
    committed in the network's zone."""
    result = walk(compile_flows(one_host(rules)), pkt)
    port = to if isinstance(to, int) else to.n
    if port in result.ports:
        assert result.committed == [GW_PORT], result.path
        return True
    return False


CASES: list[tuple[str, Rules, dict[str, Any], Ep | int, bool]] = [
    ("no rule: allowed", {}, tcp(APP1, WEB1, 22), WEB1, True),
    # Tags go by MAC, so link-local IPv6 is judged like the endpoint's other addresses.
    ("link-local v6, no rule", {}, tcp(APP1, WEB1, 22, True, **LINK_LOCAL), WEB1, True),
    (
        "link-local v6, deny all in",
        {WEB: [DENY_ALL_IN]},
        tcp(APP1, WEB1, 22, True, **LINK_LOCAL),
        WEB1,
        False,
    ),
    ("link-local v6, from app", FROM_APP, tcp(APP1, WEB1, 22, True, **LINK_LOCAL), WEB1, True),
    (
        "link-local v6, deny out",
        {APP: [rule("out", 1, "deny")]},
        udp(APP1, WEB1, 53, True) | LINK_LOCAL,
        WEB1,
        False,
    ),
    ("deny all tcp in", {WEB: [DENY_TCP_IN]}, tcp(APP1, WEB1, 80), WEB1, False),
    ("deny all tcp in: udp passes", {WEB: [DENY_TCP_IN]}, udp(APP1, WEB1, 80), WEB1, True),
    ("deny tcp at 1, allow 80 at 10: 80", ONLY_80, tcp(APP1, WEB1, 80), WEB1, True),
    ("deny tcp at 1, allow 80 at 10: 22", ONLY_80, tcp(APP1, WEB1, 22), WEB1, False),
    ("deny tcp at 1, allow 80 at 10: v6 80", ONLY_80, tcp(APP1, WEB1, 80, v6=True), WEB1, True),
    ("deny tcp at 1, allow 80 at 10: v6 22", ONLY_80, tcp(APP1, WEB1, 22, v6=True), WEB1, False),
    ("deny tcp at 1, allow 80 at 10: other group", ONLY_80, tcp(WEB1, APP1, 22), APP1, True),
    ("deny tcp at 1, allow 80 at 10: in the group", ONLY_80, tcp(WEB2, WEB1, 22), WEB1, False),
    (
        "higher priority wins: deny at 10 over allow at 5",
        {WEB: [rule("in", 5, "allow", protocol=6), rule("in", 10, "deny", protocol=6)]},
        tcp(APP1, WEB1, 80),
        WEB1,
        False,
    ),
    (
        "deny wins a tie",
        {WEB: [rule("in", 5, "allow", protocol=6, port=80), rule("in", 5, "deny", protocol=6)]},
        tcp(APP1, WEB1, 80),
        WEB1,
        False,
    ),
    ("from a group: it", FROM_APP, tcp(APP1, WEB1, 22), WEB1, True),
    ("from a group: another", FROM_APP, tcp(DB1, WEB1, 22), WEB1, False),
    ("from a group: no group", FROM_APP, tcp(LONER, WEB1, 22), WEB1, False),
    ("from a group: v6", FROM_APP, icmp(APP1, WEB1, v6=True), WEB1, True),
    (
        "from a group: not by way of the gateway (routed from another network)",
        FROM_APP,
        tcp(GATEWAY, WEB1, 80, ipv4_src=APP1.ipv4),
        WEB1,
        False,
    ),
    ("from a CIDR: it", FROM_APP_V4, udp(APP1, WEB1, 53), WEB1, True),
    ("from a CIDR: another", FROM_APP_V4, udp(DB1, WEB1, 53), WEB1, False),
    ("from a v4 CIDR: v6 is the deny's", FROM_APP_V4, udp(APP1, WEB1, 53, v6=True), WEB1, False),
    ("from a v6 CIDR: it", FROM_APP_V6, tcp(APP1, WEB1, 8080, v6=True), WEB1, True),
    ("from a v6 CIDR: another", FROM_APP_V6, tcp(DB1, WEB1, 8080, v6=True), WEB1, False),
    ("out to a group: it", OUT_NOT_DB, tcp(APP1, DB1, 5432), DB1, False),
    ("out to a group: another", OUT_NOT_DB, tcp(APP1, WEB1, 5432), WEB1, True),
    ("out: only the group's own", OUT_NOT_DB, tcp(WEB1, DB1, 5432), DB1, True),
    ("out to a CIDR beyond the gateway", OUT_NOT_NET, tcp(WEB1, "192.0.2.7", 443), GW_PORT, False),
    ("out elsewhere beyond it", OUT_NOT_NET, tcp(WEB1, "198.51.100.7", 443), GW_PORT, True),
    ("out to a v6 CIDR", OUT_NOT_NET, tcp(WEB1, "2001:db8::7", 443, v6=True), GW_PORT, False),
    ("deny icmp: v4", {WEB: [rule("in", 1, "deny", protocol=1)]}, icmp(APP1, WEB1), WEB1, False),
    (
        "deny icmp: v6 (ICMPv6)",
        {WEB: [rule("in", 1, "deny", protocol=1)]},
        icmp(APP1, WEB1, v6=True),
        WEB1,
        False,
    ),
    (
        "deny icmp: tcp passes",
        {WEB: [rule("in", 1, "deny", protocol=1)]},
        tcp(APP1, WEB1, 1),
        WEB1,
        True,
    ),
    (
        "deny udp 53 only",
        {WEB: [rule("in", 1, "deny", protocol=17, port=53)]},
        udp(APP1, WEB1, 53),
        WEB1,
        False,
    ),
    (
        "deny udp 53 only: 54 passes",
        {WEB: [rule("in", 1, "deny", protocol=17, port=53)]},
        udp(APP1, WEB1, 54),
        WEB1,
        True,
    ),
    (
        "deny a protocol number (SCTP)",
        {WEB: [rule("in", 1, "deny", protocol=132)]},
        ip(APP1, WEB1, ip_proto=132),
        WEB1,
        False,
    ),
    (
        "out allow, in deny: denied",
        {APP: [rule("out", 5, "allow")], WEB: [DENY_ALL_IN]},
        tcp(APP1, WEB1, 80),
        WEB1,
        False,
    ),
    (
        "out deny, in allow: denied",
        {APP: [rule("out", 5, "deny")], WEB: [rule("in", 5, "allow")]},
        tcp(APP1, WEB1, 80),
        WEB1,
        False,
    ),
    (
        "out allow, in allow: allowed",
        {APP: [rule("out", 5, "allow")], WEB: [rule("in", 5, "allow")]},
        tcp(APP1, WEB1, 80),
        WEB1,
        True,
    ),
    (
        "in rules judge the gateway: allowed from its address",
        {
            WEB: [
                DENY_ALL_IN,
                rule("in", 10, "allow", peer_cidrs=("10.1.0.254/32",), protocol=6, port=22),
            ]
        },
        tcp(GATEWAY, WEB1, 22),
        WEB1,
        True,
    ),
    (
        "in rules judge the gateway: denied",
        {WEB: [DENY_ALL_IN]},
        tcp(GATEWAY, WEB1, 22),
        WEB1,
        False,
    ),
    (
        "in rules judge an outside address: allowed",
        {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_cidrs=("192.0.2.0/24",))]},
        tcp(GATEWAY, WEB1, 80, ipv4_src="192.0.2.7"),
        WEB1,
        True,
    ),
    (
        "in rules judge an outside address: another",
        {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_cidrs=("192.0.2.0/24",))]},
        tcp(GATEWAY, WEB1, 80, ipv4_src="198.51.100.7"),
        WEB1,
        False,
    ),
    (
        "a /0 peer is its family",
        {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_cidrs=("0.0.0.0/0",))]},
        tcp(GATEWAY, WEB1, 80, ipv4_src="198.51.100.7"),
        WEB1,
        True,
    ),
    (
        "a /0 peer is its family: v6 is denied",
        {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_cidrs=("0.0.0.0/0",))]},
        tcp(APP1, WEB1, 80, v6=True),
        WEB1,
        False,
    ),
]


@pytest.mark.parametrize(
    ("rules", "pkt", "to", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_new_connection_meets_the_rules(
    rules: Rules, pkt: dict[str, Any], to: Ep | int, expected: bool
) -> None:
    assert allowed(rules, pkt, to) is expected


def test_replies_pass_and_unsolicited_packets_meet_the_rules() -> None:
    # Web takes only port 80; app takes nothing new at all.
    rules = {**ONLY_80, APP: [DENY_ALL_IN]}
    host = Host(one_host(rules))
    syn = tcp(APP1, WEB1, 80)
    assert WEB1.n in host.send(syn).ports
    back = reply(syn, WEB1)
    answered = host.send(back)
    assert answered.ports == {APP1.n} and answered.committed == []  # +est: straight through
    assert WEB1.n in host.send(syn).ports  # the connection goes on
    assert host.send(tcp(WEB1, APP1, 40000, sport=80 + 1)).ports == set()  # new: denied
    ping = icmp(APP1, WEB1)
    assert WEB1.n in host.send(ping).ports and APP1.n in host.send(reply(ping, WEB1)).ports


def test_an_invalid_packet_is_dropped_whatever_the_rules() -> None:
    flows = compile_flows(one_host({}))
    result = walk(flows, tcp(APP1, WEB1, 80), ct_state=CT_TRACKED | CT_INVALID)
    assert result.outputs == [] and result.committed == []


def test_a_new_rule_does_not_cut_an_established_connection() -> None:
    host = Host(one_host({}))
    syn = tcp(APP1, WEB1, 22)
    assert WEB1.n in host.send(syn).ports
    assert APP1.n in host.send(reply(syn, WEB1)).ports
    host.recompile({WEB: [DENY_TCP_IN]})
    assert WEB1.n in host.send(syn).ports  # established
    assert APP1.n in host.send(reply(syn, WEB1)).ports
    assert host.send(tcp(APP1, WEB1, 22, sport=40001)).ports == set()  # a new one: denied


@pytest.mark.parametrize("encap", ["vni", "vlan"])
def test_in_rules_hold_on_the_destinations_host_and_out_rules_on_the_sources(
    encap: str,
) -> None:
    """App (h2) connects to web (h1): the packet goes through conntrack on both hosts; web's
    in rules drop it on h1, app's out rules on h2, and the reply passes both as +est."""
    way_in = TUN if encap == "vni" else UPLINK

    def connect(rules: Rules, pkt: dict[str, Any]) -> tuple[bool, bool, Host, Host]:
        h1, h2 = (Host(s) for s in two_hosts(rules, encap))
        left = h2.send(pkt)
        if way_in not in left.ports:
            return False, False, h1, h2
        assert left.committed == [GW_PORT + 1]  # h2's zone
        there = h1.send(arrival(left.sent(way_in), way_in))
        assert POLICY_IN.id in there.tables  # tracked on arrival too
        if WEB1.n in there.ports:
            assert there.committed == [GW_PORT]  # h1's zone
        return True, WEB1.n in there.ports, h1, h2

    syn = tcp(APP1, WEB1, 80)
    assert connect({}, syn)[:2] == (True, True)
    assert connect({WEB: [DENY_TCP_IN]}, syn)[:2] == (True, False)  # left h2, stopped on h1
    assert connect({APP: [rule("out", 1, "deny", protocol=6)]}, syn)[:2] == (False, False)
    by_tag = {WEB: [DENY_ALL_IN, rule("in", 10, "allow", peer_tag=TAGS[APP], protocol=6)]}
    sent, arrived, h1, h2 = connect(by_tag, syn)
    assert sent and arrived
    # The reply: +est on h1 and on h2, though web denies everything but app's tcp in.
    back = h1.send(reply(syn, WEB1))
    assert way_in in back.ports and back.committed == []
    home = h2.send(arrival(back.sent(way_in), way_in))
    assert home.ports == {APP1.n} and home.committed == []
    # Another group's endpoint on h2 would be denied on h1: from db's address.
    assert connect(by_tag, tcp(APP1, WEB1, 80, ipv4_src=DB1.ipv4))[:2] == (False, False)


def test_rule_flows_sit_in_their_stage_with_the_priority_that_encodes_theirs() -> None:
    flows = compile_flows(one_host({WEB: [ALLOW_80_IN, rule("out", 7, "deny", peer_tag=22)]}))
    rules = sorted(
        (f.table, f.priority, len(f.actions))
        for f in flows
        if isinstance(f, Flow) and f.priority > 1000
    )
    # in: allow 80 at 10 -> 1020, v4 and v6, commit + goto; out: deny at 7 -> 1015, drop.
    assert rules == [(POLICY_OUT.id, 1015, 0)] * 2 + [(POLICY_IN.id, 1020, 2)] * 2


def _tag_flows_of(flows: set[Entry], ep: Ep) -> set[Flow]:
    return {
        f
        for f in flows
        if isinstance(f, Flow)
        and f.table in (SRC_GROUP.id, DST_GROUP.id)
        and ep.mac in {v for _, v in f.match}
    }


def test_what_gets_no_tag_and_no_rule_flows() -> None:
    rules = {WEB: [DENY_ALL_IN]}
    state = one_host(rules)
    flows = compile_flows(state)
    assert len(_tag_flows_of(flows, WEB1)) == 2  # src and dst, by MAC: any family
    assert _tag_flows_of(flows, LONER) == set()  # in no group
    # A group the state does not list: no tags.
    ghost = replace(state, endpoints=[replace(state.endpoints[0], group="t:ghost")])
    assert _tag_flows_of(compile_flows(ghost), WEB1) == set()
    # An untagged group (the master has not tagged it yet): no tags, no rules.
    untagged = replace(
        state, groups=[replace(g, tag=0) if g.id == WEB else g for g in groups(rules)]
    )
    flows = compile_flows(untagged)
    assert _tag_flows_of(flows, WEB1) == _tag_flows_of(flows, WEB2) == set()
    assert not any(f.table == POLICY_IN.id and f.priority > 1000 for f in flows_only(flows))
    # A group of another network than its endpoint's: that endpoint gets no tag.
    other = replace(state, networks=[*state.networks, NetworkState("other", 7, gateway_ofport=99)])
    other.groups = [replace(g, network_id="other") if g.id == WEB else g for g in groups(rules)]
    other.endpoints = [e.local() for e in (WEB1, APP1)]
    flows = compile_flows(other)
    assert _tag_flows_of(flows, WEB1) == set() and len(_tag_flows_of(flows, APP1)) == 2
    # An untracked network (no gateway port: no zone): no tags, no rules, no conntrack.
    untracked = one_host(rules)
    untracked.networks = [replace(n, gateway_ofport=None) for n in untracked.networks]
    flows = flows_only(compile_flows(untracked))
    assert not [f for f in flows if f.table in (SRC_GROUP.id, DST_GROUP.id) and f.priority]
    assert not [f for f in flows if f.table in (POLICY_OUT.id, POLICY_IN.id) and f.priority]


def test_a_rule_costs_a_flow_per_ip_family_or_per_peer_cidr() -> None:
    base = compile_flows(one_host({}))
    rules = {WEB: [DENY_TCP_IN, ALLOW_80_IN, rule("out", 3, "deny", peer_cidrs=OUT_CIDRS)]}
    more = compile_flows(one_host(rules))
    # deny tcp: v4+v6; allow 80: v4+v6; out to two CIDRs of two families: one each.
    assert len(more) - len(base) == 2 + 2 + 2


def test_every_policy_flow_survives_the_wire() -> None:
    """Tags, rules, ct and the gate read back from an OpenFlow message as they were written,
    so reconcile leaves them alone."""
    rules = {
        WEB: [DENY_TCP_IN, ALLOW_80_IN, rule("in", 9, "allow", peer_tag=TAGS[APP], protocol=1)],
        APP: [rule("out", 4, "deny", peer_cidrs=OUT_CIDRS, protocol=17, port=53)],
        DB: [rule("out", 100, "allow", peer_cidrs=("0.0.0.0/0",)), rule("in", 1, "deny")],
    }
    flows = flows_only(compile_flows(one_host(rules)) | compile_flows(two_hosts(rules, "vlan")[1]))
    assert len([f for f in flows if f.table in (POLICY_OUT.id, POLICY_IN.id)]) > 10
    for f in flows:
        assert _over_the_wire(f) == f
