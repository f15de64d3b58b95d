"""Tenants and their tags in the real control plane (ClusterState on an embedded store):
a tag is given in the tenant's create txn, kept by updates, freed by its delete; tenants an
earlier master stored without one get one; tags running out refuse the create and store
nothing; inspect (REST and netctl) shows the tag; the store holds together after each step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from flask.testing import FlaskClient
from test_netctl import run

from common import keys
from common.models import Network, Tenant
from common.records import TenantRecord, encode_config
from master.app import create_app
from master.decisions.consistency import check_state
from master.errors import Conflict
from master.state import ClusterState
from master.tenants import Tenants
from store import open_store


def everything(state: ClusterState) -> dict[str, bytes]:
    return {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}


def holds_together(state: ClusterState) -> None:
    assert [str(p) for p in check_state(everything(state))] == []


def tag_of(state: ClusterState, name: str) -> int:
    return TenantRecord.decode(state.store.get(keys.tenant(name)).value).tag  # type: ignore[union-attr]


def holder(state: ClusterState, tag: int) -> bytes | None:
    kv = state.store.get(keys.tenant_tag(tag))
    return kv.value if kv is not None else None


def test_the_default_tenant_has_a_tag(state: ClusterState) -> None:
    assert tag_of(state, "default") == 1 and holder(state, 1) == b"default"
    before = everything(state)
    state.ensure_defaults()  # a second start changes nothing
    assert everything(state) == before
    holds_together(state)


def test_tenant_tags_are_allocated_kept_and_freed(state: ClusterState) -> None:
    s = state
    s.tenants.put(Tenant(tenantName="blue"))
    s.tenants.put(Tenant(tenantName="red"))
    assert (tag_of(s, "blue"), tag_of(s, "red")) == (2, 3)
    assert (holder(s, 2), holder(s, 3)) == (b"blue", b"red")
    s.networks.put(Network(tenantName="blue", networkName="n", subnet="10.1.0.0/24"))
    s.tenants.put(Tenant(tenantName="blue", defaultNetwork="n"))  # an update keeps the tag
    assert tag_of(s, "blue") == 2 and s.tenants.get("blue").defaultNetwork == "n"
    before = everything(s)
    s.tenants.put(Tenant(tenantName="blue", defaultNetwork="n"))  # unchanged: not rewritten
    assert everything(s) == before
    holds_together(s)
    s.networks.delete("blue", "n")
    s.tenants.delete("blue")  # the tag goes in the same txn
    assert holder(s, 2) is None and s.store.get(keys.tenant("blue")) is None
    holds_together(s)
    s.tenants.put(Tenant(tenantName="green"))
    assert tag_of(s, "green") == 2  # the freed tag is the first free one
    assert [t.tenantName for t in s.tenants.list()] == ["default", "green", "red"]
    holds_together(s)


def test_a_refused_delete_keeps_the_tag(state: ClusterState) -> None:
    state.tenants.put(Tenant(tenantName="blue"))
    state.networks.put(Network(tenantName="blue", networkName="n", subnet="10.1.0.0/24"))
    before = everything(state)
    with pytest.raises(Conflict, match="it still has network blue:n"):
        state.tenants.delete("blue")
    assert everything(state) == before


def test_tenants_stored_before_tags_are_read_and_get_one_at_start(state: ClusterState) -> None:
    s = state
    s.tenants.put(Tenant(tenantName="new"))  # tag 2
    for name in ("old1", "old2"):  # as an earlier master wrote them: no tag, no tag key
        s.store.put(keys.tenant(name), encode_config(Tenant(tenantName=name, defaultNetwork="x")))
    assert tag_of(s, "old1") == 0
    assert s.tenants.get("old1").defaultNetwork == "x"  # readers read them as ever
    assert s.tenants.inspect("old1")["Oper"]["tenantTag"] == 0
    assert [p.what for p in check_state(everything(s))] == [
        "has no tenant tag (the master gives it one when it starts)"
    ] * 2
    s.ensure_defaults()
    assert {tag_of(s, n) for n in ("default", "new", "old1", "old2")} == {1, 2, 3, 4}
    assert s.tenants.get("old1").defaultNetwork == "x"  # the config is kept
    holds_together(s)
    before = everything(s)
    s.ensure_defaults()  # a second start changes nothing
    assert everything(s) == before
    # A write of a tenant with no tag gives it one too.
    s.store.put(keys.tenant("old3"), encode_config(Tenant(tenantName="old3")))
    s.tenants.put(Tenant(tenantName="old3"))
    assert tag_of(s, "old3") == 5 and holder(s, 5) == b"old3"
    holds_together(s)


def test_a_default_tenant_an_earlier_master_made_gets_a_tag(tmp_path: Path) -> None:
    store = open_store(None, str(tmp_path))
    try:
        store.put(keys.tenant("default"), encode_config(Tenant(tenantName="default")))
        s = ClusterState(store)
        s.ensure_defaults()
        assert tag_of(s, "default") == 1 and holder(s, 1) == b"default"
        holds_together(s)
    finally:
        store.close()


def test_running_out_of_tenant_tags_refuses_and_stores_nothing(state: ClusterState) -> None:
    tenants = Tenants(state.tenants.txn, max_tag=2)  # default holds 1
    tenants.put(Tenant(tenantName="blue"))
    assert tag_of(state, "blue") == 2
    before = everything(state)
    with pytest.raises(Conflict) as e:
        tenants.put(Tenant(tenantName="red"))
    assert str(e.value) == "tenant red: no free tenant tag left (1-2)"
    assert everything(state) == before
    tenants.put(Tenant(tenantName="blue", defaultNetwork="n"))  # updates still hold
    assert tag_of(state, "blue") == 2
    tenants.delete("blue")
    tenants.put(Tenant(tenantName="red"))  # a freed tag serves again
    assert tag_of(state, "red") == 2
    holds_together(state)


def test_running_out_over_rest_is_a_409_naming_the_tenant(state: ClusterState) -> None:
    state.tenants.max_tag = 1  # the default tenant holds the only tag
    client: FlaskClient = create_app(state).test_client()
    before = everything(state)
    r = client.post("/api/v1/tenants/blue", json={"tenantName": "blue"})
    assert r.status_code == 409
    assert "tenant blue: no free tenant tag left (1-1)" in r.get_data(as_text=True)
    assert everything(state) == before


def test_inspect_shows_the_tag(client: FlaskClient) -> None:
    assert client.post("/api/v1/tenants/blue", json={"tenantName": "blue"}).status_code == 200
    oper = client.get("/api/v1/inspect/tenants/blue").json["Oper"]
    assert oper["tenantTag"] == 2
    assert client.get("/api/v1/inspect/tenants/default").json["Oper"]["tenantTag"] == 1
    # The tenant's config is what it was: the tag is the control plane's, not the user's.
    assert client.get("/api/v1/tenants/blue").json == {
        "key": "blue",
        "tenantName": "blue",
        "defaultNetwork": "",
    }


def test_netctl_tenant_inspect_shows_the_tag(
    capsys: pytest.CaptureFixture[str], master_session: requests.Session
) -> None:
    rc, _, err = run(capsys, ["tenant", "create", "blue"], master_session)
    assert (rc, err) == (0, "")
    rc, out, err = run(capsys, ["tenant", "inspect", "blue"], master_session)
    assert (rc, err) == (0, "")
    assert json.loads(out)["Oper"]["tenantTag"] == 2
