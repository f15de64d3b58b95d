"""Fixtures shared by the control plane's unit tests: the real ClusterState on a temporary
embedded store, and its REST app's test client. A module that needs more (a network made
up front) defines its own fixture of the same name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask.testing import FlaskClient

from master.app import create_app
from master.state import ClusterState
from store import open_store
from testbed.real_master import real_master


@pytest.fixture
def state(tmp_path: Path) -> Iterator[ClusterState]:
    store = open_store(None, str(tmp_path))
    s = ClusterState(store)
    s.ensure_defaults()
    yield s
    store.close()


@pytest.fixture
def client(state: ClusterState) -> FlaskClient:
    return create_app(state).test_client()


@pytest.fixture
def master_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[requests.Session]:
    """A session into the real master (netctl's tests); a master that cannot be built fails
    the test."""
    monkeypatch.delenv("NETMASTER", raising=False)
    with real_master(tmp_path) as master:
        yield master.session()
