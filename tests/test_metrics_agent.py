"""The agent's metrics (plugin.metrics): Docker calls by method and outcome, reconciles and
the flows they changed, audit repairs, and the mirrors' revisions and watch restarts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docker_plugin import FakeDatapath, call
from prometheus_client.parser import text_string_to_metric_families

from common import keys
from datapath.ofstate import ReconcileStats
from plugin.app import create_app
from plugin.cluster import PrefixMirror
from plugin.driver import Driver
from plugin.master_client import MasterClient
from plugin.metrics import AgentMetrics
from store import Compacted, Watch
from store.embedded import EmbeddedStore
from testbed.wait import wait_for


def value(metrics: AgentMetrics, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` with these labels (0 if none)."""
    total = 0.0
    text = metrics.exposition().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def stats(full: bool, generation: int, added: int = 0, deleted: int = 0) -> ReconcileStats:
    return ReconcileStats(
        connection=1,
        dpid=1,
        generation=generation,
        desired=10,
        found=10,
        added=added,
        replaced=0,
        deleted=deleted,
        seconds=0.01,
        full=full,
    )


def test_docker_calls_are_counted_and_timed_by_method_and_outcome() -> None:
    metrics = AgentMetrics()
    # The master is never reached: these calls need no allocation.
    driver = Driver(MasterClient("http://127.0.0.1:9"), FakeDatapath(), host="h1")
    client = create_app(driver, metrics).test_client()
    assert call(client, "Plugin.Activate").status_code == 200
    assert call(client, "NetworkDriver.GetCapabilities").status_code == 200
    assert call(client, "NetworkDriver.GetCapabilities").status_code == 200
    assert call(client, "NetworkDriver.CreateEndpoint", raw=b"{not json").status_code == 400
    assert call(client, "NetworkDriver.MadeUp").status_code == 404
    count = "netplugin_docker_requests_total"
    assert value(metrics, count, method="NetworkDriver.GetCapabilities", outcome="ok") == 2
    assert value(metrics, count, method="Plugin.Activate", outcome="ok") == 1
    assert value(metrics, count, method="NetworkDriver.CreateEndpoint", outcome="error") == 1
    assert value(metrics, count, method="unknown", outcome="error") == 1  # no made-up labels
    hist = "netplugin_docker_request_duration_seconds_count"
    assert value(metrics, hist, method="NetworkDriver.GetCapabilities") == 2
    assert value(metrics, hist) == 5


def test_reconciles_flows_changed_and_only_the_audits_repairs() -> None:
    metrics = AgentMetrics()
    metrics.reconciled(stats(True, 1, added=40))  # the first full reconcile after start
    metrics.reconciled(stats(False, 2, added=3, deleted=1))  # an endpoint's delta
    metrics.audit_started(None)  # the agent was not ready: no audit
    metrics.audit_started(4)
    metrics.reconciled(stats(False, 3, added=2))  # a delta before the audit's reconcile
    metrics.reconciled(stats(True, 4, added=1, deleted=2))  # the audit found 3 flows wrong
    metrics.reconciled(stats(True, 5, added=7))  # a reconnect later: not an audit's
    assert value(metrics, "netplugin_reconciles_total", kind="full") == 3
    assert value(metrics, "netplugin_reconciles_total", kind="delta") == 2
    assert value(metrics, "netplugin_flows_changed_total", op="added") == 53
    assert value(metrics, "netplugin_flows_changed_total", op="deleted") == 3
    assert value(metrics, "netplugin_audits_total") == 1
    assert value(metrics, "netplugin_audit_repairs_total") == 3


class CompactedOnce:
    """An embedded store whose first watch fails as compacted history would."""

    def __init__(self, store: EmbeddedStore) -> None:
        self.store = store
        self.watches = 0

    def range(self, prefix: str) -> Any:
        return self.store.range(prefix)

    def revision(self) -> int:
        return self.store.revision()

    def watch(self, prefix: str, start: int) -> Watch:
        self.watches += 1
        if self.watches == 1:
            return CompactedWatch()
        return self.store.watch(prefix, start)


class CompactedWatch(Watch):
    def __iter__(self) -> Iterator[Any]:
        raise Compacted(1)

    def cancel(self) -> None:
        pass


def test_a_mirror_counts_its_watch_restarts_and_follows_the_revision(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        store.put(keys.host("h1"), b'{"host": "h1"}')
        flaky = CompactedOnce(store)
        mirror = PrefixMirror(flaky, keys.HOSTS, lambda: None).start()  # type: ignore[arg-type]
        try:
            assert mirror.synced.wait(5)
            wait_for(lambda: flaky.watches >= 2, 5, "the mirror watched again")
            assert mirror.restarts == 1 and mirror.last_read is not None
            rev = store.put(keys.host("h2"), b'{"host": "h2"}')
            wait_for(lambda: mirror.revision >= rev, 5, f"the mirror read revision {rev}")
            assert mirror.revision == rev and set(mirror.values()) == {"h1", "h2"}
        finally:
            mirror.stop()
