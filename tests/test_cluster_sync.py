"""plugin.cluster_sync.ClusterSync's pass: nothing changes on the switch until the agent has
read a cluster state netmaster wrote; then resync, then the view as it changes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from common import keys
from common.models import Endpoint, GlobalSettings, Network, Tenant
from common.records import HostRecord, NetworkRecord, TenantRecord, encode_config, encode_endpoint
from datapath.host import HostConfig, HostDatapath
from plugin.cluster import ClusterView
from plugin.cluster_sync import ClusterSync, vrf_networks
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


def _network(tenant: str, name: str, subnet: str, tag: int) -> bytes:
    config = Network(tenantName=tenant, networkName=name, subnet=subnet, encap="vxlan")
    return NetworkRecord(config=config, encap="vxlan", pkt_tag=tag).encode()


def _endpoint(eid: str, host: str, tenant: str, net: str, ip: str) -> bytes:
    return encode_endpoint(
        Endpoint(
            endpointID=eid,
            host=host,
            tenantName=tenant,
            networkName=net,
            macAddress=f"02:42:0a:00:00:{ip.rsplit('.', 1)[1]:0>2}",
            ipAddress=ip,
        )
    )


def test_routing_mode_holds_every_network_of_a_tenant_present_here(tmp_path: Path) -> None:
    """In routing mode the host holds each network of a tenant with an endpoint here, in
    the tenant's VRF, so the other hosts' endpoints of all of them are routed to; another
    tenant's networks stay away. Bridge mode holds only the networks used here."""
    store = EmbeddedStore(str(tmp_path / "state.db"))
    for name, tag in (("blue", 3), ("red", 4)):
        store.put(keys.tenant(name), TenantRecord(config=Tenant(tenantName=name), tag=tag).encode())
    store.put(keys.network("blue", "web"), _network("blue", "web", "10.1.0.0/24", 101))
    store.put(keys.network("blue", "db"), _network("blue", "db", "10.2.0.0/24", 102))
    store.put(keys.network("red", "web"), _network("red", "web", "10.1.0.0/24", 103))
    store.put(keys.endpoint("blue", "web", "e1"), _endpoint("e1", "h1", "blue", "web", "10.1.0.2"))
    store.put(keys.endpoint("blue", "db", "e2"), _endpoint("e2", "h2", "blue", "db", "10.2.0.2"))
    store.put(keys.endpoint("red", "web", "e3"), _endpoint("e3", "h2", "red", "web", "10.1.0.3"))
    store.put(keys.host("h2"), HostRecord(host="h2", vtep_ip="192.0.2.2").encode())
    store.put(keys.GLOBAL, encode_config(GlobalSettings(fwdMode="routing")))
    agent = HostDatapath(
        HostConfig(datapath_type="netdev", tunnels=True),
        FakeOvs(),
        FakeController(),
        FakeIptables(),
        FakeLinks(),
    )
    agent.start()
    view = ClusterView(store, lambda: None).start()
    sync = ClusterSync(view, agent, "h1")
    try:
        assert view.wait_synced(5)
        assert sync._pass() == 0.0 and agent.ready
        desired = agent.desired()
        assert desired.fwd_mode == "routing" and agent.fwd_mode == "routing"
        assert {(n.id, n.vrf) for n in desired.networks} == {("blue:web", 3), ("blue:db", 3)}
        assert [r.id for r in desired.remote_endpoints] == ["e2"]  # not red's e3
        # A network the tenant gets later is held at the next pass.
        store.put(keys.network("blue", "app"), _network("blue", "app", "10.3.0.0/24", 104))
        wait_until(lambda: len(view.networks.values()) == 4)
        assert sync._pass() is None
        assert agent.networks() == {"blue:web", "blue:db", "blue:app"}
        assert agent.network("blue:app").vrf == 3  # type: ignore[union-attr]
    finally:
        sync.stop()
        view.stop()
        store.close()


def test_bridge_mode_holds_only_the_networks_used_here() -> None:
    records = [
        NetworkRecord(config=Network(tenantName="blue", networkName=n, subnet=s))
        for n, s in (("web", "10.1.0.0/24"), ("db", "10.2.0.0/24"))
    ]
    assert vrf_networks("bridge", {"blue:web"}, records, {"blue": 3}) == []
    [db] = vrf_networks("routing", {"blue:web"}, records, {"blue": 3})
    assert (db.id, db.vrf, db.subnet) == ("blue:db", 3, "10.2.0.0/24")
    assert vrf_networks("routing", set(), records, {"blue": 3}) == []
