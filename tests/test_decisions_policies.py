"""Policies, rules and the guards they add, as pure decisions: rule validation (every bad field
a 400 naming it), what a rule may name, which groups attach a policy, which rules name a group
or a network, group tags and the group/network name clash."""

from __future__ import annotations

from typing import Any

import pytest

from common.models import EndpointGroup, Network, Rule
from master.decisions import groups, networks, policies, tenants
from master.decisions.groups import normalize_group
from master.decisions.rules import normalize_rule
from master.errors import BadRequest, Conflict, NotFound
from master.validate import parse_body


def rule(**fields: Any) -> Rule:
    return Rule.model_validate({"tenantName": "t", "policyName": "p", "ruleId": "r", **fields})


# --- a rule on its own ---


@pytest.mark.parametrize(
    ("fields", "stored"),
    [
        ({}, {"protocol": "", "port": 0, "fromIpAddress": "", "toIpAddress": ""}),
        ({"protocol": "TCP", "port": 80}, {"protocol": "tcp", "port": 80}),
        ({"protocol": " udp ", "port": 53}, {"protocol": "udp"}),
        ({"protocol": "6", "port": 443}, {"protocol": "tcp"}),
        ({"protocol": "17"}, {"protocol": "udp"}),
        ({"protocol": "1"}, {"protocol": "icmp"}),
        ({"protocol": 1}, {"protocol": "icmp"}),  # a JSON number is the same protocol
        ({"protocol": "icmp"}, {"protocol": "icmp"}),
        ({"protocol": "047"}, {"protocol": "47"}),
        ({"protocol": "0"}, {"protocol": "0"}),
        ({"protocol": "255"}, {"protocol": "255"}),
        ({"fromIpAddress": "10.1.1.5"}, {"fromIpAddress": "10.1.1.5/32"}),
        ({"fromIpAddress": "10.1.1.0/24"}, {"fromIpAddress": "10.1.1.0/24"}),
        ({"fromIpAddress": "10.1.1.0/255.255.255.0"}, {"fromIpAddress": "10.1.1.0/24"}),
        ({"fromIpAddress": "FD00::1"}, {"fromIpAddress": "fd00::1/128"}),
        ({"fromIpAddress": "fd00:0::/64"}, {"fromIpAddress": "fd00::/64"}),
        ({"fromIpAddress": "0.0.0.0/0"}, {"fromIpAddress": "0.0.0.0/0"}),
        (
            {"direction": "out", "toIpAddress": "192.168.0.0/16", "toNetwork": "n"},
            {"toIpAddress": "192.168.0.0/16", "toNetwork": "n"},
        ),
        ({"fromEndpointGroup": "g", "fromNetwork": "n"}, {"fromEndpointGroup": "g"}),
    ],
)
def test_a_rule_is_stored_normalised(fields: dict[str, Any], stored: dict[str, Any]) -> None:
    r = normalize_rule(rule(**fields))
    assert {k: getattr(r, k) for k in stored} == stored
    assert normalize_rule(r) == r  # normalised once is normalised


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"protocol": "sctpx"}, "field 'protocol': 'sctpx' is not a protocol; use tcp, udp"),
        ({"protocol": "256"}, "field 'protocol': '256' is not a protocol"),
        ({"protocol": "-1"}, "field 'protocol': '-1' is not a protocol"),
        ({"port": 80}, "field 'port': a port needs protocol tcp or udp"),
        ({"protocol": "icmp", "port": 8}, "field 'port': a port needs protocol tcp or udp"),
        ({"protocol": "47", "port": 1}, "field 'port': a port needs protocol tcp or udp"),
        (
            {"fromIpAddress": "10.1.1.5/24"},
            "field 'fromIpAddress': 10.1.1.5/24 has host bits set; did you mean 10.1.1.0/24?",
        ),
        (
            {"direction": "out", "toIpAddress": "fd00::1/64"},
            "field 'toIpAddress': fd00::1/64 has host bits set; did you mean fd00::/64?",
        ),
        ({"fromIpAddress": "10.1.1.0/33"}, "field 'fromIpAddress': '10.1.1.0/33' is not an"),
        ({"fromIpAddress": "web"}, "field 'fromIpAddress': 'web' is not an address or CIDR"),
        ({"toEndpointGroup": "g"}, "field 'toEndpointGroup': an in rule matches traffic to"),
        ({"toNetwork": "n"}, "field 'toNetwork': an in rule"),
        ({"toIpAddress": "10.0.0.1"}, "field 'toIpAddress': an in rule"),
        ({"direction": "out", "fromEndpointGroup": "g"}, "field 'fromEndpointGroup': an out rule"),
        ({"direction": "out", "fromNetwork": "n"}, "field 'fromNetwork': an out rule"),
        ({"direction": "out", "fromIpAddress": "10.0.0.1"}, "field 'fromIpAddress': an out rule"),
        ({"fromEndpointGroup": "a/b"}, "field 'fromEndpointGroup': 'a/b' is not a name"),
        ({"fromNetwork": "x:y"}, "field 'fromNetwork': 'x:y' is not a name"),
        ({"ruleId": "r:1"}, "invalid name"),
        ({"policyName": "p/1"}, "invalid name"),
    ],
)
def test_a_bad_rule_field_is_a_400_naming_it(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadRequest) as e:
        normalize_rule(rule(**fields))
    assert reason in e.value.reason
    assert e.value.status == 400


