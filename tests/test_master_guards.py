"""Each guard is also a compare in the same txn: a writer that slips in between a guard's
read and its commit makes the commit fail, and the retry sees it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from common import keys
from common.models import EndpointGroup, EndpointRequest, Network, Tenant
from master.errors import Conflict
from master.service import ClusterState
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
    return lambda: state.create_endpoint(
        EndpointRequest(endpointID=eid, networkName="n", groupName=group)
    )


def test_a_group_does_not_move_under_an_endpoint_that_just_joined(state: ClusterState) -> None:
    state.put_network(Network(networkName="n", subnet="10.1.0.0/24"))
    g = EndpointGroup(groupName="g", networkName="n", ipPool="10.1.0.10-10.1.0.20")
    state.put_group(g)
    before_commit_of(
        state,
        keys.group("default", "g"),
        join(state, group="g"),
    )
    with pytest.raises(Conflict, match="cannot change while 1 endpoint"):
        state.put_group(g.model_copy(update={"ipPool": "10.1.0.30-10.1.0.40"}))
    assert state.get_group("default", "g").ipPool == "10.1.0.10-10.1.0.20"
    assert state.get_endpoint("e").ipAddress == "10.1.0.10"


def test_a_group_goes_only_without_members(state: ClusterState) -> None:
    state.put_network(Network(networkName="n", subnet="10.1.0.0/24"))
    state.put_group(EndpointGroup(groupName="g", networkName="n"))
    before_commit_of(state, keys.group("default", "g"), join(state, group="g"))
    with pytest.raises(Conflict, match="endpoint group default:g: it still has 1 endpoint"):
        state.delete_group("default", "g")
    assert state.get_group("default", "g").groupName == "g"


def test_a_network_is_readdressed_only_without_endpoints(state: ClusterState) -> None:
    state.put_network(Network(networkName="n", subnet="10.1.0.0/24"))
    before_commit_of(state, keys.network("default", "n"), join(state))
    with pytest.raises(Conflict, match="cannot change while 1 endpoint"):
        state.put_network(Network(networkName="n", subnet="10.2.0.0/24"))
    assert state.get_network("default", "n").subnet == "10.1.0.0/24"
    assert state.get_endpoint("e").ipAddress == "10.1.0.2"


def test_fwd_mode_changes_only_without_networks(state: ClusterState) -> None:
    routing = state.get_global().model_copy(update={"fwdMode": "routing"})
    before_commit_of(
        state,
        keys.GLOBAL,
        lambda: state.put_network(Network(networkName="n", subnet="10.1.0.0/24")),
    )
    with pytest.raises(
        Conflict, match=r"fwd-mode cannot change from bridge to routing while 1 network\(s\) exist"
    ):
        state.put_global(routing)
    assert state.get_global().fwdMode == "bridge"


def test_a_tag_range_does_not_shrink_below_a_new_network(state: ClusterState) -> None:
    narrow = state.get_global().model_copy(update={"vxlans": "2-100"})
    before_commit_of(
        state,
        keys.GLOBAL,
        lambda: state.put_network(Network(networkName="n", subnet="10.1.0.0/24")),
    )
    with pytest.raises(Conflict, match="would exclude vxlan tag 1 in use by network default:n"):
        state.put_global(narrow)
    assert state.get_global().vxlans == "1-10000"


def test_a_network_goes_only_without_endpoints(state: ClusterState) -> None:
    state.put_network(Network(networkName="n", subnet="10.1.0.0/24"))
    before_commit_of(
        state,
        keys.network("default", "n"),
        lambda: state.create_endpoint(EndpointRequest(endpointID="e", networkName="n", host="h1")),
    )
    with pytest.raises(Conflict, match=r"it still has 1 endpoint\(s\) on host\(s\) h1"):
        state.delete_network("default", "n")
    assert state.get_network("default", "n").subnet == "10.1.0.0/24"


def test_a_tenant_goes_only_without_children(state: ClusterState) -> None:
    state.put_tenant(Tenant(tenantName="blue"))
    before_commit_of(
        state,
        keys.tenant("blue"),
        lambda: state.put_network(
            Network(tenantName="blue", networkName="n", subnet="10.1.0.0/24")
        ),
    )
    with pytest.raises(Conflict, match="tenant blue: it still has network blue:n"):
        state.delete_tenant("blue")
    assert state.get_tenant("blue").tenantName == "blue"
