"""A fake of plugin.bgp's Speaker with os-ken's habits: calls are queued to a processor
thread, a withdrawal that arrives while the add of the same prefix is still queued is lost
(os-ken's bug), and the handlers run on that thread, never the caller's."""

from __future__ import annotations

import queue
import threading
from typing import Any

from plugin.bgp import Peering, SpeakerEvents


class CoreStopped(RuntimeError):
    """Like os-ken's CoreNotStarted: the speaker was shut down."""


class FakeSpeaker:
    """``hold()`` pauses the processor (so an add stays queued), ``release()`` resumes it;
    ``learn``/``unlearn``/``peer`` make the neighbor's events, delivered on the processor
    thread; ``state`` is the neighbor's state once it is added."""

    def __init__(self, peering: Peering, events: SpeakerEvents) -> None:
        self.peering = peering
        self.events = events
        self.rib: dict[str, str] = {}  # originated here, as processed
        self.calls: list[tuple[str, ...]] = []  # every call, in order
        self.lost: list[str] = []  # withdrawals lost
        self.neighbors: dict[str, int] = {}
        self.state = "Established"
        self.stuck = False  # its connect loop stopped (rearm() starts it)
        self.shut = False
        self.handler_threads: set[str] = set()
        self._lock = threading.Lock()
        self._pending: list[tuple[str, str, str]] = []  # (op, prefix, next hop), unprocessed
        self._run = threading.Event()
        self._run.set()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread = threading.Thread(target=self._process, name="fake-bgp-core", daemon=True)
        self._thread.start()

    # test controls

    def hold(self) -> None:
        self._run.clear()

    def release(self) -> None:
        self._run.set()

    def learn(self, prefix: str, next_hop: str) -> None:
        self._queue.put(("event", prefix, next_hop, False))

    def unlearn(self, prefix: str) -> None:
        self._queue.put(("event", prefix, "", True))

    def peer(self, up: bool) -> None:
        self._queue.put(("peer", self.peering.neighbor, up))

    def drop(self, prefix: str) -> None:
        """The speaker forgets one of our routes (as a restarted core would)."""
        with self._lock:
            self.rib.pop(prefix, None)

    # Speaker

    def prefix_add(self, prefix: str, next_hop: str) -> None:
        self._check()
        with self._lock:
            self.calls.append(("add", prefix, next_hop))
            self._pending.append(("add", prefix, next_hop))
        self._queue.put(("route",))

    def prefix_del(self, prefix: str) -> None:
        self._check()
        with self._lock:
            self.calls.append(("del", prefix))
            if any(op == "add" and p == prefix for op, p, _ in self._pending):
                self.lost.append(prefix)  # os-ken's bug: the add wins, for good
                return
            self._pending.append(("del", prefix, ""))
        self._queue.put(("route",))

    def rib_prefixes(self) -> set[str]:
        self._check()
        with self._lock:
            return set(self.rib)

    def neighbor_add(self, address: str, remote_as: int) -> None:
        self._check()
        self.neighbors[address] = remote_as

    def neighbor_del(self, address: str) -> None:
        self._check()
        self.neighbors.pop(address, None)

    def neighbor_state(self, address: str) -> str:
        self._check()
        return self.state if address in self.neighbors else "Idle"

    def rearm(self, address: str) -> bool:
        """A speaker whose connect loop stopped (``stuck``) peers again."""
        self._check()
        if not self.stuck:
            return False
        self.stuck, self.state = False, "Established"
        return True

    def end_of_rib(self, address: str) -> None:
        self._check()
        with self._lock:
            self.calls.append(("end_of_rib", address))

    def shutdown(self) -> None:
        self.shut = True
        self._run.set()
        self._queue.put(None)
        self._thread.join(5)

    # the processor thread

    def _check(self) -> None:
        if self.shut:
            raise CoreStopped("500.3 - CoreManager is not active.")

    def _process(self) -> None:
        while True:
            item = self._queue.get()
            self._run.wait()
            if item is None:
                return
            self.handler_threads.add(threading.current_thread().name)
            if item[0] == "route":
                with self._lock:
                    if not self._pending:
                        continue
                    op, prefix, next_hop = self._pending.pop(0)
                    if op == "add":
                        self.rib[prefix] = next_hop
                    else:
                        self.rib.pop(prefix, None)
            elif item[0] == "event":
                _, prefix, next_hop, withdraw = item
                self.events.best_path_changed(prefix, next_hop, withdraw)
            else:
                _, address, up = item
                self.events.peer_changed(address, up)
