"""plugin.cluster_sync.ClusterSync's pass: nothing changes on the switch until the agent has
read a cluster state netmaster wrote; then resync, then the view as it changes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from common import keys
from common.models import GlobalSettings
from common.records import HostRecord, encode_config
from datapath.host import HostConfig, HostDatapath
from plugin.cluster import ClusterView
from plugin.cluster_sync import ClusterSync
from store.embedded import EmbeddedStore
from testbed.fakes_datapath import FakeController, FakeIptables, FakeLinks, FakeOvs


def wait_until(predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


def test_resync_waits_for_netmaster_state_then_the_view_follows(tmp_path: Path) -> None:
    store = EmbeddedStore(str(tmp_path / "state.db"))
    store.put(keys.host("h2"), HostRecord(host="h2", vtep_ip="192.0.2.2").encode())
    ctl = FakeController()
    agent = HostDatapath(
        HostConfig(datapath_type="netdev", tunnels=True),
        FakeOvs(),
        ctl,
        FakeIptables(),
        FakeLinks(),
    )
    agent.start()
    view = ClusterView(store, lambda: None).start()
    resyncs: list[dict[str, int]] = []
    sync = ClusterSync(view, agent, "h1", on_resync=resyncs.append)
    try:
        # A store netmaster never wrote (a wrong --data-dir): the switch is left alone.
        assert sync._pass() == 5.0
        assert not agent.ready and not resyncs and not ctl.pushed
        store.put(keys.GLOBAL, encode_config(GlobalSettings()))
        wait_until(lambda: view.globals.values())
        assert sync._pass() == 0.0  # resynced: the view is applied on the next pass, at once
        assert agent.ready and len(resyncs) == 1
        assert set(agent._state.tunnels) == {"h2"}  # the peer, from the resync
        store.put(keys.host("h3"), HostRecord(host="h3", vtep_ip="192.0.2.3").encode())
        wait_until(lambda: len(view.hosts.values()) == 2)
        assert sync._pass() is None
        assert set(agent._state.tunnels) == {"h2", "h3"}
    finally:
        sync.stop()
        view.stop()
        store.close()
