"""The real control plane in a unit test: master.app over ClusterState on an embedded SQLite
store in a temporary directory, reached over requests through a transport adapter that hands
each request to the app's Flask test client (no socket, no thread)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from flask import Flask
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from common import keys
from master.app import create_app
from master.auth import Caller, Role, TokenTable
from master.state import ClusterState
from store.embedded import EmbeddedStore

URL = "http://netmaster.test:9999"


class FlaskAdapter(BaseAdapter):
    """A requests transport adapter that answers from a Flask app's test client."""

    def __init__(self, app: Flask) -> None:
        super().__init__()
        self.client = app.test_client()

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, **kwargs: Any
    ) -> requests.Response:
        url = urlsplit(request.url or "")
        body = request.body.encode() if isinstance(request.body, str) else request.body
        answer = self.client.open(
            url.path,
            method=request.method or "GET",
            query_string=url.query,
            data=body or b"",
            headers=dict(request.headers),
        )
        resp = requests.Response()
        resp.status_code = answer.status_code
        resp.reason = answer.status.partition(" ")[2]
        resp.headers = CaseInsensitiveDict(answer.headers)
        resp._content = answer.get_data()
        resp.encoding = "utf-8"
        resp.url = request.url or ""
        resp.request = request
        return resp

    def close(self) -> None:
        pass


def session_into(app: Flask) -> requests.Session:
    """A requests session whose every http:// request is served by ``app``."""
    session = requests.Session()
    session.trust_env = False
    session.mount("http://", FlaskAdapter(app))
    return session


@dataclass
class RealMaster:
    state: ClusterState
    store: EmbeddedStore
    app: Flask
    url: str = URL
    token: str = ""  # with tokens on: the token of the role asked for

    def session(self) -> requests.Session:
        return session_into(self.app)

    def snapshot(self) -> dict[str, bytes]:
        """Every key of the cluster state with its value: equal snapshots, nothing changed."""
        return {kv.key: kv.value for kv in self.store.range(keys.ROOT).kvs}


@contextmanager
def real_master(directory: Path, role: Role | None = None) -> Iterator[RealMaster]:
    """A master with its defaults (the default tenant, the global settings), as netmaster
    starts one; any failure to build it fails the test. With ``role`` it requires tokens,
    and ``token`` is one of that role."""
    store = EmbeddedStore(str(directory / "state.db"))
    try:
        state = ClusterState(store)
        state.ensure_defaults()
        token = f"{role}-token-0123456789abcdef" if role else ""
        tokens = TokenTable([(token, Caller(role, "test"))]) if role else None
        yield RealMaster(state, store, create_app(state, tokens=tokens), token=token)
    finally:
        store.close()
