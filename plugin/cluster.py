"""This host in the cluster: its registration under a lease, and a live read of the cluster
state it needs (hosts, VTEPs, tenants, networks, endpoints, global settings, ...), kept by
watches.

Every read is a mirror of one key prefix: a range at some revision, then a watch from the
next one. The store's watch rides out backend outages and resumes where it stopped, so no
event is lost or seen twice; history compacted away makes the mirror range again (after a
random pause, so a thousand agents do not read at once). A ClusterView's mirrors are kept
by one thread on one watch of the store: one etcd stream and two threads per agent, not a
stream and a thread per prefix. What the agent derives from the mirrors (peers, other
hosts' endpoints) is computed by pure functions.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any, Generic, TypeVar

from common import keys
from common.loop import Reconciler
from common.models import Bgp, Endpoint, GlobalSettings, NetProfile, Rule
from common.records import (
    GroupRecord,
    HostRecord,
    NetworkRecord,
    ServiceRecord,
    TenantRecord,
    decode,
    decode_config,
    decode_endpoint,
)
from datapath.desired import FwdMode
from datapath.local import EndpointState
from store import KV, Compacted, Event, Lease, Store, StoreError, Watch
from store.hub import Missed, WatchSource

log = logging.getLogger(__name__)

R = TypeVar("R")

# The longest pause before a mirror reads its prefix again after etcd compacted the history
# its watch needed: every agent's mirrors meet the compaction at once.
COMPACTED_PAUSE = 2.0


def reread_pause(e: Compacted, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before reading again after ``e``: none when only a shared watch's own
    history fell short (Missed), else a random part of COMPACTED_PAUSE."""
    return 0.0 if isinstance(e, Missed) else COMPACTED_PAUSE * rand()


def decode_rule(value: bytes) -> Rule:
    return decode_config(Rule, value)


def decode_global(value: bytes) -> GlobalSettings:
    return decode_config(GlobalSettings, value)


def decode_profile(value: bytes) -> NetProfile:
    return decode_config(NetProfile, value)


def decode_bgp(value: bytes) -> Bgp:
    return decode_config(Bgp, value)


