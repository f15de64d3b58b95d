"""Each guard is also a compare in the same txn: a writer that slips in between a guard's
read and its commit makes the commit fail, and the retry sees it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from common import keys
from common.models import (
    EndpointGroup,
    EndpointRequest,
    NetProfile,
    Network,
    Policy,
    Rule,
    Tenant,
)
from common.records import encode_config
from master.decisions.consistency import check_state
from master.errors import Conflict, NotFound
from master.state import ClusterState
from store import Compare, Op, TxnResult


def before_commit_of(state: ClusterState, key: str, writer: Callable[[], object]) -> None:
    """Run ``writer`` once, just before the first txn that writes ``key`` is sent."""
    real = state.store.txn
    pending = [writer]

    def txn(compares: Sequence[Compare], ops: Sequence[Op]) -> TxnResult:
        if pending and any(op.key == key for op in ops):
            pending.pop()()
        return real(compares, ops)

    state.store.txn = txn  # type: ignore[method-assign]


def join(state: ClusterState, eid: str = "e", group: str = "") -> Callable[[], object]:
    return lambda: state.endpoints.create(
        EndpointRequest(endpointID=eid, networkName="n", groupName=group)
    )


def test_a_group_does_not_move_under_an_endpoint_that_just_joined(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    g = EndpointGroup(groupName="g", networkName="n", ipPool="10.1.0.10-10.1.0.20")
    state.groups.put(g)
    before_commit_of(
        state,
        keys.group("default", "g"),
        join(state, group="g"),
    )
    with pytest.raises(Conflict, match="cannot change while 1 endpoint"):
        state.groups.put(g.model_copy(update={"ipPool": "10.1.0.30-10.1.0.40"}))
    assert state.groups.get("default", "g").ipPool == "10.1.0.10-10.1.0.20"
    assert state.endpoints.get("e").ipAddress == "10.1.0.10"


def test_a_group_goes_only_without_members(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    state.groups.put(EndpointGroup(groupName="g", networkName="n"))
    before_commit_of(state, keys.group("default", "g"), join(state, group="g"))
    with pytest.raises(Conflict, match="endpoint group default:g: it still has 1 endpoint"):
        state.groups.delete("default", "g")
    assert state.groups.get("default", "g").groupName == "g"


def test_a_network_is_readdressed_only_without_endpoints(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    before_commit_of(state, keys.network("default", "n"), join(state))
    with pytest.raises(Conflict, match="cannot change while 1 endpoint"):
        state.networks.put(Network(networkName="n", subnet="10.2.0.0/24"))
    assert state.networks.get("default", "n").subnet == "10.1.0.0/24"
    assert state.endpoints.get("e").ipAddress == "10.1.0.2"


def test_fwd_mode_changes_only_without_networks(state: ClusterState) -> None:
    routing = state.settings.get().model_copy(update={"fwdMode": "routing"})
    before_commit_of(
        state,
        keys.GLOBAL,
        lambda: state.networks.put(Network(networkName="n", subnet="10.1.0.0/24")),
    )
    with pytest.raises(
        Conflict, match=r"fwd-mode cannot change from bridge to routing while 1 network\(s\) exist"
    ):
        state.settings.put(routing)
    assert state.settings.get().fwdMode == "bridge"


def test_a_tag_range_does_not_shrink_below_a_new_network(state: ClusterState) -> None:
    narrow = state.settings.get().model_copy(update={"vxlans": "2-100"})
    before_commit_of(
        state,
        keys.GLOBAL,
        lambda: state.networks.put(Network(networkName="n", subnet="10.1.0.0/24")),
    )
    with pytest.raises(Conflict, match="would exclude vxlan tag 1 in use by network default:n"):
        state.settings.put(narrow)
    assert state.settings.get().vxlans == "1-10000"


def test_a_network_goes_only_without_endpoints(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    before_commit_of(
        state,
        keys.network("default", "n"),
        lambda: state.endpoints.create(EndpointRequest(endpointID="e", networkName="n", host="h1")),
    )
    with pytest.raises(Conflict, match=r"it still has 1 endpoint\(s\) on host\(s\) h1"):
        state.networks.delete("default", "n")
    assert state.networks.get("default", "n").subnet == "10.1.0.0/24"


def test_a_tenant_goes_only_without_children(state: ClusterState) -> None:
    state.tenants.put(Tenant(tenantName="blue"))
    before_commit_of(
        state,
        keys.tenant("blue"),
        lambda: state.networks.put(
            Network(tenantName="blue", networkName="n", subnet="10.1.0.0/24")
        ),
    )
    with pytest.raises(Conflict, match="tenant blue: it still has network blue:n"):
        state.tenants.delete("blue")
    assert state.tenants.get("blue").tenantName == "blue"


# --- policies, rules and groups: each side of every race, and the store holds together ---


def holds_together(state: ClusterState) -> None:
    scan = {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}
    assert [str(p) for p in check_state(scan)] == []


@pytest.fixture
def pol(state: ClusterState) -> ClusterState:
    """A network n, a group g on it and a policy p, all in the default tenant."""
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    state.groups.put(EndpointGroup(groupName="g", networkName="n"))
    state.policies.put(Policy(policyName="p"))
    return state


def attach(state: ClusterState, group: str = "g") -> Callable[[], object]:
    return lambda: state.groups.put(EndpointGroup(groupName=group, networkName="n", policies=["p"]))


def add_rule(state: ClusterState, rule_id: str = "1", **fields: object) -> Callable[[], object]:
    return lambda: state.rules.put(Rule(policyName="p", ruleId=rule_id, **fields))  # type: ignore[arg-type]


def test_a_policy_is_not_deleted_under_a_group_that_just_attached_it(pol: ClusterState) -> None:
    before_commit_of(pol, keys.policy("default", "p"), attach(pol))
    with pytest.raises(Conflict, match="policy default:p: it is attached to endpoint group"):
        pol.policies.delete("default", "p")
    assert pol.groups.get("default", "g").policies == ["p"]
    holds_together(pol)


def test_a_group_does_not_attach_a_policy_deleted_meanwhile(pol: ClusterState) -> None:
    before_commit_of(pol, keys.group("default", "g"), lambda: pol.policies.delete("default", "p"))
    with pytest.raises(NotFound, match="policy default:p not found; create it first"):
        attach(pol)()
    assert pol.groups.get("default", "g").policies == []
    holds_together(pol)


def test_a_group_is_not_deleted_under_a_rule_that_just_named_it(pol: ClusterState) -> None:
    before_commit_of(pol, keys.group("default", "g"), add_rule(pol, fromEndpointGroup="g"))
    with pytest.raises(Conflict, match="it is named by rule\\(s\\) default:p:1; remove"):
        pol.groups.delete("default", "g")
    assert pol.rules.get("default", "p", "1").fromEndpointGroup == "g"
    holds_together(pol)


def test_a_rule_does_not_name_a_group_deleted_meanwhile(pol: ClusterState) -> None:
    before_commit_of(pol, keys.rule("default", "p", "1"), lambda: pol.groups.delete("default", "g"))
    with pytest.raises(NotFound, match="endpoint group default:g not found"):
        add_rule(pol, direction="out", toEndpointGroup="g")()
    assert pol.rules.list() == []
    holds_together(pol)


def test_a_rule_added_while_its_policy_goes_goes_with_it(pol: ClusterState) -> None:
    before_commit_of(pol, keys.policy("default", "p"), add_rule(pol))
    pol.policies.delete("default", "p")
    assert pol.rules.list() == []  # the cascade took the rule written after the read
    holds_together(pol)


def test_a_rule_is_not_added_to_a_policy_deleted_meanwhile(pol: ClusterState) -> None:
    before_commit_of(
        pol, keys.rule("default", "p", "1"), lambda: pol.policies.delete("default", "p")
    )
    with pytest.raises(NotFound, match="rule default:p:1: policy default:p not found"):
        add_rule(pol)()
    assert pol.rules.list() == []
    holds_together(pol)


def test_a_network_is_not_deleted_under_a_rule_that_just_named_it(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    state.policies.put(Policy(policyName="p"))
    before_commit_of(state, keys.network("default", "n"), add_rule(state, fromNetwork="n"))
    with pytest.raises(Conflict, match="network default:n: it is named by rule\\(s\\) default:p:1"):
        state.networks.delete("default", "n")
    assert state.networks.get("default", "n").networkName == "n"
    holds_together(state)


def test_a_network_is_not_renamed_under_a_rule_that_just_named_it(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    state.policies.put(Policy(policyName="p"))
    before_commit_of(state, keys.network("default", "n2"), add_rule(state, fromNetwork="n"))
    with pytest.raises(Conflict, match="network default:n: it is named by rule\\(s\\) default:p:1"):
        state.networks.rename("default", "n", "n2")
    assert [n.networkName for n in state.networks.list()] == ["n"]
    holds_together(state)


def test_a_rule_does_not_name_a_network_deleted_meanwhile(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    state.policies.put(Policy(policyName="p"))
    before_commit_of(
        state, keys.rule("default", "p", "1"), lambda: state.networks.delete("default", "n")
    )
    with pytest.raises(NotFound, match="field 'fromNetwork': network default:n not found"):
        add_rule(state, fromNetwork="n")()
    assert state.rules.list() == []
    holds_together(state)


def test_a_tenant_is_not_deleted_under_a_policy_just_made(state: ClusterState) -> None:
    state.tenants.put(Tenant(tenantName="blue"))
    before_commit_of(
        state,
        keys.tenant("blue"),
        lambda: state.policies.put(Policy(tenantName="blue", policyName="p")),
    )
    with pytest.raises(Conflict, match="tenant blue: it still has policy p; delete them first"):
        state.tenants.delete("blue")
    assert state.policies.get("blue", "p").id == "blue:p"
    holds_together(state)


def test_a_policy_is_not_made_in_a_tenant_deleted_meanwhile(state: ClusterState) -> None:
    state.tenants.put(Tenant(tenantName="blue"))
    before_commit_of(state, keys.policy("blue", "p"), lambda: state.tenants.delete("blue"))
    with pytest.raises(NotFound, match="tenant blue: not found; create it first"):
        state.policies.put(Policy(tenantName="blue", policyName="p"))
    assert state.policies.list() == []
    holds_together(state)


def test_a_group_and_a_network_made_at_once_under_one_name(state: ClusterState) -> None:
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/24"))
    web = Network(networkName="web", subnet="10.2.0.0/24")
    before_commit_of(state, keys.group("default", "web"), lambda: state.networks.put(web))
    with pytest.raises(Conflict, match="network default:web has the name web"):
        state.groups.put(EndpointGroup(groupName="web", networkName="n"))
    assert state.groups.list() == []
    before_commit_of(
        state,
        keys.network("default", "db"),
        lambda: state.groups.put(EndpointGroup(groupName="db", networkName="n")),
    )
    with pytest.raises(Conflict, match="endpoint group default:db has the name db"):
        state.networks.put(Network(networkName="db", subnet="10.3.0.0/24"))
    assert [n.networkName for n in state.networks.list()] == ["n", "web"]
    holds_together(state)


def test_two_groups_made_at_once_get_different_tags(state: ClusterState) -> None:
    # Tags are cluster-wide: groups of two tenants (which no other guard orders) race for 1.
    state.tenants.put(Tenant(tenantName="blue"))
    for t in ("default", "blue"):
        state.networks.put(Network(tenantName=t, networkName="n", subnet="10.1.0.0/24"))
    before_commit_of(
        state,
        keys.group("default", "a"),
        lambda: state.groups.put(EndpointGroup(tenantName="blue", groupName="b", networkName="n")),
    )
    state.groups.put(EndpointGroup(groupName="a", networkName="n"))
    tags = {
        t: state.groups.inspect(t, g)["Oper"]["groupTag"]
        for t, g in (("default", "a"), ("blue", "b"))
    }
    assert tags == {"blue": 1, "default": 2}  # a chose 1 too, lost the race, and chose again
    holds_together(state)


def test_two_tenants_made_at_once_get_different_tags(state: ClusterState) -> None:
    # Each create compares its tag key absent: blue slips in with tag 2, red chose 2 too,
    # loses the race, and chooses again.
    before_commit_of(
        state, keys.tenant("red"), lambda: state.tenants.put(Tenant(tenantName="blue"))
    )
    state.tenants.put(Tenant(tenantName="red"))
    tags = {t: state.tenants.inspect(t)["Oper"]["tenantTag"] for t in ("default", "blue", "red")}
    assert tags == {"default": 1, "blue": 2, "red": 3}
    assert state.store.get(keys.tenant_tag(3)).value == b"red"  # type: ignore[union-attr]
    holds_together(state)


def test_a_tenant_tag_is_not_given_twice_by_a_backfill_and_a_create(state: ClusterState) -> None:
    # A tenant an earlier master stored without a tag is tagged at start while another
    # master creates a tenant: both chose tag 2, one compare fails, the other chooses again.
    state.store.put(keys.tenant("old"), encode_config(Tenant(tenantName="old")))
    before_commit_of(
        state, keys.tenant("old"), lambda: state.tenants.put(Tenant(tenantName="blue"))
    )
    assert state.tenants.tag_untagged() == 1
    tags = {t: state.tenants.inspect(t)["Oper"]["tenantTag"] for t in ("blue", "old")}
    assert tags == {"blue": 2, "old": 3}
    holds_together(state)


def test_a_tenant_deleted_meanwhile_frees_its_tag_once(state: ClusterState) -> None:
    state.tenants.put(Tenant(tenantName="blue"))
    before_commit_of(state, keys.tenant("blue"), lambda: state.tenants.delete("blue"))
    with pytest.raises(NotFound, match="tenant blue: not found"):
        state.tenants.delete("blue")  # its retry finds it gone
    assert state.store.get(keys.tenant_tag(2)) is None
    holds_together(state)


def test_two_patches_of_a_group_both_hold(pol: ClusterState) -> None:
    pol.netprofiles.put(NetProfile(profileName="gold", DSCP=46))
    before_commit_of(
        pol,
        keys.group("default", "g"),
        lambda: pol.groups.patch("default", "g", {"netProfile": "gold"}),
    )
    pol.groups.patch("default", "g", {"policies": ["p"]})
    g = pol.groups.get("default", "g")
    assert (g.policies, g.netProfile) == (["p"], "gold")  # GET+PUT would have lost one
    holds_together(pol)
