"""One keeper for the leases of every simulated agent in a bench/scale.py worker process.

Each simulated agent has its own lease, as in production; what is shared is the refreshing:
one scheduler thread with a heap of due times hands each due lease to a small fixed pool of
threads that call its ``refresh()``. A thread and a `requests` call per agent (the
agent's own ``Lease.keep_alive``) cannot keep 1,000 leases alive in two GIL-bound processes
on two cores (docs/research/issue27-flood-groups-and-etcd-watches.md, section 3); a fixed
pool bounds the requests in flight, so a slow etcd meets no more of them than the pool.

The rules are ``Lease.keep_alive``'s: the first refresh a random part of ttl/3 early, then
every ttl/3 after the last one answered; a failure other than LeaseNotFound is retried ever
further apart (0.25-0.5 s first, doubling to ttl/3, jittered, never past the TTL measured
from the last refresh sent); LeaseNotFound, or no refresh within the TTL, loses the lease.
``Schedule`` holds those decisions (pure: the clock and the random draws are passed in);
``LeaseKeeper`` runs them. A bench/scale.py worker runs its keeper in a process of its own
(``KeeperProcess``, ``serve``): inside the worker, 500 views starting starved it of the GIL
until refreshes came past the TTL.

``python -m bench.lease_keeper`` measures how many refreshes a second one keeper sustains
against a real etcd (the figure bench/scale.py's refresh budget rests on).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import queue
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from store.base import RETRY_FIRST, Lease, LeaseNotFound, first_refresh, retry_after

STOP_POLL = 5.0  # how often a registration blocked in keep() looks whether it was stopped


@dataclass(eq=False)
class Kept:
    """One lease under the keeper: when it is due, and until when it surely lives."""

    lease: Lease
    ttl: float
    due: float = 0.0
    deadline: float = 0.0  # ttl after the last refresh sent (or the grant)
    retry: float = RETRY_FIRST
    lost: bool = False
    ended: threading.Event = field(default_factory=threading.Event)


class Schedule:
    """The keeper's decisions: which leases are due, and when each goes again."""

    def __init__(self, rand: Callable[[], float] = random.random) -> None:
        self._rand = rand
        self._heap: list[tuple[float, int, Kept]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def _push(self, item: Kept, due: float) -> bool:
        """Schedule ``item`` at ``due``; True if it is now the first due."""
        item.due = due
        heapq.heappush(self._heap, (due, next(self._seq), item))
        return self._heap[0][2] is item

    def add(self, item: Kept, now: float) -> bool:
        """A lease just granted (or handed over): it lives ttl from now; its first refresh
        comes a random part (up to half) of ttl/3 early, so leases granted together are
        not refreshed together ever after."""
        ttl = max(item.ttl, 1.0)
        item.deadline = now + ttl
        item.retry = RETRY_FIRST
        return self._push(item, now + first_refresh(ttl, self._rand()))

    def pop_due(self, now: float) -> list[Kept]:
        """Every lease due by ``now`` (an ended one is dropped), earliest first."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            item = heapq.heappop(self._heap)[2]
            if not item.ended.is_set():
                out.append(item)
        return out

    def wait(self, now: float) -> float | None:
        """Seconds until the next lease is due (0 if one is), None if none is kept."""
        return max(self._heap[0][0] - now, 0.0) if self._heap else None

    def refreshed(self, item: Kept, sent: float, now: float, ttl: float) -> bool:
        """A refresh sent at ``sent`` answered at ``now`` with ``ttl``: it lives ttl from
        ``sent``, and the next refresh is ttl/3 from now. True if it is the first due."""
        item.ttl = max(ttl, 1.0)
        item.deadline = sent + item.ttl
        item.retry = RETRY_FIRST
        return self._push(item, now + item.ttl / 3)

    def failed(self, item: Kept, now: float) -> float | None:
        """A refresh failed (not LeaseNotFound): the seconds until it is tried again, or
        None when the TTL from the last refresh sent has passed (the lease is lost)."""
        if now >= item.deadline:
            return None
        ttl, left = max(item.ttl, 1.0), item.deadline - now
        item.retry, delay = retry_after(item.retry, ttl, left, self._rand())
        self._push(item, now + delay)
        return delay


@dataclass
class KeeperStats:
    """What the keeper did: refreshes answered, failed and leases lost; how late the
    refreshes were sent after they were due (the keeper's own lag)."""

    refreshes: int = 0
    failures: int = 0
    lost: int = 0
    late_max: float = 0.0
    late_total: float = 0.0
    late_over_1s: int = 0

    def sent_late(self, late: float) -> None:
        self.late_max = max(self.late_max, late)
        self.late_total += late
        self.late_over_1s += late > 1.0

    def as_dict(self) -> dict[str, float]:
        sent = self.refreshes + self.failures
        return {
            "refreshes": self.refreshes,
            "failures": self.failures,
            "lost": self.lost,
            "late_max_s": self.late_max,
            "late_mean_s": self.late_total / sent if sent else 0.0,
            "late_over_1s": self.late_over_1s,
        }


class LeaseKeeper:
    """Keeps many leases alive: one scheduler thread and ``workers`` refreshing threads.

    ``keep(lease, sleep)`` is a HostRegistration keep-alive: it hands the lease over and
    blocks the caller until the lease is lost (``lease.lost`` set) or ``sleep(0)`` says the
    caller was stopped (looked at every STOP_POLL seconds, and at close()).
    """

    def __init__(
        self,
        workers: int = 8,
        rand: Callable[[], float] = random.random,
        on_lost: Callable[[Lease], object] | None = None,
    ) -> None:
        self.workers = workers
        self.on_lost = on_lost
        self.stats = KeeperStats()
        self._schedule = Schedule(rand)
        self._cond = threading.Condition()
        self._work: queue.SimpleQueue[Kept | None] = queue.SimpleQueue()
        self._closed = False
        self._kept: set[Kept] = set()
        self._pending = 0  # handed to the refreshing threads, not answered yet
        self._threads = [threading.Thread(target=self._schedule_loop, name="keeper", daemon=True)]
        self._threads += [
            threading.Thread(target=self._refresh_loop, name=f"keeper-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self) -> LeaseKeeper:
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        """Stop refreshing; every keep() returns."""
        with self._cond:
            self._closed = True
            kept, self._kept = self._kept, set()
            self._cond.notify()
        for item in kept:
            item.ended.set()
        for _ in range(self.workers):
            self._work.put(None)

    def add(self, lease: Lease) -> Kept:
        item = Kept(lease, float(lease.ttl))
        with self._cond:
            if self._closed:
                item.ended.set()
                return item
            self._kept.add(item)
            if self._schedule.add(item, time.monotonic()):
                self._cond.notify()
        return item

    def remove(self, item: Kept) -> None:
        item.ended.set()  # the schedule drops it when it comes due
        with self._cond:
            self._kept.discard(item)

    def keep(self, lease: Lease, sleep: Callable[[float], bool]) -> None:
        item = self.add(lease)
        try:
            while not item.ended.wait(STOP_POLL):
                if sleep(0):
                    break
        finally:
            self.remove(item)

    def _lose(self, item: Kept) -> None:
        item.lost = True
        with self._cond:
            self.stats.lost += 1
            self._kept.discard(item)
        item.lease.lost.set()
        item.ended.set()
        if self.on_lost is not None:
            self.on_lost(item.lease)

    def _schedule_loop(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                for item in self._schedule.pop_due(now):
                    self._pending += 1
                    self._work.put(item)
                self._cond.wait(self._schedule.wait(time.monotonic()))

    def pending(self) -> int:
        """Refreshes due and not answered yet: more than the refreshing threads means the
        keeper is behind (etcd answers slowly, or the process is short of CPU)."""
        with self._cond:
            return self._pending

    def _refresh_loop(self) -> None:
        while (item := self._work.get()) is not None:
            try:
                self._refresh(item)
            finally:
                with self._cond:
                    self._pending -= 1

    def _refresh(self, item: Kept) -> None:
        if item.ended.is_set():
            return
        sent = time.monotonic()
        try:
            ttl = item.lease.refresh()
        except LeaseNotFound:
            self._lose(item)
            return
        except Exception:  # an outage, a timeout: retried until the TTL has passed
            with self._cond:
                self.stats.failures += 1
                self.stats.sent_late(sent - item.due)
                if item.ended.is_set():
                    return
                if self._schedule.failed(item, time.monotonic()) is not None:
                    self._cond.notify()
                    return
            self._lose(item)
            return
        with self._cond:
            self.stats.refreshes += 1
            self.stats.sent_late(sent - item.due)
            if not item.ended.is_set() and self._schedule.refreshed(
                item, sent, time.monotonic(), ttl
            ):
                self._cond.notify()


# The keeper process's figures, in a shared array the worker reads (KeeperProcess.stats).
STATUS = ("pending", "refreshes", "failures", "lost", "late_max_s", "late_mean_s", "late_over_1s")


def serve(conn: Connection, etcd: str, workers: int, status: Any) -> None:
    """The keeper process: keeps the leases its worker hands over (("add", id, ttl),
    ("remove", id)) until ("stop",), says ("lost", id) of each lease it loses, and
    publishes its figures in ``status`` (STATUS) every 0.2 s. Its own process, with its own
    GIL and no nice: what a real agent's keep-alive has, a CPU of its own."""
    from store.etcd import EtcdStore

    stores = [EtcdStore([etcd]) for _ in range(workers)]
    lock = threading.Lock()

    def lost(lease: Lease) -> None:
        with lock:
            conn.send(("lost", lease.id))

    keeper = LeaseKeeper(workers, on_lost=lost).start()
    kept: dict[int, Kept] = {}
    done = threading.Event()

    def publish() -> None:
        while not done.wait(0.2):
            figures = {"pending": keeper.pending(), **keeper.stats.as_dict()}
            for i, name in enumerate(STATUS):
                status[i] = float(figures[name])

    threading.Thread(target=publish, name="keeper-status", daemon=True).start()
    try:
        while True:
            cmd = conn.recv()
            if cmd[0] == "add":
                kept[cmd[1]] = keeper.add(Lease(cmd[1], cmd[2], stores[cmd[1] % workers]))
            elif cmd[0] == "remove":
                if (item := kept.pop(cmd[1], None)) is not None:
                    keeper.remove(item)
            else:
                return
    except EOFError:
        return  # the worker is gone
    finally:
        done.set()
        keeper.close()
        for s in stores:
            s.close()


class KeeperProcess:
    """A worker's side of its keeper process (serve): ``keep`` is a HostRegistration
    keep-alive, as LeaseKeeper.keep, with the refreshing done in the other process."""

    def __init__(self, etcd: str, workers: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self._status = ctx.Array("d", len(STATUS), lock=False)
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=serve, args=(child, etcd, workers, self._status), daemon=True
        )
        self._proc.start()
        child.close()
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[Lease, threading.Event]] = {}
        threading.Thread(target=self._listen, name="keeper-listener", daemon=True).start()

    def _send(self, msg: tuple[Any, ...]) -> None:
        with self._lock:
            self._conn.send(msg)

    def _listen(self) -> None:
        try:
            while True:
                msg = self._conn.recv()
                if msg[0] == "lost" and (got := self._waiting.pop(msg[1], None)) is not None:
                    got[0].lost.set()
                    got[1].set()
        except (EOFError, OSError):
            for _, ended in list(self._waiting.values()):
                ended.set()

    def keep(self, lease: Lease, sleep: Callable[[float], bool]) -> None:
        ended = threading.Event()
        self._waiting[lease.id] = (lease, ended)
        self._send(("add", lease.id, lease.ttl))
        try:
            while not ended.wait(STOP_POLL):
                if sleep(0):
                    break
        finally:
            if self._waiting.pop(lease.id, None) is not None:
                with contextlib.suppress(OSError):
                    self._send(("remove", lease.id))

    def pending(self) -> int:
        return int(self._status[0])

    def stats(self) -> dict[str, float]:
        return {name: self._status[i] for i, name in enumerate(STATUS) if name != "pending"}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._send(("stop",))
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()
        for _, ended in list(self._waiting.values()):
            ended.set()


def measure(endpoint: str, leases: int, ttl: int, seconds: float, workers: int) -> dict:
    """Grant ``leases`` leases of ``ttl`` on the etcd at ``endpoint`` (one store, as one
    agent, per lease), keep them with one keeper for ``seconds``, and say how many
    refreshes a second it did against the ``leases * 3 / ttl`` asked of it."""
    from store.etcd import EtcdStore

    stores = [EtcdStore([endpoint]) for _ in range(leases)]
    keeper = LeaseKeeper(workers).start()
    for s in stores:
        keeper.add(s.lease_grant(ttl))
    time.sleep(seconds / 4)  # past the first (jittered) round
    before = keeper.stats.refreshes
    t0 = time.monotonic()
    time.sleep(seconds)
    rate = (keeper.stats.refreshes - before) / (time.monotonic() - t0)
    keeper.close()
    for s in stores:
        s.close()
    return {
        "leases": leases,
        "ttl": ttl,
        "workers": workers,
        "asked_per_s": leases * 3 / ttl,
        "done_per_s": rate,
        **keeper.stats.as_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.lease_keeper", description=__doc__.split("\n")[0]
    )
    p.add_argument("--leases", default="500", help="comma-separated lease counts")
    p.add_argument("--ttl", type=int, default=1, help="each lease's TTL, seconds")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=8, help="the keeper's refreshing threads")
    args = p.parse_args(argv)
    import tempfile
    from pathlib import Path

    from testbed.etcd import EtcdServer

    with tempfile.TemporaryDirectory(prefix="netplugin-keeper-", dir="/dev/shm") as d:
        etcd = EtcdServer(Path(d) / "etcd")
        etcd.start()
        try:
            for n in (int(x) for x in args.leases.split(",")):
                print(json.dumps(measure(etcd.endpoint, n, args.ttl, args.seconds, args.workers)))
        finally:
            etcd.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
