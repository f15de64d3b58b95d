"""The master's bearer tokens and roles: the token file, the route -> role table, the 401 and
403 answers, forwarding the caller's token to the leader, and the logs never holding a token."""

from __future__ import annotations

import hmac
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from flask import Flask
from test_election import SERVED_BY, AppSession, elector

from master import auth
from master.app import create_app
from master.auth import (
    Caller,
    Refusal,
    TokenFileError,
    TokenTable,
    bearer_token,
    check,
    load_tokens,
    parse_tokens,
    required_role,
)
from master.state import ClusterState
from store.embedded import EmbeddedStore

ADMIN = "admin-0123456789abcdef0123"
AGENT = "agent-0123456789abcdef0123"
READER = "reader-0123456789abcdef012"
TOKEN_FILE = f"""
# role   token   name
admin  {ADMIN}  ops
agent  {AGENT}
reader {READER} grafana
"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- the token file ---


def test_token_file_lines_give_each_token_its_role_and_name() -> None:
    table = parse_tokens(TOKEN_FILE)
    assert len(table) == 3 and table.roles() == {"admin": 1, "agent": 1, "reader": 1}
    assert table.lookup(ADMIN) == Caller("admin", "ops")
    assert table.lookup(AGENT) == Caller("agent", "agent@line4")  # no name: its line
    assert table.lookup(READER) == Caller("reader", "grafana")
    assert table.lookup(ADMIN + "x") is None and table.lookup("") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("admin", "line 1: expected 'ROLE TOKEN [NAME]'"),
        (f"admin {ADMIN} a b", "line 1: expected 'ROLE TOKEN [NAME]'"),
        (f"\n# x\nroot {ADMIN}", "line 3: unknown role 'root'; the roles are reader, agent, admin"),
        ("agent short-token", "line 1: the token is shorter than 16 characters"),
        (f"admin {ADMIN}\nagent {ADMIN}", "line 2: the same token as line 1"),
        ("# only comments\n\n", "no tokens"),
    ],
)
def test_a_bad_token_file_names_the_line_and_never_the_token(text: str, message: str) -> None:
    with pytest.raises(TokenFileError) as e:
        parse_tokens(text, "token file t")
    assert message in str(e.value) and str(e.value).startswith("token file t")
    assert ADMIN not in str(e.value) and "short-token" not in str(e.value)


def test_load_tokens_reads_the_file_and_warns_when_others_may_read_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens"
    path.write_text(TOKEN_FILE)
    path.chmod(0o600)
    assert len(load_tokens(str(path))) == 3 and "chmod 600" not in caplog.text
    path.chmod(0o644)
    load_tokens(str(path))
    assert f"token file {path} may be read by other users: chmod 600 it" in caplog.text
    with pytest.raises(TokenFileError, match=r"tokens\.missing: cannot read it: No such file"):
        load_tokens(str(tmp_path / "tokens.missing"))


def test_tokens_are_compared_in_constant_time_against_every_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    table = parse_tokens(TOKEN_FILE)
    assert table.lookup(ADMIN) == Caller("admin", "ops")  # the first entry: no early return
    assert len(calls) == 3 and {len(a) for a, _ in calls} == {32}  # digests: equal lengths
    calls.clear()
    assert table.lookup("x") is None and len(calls) == 3


# --- which role a route needs ---


def test_bearer_header_parsing() -> None:
    assert bearer_token(None) is None and bearer_token("  ") is None
    assert bearer_token(f"Bearer {ADMIN}") == ADMIN and bearer_token(f"bearer  {ADMIN} ") == ADMIN
    assert bearer_token("Basic dXNlcjpwdw==") == ""


@pytest.mark.parametrize(
    ("method", "rule", "role"),
    [
        ("GET", "/version", None),
        ("HEAD", "/version", None),
        ("GET", "/api/v1/leader", None),
        ("GET", "/api/v1/openapi.json", None),
        ("GET", "/api/v1/tenants", "reader"),
        ("GET", "/api/v1/inspect/networks/<key>", "reader"),
        ("POST", "/api/v1/alloc/endpoints", "agent"),
        ("DELETE", "/api/v1/alloc/pools/<path:pool_id>", "agent"),
        ("POST", "/api/v1/networks/<key>", "agent"),
        ("PUT", "/api/v1/networks/<key>", "agent"),
        ("POST", "/api/v1/networks/<key>/rename", "agent"),
        ("DELETE", "/api/v1/networks/<key>", "agent"),
        ("DELETE", "/api/v1/tenants/<key>", "admin"),
        ("POST", "/api/v1/endpointGroups/<key>", "admin"),
        ("DELETE", "/api/v1/endpointGroups/<key>", "agent"),
        ("PATCH", "/api/v1/endpointGroups/<key>", "admin"),
        ("POST", "/api/v1/globals/<key>", "admin"),
        ("POST", "/api/v1/Bgps/<key>", "admin"),
        ("DELETE", "/api/v1/Bgps/<key>", "admin"),
        ("POST", None, "reader"),  # no such route: a valid token of any role learns the 404
    ],
)
def test_required_role(method: str, rule: str | None, role: str | None) -> None:
    assert required_role(method, rule) == role


def test_every_route_of_the_app_needs_the_role_the_readme_says(tmp_path: Path) -> None:
    """The table written down in README (Security): writes the agent may do, and nothing else."""
    store = EmbeddedStore(str(tmp_path / "state.db"))
    try:
        app = create_app(ClusterState(store))
    finally:
        store.close()
    needs: dict[str, set[tuple[str, str]]] = {}
    for rule in app.url_map.iter_rules():
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                role = required_role(method, rule.rule) or "public"
                needs.setdefault(role, set()).add((method, rule.rule))
    assert needs["public"] == {
        ("GET", "/version"),
        ("GET", "/api/v1/leader"),
        ("GET", "/api/v1/openapi.json"),
    }
    assert {m for m, _ in needs["reader"]} == {"GET"}
    assert needs["agent"] == {
        ("POST", "/api/v1/alloc/endpoints"),
        ("DELETE", "/api/v1/alloc/endpoints/<endpoint_id>"),
        ("PUT", "/api/v1/alloc/endpoints/<endpoint_id>/container"),
        ("POST", "/api/v1/alloc/pools"),
        ("DELETE", "/api/v1/alloc/pools/<path:pool_id>"),
        ("POST", "/api/v1/alloc/pool-bindings"),
        ("POST", "/api/v1/alloc/addresses"),
        ("POST", "/api/v1/alloc/addresses/release"),
        ("POST", "/api/v1/networks/<key>"),
        ("PUT", "/api/v1/networks/<key>"),
        ("POST", "/api/v1/networks/<key>/rename"),
        ("DELETE", "/api/v1/networks/<key>"),
        ("DELETE", "/api/v1/endpointGroups/<key>"),
    }
    admin = {(m, r.split("/")[3]) for m, r in needs["admin"]}
    assert admin == {
        (m, kind)
        for m in ("POST", "PUT", "DELETE")
        for kind in (
            "tenants",
            "endpointGroups",
            "policys",
            "rules",
            "globals",
            "netprofiles",
            "serviceLBs",
            "Bgps",
        )
        if (m, kind) not in (("DELETE", "globals"), ("DELETE", "endpointGroups"))
    } | {("PATCH", "endpointGroups")}


def test_check_decides_401_403_or_the_caller() -> None:
    table = parse_tokens(TOKEN_FILE)
    rule = "/api/v1/tenants/<key>"
    assert check(table, "GET", "/version", "/version", None) is None
    missing = check(table, "DELETE", rule, "/api/v1/tenants/t", None)
    assert isinstance(missing, Refusal) and missing.status == 401
    assert missing.challenge == 'Bearer realm="netmaster"'
    bad = check(table, "DELETE", rule, "/api/v1/tenants/t", "Bearer nope")
    assert isinstance(bad, Refusal) and bad.status == 401 and "invalid_token" in bad.challenge
    wrong = check(table, "DELETE", rule, "/api/v1/tenants/t", f"Bearer {AGENT}")
    assert isinstance(wrong, Refusal) and wrong.status == 403
    assert check(table, "DELETE", rule, "/api/v1/tenants/t", f"Bearer {ADMIN}") == Caller(
        "admin", "ops"
    )


# --- the app's answers ---


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Flask]:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    state = ClusterState(store)
    state.ensure_defaults()
    yield create_app(state, tokens=parse_tokens(TOKEN_FILE))
    store.close()


def test_no_token_is_a_401_in_the_error_shape_with_a_bearer_challenge(secured: Flask) -> None:
    c = secured.test_client()
    r = c.get("/api/v1/networks")
    assert r.status_code == 401 and set(r.json) == {"error", "object", "reason"}
    assert r.json["object"] == "GET /api/v1/networks"
    assert "authentication required: send 'Authorization: Bearer TOKEN'" in r.json["reason"]
    assert r.json["error"] == f"GET /api/v1/networks: {r.json['reason']}"
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="netmaster"'
    r = c.get("/api/v1/networks", headers=bearer("not-a-token-at-all"))
    assert r.status_code == 401 and r.json["reason"] == "the bearer token is not valid"
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="netmaster", error="invalid_token"'
    r = c.get("/api/v1/networks", headers={"Authorization": "Basic dXNlcjpwdw=="})
    assert r.status_code == 401 and "must be 'Bearer TOKEN'" in r.json["reason"]
    # Unknown routes do not tell a stranger they do not exist.
    assert c.post("/api/v1/nosuch").status_code == 401
    assert c.post("/api/v1/nosuch", headers=bearer(READER)).status_code == 404


def test_a_role_too_weak_is_a_403_naming_the_route_and_the_role(secured: Flask) -> None:
    c = secured.test_client()
    r = c.delete("/api/v1/tenants/default", headers=bearer(AGENT))
    assert r.status_code == 403 and set(r.json) == {"error", "object", "reason"}
    assert r.json["object"] == "DELETE /api/v1/tenants/default"
    assert r.json["reason"] == (
        "role agent may not call DELETE /api/v1/tenants/<key>: it needs role admin"
    )
    r = c.post(
        "/api/v1/networks/default:n1", json={"subnet": "10.1.0.0/24"}, headers=bearer(READER)
    )
    assert r.status_code == 403 and "it needs role agent" in r.json["reason"]
    # Nothing changed on refusal.
    assert c.get("/api/v1/networks", headers=bearer(READER)).json == []


def test_each_role_does_what_it_may(secured: Flask) -> None:
    c = secured.test_client()
    for path in ("/version", "/api/v1/leader", "/api/v1/openapi.json"):
        assert c.get(path).status_code == 200, path
    assert c.get("/api/v1/tenants", headers=bearer(READER)).status_code == 200
    r = c.post("/api/v1/networks/default:n1", json={"subnet": "10.1.0.0/24"}, headers=bearer(AGENT))
    assert r.status_code == 200, r.json
    body = {"endpointID": "e1", "networkName": "n1"}
    assert c.post("/api/v1/alloc/endpoints", json=body, headers=bearer(AGENT)).status_code == 201
    assert c.post("/api/v1/tenants/blue", json={}, headers=bearer(ADMIN)).status_code == 200
    assert c.delete("/api/v1/tenants/blue", headers=bearer(ADMIN)).status_code == 200


def test_no_token_reaches_the_logs(
    secured: Flask, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    c = secured.test_client()
    answers = [
        c.get("/api/v1/tenants", headers=bearer(ADMIN)),
        c.delete("/api/v1/tenants/default", headers=bearer(AGENT)),
        c.get("/api/v1/tenants", headers=bearer(ADMIN[:-1] + "X")),
        c.post("/api/v1/globals/global", data="{bad json", headers=bearer(ADMIN)),
    ]
    bad = tmp_path / "bad-tokens"
    bad.write_text(f"agent {AGENT}\nroot {ADMIN}\n")
    with pytest.raises(TokenFileError) as e:
        load_tokens(str(bad))
    logging.getLogger("netmaster").error("%s", e.value)
    assert "refused DELETE /api/v1/tenants/default" in caplog.text  # the refusals are logged
    for token in (ADMIN, AGENT, ADMIN[:-1] + "X"):
        assert token not in caplog.text
        assert all(token not in a.get_data(as_text=True) for a in answers)


def test_a_master_without_tokens_serves_everyone(tmp_path: Path) -> None:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    try:
        state = ClusterState(store)
        state.ensure_defaults()
        c = create_app(state).test_client()
        assert c.post("/api/v1/tenants/blue", json={}).status_code == 200
        assert c.delete("/api/v1/tenants/blue", headers=bearer("anything")).status_code == 200
    finally:
        store.close()


# --- forwarding: the leader authorises the original caller ---


@pytest.fixture
def two_secured(tmp_path: Path) -> Iterator[tuple[Any, ...]]:
    """A leader that accepts ADMIN and AGENT, a follower that also accepts READER (as a
    token file being rotated would): the follower passes the caller's token on."""
    stores = [EmbeddedStore(str(tmp_path / "state.db")) for _ in range(2)]
    states = [ClusterState(s) for s in stores]
    states[0].ensure_defaults()
    e1, e2 = elector(stores[0], "m1"), elector(stores[1], "m2")
    e1.step()
    e2.step()
    session = AppSession({})
    leader_tokens = TokenTable([(ADMIN, Caller("admin", "ops")), (AGENT, Caller("agent", "node1"))])
    leader = create_app(
        states[0], {"CONTROL_URL": e1.url}, elector=e1, session=session, tokens=leader_tokens
    )
    follower = create_app(
        states[1],
        {"CONTROL_URL": e2.url},
        elector=e2,
        session=session,
        tokens=parse_tokens(TOKEN_FILE),
    )
    session.apps.update({e1.url: leader, e2.url: follower})
    yield follower, e1, e2, session
    for s in stores:
        s.close()