def test_the_wrong_side_of_a_rule_says_which_fields_select_its_peer() -> None:
    with pytest.raises(BadRequest) as e:
        normalize_rule(rule(toEndpointGroup="g"))
    assert str(e.value) == (
        "rule t:p:r: field 'toEndpointGroup': an in rule matches traffic to the groups its "
        "policy is attached to; select the source with the from* fields"
    )
    with pytest.raises(BadRequest) as e:
        normalize_rule(rule(direction="out", fromNetwork="n"))
    assert e.value.reason.endswith("select the destination with the to* fields")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"direction": "both"}, "field 'direction': Input should be 'in' or 'out'"),
        ({"action": "drop"}, "field 'action': Input should be 'allow' or 'deny'"),
        ({"priority": 0}, "field 'priority': Input should be greater than or equal to 1"),
        ({"priority": 101}, "field 'priority': Input should be less than or equal to 100"),
        ({"port": 65536}, "field 'port': Input should be less than or equal to 65535"),
        ({"port": -1}, "field 'port': Input should be greater than or equal to 0"),
        ({"priority": "high"}, "field 'priority': Input should be a valid integer"),
        ({"protocol": ["tcp"]}, "field 'protocol': Input should be a valid string"),
        ({"bogus": 1}, "field 'bogus': unknown field"),
    ],
)
def test_bad_rule_bodies_are_400s_naming_the_field(body: dict[str, Any], reason: str) -> None:
    full = {"tenantName": "t", "policyName": "p", "ruleId": "r", **body}
    with pytest.raises(BadRequest) as e:
        parse_body(Rule, full, "rule t:p:r")
    assert reason in e.value.reason


def test_rule_defaults_are_contivs() -> None:
    r = rule()
    assert (r.direction, r.priority, r.action, r.protocol, r.port) == ("in", 1, "allow", "", 0)
    assert r.id == "t:p:r" and r.policy_id == "t:p" and r.dump()["key"] == "t:p:r"


# --- what a rule names ---

NAMES_GROUPS = {"web", "db"}
NAMES_NETS = {"n1"}


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"fromEndpointGroup": "web"}, None),
        ({"fromEndpointGroup": "web", "fromNetwork": "n1"}, None),
        ({"direction": "out", "toEndpointGroup": "db", "toNetwork": "n1"}, None),
        (
            {"fromEndpointGroup": "app"},
            "rule t:p:r: field 'fromEndpointGroup': endpoint group t:app not found; create it",
        ),
        (
            {"direction": "out", "toEndpointGroup": "app"},
            "rule t:p:r: field 'toEndpointGroup': endpoint group t:app not found",
        ),
        ({"fromNetwork": "n2"}, "rule t:p:r: field 'fromNetwork': network t:n2 not found"),
        (
            {"direction": "out", "toNetwork": "web"},
            "rule t:p:r: field 'toNetwork': network t:web not found",
        ),
    ],
)
def test_a_rule_names_only_groups_and_networks_that_exist(
    fields: dict[str, Any], error: str | None
) -> None:
    r = rule(**fields)
    if error is None:
        policies.check_rule_refs(r, NAMES_GROUPS, NAMES_NETS)
        return
    with pytest.raises(NotFound) as e:
        policies.check_rule_refs(r, NAMES_GROUPS, NAMES_NETS)
    assert str(e.value).startswith(error)


RULES = [
    rule(ruleId="1", fromEndpointGroup="web"),
    rule(ruleId="2", direction="out", toEndpointGroup="db", toNetwork="n1"),
    rule(policyName="q", ruleId="3", fromNetwork="n1"),
    rule(policyName="q", ruleId="4", fromIpAddress="10.0.0.0/8"),
]


@pytest.mark.parametrize(
    ("name", "by_group", "by_network"),
    [
        ("web", ["t:p:1"], []),
        ("db", ["t:p:2"], []),
        ("n1", [], ["t:p:2", "t:q:3"]),
        ("other", [], []),
    ],
)
def test_which_rules_name_a_group_or_a_network(
    name: str, by_group: list[str], by_network: list[str]
) -> None:
    assert policies.naming_group(name, RULES) == by_group
    assert policies.naming_network(name, RULES) == by_network


# --- policies and groups ---

GROUPS = [
    EndpointGroup(tenantName="t", groupName="web", networkName="n1", policies=["p", "q"]),
    EndpointGroup(tenantName="t", groupName="db", networkName="n1", policies=["q"]),
    EndpointGroup(tenantName="t", groupName="free", networkName="n1"),
]


