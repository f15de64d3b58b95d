"""The agent's view of the cluster: peers, other hosts' endpoints, mirrors and registration."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from common import keys
from common.models import Endpoint, GlobalSettings, Tenant
from common.records import (
    HostRecord,
    TenantRecord,
    decode_endpoint,
    encode_config,
    encode_endpoint,
)
from datapath.pipeline import EndpointState
from plugin.cluster import ClusterView, HostRegistration, PrefixMirror, peers, remote_endpoints
from store.embedded import EmbeddedStore
from testbed.wait import wait_for


def ep(eid: str, host: str, net: str = "n1", tenant: str = "default", **kw: str) -> Endpoint:
    return Endpoint(
        endpointID=eid,
        host=host,
        tenantName=tenant,
        networkName=net,
        macAddress=kw.get("mac", "02:42:0a:00:00:02"),
        ipAddress=kw.get("ip", "10.0.0.2"),
        ipv6Address=kw.get("ipv6", ""),
    )


def hosts(**vtep: str) -> dict[str, HostRecord]:
    return {h: HostRecord(host=h, vtep_ip=v) for h, v in vtep.items()}


def test_peers_are_live_hosts_and_hosts_that_still_have_endpoints() -> None:
    live = hosts(h1="192.168.1.1", h2="192.168.1.2", h4="")
    vteps = hosts(h3="192.168.1.3", h5="192.168.1.5")
    eps = [ep("a", "h3"), ep("b", "h1"), ep("c", "h6")]
    # h3's agent is down but its containers run: it keeps its tunnel, at its last VTEP.
    # h4 has no VTEP; h5 is gone with no endpoint; h6 never told its VTEP.
    assert peers("h1", live, vteps, eps) == {"h2": "192.168.1.2", "h3": "192.168.1.3"}


def test_remote_endpoints_are_the_other_hosts_ones() -> None:
    eps = [
        ep("a", "h2", ip="10.0.0.5", ipv6="fd00::5"),
        ep("b", "h1"),
        ep("c", "", ip="10.0.0.7"),  # made through the API, on no host
        ep("d", "h3", net="web", tenant="blue", ip=""),
    ]
    assert remote_endpoints("h1", eps) == [
        EndpointState("a", "default:n1", "02:42:0a:00:00:02", "10.0.0.5", "fd00::5", host="h2"),
        EndpointState("d", "blue:web", "02:42:0a:00:00:02", "", "", host="h3"),
    ]


def test_mirror_follows_puts_and_deletes_after_its_first_read(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        store.put(keys.host("h1"), b'{"host": "h1"}')
        changes = threading.Event()
        mirror = PrefixMirror(store, keys.HOSTS, changes.set).start()
        try:
            assert mirror.synced.wait(5)
            assert mirror.values() == {"h1": {"host": "h1"}}
            store.put(keys.host("h2"), b'{"host": "h2"}')
            store.delete(keys.host("h1"))
            wait_for(lambda: mirror.values() == {"h2": {"host": "h2"}}, 5, "h1 gone, h2 mirrored")
            assert changes.is_set()
        finally:
            mirror.stop()


def test_registration_lives_on_a_lease_and_stop_removes_it(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        info = HostRecord(host="h1", vtep_ip="192.168.1.1", datapath="netdev", uplink_mtu=1500)
        reg = HostRegistration(store, info, ttl=2).start()
        assert reg.registered.wait(5)
        kv = store.get(keys.host("h1"))
        assert kv is not None and kv.lease and json.loads(kv.value)["vtepIP"] == "192.168.1.1"
        reg.stop()
        assert store.get(keys.host("h1")) is None  # gone at once, not after the TTL
        # The VTEP stays: peers keep a tunnel while this host still has endpoints.
        vtep = store.get(keys.vtep("h1"))
        assert vtep is not None and not vtep.lease


def test_registration_comes_back_when_its_lease_is_lost(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        reg = HostRegistration(store, HostRecord(host="h1"), ttl=1).start()
        try:
            assert reg.registered.wait(5)
            first = store.get(keys.host("h1"))
            assert first is not None
            store.lease_revoke(first.lease)  # e.g. etcd expired it during an outage
            wait_for(
                lambda: (kv := store.get(keys.host("h1"))) is not None and kv.lease != first.lease,
                5,
                "the registration came back on a new lease",
            )
        finally:
            reg.stop()


def test_mirror_decodes_records_and_leaves_out_what_does_not_decode(tmp_path: Path) -> None:
    good = ep("a", "h2")
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        store.put(keys.endpoint("default", "n1", "a"), encode_endpoint(good))
        store.put(keys.endpoint("default", "n1", "b"), b"{not json")
        mirror = PrefixMirror(store, keys.ENDPOINTS, lambda: None, decode_endpoint).start()
        try:
            assert mirror.synced.wait(5)
            assert mirror.values() == {"default/n1/a": good}
            # A record that stops decoding leaves the view; the mirror keeps following.
            store.put(keys.endpoint("default", "n1", "a"), b'{"endpointID": "a"}')
            store.put(keys.endpoint("default", "n1", "c"), encode_endpoint(ep("c", "h3")))
            wait_for(lambda: list(mirror.values()) == ["default/n1/c"], 5, "only c mirrored")
        finally:
            mirror.stop()


def test_cluster_view_reads_the_arp_mode_from_the_global_settings(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        view = ClusterView(store, lambda: None).start()
        try:
            assert view.wait_synced(5)
            assert view.arp_mode() == "proxy"  # no settings yet
            store.put(keys.GLOBAL, encode_config(GlobalSettings(arpMode="flood")))
            wait_for(lambda: view.arp_mode() == "flood", 5, "the arp mode read as flood")
            wait_for(
                lambda: isinstance(view.globals.values().get(""), GlobalSettings),
                5,
                "the global settings mirrored",
            )
        finally:
            view.stop()


def test_cluster_view_mirrors_tenants_with_their_tags(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        blue = TenantRecord(config=Tenant(tenantName="blue"), tag=2)
        store.put(keys.tenant("blue"), blue.encode())
        # As an earlier master stored it: no tag yet (the master gives it one at start).
        store.put(keys.tenant("old"), encode_config(Tenant(tenantName="old")))
        view = ClusterView(store, lambda: None).start()
        try:
            assert view.wait_synced(5)
            assert view.tenants.get("blue") == blue
            assert view.tenant_tags() == {"blue": 2}
            store.put(
                keys.tenant("old"), TenantRecord(config=Tenant(tenantName="old"), tag=3).encode()
            )
            wait_for(lambda: view.tenant_tags() == {"blue": 2, "old": 3}, 5, "old's tag mirrored")
            store.delete(keys.tenant("blue"))
            wait_for(lambda: view.tenant_tags() == {"old": 3}, 5, "blue gone")
        finally:
            view.stop()
