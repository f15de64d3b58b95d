"""This host in the cluster: its registration under a lease, and a live read of the cluster
state it needs (hosts, VTEPs, networks, endpoints, global settings), kept by watches.

Every read is a mirror of one key prefix: a range at some revision, then a watch from the
next one. The store's watch rides out backend outages and resumes where it stopped, so no
event is lost or seen twice; history compacted away makes the mirror range again. What the
agent derives from the mirrors (peers, other hosts' endpoints) is computed by pure functions.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from common import keys
from common.records import HostRecord
from datapath.pipeline import RemoteEndpointState
from store import KV, Compacted, Lease, Store, StoreError

log = logging.getLogger(__name__)


class PrefixMirror:
    """The keys under one prefix, kept current in a thread; ``on_change`` after each change."""

    def __init__(self, store: Store, prefix: str, on_change: Callable[[], None]) -> None:
        self.store = store
        self.prefix = prefix
        self.on_change = on_change
        self.synced = threading.Event()
        self._data: dict[str, KV] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread = threading.Thread(target=self._run, name=f"mirror:{prefix}", daemon=True)

    def start(self) -> PrefixMirror:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.cancel()

    def values(self) -> dict[str, dict[str, Any]]:
        """Key (without the prefix) -> decoded JSON value."""
        with self._lock:
            kvs = list(self._data.values())
        out: dict[str, dict[str, Any]] = {}
        for kv in kvs:
            try:
                out[kv.key[len(self.prefix) :]] = json.loads(kv.value)
            except ValueError:
                log.warning("ignoring %s: not JSON", kv.key)
        return out

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                rr = self.store.range(self.prefix)
                with self._lock:
                    self._data = {kv.key: kv for kv in rr.kvs}
                if not self.synced.is_set():
                    log.info("cluster state %s: %d key(s)", self.prefix, len(rr.kvs))
                self.synced.set()
                self.on_change()
                delay = 0.5
                self._watch = self.store.watch(self.prefix, rr.revision + 1)
                for ev in self._watch:
                    with self._lock:
                        if ev.type == "put":
                            self._data[ev.kv.key] = ev.kv
                        else:
                            self._data.pop(ev.kv.key, None)
                    self.on_change()
            except Compacted as e:
                log.info("cluster state %s: %s; reading it again", self.prefix, e)
            except StoreError as e:
                log.warning(
                    "cluster state %s unreachable (%s); retrying in %.1fs", self.prefix, e, delay
                )
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)
            except Exception:
                log.exception("cluster state %s: watch failed; retrying", self.prefix)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)


class HostRegistration:
    """Keeps keys.host(name) alive under a lease, registering again if the lease is lost
    (an etcd outage longer than the TTL); revoking it on stop removes the host at once."""

    def __init__(self, store: Store, info: HostRecord, ttl: int) -> None:
        self.store = store
        self.info = info
        self.ttl = ttl
        self.registered = threading.Event()
        self._lease: Lease | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-registration", daemon=True)

    def start(self) -> HostRegistration:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        lease = self._lease
        if lease is not None:
            try:
                lease.revoke()
            except StoreError as e:
                log.warning("host %s: could not revoke its lease: %s", self.info.host, e)

    def _run(self) -> None:
        value = self.info.encode()
        delay = 0.5
        while not self._stop.is_set():
            try:
                lease = self.store.lease_grant(self.ttl, keepalive=True)
                self._lease = lease
                self.store.put(keys.host(self.info.host), value, lease=lease.id)
                if self.info.vtep_ip:  # kept after the lease: see keys.vtep
                    self.store.put(keys.vtep(self.info.host), value)
                log.info(
                    "host %s registered (lease %x, ttl %ds)", self.info.host, lease.id, self.ttl
                )
                self.registered.set()
                delay = 0.5
                while not self._stop.is_set() and not lease.lost.wait(0.5):
                    pass
                if not self._stop.is_set():
                    log.warning(
                        "host %s: registration lease lost; registering again", self.info.host
                    )
                    self.registered.clear()
            except StoreError as e:
                log.warning(
                    "host %s: cannot register (%s); retrying in %.1fs", self.info.host, e, delay
                )
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)


class ClusterView:
    """The mirrors one agent needs, with a single change callback."""

    def __init__(self, store: Store, on_change: Callable[[], None]) -> None:
        self.store = store
        self.hosts = PrefixMirror(store, keys.HOSTS, on_change)
        self.vteps = PrefixMirror(store, keys.VTEPS, on_change)
        self.networks = PrefixMirror(store, keys.NETWORKS, on_change)
        self.endpoints = PrefixMirror(store, keys.ENDPOINTS, on_change)
        self.globals = PrefixMirror(store, keys.GLOBAL, on_change)
        self._mirrors = (self.hosts, self.vteps, self.networks, self.endpoints, self.globals)

    def start(self) -> ClusterView:
        for m in self._mirrors:
            m.start()
        return self

    def stop(self) -> None:
        for m in self._mirrors:
            m.stop()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once every mirror has read its prefix once."""
        return all(m.synced.wait(timeout) for m in self._mirrors)

    def arp_mode(self) -> str:
        config = self.globals.values().get("", {}).get("config", {})
        return str(config.get("arpMode") or "proxy")


def peers(
    me: str,
    live: Mapping[str, Mapping[str, Any]],
    vteps: Mapping[str, Mapping[str, Any]],
    endpoints: Iterable[Mapping[str, Any]],
) -> dict[str, str]:
    """host -> VTEP of every other host that is alive or still has endpoints.

    A host whose agent is down keeps its containers running: while it has endpoints its
    tunnel stays, with the VTEP it last published.
    """
    out = {h: str(r.get("vtepIP")) for h, r in live.items() if h != me and r.get("vtepIP")}
    for ep in endpoints:
        host = str(ep.get("host") or "")
        if host and host != me and host not in out:
            vtep = vteps.get(host, {}).get("vtepIP")
            if vtep:
                out[host] = str(vtep)
    return out


def network_id(endpoint: Mapping[str, Any]) -> str:
    """TENANT:NAME of an endpoint record's network."""
    return f"{endpoint.get('tenantName') or 'default'}:{endpoint['networkName']}"


def remote_endpoints(me: str, endpoints: Iterable[Mapping[str, Any]]) -> list[RemoteEndpointState]:
    """The endpoints of other hosts, as the datapath wants them."""
    out = []
    for ep in endpoints:
        host = str(ep.get("host") or "")
        if not host or host == me or not ep.get("macAddress"):
            continue
        out.append(
            RemoteEndpointState(
                id=str(ep["endpointID"]),
                network_id=network_id(ep),
                host=host,
                mac=str(ep["macAddress"]),
                ipv4=ep.get("ipAddress") or None,
                ipv6=ep.get("ipv6Address") or None,
            )
        )
    return sorted(out, key=lambda r: r.id)