@pytest.mark.parametrize(
    ("policy", "groups_", "error"),
    [
        ("p", ["web"], "policy t:p: it is attached to endpoint group(s) web; detach it first"),
        ("q", ["web", "db"], "policy t:q: it is attached to endpoint group(s) web, db; detach"),
        ("r", [], None),
    ],
)
def test_a_policy_goes_only_when_no_group_attaches_it(
    policy: str, groups_: list[str], error: str | None
) -> None:
    assert policies.attached(policy, GROUPS) == groups_
    if error is None:
        policies.check_deletable(f"t:{policy}", groups_)
        return
    with pytest.raises(Conflict) as e:
        policies.check_deletable(f"t:{policy}", groups_)
    assert str(e.value).startswith(error)


@pytest.mark.parametrize(
    ("attaches", "known", "error"),
    [
        ([], set(), None),
        (["p"], {"p", "q"}, None),
        (["p", "x"], {"p"}, "endpoint group t:g: policy t:x not found; create it first"),
        (["x"], set(), "endpoint group t:g: policy t:x not found"),
    ],
)
def test_a_group_attaches_only_policies_that_exist(
    attaches: list[str], known: set[str], error: str | None
) -> None:
    g = EndpointGroup(tenantName="t", groupName="g", networkName="n", policies=attaches)
    if error is None:
        groups.check_policies_exist(g, known)
        return
    with pytest.raises(NotFound) as e:
        groups.check_policies_exist(g, known)
    assert str(e.value).startswith(error)


def test_a_groups_policies_are_names_each_once() -> None:
    net = Network(tenantName="t", networkName="n", subnet="10.1.0.0/24")
    g = EndpointGroup(tenantName="t", groupName="g", networkName="n", policies=["b", "a", "b"])
    assert normalize_group(g, net).policies == ["b", "a"]
    with pytest.raises(BadRequest, match=r"field 'policies': 'a:b' is not a policy name"):
        normalize_group(g.model_copy(update={"policies": ["a:b"]}), net)


# --- guards against deleting what rules name ---


@pytest.mark.parametrize(
    ("check", "args", "error"),
    [
        (groups.check_unreferenced, ("t:web", []), None),
        (
            groups.check_unreferenced,
            ("t:web", ["t:p:1", "t:q:2"]),
            "endpoint group t:web: it is named by rule(s) t:p:1, t:q:2; remove the rule(s) first",
        ),
        (networks.check_unnamed, ("t:n1", []), None),
        (
            networks.check_unnamed,
            ("t:n1", ["t:p:2"]),
            "network t:n1: it is named by rule(s) t:p:2; remove the rule(s) first",
        ),
        (networks.check_deletable, ("t:n1", [], [], []), None),
        (networks.check_deletable, ("t:n1", [], [], ["t:p:2"]), "network t:n1: it is named by"),
        (networks.check_deletable, ("t:n1", [], ["g"], ["t:p:2"]), "network t:n1: endpoint group"),
        (tenants.check_no_children, ("t", [], [], []), None),
        (
            tenants.check_no_children,
            ("t", ["t:n1"], ["web"], ["p", "q"]),
            "tenant t: it still has network t:n1, endpoint group web, policy p, policy q; delete",
        ),
        (tenants.check_no_children, ("t", [], [], ["p"]), "tenant t: it still has policy p;"),
    ],
)
def test_delete_guards(check: Any, args: tuple[Any, ...], error: str | None) -> None:
    if error is None:
        check(*args)
        return
    with pytest.raises(Conflict) as e:
        check(*args)
    assert str(e.value).startswith(error)


# --- a group and a network of one tenant never share a name ---


def test_a_group_and_a_network_never_share_a_name() -> None:
    groups.check_name_free(EndpointGroup(groupName="web", networkName="n"), False)
    networks.check_name_free("default:web", "default", "web", False)
    with pytest.raises(Conflict) as e:
        groups.check_name_free(
            EndpointGroup(tenantName="b", groupName="web", networkName="n"), True
        )
    assert str(e.value) == (
        "endpoint group b:web: network b:web has the name web (both would be docker network "
        "web/b); choose another name"
    )
    with pytest.raises(Conflict) as e:
        networks.check_name_free("default:web", "default", "web", True)
    assert str(e.value) == (
        "network default:web: endpoint group default:web has the name web (both would be "
        "docker network web); choose another name"
    )
    with pytest.raises(Conflict) as e:  # a rename: the network keeps its id in the refusal
        networks.check_name_free("default:old", "default", "web", True)
    assert str(e.value).startswith("network default:old: endpoint group default:web has the")


# --- group tags ---


@pytest.mark.parametrize(
    ("used", "tag"),
    [
        (set(), 1),
        ({1, 2, 3}, 4),
        ({2, 3}, 1),
        ({1, 3}, 2),
        ({1, 2**31 - 1}, 2),
        (set(range(1, 1000)) - {500}, 500),
    ],
)
def test_the_first_free_group_tag(used: set[int], tag: int) -> None:
    assert groups.choose_group_tag("t:g", used) == tag


def test_group_tags_run_out_at_bit_31(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(groups, "MAX_GROUP_TAG", 3)
    assert groups.choose_group_tag("t:g", {1, 2}) == 3
    with pytest.raises(Conflict, match=r"endpoint group t:g: no free group tag left \(1-3\)"):
        groups.choose_group_tag("t:g", {1, 2, 3})
