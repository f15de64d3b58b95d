"""The kinds table (common/kinds.py, bound to families in master/kinds.py) and the routes
registered from it."""

from __future__ import annotations

from typing import Any, cast

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from common.kinds import TENANT_NAME, BadKey, Kind, PartsKey, SingletonKey
from master.errors import ApiError, BadRequest, NotFound
from master.kinds import KINDS, Row
from master.routes import Api, register_kinds
from master.state import ClusterState

KIND = {k.kind.plural: k for k in KINDS}


def _rules(app: Flask) -> set[tuple[str, str]]:
    return {
        (r.rule, m)
        for r in app.url_map.iter_rules()
        for m in r.methods or ()
        if m not in ("HEAD", "OPTIONS") and r.endpoint != "static"
    }


def _kind_of(rule: str) -> str | None:
    """The plural a rule serves: /api/v1/<plural>/... or /api/v1/inspect/<plural>/..."""
    parts = rule.split("/")
    if parts[1:3] != ["api", "v1"] or len(parts) < 4:
        return None
    return parts[4] if parts[3] == "inspect" else parts[3]


def _declared(kind: Row) -> set[tuple[str, str]]:
    """The routes Row's docstring promises for the operations a kind declares."""
    every = f"/api/v1/{kind.kind.plural}"
    one = f"{every}/<{kind.kind.key.param}>"
    routes: set[tuple[str, str]] = set()
    if kind.list:
        routes.add((every, "GET"))
    if kind.get:
        routes.add((one, "GET"))
    if kind.put:
        routes |= {(one, "POST"), (one, "PUT")}
    if kind.patch:
        routes.add((one, "PATCH"))
    if kind.rename:
        routes.add((f"{one}/rename", "POST"))
    if kind.delete:
        routes.add((one, "DELETE"))
    if kind.inspect:
        routes.add((f"/api/v1/inspect/{kind.kind.plural}/<{kind.kind.key.param}>", "GET"))
    return routes


# --- the table ---


def test_todays_kinds_and_what_each_allows() -> None:
    ops = ("list", "get", "put", "patch", "rename", "delete", "inspect")
    crud = {"list", "get", "put", "delete", "inspect"}
    allowed = {p: {op for op in ops if getattr(k, op) is not None} for p, k in KIND.items()}
    assert {p: allowed.get(p) for p in ("tenants", "policys", "Bgps")} == {
        "tenants": crud,
        "policys": crud,
        "Bgps": crud,
    }
    assert allowed["endpointGroups"] == crud | {"patch"}  # netctl group update
    assert allowed["rules"] == crud - {"inspect"}
    assert KIND["rules"].parse("web:1") == ("default", "web", "1")
    assert KIND["rules"].parse("t:web:1") == ("t", "web", "1")
    assert allowed["networks"] == crud | {"rename"}
    assert allowed["globals"] == {"list", "get", "put", "inspect"}  # one object, never deleted
    assert allowed["endpoints"] == {"list", "get", "inspect"}  # written by the allocation API
    assert [p for p, k in KIND.items() if k.merge] == ["globals"]
    assert len(KIND) == len(KINDS)  # one declaration per plural


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind.plural)
def test_every_declared_kind_gets_its_routes(kind: Row, client: FlaskClient) -> None:
    # Exactly the declared routes live under the kind's URLs.
    mine = {(r, m) for r, m in _rules(client.application) if _kind_of(r) == kind.kind.plural}
    assert mine == _declared(kind)