class PrefixMirror(Generic[R]):
    """The keys under one prefix, kept current; ``on_change`` after each change.

    Values are kept as ``decode`` reads them (a record of common.records; plain JSON by
    default). A value that does not decode is logged and left out. A mirror is kept by a
    MirrorFeed: its own (start()), watching ``watches`` (the store by default), or its
    ClusterView's, shared with the view's other mirrors.
    """

    def __init__(
        self,
        store: Store,
        prefix: str,
        on_change: Callable[[], object],
        decoder: Callable[[bytes], R] = decode,
        watches: WatchSource | None = None,
    ) -> None:
        self.store = store
        self.watches: WatchSource = watches if watches is not None else store
        self.prefix = prefix
        self.name = f"cluster state {prefix}"
        self.on_change = on_change
        self.decoder = decoder
        self.synced = threading.Event()
        self._data: dict[str, R] = {}
        self._lock = threading.Lock()
        self._feed: MirrorFeed | None = None
        # For the operator (plugin.inspect_api) and the metrics: the store revision the
        # mirror holds everything up to, how often its watch had to read the prefix again
        # (compacted history, the store unreachable) and when it last read it whole;
        # ``passes``: whole reads, ``failures``: failed reads and watches (as a loop's).
        self.revision = 0
        self.restarts = 0
        self.last_read: float | None = None  # time.time()
        self.passes = 0
        self.failures = 0
        # The revision of the last whole read (the watch's events up to it are in it), or
        # None: the mirror must read its prefix before following it.
        self.read_at: int | None = None

    def start(self) -> PrefixMirror[R]:
        """Keep this mirror alone, in a thread of its own."""
        self._feed = MirrorFeed(self.store, (self,), self.prefix, self.watches.watch).start()
        return self

    def stop(self) -> None:
        if self._feed is not None:
            self._feed.stop()

    def values(self) -> dict[str, R]:
        """Key (without the prefix) -> decoded value."""
        with self._lock:
            return dict(self._data)

    def get(self, name: str) -> R | None:
        """One value by its key without the prefix (None if absent)."""
        with self._lock:
            return self._data.get(name)

    def _decoded(self, kv: KV) -> R | None:
        try:
            return self.decoder(kv.value)
        except (ValueError, TypeError) as e:  # RecordError and pydantic's are ValueErrors
            log.warning("ignoring %s: %s", kv.key, e)
            return None

    def _put(self, data: dict[str, R], kv: KV) -> None:
        name = kv.key[len(self.prefix) :]
        value = self._decoded(kv)
        if value is None:
            data.pop(name, None)
        else:
            data[name] = value

    def read(self) -> None:
        """Read the prefix whole (its watch then resumes after read_at)."""
        try:
            rr = self.store.range(self.prefix)
        except Exception:
            self.failures += 1
            raise
        data: dict[str, R] = {}
        for kv in rr.kvs:
            self._put(data, kv)
        with self._lock:
            self._data = data
        self.revision, self.last_read, self.read_at = rr.revision, time.time(), rr.revision
        self.passes += 1
        if not self.synced.is_set():
            log.info("cluster state %s: %d key(s)", self.prefix, len(rr.kvs))
        self.synced.set()
        self.on_change()

    def apply(self, ev: Event) -> None:
        """One event of the watch: applied, unless the last read already held it."""
        if self.read_at is None or ev.kv.mod_revision <= self.read_at:
            return
        with self._lock:
            if ev.type == "put":
                self._put(self._data, ev.kv)
            else:
                self._data.pop(ev.kv.key[len(self.prefix) :], None)
            self.revision = max(self.revision, ev.kv.mod_revision)
        self.on_change()

    def lost_watch(self) -> None:
        """The watch it followed ended: read the prefix again before following it."""
        self.restarts += 1
        self.read_at = None


class MirrorFeed(Reconciler):
    """Mirrors kept by one thread: each pass opens one watch of ``prefix`` (theirs, or a
    parent of them all) from the store's next revision (or from the oldest read a mirror
    resumes from), reads the prefix of every mirror that needs it, then follows the watch,
    handing each event to the mirrors it falls under (a mirror skips what its read held).

    The watch ending ends the pass: history compacted away (``Compacted``; ``Missed`` from
    a hub) makes every mirror on it read again after reread_pause, any other error after
    the loop's backoff. A mirror whose read failed reads again on the next pass; one that
    had read resumes from that read.
    """

    def __init__(
        self,
        store: Store,
        mirrors: Iterable[PrefixMirror[Any]],
        prefix: str,
        watch: Callable[[str, int], Watch],
    ) -> None:
        self.store = store
        self.mirrors = tuple(mirrors)
        if any(not m.prefix.startswith(prefix) for m in self.mirrors):
            raise ValueError(f"a mirror is not under the feed's prefix {prefix!r}")
        self.prefix = prefix
        self._open = watch
        self._watch: Watch | None = None
        super().__init__(
            f"cluster state {prefix}",
            self._read_and_follow,
            coalesce=0,
            expected=(StoreError,),
            on_stop=lambda: self._watch is not None and self._watch.cancel(),
            run_at_start=True,
        )

    def _read_and_follow(self) -> float | None:
        mirrors = self.mirrors
        # The watch starts before the reads, from now (etcd then has no history to catch
        # it up on) or from the oldest read a mirror resumes from; its events queue up
        # while the mirrors read.
        start = min([m.read_at for m in mirrors if m.read_at is not None], default=None)
        if start is None or any(m.read_at is None for m in mirrors):
            now = self.store.revision()
            start = now if start is None else min(start, now)
        self._watch = watch = self._open(self.prefix, start + 1)
        try:
            if self.stopped:  # stop() came before there was a watch to cancel
                watch.cancel()
            watch.begin()
            for m in mirrors:
                if m.read_at is None:
                    m.read()
        except BaseException:
            watch.cancel()
            raise
        self.backoff.reset()
        try:
            for ev in watch:
                key = ev.kv.key
                for m in mirrors:
                    if key.startswith(m.prefix):
                        m.apply(ev)
        except Compacted as e:
            for m in mirrors:
                m.lost_watch()
            pause = reread_pause(e)
            log.info("cluster state %s: %s; reading it again in %.1fs", self.prefix, e, pause)
            return pause
        except Exception:
            for m in mirrors:
                m.lost_watch()
                m.failures += 1
            raise
        return 0.0


