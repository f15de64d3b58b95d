"""The master's access log holds no credential: gunicorn's real logger and format, given the
requests a client may send its token in; the caller is named by the token file's NAME."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, request
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser
from gunicorn.http.wsgi import create
from hypothesis import given
from hypothesis import strategies as st

from master.app import create_app
from master.auth import CALLER_ENVIRON, parse_tokens
from master.httplog import AccessLogger, safe_atoms, without_userinfo
from master.state import ClusterState
from store.embedded import EmbeddedStore

TOKEN = "tok-0123456789abcdef0123456789"
ENCODED = base64.b64encode(TOKEN.encode()).decode()[:12]  # how Basic sends it first


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def access_line(raw: bytes, caller: str | None = None, fmt: str | None = None) -> str:
    """The access-log line gunicorn writes (with our logger) for the request ``raw``."""
    cfg = Config()
    cfg.set("accesslog", "-")
    cfg.set("logger_class", AccessLogger)
    if fmt is not None:
        cfg.set("access_log_format", fmt)
    log = AccessLogger(cfg)
    req = next(RequestParser(cfg, iter([raw]), ("127.0.0.1", 40000)))
    resp, environ = create(req, None, ("127.0.0.1", 40000), ("127.0.0.1", 9999), cfg)
    if caller is not None:
        environ[CALLER_ENVIRON] = caller
    resp.status = "401 UNAUTHORIZED"
    atoms = log.atoms(resp, req, environ, datetime.timedelta(milliseconds=3))
    return str(cfg.access_log_format % log.atoms_wrapper_class(atoms))  # as log.access() does


def get(target: str = "/api/v1/tenants", *headers: str) -> bytes:
    lines = "".join(f"{h}\r\n" for h in headers)
    return f"GET {target} HTTP/1.1\r\nHost: m\r\n{lines}\r\n".encode()


@pytest.mark.parametrize(
    "raw",
    [
        get("/api/v1/tenants", f"Authorization: {basic(TOKEN, '')}"),  # curl -u "$TOKEN:"
        get("/api/v1/tenants", f"Authorization: {basic('admin', TOKEN)}"),
        get("/api/v1/tenants", f"Authorization: Bearer {TOKEN}"),
        get("/api/v1/tenants", f"Authorization: Token {TOKEN}"),
        get("/api/v1/tenants", f"Proxy-Authorization: {basic(TOKEN, TOKEN)}"),
        get("/api/v1/tenants", f"Cookie: session={TOKEN}"),
        get(f"http://admin:{TOKEN}@m/api/v1/tenants"),
        get(f"http://{TOKEN}@m:9999?x=1"),
    ],
    ids=[
        "basic-user",
        "basic-password",
        "bearer",
        "other-scheme",
        "proxy",
        "cookie",
        "url",
        "url2",
    ],
)
def test_no_credential_reaches_the_access_log(raw: bytes) -> None:
    line = access_line(raw)
    assert line.startswith("127.0.0.1 - - [") and " 401 " in line
    assert TOKEN not in line and ENCODED not in line
    # Nor with a format that asks for every credential there is.
    greedy = (
        '%(u)s "%(r)s" %({authorization}i)s %({proxy-authorization}i)s %({cookie}i)s '
        "%({http_authorization}e)s %({http_cookie}e)s %({raw_uri}e)s"
    )
    line = access_line(raw, fmt=greedy)
    assert TOKEN not in line and ENCODED not in line and "GET " in line


def test_the_access_log_names_the_caller_and_keeps_the_request_line() -> None:
    line = access_line(get("/api/v1/tenants?tenant=blue", f"Authorization: Bearer {TOKEN}"), "ops")
    assert line.startswith("127.0.0.1 - ops [")
    assert '"GET /api/v1/tenants?tenant=blue HTTP/1.1" 401' in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/api/v1/tenants?x=a@b", "/api/v1/tenants?x=a@b"),
        ("http://u:p@host:9/x?y=@z", "http://host:9/x?y=@z"),
        ("GET https://a@b@host/ HTTP/1.1", "GET https://host/ HTTP/1.1"),
        ("http://host/x@y", "http://host/x@y"),
        ("http://u:p@host", "http://host"),
        ("GET http://u@host HTTP/1.1", "GET http://host HTTP/1.1"),
    ],
)
def test_without_userinfo(text: str, expected: str) -> None:
    assert without_userinfo(text) == expected


@given(
    st.text(
        st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/?#@"), min_size=1
    ),
    st.sampled_from(["", "/x", "/?q=1", "#f", "/a@b"]),
)
def test_a_userinfo_never_survives(secret: str, rest: str) -> None:
    cleaned = without_userinfo(f"GET http://{secret}@host.example{rest} HTTP/1.1")
    assert cleaned == f"GET http://host.example{rest} HTTP/1.1"


def test_safe_atoms_keeps_what_is_not_a_credential() -> None:
    atoms = {"u": "x", "r": "GET / HTTP/1.1", "{user-agent}i": "curl", "{authorization}i": "x"}
    assert safe_atoms(atoms, None) == {"u": "-", "r": "GET / HTTP/1.1", "{user-agent}i": "curl"}


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Flask]:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    state = ClusterState(store)
    state.ensure_defaults()
    yield create_app(state, tokens=parse_tokens(f"admin {TOKEN} ops\nreader {TOKEN[::-1]}\n"))
    store.close()


def test_auth_names_the_caller_for_the_access_log(app: Flask) -> None:
    seen: list[Any] = []

    @app.after_request
    def remember(resp: Any) -> Any:
        seen.append(request.environ.get(CALLER_ENVIRON))
        return resp

    c = app.test_client()
    assert c.get("/api/v1/tenants", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    reader = {"Authorization": f"Bearer {TOKEN[::-1]}"}
    assert c.delete("/api/v1/tenants/default", headers=reader).status_code == 403
    assert c.get("/api/v1/tenants", headers={"Authorization": basic(TOKEN, "")}).status_code == 401
    assert seen == ["ops", "reader@line2", None]