def test_every_route_is_a_kinds_or_one_of_the_explicit_ones(client: FlaskClient) -> None:
    from_table = set().union(*(_declared(k) for k in KINDS))
    explicit = {
        ("/version", "GET"),
        ("/api/v1/leader", "GET"),
        ("/api/v1/openapi.json", "GET"),
        ("/stats/commits", "GET"),
        ("/metrics", "GET"),
        ("/api/v1/alloc/endpoints", "POST"),
        ("/api/v1/alloc/endpoints/<endpoint_id>", "DELETE"),
        ("/api/v1/alloc/endpoints/<endpoint_id>/container", "PUT"),
        ("/api/v1/alloc/networks/<key>", "GET"),
        ("/api/v1/alloc/pools", "POST"),
        ("/api/v1/alloc/pools/<path:pool_id>", "DELETE"),
        ("/api/v1/alloc/pool-bindings", "POST"),
        ("/api/v1/alloc/addresses", "POST"),
        ("/api/v1/alloc/addresses/release", "POST"),
    }
    assert _rules(client.application) == from_table | explicit
    # tenants, networks, endpointGroups, policys, rules, netprofiles, serviceLBs, Bgps,
    # globals, endpoints
    assert len(from_table) == 6 + 7 + 7 + 6 + 5 + 6 + 6 + 6 + 5 + 3


def test_undeclared_operations_are_refused(client: FlaskClient) -> None:
    for method, path in [
        ("DELETE", "/api/v1/globals/global"),
        ("POST", "/api/v1/endpoints/e1"),
        ("PUT", "/api/v1/endpoints/e1"),
        ("DELETE", "/api/v1/endpoints/e1"),
        ("POST", "/api/v1/networks"),
    ]:
        r = client.open(path, method=method)
        assert r.status_code == 405, (method, path)
        assert r.json["error"] == f"method {method} is not allowed on {path}"
    r = client.post("/api/v1/endpointGroups/t:g/rename", json={"groupName": "h"})
    assert r.status_code == 404
    assert r.json["error"] == "no such API route POST /api/v1/endpointGroups/t:g/rename"


def test_openapi_summaries_come_from_the_table(client: FlaskClient) -> None:
    paths = client.get("/api/v1/openapi.json").json["paths"]
    for row in KINDS:
        kind = row.kind
        one = f"/api/v1/{kind.plural}/{{{kind.key.param}}}"
        for summary, path, methods in [
            (row.list, f"/api/v1/{kind.plural}", ["get"]),
            (row.get, one, ["get"]),
            (row.put, one, ["post", "put"]),
            (row.rename, f"{one}/rename", ["post"]),
            (row.delete, one, ["delete"]),
            (row.inspect, f"/api/v1/inspect/{kind.plural}/{{{kind.key.param}}}", ["get"]),
        ]:
            for m in methods:
                if summary is None:
                    assert m not in paths.get(path, {}), (kind.plural, path, m)
                else:
                    assert paths[path][m]["summary"] == summary
    assert paths["/api/v1/networks/{key}"]["put"]["requestBody"]["content"]["application/json"][
        "schema"
    ] == {"$ref": "#/components/schemas/Network"}


def test_malformed_declarations_raise() -> None:
    with pytest.raises(ValueError, match="2 key part"):
        Kind("xs", "x", BaseModel, TENANT_NAME, fields=("tenantName",))
    y = Kind("ys", "y", BaseModel, SingletonKey("y", "y"))
    with pytest.raises(ValueError, match="merge over get"):
        Row(y, lambda s: s.settings, put="p", merge=True)
    with pytest.raises(ValueError, match="rename needs a key field"):
        Row(y, lambda s: s.settings, rename="r")


def test_every_declared_operation_is_a_method_of_the_family(state: ClusterState) -> None:
    ops = ("list", "get", "put", "patch", "rename", "delete", "inspect")
    for row in KINDS:
        family = row.family(state)
        for op in ops:
            if getattr(row, op) is not None:
                assert callable(getattr(family, op, None)), (row.kind.plural, op)


# --- key shapes ---


def test_a_bare_name_means_the_default_tenant() -> None:
    assert TENANT_NAME.parse("net1") == ("default", "net1")
    assert TENANT_NAME.parse("t1:net1") == ("t1", "net1")
    assert KIND["networks"].kind.name(("t1", "net1")) == "network t1:net1"
    assert KIND["endpointGroups"].kind.name(("default", "g")) == "endpoint group default:g"