def keep_alive(lease: Lease, sleep: Callable[[float], bool]) -> None:
    """HostRegistration's default keep-alive: the lease's own, in the caller's thread."""
    lease.keep_alive(sleep)


class HostRegistration(Reconciler):
    """Keeps keys.host(name) alive under a lease, registering again if the lease is lost
    (an etcd outage longer than the TTL); revoking it on stop removes the host at once.
    The loop's own thread keeps the lease alive: ``keep(lease, sleep)`` returns once the
    lease is lost or ``sleep`` (the loop's: True once stopped) says so; by default
    ``Lease.keep_alive``. (bench/scale_agents.py passes one keeper shared by many simulated
    hosts.)"""

    def __init__(
        self,
        store: Store,
        info: HostRecord,
        ttl: int,
        keep: Callable[[Lease, Callable[[float], bool]], None] | None = None,
    ) -> None:
        self.store = store
        self.info = info
        self.ttl = ttl
        self.keep = keep if keep is not None else keep_alive
        self.registered = threading.Event()
        self._lease: Lease | None = None
        super().__init__(
            "host registration",
            self._register,
            coalesce=0,
            expected=(StoreError,),
            run_at_start=True,
        )

    def put_leased(self, key: str, value: bytes | None) -> bool:
        """Put ``value`` at ``key`` under the host's lease (it goes with the host), or
        delete it with None; False while the host is not registered."""
        lease = self._lease
        if lease is None or not self.registered.is_set():
            return False
        if value is None:
            self.store.delete(key)
        else:
            self.store.put(key, value, lease=lease.id)
        return True

    def stop(self) -> None:
        super().stop()
        lease = self._lease
        if lease is not None:
            try:
                lease.revoke()
            except StoreError as e:
                log.warning("host %s: could not revoke its lease: %s", self.info.host, e)

    def _register(self) -> float | None:
        """One pass: register under a new lease, and keep it alive until it is lost or we
        stop."""
        lease = self.store.lease_grant(self.ttl)
        self._lease = lease
        value = self.info.encode()
        self.store.put(keys.host(self.info.host), value, lease=lease.id)
        if self.info.vtep_ip:  # kept after the lease: see keys.vtep
            self.store.put(keys.vtep(self.info.host), value)
        log.info("host %s registered (lease %x, ttl %ds)", self.info.host, lease.id, self.ttl)
        self.registered.set()
        self.keep(lease, self.sleep)
        if not self.stopped:
            log.warning("host %s: registration lease lost; registering again", self.info.host)
            self.registered.clear()
        return 0.0


