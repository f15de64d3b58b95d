"""Policies, rules and group tags in the real control plane (ClusterState on an embedded
store): what is stored, every refusal changes nothing, and the store holds together
(check_state) after each step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from common import keys
from common.models import EndpointGroup, EndpointRequest, Network, Policy, Rule, Tenant
from common.records import GroupRecord, decode_config, encode_config
from master.decisions.consistency import check_state
from master.errors import ApiError, BadRequest, Conflict, NotFound
from master.state import ClusterState


def everything(state: ClusterState) -> dict[str, bytes]:
    return {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}


def holds_together(state: ClusterState) -> None:
    assert [str(p) for p in check_state(everything(state))] == []


def refused(
    state: ClusterState, call: Callable[[], object], error: type[ApiError], message: str
) -> None:
    """``call`` is refused with ``message`` and changes nothing."""
    before = everything(state)
    with pytest.raises(error) as e:
        call()
    assert str(e.value) == message
    assert everything(state) == before


def tag_of(state: ClusterState, tenant: str, name: str) -> int:
    return GroupRecord.decode(state.store.get(keys.group(tenant, name)).value).tag  # type: ignore[union-attr]


@pytest.fixture
def net(state: ClusterState) -> ClusterState:
    state.tenants.put(Tenant(tenantName="t"))
    state.networks.put(Network(tenantName="t", networkName="n", subnet="10.1.0.0/24"))
    state.networks.put(Network(tenantName="t", networkName="m", subnet="10.2.0.0/24"))
    return state


def group(name: str, *policies: str, network: str = "n") -> EndpointGroup:
    return EndpointGroup(
        tenantName="t", groupName=name, networkName=network, policies=list(policies)
    )


def a_rule(policy: str = "p", rule_id: str = "1", **fields: Any) -> Rule:
    return Rule(tenantName="t", policyName=policy, ruleId=rule_id, **fields)


# --- policies and rules ---


def test_policy_and_rule_lifecycle(net: ClusterState) -> None:
    s = net
    assert s.policies.put(Policy(tenantName="t", policyName="p")).id == "t:p"
    s.policies.put(Policy(tenantName="t", policyName="p"))  # again: nothing changes
    stored = s.rules.put(a_rule(protocol="6", port=80, fromIpAddress="10.9.0.7", priority=10))
    assert (stored.protocol, stored.fromIpAddress) == ("tcp", "10.9.0.7/32")
    assert s.rules.get("t", "p", "1") == stored
    assert decode_config(Rule, s.store.get(keys.rule("t", "p", "1")).value) == stored  # type: ignore[union-attr]
    s.rules.put(a_rule(rule_id="2", direction="out", action="deny"))
    assert [r.id for r in s.rules.list("t")] == ["t:p:1", "t:p:2"]
    assert s.rules.list("default") == []
    assert [p.id for p in s.policies.list()] == ["t:p"]
    s.rules.put(a_rule(rule_id="2", direction="out", action="allow"))  # an update
    assert s.rules.get("t", "p", "2").action == "allow"
    s.rules.delete("t", "p", "2")
    with pytest.raises(NotFound, match="rule t:p:2: not found"):
        s.rules.get("t", "p", "2")
    holds_together(s)


def test_deleting_a_policy_deletes_its_rules(net: ClusterState) -> None:
    s = net
    for name in ("p", "pq"):
        s.policies.put(Policy(tenantName="t", policyName=name))
        s.rules.put(a_rule(name, "1"))
    s.policies.delete("t", "p")
    assert [r.id for r in s.rules.list("t")] == ["t:pq:1"]  # not a prefix match on "p"
    with pytest.raises(NotFound, match="policy t:p: not found"):
        s.policies.get("t", "p")
    holds_together(s)


def test_policy_refusals_change_nothing(net: ClusterState) -> None:
    s = net
    s.policies.put(Policy(tenantName="t", policyName="p"))
    s.groups.put(group("web", "p"))
    s.rules.put(a_rule(fromEndpointGroup="web", fromNetwork="n"))
    cases: list[tuple[Callable[[], object], type[ApiError], str]] = [
        (
            lambda: s.policies.put(Policy(tenantName="nosuch", policyName="p")),
            NotFound,
            "tenant nosuch: not found; create it first",
        ),
        (
            lambda: s.policies.put(Policy(tenantName="t", policyName="a:b")),
            BadRequest,
            "policy 'a:b': invalid name; use 1-64 letters, digits, '_', '.' or '-', starting "
            "with a letter or digit",
        ),
        (
            lambda: s.policies.delete("t", "p"),
            Conflict,
            "policy t:p: it is attached to endpoint group(s) web; detach it first",
        ),
        (lambda: s.policies.delete("t", "q"), NotFound, "policy t:q: not found"),
        (
            lambda: s.rules.put(a_rule("q")),
            NotFound,
            "rule t:q:1: policy t:q not found; create it first",
        ),
        (
            lambda: s.rules.put(a_rule(rule_id="2", fromEndpointGroup="db")),
            NotFound,
            "rule t:p:2: field 'fromEndpointGroup': endpoint group t:db not found; create it first",
        ),
        (
            lambda: s.rules.put(a_rule(rule_id="2", direction="out", toNetwork="x")),
            NotFound,
            "rule t:p:2: field 'toNetwork': network t:x not found; create it first",
        ),
        (
            lambda: s.rules.put(a_rule(rule_id="2", port=22)),
            BadRequest,
            "rule t:p:2: field 'port': a port needs protocol tcp or udp",
        ),
        (
            lambda: s.rules.put(a_rule(rule_id="2", fromIpAddress="10.1.1.5/24")),
            BadRequest,
            "rule t:p:2: field 'fromIpAddress': 10.1.1.5/24 has host bits set; did you mean "
            "10.1.1.0/24?",
        ),
        (lambda: s.rules.delete("t", "p", "9"), NotFound, "rule t:p:9: not found"),
        (
            lambda: s.groups.put(group("db", "p", "nosuch")),
            NotFound,
            "endpoint group t:db: policy t:nosuch not found; create it first",
        ),
        (
            lambda: s.groups.put(group("web", "p", "nosuch")),
            NotFound,
            "endpoint group t:web: policy t:nosuch not found; create it first",
        ),
        (
            lambda: s.groups.delete("t", "web"),
            Conflict,
            "endpoint group t:web: it is named by rule(s) t:p:1; remove the rule(s) first",
        ),
    ]
    for call, error, message in cases:
        refused(s, call, error, message)
    s.rules.put(a_rule(rule_id="3", fromNetwork="m"))
    refused(
        s,
        lambda: s.networks.delete("t", "m"),
        Conflict,
        "network t:m: it is named by rule(s) t:p:3; remove the rule(s) first",
    )
    refused(
        s,
        lambda: s.networks.rename("t", "m", "m2"),
        Conflict,
        "network t:m: it is named by rule(s) t:p:3; remove the rule(s) first",
    )
    refused(
        s,
        lambda: s.tenants.delete("t"),
        Conflict,
        "tenant t: it still has network t:m, network t:n, endpoint group web, policy p; "
        "delete them first",
    )
    holds_together(s)
    s.rules.delete("t", "p", "3")
    s.networks.rename("t", "m", "m2")
    s.networks.delete("t", "m2")
    s.rules.delete("t", "p", "1")
    s.groups.delete("t", "web")
    s.networks.delete("t", "n")
    refused(
        s,
        lambda: s.tenants.delete("t"),
        Conflict,
        "tenant t: it still has policy p; delete them first",
    )
    s.policies.delete("t", "p")
    s.tenants.delete("t")
    holds_together(s)


def test_a_rule_of_the_default_tenant_by_rest(client: FlaskClient) -> None:
    assert client.post("/api/v1/policys/web").json["key"] == "default:web"
    r = client.post("/api/v1/rules/web:1", json={"protocol": "TCP", "port": 80, "priority": 5})
    assert r.status_code == 200, r.json
    assert r.json == {
        "key": "default:web:1",
        "tenantName": "default",
        "policyName": "web",
        "ruleId": "1",
        "direction": "in",
        "priority": 5,
        "fromEndpointGroup": "",
        "toEndpointGroup": "",
        "fromNetwork": "",
        "toNetwork": "",
        "fromIpAddress": "",
        "toIpAddress": "",
        "protocol": "tcp",
        "port": 80,
        "action": "allow",
    }
    r = client.post("/api/v1/rules/web:2", json={"direction": "sideways"})
    assert r.status_code == 400
    assert r.json["object"] == "rule default:web:2"
    assert r.json["reason"].startswith("field 'direction': Input should be 'in' or 'out'")
    r = client.post("/api/v1/rules/web:2", json={"port": 80})
    assert (r.status_code, r.json["reason"]) == (
        400,
        "field 'port': a port needs protocol tcp or udp",
    )
    assert client.get("/api/v1/rules/web:2").status_code == 404
    assert client.delete("/api/v1/policys/web").json == {"deleted": "policy default:web"}
    assert client.get("/api/v1/rules").json == []


# --- groups: policies, tags, inspect ---


def test_group_tags_are_allocated_kept_and_freed(net: ClusterState) -> None:
    s = net
    s.groups.put(group("a"))
    s.groups.put(group("b"))
    assert (tag_of(s, "t", "a"), tag_of(s, "t", "b")) == (1, 2)
    assert s.store.get(keys.group_tag(1)).value == b"t:a"  # type: ignore[union-attr]
    s.policies.put(Policy(tenantName="t", policyName="p"))
    s.groups.put(group("a", "p", network="m"))  # an update keeps the tag
    assert tag_of(s, "t", "a") == 1
    s.groups.delete("t", "a")
    assert s.store.get(keys.group_tag(1)) is None
    s.groups.put(group("c"))
    assert tag_of(s, "t", "c") == 1  # the freed tag is the first free one
    assert s.groups.inspect("t", "c")["Oper"]["groupTag"] == 1
    holds_together(s)


def test_groups_stored_before_tags_get_one_at_start(net: ClusterState) -> None:
    s = net
    s.groups.put(group("new"))
    for name in ("old1", "old2"):  # as an earlier master wrote them: no tag, no tag key
        s.store.put(keys.group("t", name), encode_config(group(name)))
    assert tag_of(s, "t", "old1") == 0
    assert s.groups.get("t", "old1").groupName == "old1"  # readers read them as ever
    assert [p.what for p in check_state(everything(s))] == [
        "has no group tag (the master gives it one when it starts)"
    ] * 2
    s.ensure_defaults()
    assert {tag_of(s, "t", n) for n in ("new", "old1", "old2")} == {1, 2, 3}
    holds_together(s)
    before = everything(s)
    s.ensure_defaults()  # a second start changes nothing
    assert everything(s) == before
    # An update of a group with no tag gives it one too.
    s.store.put(keys.group("t", "old3"), encode_config(group("old3")))
    s.groups.put(group("old3"))
    assert tag_of(s, "t", "old3") == 4
    holds_together(s)


def test_inspect_policy(net: ClusterState) -> None:
    s = net
    s.policies.put(Policy(tenantName="t", policyName="p"))
    s.policies.put(Policy(tenantName="t", policyName="q"))
    s.groups.put(group("web", "p", "q"))
    s.groups.put(group("db", "q", network="m"))
    s.groups.put(group("other"))
    s.rules.put(a_rule("q", "1", fromEndpointGroup="web"))
    s.rules.put(a_rule("q", "2", protocol="udp"))
    for eid, net_name, grp in (("e1", "n", "web"), ("e2", "m", "db"), ("e3", "n", "other")):
        s.endpoints.create(
            EndpointRequest(endpointID=eid, tenantName="t", networkName=net_name, groupName=grp)
        )
    view = s.policies.inspect("t", "q")
    assert view["Config"] == {"key": "t:q", "tenantName": "t", "policyName": "q"}
    oper = view["Oper"]
    assert (oper["endpointGroups"], oper["numEndpoints"], oper["numRules"]) == (
        ["db", "web"],
        2,
        2,
    )
    assert sorted(e["endpointID"] for e in oper["endpoints"]) == ["e1", "e2"]
    assert oper["rules"] == ["1", "2"]
    assert s.policies.inspect("t", "p")["Oper"]["numRules"] == 0
    with pytest.raises(NotFound, match="policy t:x: not found"):
        s.policies.inspect("t", "x")


def test_patch_changes_only_the_given_fields(net: ClusterState) -> None:
    s = net
    s.policies.put(Policy(tenantName="t", policyName="p"))
    s.groups.put(
        EndpointGroup(tenantName="t", groupName="g", networkName="n", ipPool="10.1.0.10-10.1.0.20")
    )
    got = s.groups.patch("t", "g", {"policies": ["p", "p"]})
    assert (got.policies, got.ipPool) == (["p"], "10.1.0.10-10.1.0.20")
    assert s.groups.get("t", "g") == got
    refused(
        s,
        lambda: s.groups.patch("t", "g", {"policies": ["x"]}),
        NotFound,
        "endpoint group t:g: policy t:x not found; create it first",
    )
    refused(
        s,
        lambda: s.groups.patch("t", "g", {"policies": "p"}),
        BadRequest,
        "endpoint group t:g: field 'policies': Input should be a valid list",
    )
    refused(s, lambda: s.groups.patch("t", "x", {}), NotFound, "endpoint group t:x: not found")
    assert s.groups.patch("t", "g", {"policies": []}).policies == []
    holds_together(s)


def test_patch_by_rest(client: FlaskClient) -> None:
    client.post("/api/v1/networks/n", json={"subnet": "10.1.0.0/24"})
    client.post("/api/v1/netprofiles/gold", json={"bandwidth": "1gbps"})
    client.post("/api/v1/endpointGroups/g", json={"networkName": "n", "netProfile": "gold"})
    client.post("/api/v1/policys/p")
    r = client.patch("/api/v1/endpointGroups/g", json={"policies": ["p"]})
    assert r.status_code == 200, r.json
    assert (r.json["policies"], r.json["netProfile"]) == (["p"], "gold")
    r = client.patch("/api/v1/endpointGroups/g", json={"groupName": "h"})
    assert r.status_code == 400
    assert r.json["error"] == (
        "endpoint group default:g: field 'groupName' is 'h' but the URL names 'g'"
    )
    r = client.patch("/api/v1/endpointGroups/g", json={"bogus": 1})
    assert (r.status_code, r.json["reason"]) == (400, "field 'bogus': unknown field")
    assert client.get("/api/v1/endpointGroups/g").json["policies"] == ["p"]


# --- a group and a network of one tenant never share a name ---


def test_a_group_and_a_network_never_share_a_name(net: ClusterState) -> None:
    s = net
    s.groups.put(group("web"))
    refused(
        s,
        lambda: s.groups.put(group("m")),
        Conflict,
        "endpoint group t:m: network t:m has the name m (both would be docker network m/t); "
        "choose another name",
    )
    refused(
        s,
        lambda: s.networks.put(Network(tenantName="t", networkName="web", subnet="10.3.0.0/24")),
        Conflict,
        "network t:web: endpoint group t:web has the name web (both would be docker network "
        "web/t); choose another name",
    )
    refused(
        s,
        lambda: s.networks.rename("t", "m", "web"),
        Conflict,
        "network t:m: endpoint group t:web has the name web (both would be docker network "
        "web/t); choose another name",
    )
    # Other tenants' names do not clash.
    s.networks.put(Network(networkName="web", subnet="10.3.0.0/24"))
    holds_together(s)