@pytest.mark.parametrize("key", ["a:b:c", ":b", "a:", ":", "::", "a::b"])
def test_a_bad_tenant_name_key_is_refused(key: str) -> None:
    with pytest.raises(BadRequest) as e:
        KIND["endpointGroups"].parse(key)
    assert e.value.obj == f"endpoint group {key}"
    assert e.value.reason == "key must be TENANT:NAME"


_part = st.text(st.characters(blacklist_characters=":"), min_size=1, max_size=12)


@given(_part, _part)
def test_tenant_name_keys_round_trip(tenant: str, name: str) -> None:
    assert TENANT_NAME.parse(f"{tenant}:{name}") == (tenant, name)
    assert TENANT_NAME.parse(name) == ("default", name)


@given(st.text(min_size=1, max_size=20))
def test_single_name_and_opaque_keys_are_taken_whole(key: str) -> None:
    assert KIND["tenants"].parse(key) == (key,)
    assert KIND["endpoints"].parse(key) == (key,)


def test_a_three_part_key_fits() -> None:
    rule = PartsKey(("TENANT", "POLICY", "RULEID"), default_tenant=True)
    assert rule.parse("t:p:1") == ("t", "p", "1")
    assert rule.parse("p:1") == ("default", "p", "1")
    assert rule.tenant_scoped
    for bad in ("1", "t:p:1:x", "t::1", ":p:1", "p:"):
        with pytest.raises(BadKey, match="key must be TENANT:POLICY:RULEID"):
            rule.parse(bad)


def test_the_only_global_is_global() -> None:
    globals_ = KIND["globals"]
    assert globals_.parse("global") == ()
    assert globals_.kind.name(()) == "global"
    with pytest.raises(BadRequest) as e:
        globals_.parse("other")
    assert e.value.obj == "global other"
    assert e.value.reason == "the only global settings object is 'global'"


# --- refusals change nothing ---


def _everything(client: FlaskClient) -> dict[str, Any]:
    seen = {p: client.get(f"/api/v1/{p}").json for p, k in KIND.items() if k.list}
    seen["inspect/globals"] = client.get("/api/v1/inspect/globals/global").json
    return seen


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        (
            "POST",
            "/api/v1/tenants/t2",
            {"tenantName": "x"},
            400,
            "tenant t2: field 'tenantName' is 'x' but the URL names 't2'",
        ),
        (
            "PUT",
            "/api/v1/networks/t1:n2",
            {"tenantName": "default", "subnet": "10.9.0.0/24"},
            400,
            "network t1:n2: field 'tenantName' is 'default' but the URL names 't1'",
        ),
        (
            "POST",
            "/api/v1/networks/n1",
            {"subnet": "10.1.0.0/24", "encap": "gre"},
            400,
            "network default:n1: field 'encap': Input should be 'vlan' or 'vxlan'",
        ),
        (
            "POST",
            "/api/v1/networks/t1:n1:x",
            {"subnet": "10.9.0.0/24"},
            400,
            "network t1:n1:x: key must be TENANT:NAME",
        ),
        (
            "POST",
            "/api/v1/endpointGroups/t1:g1",
            {"groupName": "g2", "networkName": "n1"},
            400,
            "endpoint group t1:g1: field 'groupName' is 'g2' but the URL names 'g1'",
        ),
        (
            "POST",
            "/api/v1/endpointGroups/t1:g1",
            b"[1]",
            400,
            "endpoint group t1:g1: request body must be a JSON object",
        ),
        (
            "PUT",
            "/api/v1/globals/global",
            {"arpMode": "flood", "vlans": "x"},
            400,
            "global vlans: 'x' is not a range like 1-4094",
        ),
        (
            "POST",
            "/api/v1/globals/global",
            {"name": "mine", "arpMode": "flood"},
            400,
            "global: field 'name': Input should be 'global'",
        ),
        (
            "POST",
            "/api/v1/globals/mine",
            {"arpMode": "flood"},
            400,
            "global mine: the only global settings object is 'global'",
        ),
        (
            "POST",
            "/api/v1/networks/t1:n1/rename",
            {"networkName": ""},
            400,
            'network t1:n1: body must be {"networkName": NEW_NAME}',
        ),
        (
            "DELETE",
            "/api/v1/tenants/t1",
            None,
            409,
            "tenant t1: it still has network t1:n1; delete them first",
        ),
    ],
)
def test_a_refused_request_changes_nothing(
    client: FlaskClient,
    method: str,
    path: str,
    body: Any,
    status: int,
    error: str,
) -> None:
    assert client.post("/api/v1/tenants/t1").status_code == 200
    assert client.post("/api/v1/networks/t1:n1", json={"subnet": "10.1.0.0/24"}).status_code == 200
    before = _everything(client)
    kw = {"data": body} if isinstance(body, bytes) else {"json": body}
    r = client.open(path, method=method, **kw)
    assert (r.status_code, r.json["error"]) == (status, error)
    assert _everything(client) == before