class ClusterView:
    """The mirrors one agent needs, with a single change callback, kept by one MirrorFeed
    (``feed``, one thread) on one watch of keys.ROOT: by default the store's own, without
    previous values; ``watches`` may give it instead (a WatchHub shared by many views).
    """

    def __init__(
        self,
        store: Store,
        on_change: Callable[[], object],
        watches: WatchSource | None = None,
    ) -> None:
        self.store = store

        def mirror(prefix: str, decoder: Callable[[bytes], R]) -> PrefixMirror[R]:
            return PrefixMirror(store, prefix, on_change, decoder, watches)

        self.hosts = mirror(keys.HOSTS, HostRecord.decode)
        self.vteps = mirror(keys.VTEPS, HostRecord.decode)
        self.networks = mirror(keys.NETWORKS, NetworkRecord.decode)
        self.endpoints = mirror(keys.ENDPOINTS, decode_endpoint)
        self.globals = mirror(keys.GLOBAL, decode_global)
        # Tenants with their tags (a tenant's VRF in routing mode).
        self.tenants = mirror(keys.TENANTS, TenantRecord.decode)
        # Policy: groups (with their tags) and the rules of every policy.
        self.groups = mirror(keys.GROUPS, GroupRecord.decode)
        self.rules = mirror(keys.RULES, decode_rule)
        # Netprofiles (what a group's endpoints may send) and service LBs.
        self.netprofiles = mirror(keys.NETPROFILES, decode_profile)
        self.services = mirror(keys.SERVICES, ServiceRecord.decode)
        # Routing mode's BGP peerings, by host name.
        self.bgps = mirror(keys.BGPS, decode_bgp)
        self._mirrors: tuple[PrefixMirror[Any], ...] = tuple(
            m for m in vars(self).values() if isinstance(m, PrefixMirror)
        )
        # The store's stream carries every key under ROOT: previous values would be waste.
        watch = watches.watch if watches is not None else partial(store.watch, prev_kv=False)
        self.feed = MirrorFeed(store, self._mirrors, keys.ROOT, watch)

    def start(self) -> ClusterView:
        self.feed.start()
        return self

    def stop(self) -> None:
        """Stop following (the watch is cancelled)."""
        self.feed.stop()

    def mirrors(self) -> tuple[PrefixMirror[Any], ...]:
        return self._mirrors

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once every mirror has read its prefix once."""
        return all(m.synced.wait(timeout) for m in self._mirrors)

    def tenant_tags(self) -> dict[str, int]:
        """Tenant name -> its tag, for the tenants that have one (a tenant stored before
        tenants had tags has none until the master gives it one)."""
        return {r.id: r.tag for r in self.tenants.values().values() if r.tag}

    def arp_mode(self) -> str:
        settings = self.globals.values().get("")
        return settings.arpMode if settings is not None else "proxy"

    def fwd_mode(self) -> FwdMode:
        settings = self.globals.values().get("")
        return "routing" if settings is not None and settings.fwdMode == "routing" else "bridge"


def peers(
    me: str,
    live: Mapping[str, HostRecord],
    vteps: Mapping[str, HostRecord],
    endpoints: Iterable[Endpoint],
) -> dict[str, str]:
    """host -> VTEP of every other host that is alive or still has endpoints.

    A host whose agent is down keeps its containers running: while it has endpoints its
    tunnel stays, with the VTEP it last published.
    """
    out = {h: r.vtep_ip for h, r in live.items() if h != me and r.vtep_ip}
    for ep in endpoints:
        if ep.host and ep.host != me and ep.host not in out:
            last = vteps.get(ep.host)
            if last is not None and last.vtep_ip:
                out[ep.host] = last.vtep_ip
    return out


def datapath_endpoint(ep: Endpoint, host: str = "") -> EndpointState:
    """An endpoint as the datapath wants it: ``host`` names another host's."""
    return EndpointState(
        ep.endpointID,
        ep.network_id,
        ep.macAddress,
        ep.ipAddress,
        ep.ipv6Address,
        ep.group_id,
        host=host,
    )


def remote_endpoints(me: str, endpoints: Iterable[Endpoint]) -> list[EndpointState]:
    """The endpoints of other hosts, as the datapath wants them."""
    out = [
        datapath_endpoint(ep, ep.host)
        for ep in endpoints
        if ep.host and ep.host != me and ep.macAddress
    ]
    return sorted(out, key=lambda r: r.id)
