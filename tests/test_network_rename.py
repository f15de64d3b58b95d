"""Renaming a network carries its endpoint groups along, in the rename's own transaction:
through the REST API against the real control plane, and against writers that slip in
between the rename's reads and its commit. The store holds together after each
(master.decisions.consistency.check_state)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from test_master_guards import before_commit_of, holds_together

from common import keys
from common.models import EndpointGroup, Network
from master.decisions.consistency import check_state
from master.state import ClusterState
from testbed.real_master import RealMaster, real_master

SUBNET = "10.61.0.0/24"
WEB_POOL = "10.61.0.100-10.61.0.110"


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RealMaster]:
    with real_master(tmp_path) as m:
        yield m


class Api:
    def __init__(self, master: RealMaster) -> None:
        self.session = master.session()
        self.base = f"{master.url}/api/v1"

    def call(self, method: str, path: str, body: Any = None) -> requests.Response:
        return self.session.request(method, f"{self.base}/{path}", json=body)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = self.call(method, path, body)
        assert r.status_code in (200, 201), r.text
        return r.json()


def groups_by_name(api: Api) -> dict[str, dict[str, Any]]:
    return {g["groupName"]: g for g in api.ok("GET", "endpointGroups")}


def test_a_renamed_network_keeps_its_groups(master: RealMaster) -> None:
    api = Api(master)
    api.ok("POST", "networks/default:a", {"subnet": SUBNET})
    api.ok("POST", "endpointGroups/default:web", {"networkName": "a", "ipPool": WEB_POOL})
    api.ok("POST", "endpointGroups/default:app", {"networkName": "a"})
    api.ok("POST", "networks/default:other", {"subnet": "10.62.0.0/24"})
    api.ok("POST", "endpointGroups/default:db", {"networkName": "other"})
    tag = api.ok("GET", "inspect/endpointGroups/default:web")["Oper"]["groupTag"]

    assert api.ok("POST", "networks/default:a/rename", {"networkName": "b"})["networkName"] == "b"

    groups = groups_by_name(api)
    assert {n: g["networkName"] for n, g in groups.items()} == {
        "app": "b",
        "db": "other",
        "web": "b",
    }
    assert groups["web"]["ipPool"] == WEB_POOL
    assert api.ok("GET", "inspect/endpointGroups/default:web")["Oper"]["groupTag"] == tag
    assert check_state(master.snapshot()) == []

    # The group's containers go on b, from its ip-pool: as endpoints, and through the pool
    # id of the group's docker network (Docker's RequestAddress comes first).
    ep = api.ok(
        "POST", "alloc/endpoints", {"endpointID": "e1", "networkName": "b", "groupName": "web"}
    )
    assert ep["ipAddress"] == "10.61.0.100"
    got = api.ok("POST", "alloc/addresses", {"poolID": f"default:{SUBNET}@web", "owner": "r1"})
    assert got["address"] == "10.61.0.101/24"

    # b goes only once its groups do, and a new network a adopts none of them.
    api.ok("DELETE", "alloc/endpoints/e1")
    r = api.call("DELETE", "networks/default:b")
    assert r.status_code == 409
    assert r.json()["reason"] == "endpoint group(s) app, web use it; delete them first"
    api.ok("POST", "networks/default:a", {"subnet": "10.63.0.0/24"})
    assert {n: g["networkName"] for n, g in groups_by_name(api).items()} == {
        "app": "b",
        "db": "other",
        "web": "b",
    }
    assert check_state(master.snapshot()) == []


def test_a_group_made_on_the_old_name_meanwhile_is_carried_too(state: ClusterState) -> None:
    state.networks.put(Network(networkName="a", subnet=SUBNET))
    state.groups.put(EndpointGroup(groupName="web", networkName="a"))
    late = EndpointGroup(groupName="late", networkName="a")
    before_commit_of(state, keys.network("default", "b"), lambda: state.groups.put(late))
    state.networks.rename("default", "a", "b")
    assert {g.groupName: g.networkName for g in state.groups.list()} == {"late": "b", "web": "b"}
    holds_together(state)


def test_a_group_changed_meanwhile_is_carried_as_it_now_is(state: ClusterState) -> None:
    state.networks.put(Network(networkName="a", subnet=SUBNET))
    state.groups.put(EndpointGroup(groupName="web", networkName="a", ipPool=WEB_POOL))
    moved = {"ipPool": "10.61.0.200-10.61.0.210"}
    before_commit_of(
        state, keys.network("default", "b"), lambda: state.groups.patch("default", "web", moved)
    )
    state.networks.rename("default", "a", "b")
    web = state.groups.get("default", "web")
    assert (web.networkName, web.ipPool) == ("b", "10.61.0.200-10.61.0.210")
    holds_together(state)


def test_a_network_renamed_meanwhile_takes_no_group(state: ClusterState) -> None:
    """A group made on a network whose rename commits between the group's reads and its own
    commit is refused (the network it names is gone), never stranded."""
    state.networks.put(Network(networkName="a", subnet=SUBNET))
    rename = lambda: state.networks.rename("default", "a", "b")  # noqa: E731
    before_commit_of(state, keys.group("default", "web"), rename)
    with pytest.raises(Exception, match="network default:a: not found"):
        state.groups.put(EndpointGroup(groupName="web", networkName="a"))
    assert state.groups.list() == []
    holds_together(state)