# --- every kind through HTTP ---


def test_each_kind_serves_list_get_and_inspect(client: FlaskClient) -> None:
    assert client.post("/api/v1/tenants/t1").status_code == 200
    assert client.post("/api/v1/networks/t1:n1", json={"subnet": "10.1.0.0/24"}).status_code == 200
    r = client.post("/api/v1/endpointGroups/t1:g1", json={"networkName": "n1"})
    assert r.status_code == 200
    assert client.post("/api/v1/policys/t1:p1").status_code == 200
    assert client.post("/api/v1/rules/t1:p1:1", json={"action": "deny"}).status_code == 200
    assert client.post("/api/v1/netprofiles/t1:np1", json={"DSCP": 8}).status_code == 200
    r = client.post(
        "/api/v1/serviceLBs/t1:s1",
        json={"networkName": "n1", "selectors": ["app=a"], "ports": ["80:80:TCP"]},
    )
    assert r.status_code == 200, r.json
    r = client.post(
        "/api/v1/alloc/endpoints",
        json={"endpointID": "e1", "tenantName": "t1", "networkName": "n1"},
    )
    assert r.status_code == 201, r.json
    r = client.post(
        "/api/v1/Bgps/host1",
        json={"routerip": "50.1.1.1/24", "as": "1", "neighbor-as": "2", "neighbor": "50.1.1.2"},
    )
    assert r.status_code == 200, r.json
    sample = {
        "tenants": "t1",
        "networks": "t1:n1",
        "endpointGroups": "t1:g1",
        "policys": "t1:p1",
        "rules": "t1:p1:1",
        "netprofiles": "t1:np1",
        "serviceLBs": "t1:s1",
        "Bgps": "host1",
        "globals": "global",
        "endpoints": "e1",
    }
    assert set(sample) == set(KIND)
    for plural, key in sample.items():
        got = client.get(f"/api/v1/{plural}/{key}")
        assert got.status_code == 200 and got.json["key"] == key, (plural, got.json)
        assert got.json in client.get(f"/api/v1/{plural}").json
        if KIND[plural].inspect is None:
            continue
        inspected = client.get(f"/api/v1/inspect/{plural}/{key}")
        assert inspected.status_code == 200 and inspected.json["Config"] == got.json


def test_the_tenant_filter_applies_to_tenant_scoped_kinds(client: FlaskClient) -> None:
    for t in ("t1", "t2"):
        assert client.post(f"/api/v1/tenants/{t}").status_code == 200
    client.post("/api/v1/networks/t1:n", json={"subnet": "10.1.0.0/24"})
    client.post("/api/v1/networks/t2:n", json={"subnet": "10.2.0.0/24"})
    assert [n["key"] for n in client.get("/api/v1/networks?tenant=t2").json] == ["t2:n"]
    assert len(client.get("/api/v1/networks?tenant=").json) == 2
    # Tenants themselves are not tenant-scoped: the filter is ignored.
    assert len(client.get("/api/v1/tenants?tenant=t2").json) == 3


# --- a kind declared later: its family and one table row ---


