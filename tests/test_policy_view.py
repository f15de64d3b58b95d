"""The agent resolves groups, policies and rules (names) into the datapath's GroupStates."""

from __future__ import annotations

from typing import Any

import pytest

from common.models import EndpointGroup, Network, Rule
from common.records import GroupRecord, NetworkRecord
from datapath.policy import GroupState, RuleState
from plugin.policy_view import group_states, protocol_number


def net(name: str, subnet: str, v6: str = "", tenant: str = "default") -> NetworkRecord:
    cfg = Network(tenantName=tenant, networkName=name, subnet=subnet, ipv6Subnet=v6)
    return NetworkRecord(config=cfg, encap="vxlan", pkt_tag=100)


def grp(name: str, network: str, tag: int, *policies: str, tenant: str = "default") -> GroupRecord:
    cfg = EndpointGroup(
        tenantName=tenant, groupName=name, networkName=network, policies=list(policies)
    )
    return GroupRecord(config=cfg, tag=tag)


def rule(policy: str, rid: str, tenant: str = "default", **kw: Any) -> Rule:
    return Rule(tenantName=tenant, policyName=policy, ruleId=rid, **kw)


NETS = [net("pn", "10.1.0.0/16", "fd00:1::/64"), net("other", "10.9.0.0/24")]


def test_a_group_without_policies_is_handed_over_with_its_tag() -> None:
    groups, skipped = group_states([grp("web", "pn", 5)], [], NETS)
    assert groups == [GroupState("default:web", "default:pn", 5, ())]
    assert skipped == []


def test_in_rules_take_their_peer_from_the_from_fields_and_out_rules_from_the_to_fields() -> None:
    rules = [
        rule("p", "1", direction="in", fromEndpointGroup="app", protocol="tcp", port=80),
        rule("p", "2", direction="out", toNetwork="other", action="deny", priority=10),
        rule("p", "3", direction="in", fromIpAddress="192.0.2.0/24", protocol="icmp"),
    ]
    groups, _ = group_states([grp("web", "pn", 5, "p"), grp("app", "pn", 7)], rules, NETS)
    web = next(g for g in groups if g.id == "default:web")
    assert set(web.rules) == {
        RuleState("in", 1, "allow", peer_tag=7, protocol=6, port=80),
        RuleState("out", 10, "deny", peer_cidrs=("10.9.0.0/24",)),
        RuleState("in", 1, "allow", peer_cidrs=("192.0.2.0/24",), protocol=1),
    }


def test_a_network_and_an_address_together_mean_both() -> None:
    rules = [
        rule("p", "1", fromNetwork="pn", fromIpAddress="10.1.2.0/24"),
        rule("p", "2", fromNetwork="pn", fromIpAddress="10.0.0.0/8"),
        rule("p", "3", fromNetwork="pn", fromIpAddress="192.0.2.1/32"),  # never matches
    ]
    groups, skipped = group_states([grp("web", "pn", 5, "p")], rules, NETS)
    assert [r.peer_cidrs for r in groups[0].rules] == [("10.1.0.0/16",), ("10.1.2.0/24",)]
    assert [s.rule for s in skipped] == ["default:p:3"]


def test_a_network_peer_covers_both_its_families() -> None:
    groups, _ = group_states([grp("web", "pn", 5, "p")], [rule("p", "1", fromNetwork="pn")], NETS)
    assert groups[0].rules[0].peer_cidrs == ("10.1.0.0/16", "fd00:1::/64")


def test_several_policies_merge_and_identical_rules_count_once() -> None:
    rules = [
        rule("a", "1", protocol="udp", port=53),
        rule("b", "x", protocol="udp", port=53),
        rule("b", "y", action="deny"),
    ]
    groups, _ = group_states([grp("web", "pn", 5, "a", "b", "a")], rules, NETS)
    assert groups[0].rules == (
        RuleState("in", 1, "allow", protocol=17, port=53),
        RuleState("in", 1, "deny"),
    )


def test_rules_of_other_policies_and_tenants_do_not_apply() -> None:
    rules = [rule("q", "1", action="deny"), rule("p", "1", tenant="blue", action="deny")]
    nets = [*NETS, net("pn", "10.2.0.0/16", tenant="blue")]
    groups, _ = group_states(
        [grp("web", "pn", 5, "p"), grp("w", "pn", 6, tenant="blue")], rules, nets
    )
    assert [g.rules for g in groups] == [(), ()]


def test_unresolved_references_leave_the_rule_out_and_say_why() -> None:
    rules = [
        rule("p", "1", fromEndpointGroup="gone"),
        rule("p", "2", fromEndpointGroup="untagged"),
        rule("p", "3", fromNetwork="gone"),
        rule("p", "4", action="deny"),
    ]
    groups, skipped = group_states(
        [grp("web", "pn", 5, "p"), grp("untagged", "pn", 0)], rules, NETS
    )
    assert [g.id for g in groups] == ["default:web"]  # an untagged group gets no state
    assert groups[0].rules == (RuleState("in", 1, "deny"),)
    assert [(s.group, s.rule) for s in skipped] == [
        ("default:web", "default:p:1"),
        ("default:web", "default:p:2"),
        ("default:web", "default:p:3"),
    ]
    assert "gone" in skipped[0].reason and "network gone" in skipped[2].reason


def test_a_group_whose_network_is_unknown_is_left_out() -> None:
    assert group_states([grp("web", "nowhere", 5)], [], NETS) == ([], [])


@pytest.mark.parametrize(
    ("stored", "number"), [("", None), ("tcp", 6), ("udp", 17), ("icmp", 1), ("47", 47)]
)
def test_protocols(stored: str, number: int | None) -> None:
    assert protocol_number(stored) == number


def test_a_rule_the_datapath_cannot_take_is_left_out_not_fatal() -> None:
    """A stored rule this master would have refused (written by hand, or by a newer master
    with a protocol name this agent does not know) is skipped and said: raising here would
    stop the agent's resync and every later cluster update (peers, other hosts' endpoints)."""
    rules = [
        rule("p", "1", protocol="sctp"),
        rule("p", "2", port=80),  # a port without tcp/udp
        rule("p", "3", fromIpAddress="not-an-address"),
        rule("p", "4", protocol="300"),
        rule("p", "5", action="deny"),
    ]
    groups, skipped = group_states([grp("web", "pn", 5, "p")], rules, NETS)
    assert groups[0].rules == (RuleState("in", 1, "deny"),)
    assert [s.rule for s in skipped] == [f"default:p:{n}" for n in "1234"]
    assert "sctp" in skipped[0].reason and "port" in skipped[1].reason
    # Nor a group with a tag no master gives (the datapath would refuse the whole state).
    assert group_states([grp("web", "pn", 2**31, "p")], rules, NETS)[0] == []
