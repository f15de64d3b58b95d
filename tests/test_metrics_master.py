"""The master's metrics (master.metrics): requests by route template and status, allocations,
store transaction retries and conflicts, leadership; /metrics behind the reader role; and
the multiprocess mode adding up what several worker processes counted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from master.app import create_app
from master.auth import Caller, TokenTable
from master.election import Elector
from master.errors import Conflict
from master.state import ClusterState
from master.txn import MAX_ATTEMPTS, Retry, retrying
from store.embedded import EmbeddedStore
from testbed.wait import wait_for

READER, AGENT = "r" * 32, "a" * 32
ROOT = Path(__file__).resolve().parent.parent


def value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    with EmbeddedStore(str(tmp_path / "state.db")) as s:
        yield s


@pytest.fixture
def client(store: EmbeddedStore) -> FlaskClient:
    state = ClusterState(store)
    state.ensure_defaults()
    tokens = TokenTable([(READER, Caller("reader", "r")), (AGENT, Caller("agent", "a"))])
    return create_app(state, tokens=tokens).test_client()


def scrape(client: FlaskClient) -> str:
    r = client.get("/metrics", headers={"Authorization": f"Bearer {READER}"})
    assert r.status_code == 200 and r.content_type.startswith("text/plain")
    return r.get_data(as_text=True)


def test_requests_are_counted_by_route_template_and_status(client: FlaskClient) -> None:
    auth = {"Authorization": f"Bearer {READER}"}
    before = scrape(client)
    route = "/api/v1/networks/<key>"
    for name in ("a", "b", "c"):  # three URLs, one route
        assert client.get(f"/api/v1/networks/default:{name}", headers=auth).status_code == 404
    assert client.get("/api/v1/networks/default:a").status_code == 401  # no token: counted too
    assert client.get("/no/such/thing", headers=auth).status_code == 404
    after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    total = "netmaster_http_requests_total"
    assert moved(total, method="GET", route=route, status="404") == 3
    assert moved(total, method="GET", route=route, status="401") == 1
    assert moved(total, method="GET", route="<unmatched>", status="404") == 1
    assert moved("netmaster_http_request_duration_seconds_count", route=route) == 4
    assert "default:a" not in after  # never a raw URL


def test_metrics_need_a_readers_token_like_every_other_read(client: FlaskClient) -> None:
    assert client.get("/metrics").status_code == 401
    assert "netmaster_http_requests_total" in scrape(client)


def test_allocations_count_what_was_allocated_and_released(client: FlaskClient) -> None:
    auth = {"Authorization": f"Bearer {AGENT}"}
    net = {"tenantName": "default", "networkName": "n1", "subnet": "10.9.0.0/24"}
    assert client.post("/api/v1/networks/default:n1", json=net, headers=auth).status_code == 200
    before = scrape(client)
    body = {"endpointID": "e1", "tenantName": "default", "networkName": "n1", "host": "h1"}
    assert client.post("/api/v1/alloc/endpoints", json=body, headers=auth).status_code == 201
    assert client.post("/api/v1/alloc/endpoints", json=body, headers=auth).status_code == 200
    assert client.delete("/api/v1/alloc/endpoints/e1", headers=auth).status_code == 200
    assert client.delete("/api/v1/alloc/endpoints/e1", headers=auth).status_code == 404
    after = scrape(client)
    allocations = "netmaster_allocations_total"
    for op in ("allocate", "release"):  # the retried create and the second delete: nothing
        moved = value(after, allocations, kind="endpoint", op=op)
        assert moved - value(before, allocations, kind="endpoint", op=op) == 1


def test_store_txn_retries_and_conflicts(client: FlaskClient) -> None:
    before = scrape(client)
    tries = iter(range(3))

    def twice_then_done() -> str:
        if next(tries) < 2:
            raise Retry
        return "done"

    assert retrying("x", twice_then_done) == "done"

    def never() -> None:
        raise Retry

    with pytest.raises(Conflict):
        retrying("y", never)
    after = scrape(client)
    retries = "netmaster_store_txn_retries_total"
    assert value(after, retries) - value(before, retries) == 2 + MAX_ATTEMPTS
    conflicts = "netmaster_store_txn_conflicts_total"
    assert value(after, conflicts) - value(before, conflicts) == 1


def test_leadership_changes_and_gauge(client: FlaskClient, store: EmbeddedStore) -> None:
    before = scrape(client)
    elector = Elector(store, master_id="m1", url="http://m1", ttl=5, poll_interval=0.05)
    elector.start()
    try:
        wait_for(lambda: value(scrape(client), "netmaster_leader") == 1, 5, "the gauge said leader")
    finally:
        elector.stop()
    after = scrape(client)
    changes = "netmaster_leader_changes_total"
    assert value(after, changes, change="acquired") - value(before, changes, change="acquired") == 1
    assert value(after, changes, change="lost") - value(before, changes, change="lost") == 1
    assert value(after, "netmaster_leader") == 0


def test_multiprocess_mode_adds_up_every_workers_counts(tmp_path: Path) -> None:
    """prepare_multiprocess_dir before prometheus_client is imported, then two forked
    'workers' count; an exposition in either sees both, and a dead one's live gauge goes."""
    script = textwrap.dedent(
        """
        import os, sys
        from master import metrics as m
        path = m.prepare_multiprocess_dir()
        pids = []
        for n in (1, 2):
            pid = os.fork()
            if pid == 0:
                for _ in range(n):
                    m.txn_retried()
                m.leading(n == 2)
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        text = m.exposition().decode()
        class W: pass
        for pid in pids:
            w = W(); w.pid = pid
            m.worker_exited(None, w)
        print(path)
        print(text)
        print("AFTER")
        print(m.exposition().decode())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    path, _, rest = out.stdout.partition("\n")
    during, _, after = rest.partition("AFTER\n")
    assert value(during, "netmaster_store_txn_retries_total") == 3
    assert value(during, "netmaster_leader") == 1
    assert value(after, "netmaster_store_txn_retries_total") == 3  # counters outlive workers
    assert value(after, "netmaster_leader") == 0  # live gauges do not
    assert not os.path.exists(path)  # removed when the "arbiter" exited