class Rule(BaseModel):
    tenantName: str = "default"
    policyName: str
    ruleId: str
    action: str = "allow"

    def dump(self) -> dict[str, Any]:
        return {"key": f"{self.tenantName}:{self.policyName}:{self.ruleId}", **self.model_dump()}


class FakeRules:
    """A family of rules over a dict."""

    def __init__(self) -> None:
        self.rules: dict[tuple[str, str, str], Rule] = {}

    def list(self, tenant: str | None) -> list[Rule]:
        return [r for k, r in sorted(self.rules.items()) if tenant in (None, k[0])]

    def get(self, tenant: str, policy: str, rule_id: str) -> Rule:
        try:
            return self.rules[tenant, policy, rule_id]
        except KeyError:
            raise NotFound(f"rule {tenant}:{policy}:{rule_id}") from None

    def put(self, rule: Rule) -> Rule:
        self.rules[rule.tenantName, rule.policyName, rule.ruleId] = rule
        return rule

    def delete(self, tenant: str, policy: str, rule_id: str) -> None:
        self.get(tenant, policy, rule_id)
        del self.rules[tenant, policy, rule_id]

    def inspect(self, tenant: str, policy: str, rule_id: str) -> dict[str, Any]:
        return {"Config": self.get(tenant, policy, rule_id).dump(), "Oper": {}}


class FakeState:
    def __init__(self) -> None:
        self.rules = FakeRules()


RULES = Row(
    Kind(
        "rules",
        "rule",
        Rule,
        PartsKey(("TENANT", "POLICY", "RULEID"), default_tenant=True),
        fields=("tenantName", "policyName", "ruleId"),
    ),
    lambda s: s.rules,
    list="List rules",
    get="Get a rule",
    put="Create or update a rule",
    delete="Delete a rule",
    inspect="Rule config and oper state",
)


@pytest.fixture
def rules() -> tuple[FlaskClient, FakeRules]:
    app = Flask("rules")
    fake = FakeState()

    @app.errorhandler(ApiError)
    def api_error(e: ApiError) -> tuple[dict[str, str], int]:
        return e.to_json(), e.status

    register_kinds(Api(app), cast(ClusterState, fake), [RULES])
    return app.test_client(), fake.rules


def test_a_three_part_kind_needs_only_its_family_and_table_row(
    rules: tuple[FlaskClient, FakeRules],
) -> None:
    client, fake = rules
    assert _rules(client.application) == _declared(RULES)
    r = client.put("/api/v1/rules/t1:web:1", json={"action": "deny"})
    assert r.status_code == 200 and r.json["key"] == "t1:web:1", r.json
    assert client.post("/api/v1/rules/web:2", json={}).json["tenantName"] == "default"
    assert [x["key"] for x in client.get("/api/v1/rules?tenant=t1").json] == ["t1:web:1"]
    assert client.get("/api/v1/rules/t1:web:1").json["action"] == "deny"
    assert client.get("/api/v1/inspect/rules/web:2").json["Config"]["ruleId"] == "2"

    before = dict(fake.rules)
    r = client.put("/api/v1/rules/t1:web:1", json={"policyName": "db"})
    assert r.status_code == 400
    assert r.json["error"] == "rule t1:web:1: field 'policyName' is 'db' but the URL names 'web'"
    r = client.put("/api/v1/rules/web", json={})
    assert r.json["error"] == "rule web: key must be TENANT:POLICY:RULEID"
    assert fake.rules == before

    assert client.delete("/api/v1/rules/t1:web:1").json == {"deleted": "rule t1:web:1"}
    assert client.get("/api/v1/rules/t1:web:1").status_code == 404


def test_a_partial_global_update_keeps_the_fields_it_leaves_out(client: FlaskClient) -> None:
    assert client.put("/api/v1/globals/global", json={"vlans": "1-100"}).status_code == 200
    r = client.post("/api/v1/globals/global", json={"arpMode": "flood"})
    assert r.status_code == 200, r.json
    assert (r.json["vlans"], r.json["arpMode"]) == ("1-100", "flood")
    assert client.get("/api/v1/globals/global").json == r.json