def test_the_follower_forwards_the_callers_authorization(two_secured: tuple[Any, ...]) -> None:
    follower, e1, _, session = two_secured
    c = follower.test_client()
    r = c.post("/api/v1/tenants/blue", json={}, headers=bearer(ADMIN))
    assert r.status_code == 200 and r.headers[SERVED_BY] == e1.url
    assert session.calls[-1][2]["Authorization"] == f"Bearer {ADMIN}"
    # The leader decides for itself: it does not know READER, whatever the follower thinks.
    r = c.get("/api/v1/tenants", headers=bearer(READER))
    assert r.status_code == 401 and r.headers[SERVED_BY] == e1.url
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="netmaster", error="invalid_token"'


def test_the_follower_refuses_before_forwarding(two_secured: tuple[Any, ...]) -> None:
    follower, _, e2, session = two_secured
    c = follower.test_client()
    assert c.get("/api/v1/tenants").status_code == 401
    r = c.delete("/api/v1/tenants/default", headers=bearer(AGENT))
    assert r.status_code == 403 and r.headers[SERVED_BY] == e2.url
    assert session.calls == []


class UnverifiedLeader:
    """A session to a leader whose certificate this follower cannot verify."""

    def request(self, method: str, url: str, **kw: Any) -> Any:
        inner = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] ...")
        inner.verify_message = "unable to get local issuer certificate"
        reason = urllib3.exceptions.SSLError(inner)
        raise requests.exceptions.SSLError(urllib3.exceptions.MaxRetryError(None, url, reason))  # type: ignore[arg-type]


def test_a_leader_the_follower_cannot_verify_is_a_503_saying_why(tmp_path: Path) -> None:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    try:
        e1, e2 = elector(store, "m1"), elector(store, "m2")
        e1.step()
        e2.step()
        app = create_app(
            ClusterState(store), {"CONTROL_URL": e2.url}, elector=e2, session=UnverifiedLeader()
        )
        r = app.test_client().get("/api/v1/tenants")
        assert r.status_code == 503 and r.json["object"] == f"netmaster leader {e1.url}"
        assert r.json["reason"] == (
            f"unreachable from {e2.url} (its certificate cannot be verified (unable to get "
            "local issuer certificate); give the CA that signed it with --tls-ca); retry the "
            "request"
        )
    finally:
        store.close()
