"""The simulated agents of bench/scale.py: one worker process runs many, each with the real
registration (HostRegistration: a host key under a kept-alive lease) and the real
ClusterView with its watches, and nothing else (no OVS, no docker).

The driver talks to a worker over a pipe: ("start", ...), then ("arm", mirror, key) before
it creates something through the master and ("collect", timeout) for when each agent's view
first held it, then ("stats",) and ("stop",).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

# Watches: "hub": each view follows one watch of its own (the agent's default: one stream,
# the view's mirrors fed by one thread); "shared": every view of the worker process shares
# one watch (store.hub.WatchHub: what a relay in front of etcd would give). "legacy" (a
# stream and a thread per mirror, as before issue 27) is gone with that code: its rows in
# docs/research/issue27-flood-groups-and-etcd-watches.md were measured before.
MODES = ("hub", "shared")


@dataclass
class Probe:
    """When each agent's view first held ``key`` in mirror ``mirror``."""

    mirror: str = ""
    key: str = ""
    seen: dict[int, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    all_seen: threading.Event = field(default_factory=threading.Event)
    agents: int = 0

    def arm(self, mirror: str, key: str, agents: int) -> None:
        with self.lock:
            self.mirror, self.key, self.agents = mirror, key, agents
            self.seen = {}
            self.all_seen.clear()

    def check(self, i: int, view: Any) -> None:
        if not self.key or i in self.seen:
            return
        if getattr(view, self.mirror).get(self.key) is not None:
            now = time.monotonic()
            with self.lock:
                self.seen.setdefault(i, now)
                if len(self.seen) == self.agents:
                    self.all_seen.set()


def rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _until(done: Callable[[], bool], conn: Connection, timeout: float) -> bool:
    """Wait for ``done()`` (asked every 50 ms), unless the driver sends something first."""
    deadline = time.monotonic() + timeout
    while not done():
        if conn.poll(0.05) or time.monotonic() > deadline:
            return False
    return True


def worker(
    conn: Connection,
    etcd: str,
    hosts: list[str],
    mode: str,
    ttl: int,
    wave: int,
    keepers: int = 32,
) -> None:
    """One worker process: its agents, until ("stop",). Every registration first (``wave``
    at a time, each wave registered before the next), then the views ``wave`` at a time
    (each wave synced before the next: hundreds of agents reading every endpoint at once in
    one process starve each other of the GIL past the store's read timeout, and read
    again). Registering first keeps the start linear in the simulator: started together,
    each registration is an event that every view already up decodes (N² in all, on the
    simulator's two cores; each real agent has a CPU of its own), and at 1,000 hosts that
    starved the keep-alives past the TTL: leases expired and hosts registered again,
    making more events (a livelock, seen 2026-11-29)."""
    threading.stack_size(256 * 1024)  # thousands of threads: keep their stacks small
    from bench.lease_keeper import KeeperProcess

    # Every agent's lease (one each, as in production) kept alive by one keeper in a
    # process of its own, started before this one lowers its priority: a scheduler thread
    # and ``keepers`` refreshing threads, not a thread and a request loop per lease
    # (bench/lease_keeper.py says why). In this process, at 1,000 hosts, the views' start
    # starved it of the GIL: refreshes up to 4.4 s late, and in one run of three past the
    # TTL: leases expired, each expiry was an event for every view, and it never recovered.
    keeper = KeeperProcess(etcd, keepers)
    # Below etcd and the masters: each real agent has a CPU of its own, so the simulator's
    # load must not starve etcd's apply loop (it then refuses lease renewals) or the leader.
    os.nice(10)
    logging.disable(logging.WARNING)  # retries are counted (failures), not logged
    from common.records import HostRecord
    from plugin.cluster import ClusterView, HostRegistration
    from store.etcd import EtcdStore
    from store.hub import WatchHub

    probe = Probe()
    # Full (generation 2) garbage collections stop every thread of the process: how many
    # and how long (a figure of the run: see gc.freeze below).
    gc_full: list[float] = []
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                gc_start[0] = time.perf_counter()
            else:
                gc_full.append(time.perf_counter() - gc_start[0])

    gc.callbacks.append(on_gc)
    stores: list[EtcdStore] = []
    views: list[ClusterView] = []
    regs: list[HostRegistration] = []
    shared_store = EtcdStore([etcd]) if mode == "shared" else None
    hub = WatchHub(shared_store, "/netplugin/") if shared_store is not None else None
    rss0 = rss_bytes()
    t0 = time.monotonic()
    for i, host in enumerate(hosts):
        store = EtcdStore([etcd])
        stores.append(store)

        def changed(i: int = i) -> None:
            probe.check(i, views[i])

        views.append(ClusterView(store, changed, watches=hub))
        info = HostRecord(host=host, vtep_ip=f"10.{200 + i // 65536}.{i // 256 % 256}.{i % 256}")
        regs.append(HostRegistration(store, info, ttl, keep=keeper.keep))
    registered = True
    for first in range(0, len(regs), wave):
        if conn.poll():
            break  # the driver gave up (a stop): answer it
        for reg in regs[first : first + wave]:
            reg.start()
        batch = regs[first : first + wave]
        registered &= _until(lambda b=batch: all(r.registered.is_set() for r in b), conn, 60)
    synced = registered
    for first in range(0, len(views), wave):
        if conn.poll():
            break  # the driver gave up (a stop): answer it
        # Each wave of views reads every prefix (the endpoints: ~1 MB a view at 1,000
        # standing), and etcd answers everything slower meanwhile, the refreshes too. A wave
        # waits for the keeper to have no refresh queued (at most one per refreshing thread
        # in flight): at 1,000 hosts, views started regardless made the refreshes wait past
        # the TTL, leases expired, hosts registered again, and each registration was an event
        # for every view up (a livelock, seen 2026-11-29 with 8 threads and waves of 50).
        _until(lambda: keeper.pending() <= keepers // 2, conn, 60)
        if (first // wave) % 10 == 0:
            print(
                f"worker {os.getpid()}: {first} views up in {time.monotonic() - t0:.0f} s, "
                f"keeper {keeper.stats()}",
                file=sys.stderr,
                flush=True,
            )
        for view in views[first : first + wave]:
            view.start()
        batch_v = views[first : first + wave]
        synced &= _until(lambda b=batch_v: all(v.wait_synced(0) for v in b), conn, 600)
        # What the views hold now lives as long as they do: out of the collector's sight.
        # A full collection of 500 agents' heaps in one process (~2 GB) stopped every view
        # for up to 5 s (38 of them in a 1,000-host run, 28 s in all), which set the p99
        # of propagation; a real agent's heap is a 500th of that.
        gc.freeze()
    synced &= _until(lambda: all(r.registered.is_set() for r in regs), conn, 60)
    conn.send(
        {
            "synced": synced,
            "sync_s": time.monotonic() - t0,
            "rss_growth": rss_bytes() - rss0,
            "threads": threading.active_count(),
            "pid": os.getpid(),
            "keeper": keeper.stats(),
        }
    )
    while True:
        cmd = conn.recv()
        if cmd[0] == "arm":
            probe.arm(cmd[1], cmd[2], len(views))
            for i, v in enumerate(views):
                probe.check(i, v)
            conn.send("armed")
        elif cmd[0] == "collect":
            probe.all_seen.wait(cmd[1])
            with probe.lock:
                conn.send([probe.seen.get(i) for i in range(len(views))])
        elif cmd[0] == "stats":
            restarts = sum(m.restarts for v in views for m in v.mirrors())
            hubs = [hub] if hub is not None else []
            failures = sum(v.feed.failures for v in views)
            conn.send(
                {
                    "rss": rss_bytes(),
                    "restarts": restarts,
                    "failures": failures,
                    "threads": threading.active_count(),
                    "hub_received": sum(h.received for h in hubs),
                    "hub_delivered": sum(h.delivered for h in hubs),
                    # A registration's pass ends when its lease is lost (or fails).
                    "leases_lost": sum(r.passes for r in regs),
                    "reg_failures": sum(r.failures for r in regs),
                    "keeper": keeper.stats(),
                    "gc_full": len(gc_full),
                    "gc_full_max_s": max(gc_full, default=0.0),
                    "gc_full_s": sum(gc_full),
                }
            )
        elif cmd[0] == "stop":
            for v in views:
                v.stop()
            for r in regs:
                r.stop()
            keeper.close()
            for s in stores:
                s.close()
            if hub is not None:
                hub.close()
            if shared_store is not None:
                shared_store.close()
            conn.send("stopped")
            return
