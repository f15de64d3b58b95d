"""Switch ports plugged ahead of demand (issue 27): CreateEndpoint takes one, DeleteEndpoint
gives it back, and neither writes to OVSDB.

Why: ovs-vswitchd reconfigures every port of the bridge after any change of its database
(11 ms at 10 ports, 175 ms at 1,000 here), and handles no OpenFlow message meanwhile, so
a port added or removed on Docker's path costs that much and delays every other
endpoint's flows. It does the same after any link change the kernel reports in the host's
namespace (its interface notifier: a MAC, an MTU, an alias, a carrier, on any interface,
ours or not): at 1,000 ports some 5,000 netlink requests, 50 to 100 ms of its main
thread. Changes inside a container's namespace it does not see. So a pool port is a veth
pair with names of its own (``vq…`` on the bridge, ``vr…`` for the container), already an
OVS port with a known ofport, made the way the last one was taken (MTU, TX checksumming):
- taking one changes nothing in the kernel when it already has the endpoint's MTU and TX
  checksumming (the usual case): the container end gets its MAC from Docker, inside the
  container's namespace (libnetwork sets the MAC the driver answered), or from the CNI
  plugin, there too; which endpoint a port serves is written to a small file of the
  agent's (how a restarted agent finds it), and the flows go out with the known ofport;
- giving one back (Docker has moved the container end back to the host's namespace under
  its own name, as libnetwork does when it releases a sandbox) drops that file and keeps
  the port for the next endpoint; a port whose container end did not come back is the
  caller's to remove;
- ``refill`` makes what is missing, in one OVSDB transaction, only when no endpoint was
  taken for ``quiet`` seconds: the reconfiguration then delays nobody;
- a take that finds the pool empty makes a batch at once, in one transaction, and takes
  one of it: a burst of new containers costs ovs-vswitchd one reconfiguration per
  ``batch`` endpoints, not one each.

Decisions are here; the effects are the ``PoolLinks`` and ``PoolOvs`` given.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from .plugcost import PlugCosts

log = logging.getLogger(__name__)

HOST_PREFIX = "vq"  # a pool port's end on the bridge
CONTAINER_PREFIX = "vr"  # and the end a container gets
EXT_POOL = "netplugin-pool"  # on a pool port's OVSDB row


def pool_names(key: str) -> tuple[str, str]:
    """(host end, container end) of the pool port ``key`` (11 hex characters)."""
    return HOST_PREFIX + key, CONTAINER_PREFIX + key


def new_key() -> str:
    return secrets.token_hex(6)[:11]


def is_pool_port(name: str) -> bool:
    return name.startswith(HOST_PREFIX) and len(name) == len(HOST_PREFIX) + 11


def container_end(host: str) -> str:
    """The container end of the pool port whose host end is ``host``."""
    return CONTAINER_PREFIX + host[len(HOST_PREFIX) :]


@dataclass(frozen=True)
class PoolPort:
    host: str  # the host end: a port of the bridge
    container: str  # the end Docker moves into the container and renames
    ofport: int
    # Whether the container end has TX checksumming off (datapath.offloads), and the MTU
    # of both ends; None: not known (a port adopted at start), so the next claim sets it.
    offloads_off: bool | None = False
    mtu: int | None = None


@dataclass(frozen=True)
class Shape:
    """What a port is readied with for an endpoint: the MTU of both ends, and whether
    the container end has TX checksumming off."""

    mtu: int
    offloads_off: bool = False


@dataclass(frozen=True)
class PoolLink:
    """A pool port's pair as the kernel has it."""

    endpoint: str  # the endpoint it serves ("" for none)
    home: bool  # its container end is in the host's namespace under its name


class PoolLinks(Protocol):
    def create_pool_veth(self, host: str, container: str, shape: Shape) -> None:
        """A new pair of ``shape``, the host end up and kept off the host's IP stack."""
        ...

    def claim(self, port: PoolPort, endpoint_id: str, shape: Shape) -> None:
        """Ready ``port`` for the endpoint: the MTU and TX checksumming of ``shape``
        where the port's differ (only then does the kernel hear of it), and the record
        that it serves ``endpoint_id``."""
        ...

    def release(self, port: PoolPort) -> bool:
        """Drop the record of the endpoint it served; True if the container end is back
        in the host's namespace under its name (the port can serve again)."""
        ...

    def discard(self, host: str) -> None:
        """Delete the pair whose host end is ``host`` (if it is there)."""
        ...

    def survey(self) -> dict[str, PoolLink]:
        """Every pool port's pair in this namespace, by host end (at start)."""
        ...


class PoolOvs(Protocol):
    def add_ports(
        self, bridge: str, names: list[str], external_ids: Mapping[str, str]
    ) -> dict[str, int]:
        """Add these ports in one transaction; their ofports by name."""
        ...


class PortPool:
    """At most ``size`` free ports; ``batch`` made at a time."""

    def __init__(
        self,
        ovs: PoolOvs,
        links: PoolLinks,
        bridge: str,
        size: int,
        batch: int = 8,
        quiet: float = 0.5,
        shape: Shape = Shape(1500),
        keys: Callable[[], str] = new_key,
        clock: Callable[[], float] = time.monotonic,
        costs: PlugCosts | None = None,
    ) -> None:
        self.ovs, self.links, self.bridge = ovs, links, bridge
        self.costs = costs or PlugCosts()  # every batch's add is measured
        self.size, self.batch, self.quiet = size, batch, quiet
        # New ports are made as the last one was taken: the next take then changes nothing.
        self._shape = shape
        self._keys, self._clock = keys, clock
        self._lock = threading.Lock()
        self._making = threading.Lock()  # held while a batch is made
        self._free: deque[PoolPort] = deque()
        self._last_take = float("-inf")
        self.taken = 0  # ports handed to endpoints, since start
        self.missed = 0  # endpoints that found the pool empty
        self.reused = 0  # ports given back and kept
        self.made = 0  # ports made

    def take(self, endpoint_id: str, shape: Shape, make: bool = True) -> PoolPort | None:
        """A free port readied for the endpoint (``shape``), or None (no port could be made, or
        readying it failed: that port is dropped; the caller plugs a port of its own). An
        empty pool makes a batch first, in one transaction, if ``make``."""
        with self._lock:
            self._last_take = self._clock()
            self._shape = shape
            empty = not self._free
            if empty:
                self.missed += 1
        if empty and not make:
            return None
        if empty:
            try:
                with self._making:  # one batch at a time: the refill's may just have come
                    if not self.state()["free"]:
                        self._make(self.batch)
            except Exception:
                return None
        with self._lock:
            if not self._free:  # taken meanwhile by another caller
                return None
            port = self._free.popleft()
        try:
            self.links.claim(port, endpoint_id, shape)
        except OSError as e:
            log.warning("pool port %s: cannot ready it for %s: %s", port.host, endpoint_id[:12], e)
            return None
        with self._lock:
            self.taken += 1
        return replace(port, offloads_off=shape.offloads_off, mtu=shape.mtu)

    def give_back(self, port: PoolPort) -> bool:
        """Keep ``port`` for the next endpoint; False if it cannot serve again or the pool
        holds twice its size (the caller removes it). Up to then a port given back is kept
        although a refill may have replaced it meanwhile: under steady churn (a container
        started as another ends) the pool then makes and removes nothing."""
        try:
            home = self.links.release(port)
        except OSError as e:
            log.info("pool port %s: not reused: %s", port.host, e)
            return False
        with self._lock:
            if not home or len(self._free) >= 2 * self.size:
                return False
            self._free.append(port)
            self.reused += 1
            return True

    def missing(self) -> int:
        """How many ports the next refill would make now (0 while endpoints are being
        taken: a refill would delay their flows)."""
        with self._lock:
            if self._clock() - self._last_take < self.quiet:
                return 0
            return max(0, min(self.batch, self.size - len(self._free)))

    def refill(self) -> int:
        """Make what is missing (see ``missing``) in one OVSDB transaction; how many."""
        with self._making:
            n = self.missing()
            return self._make(n) if n else 0

    def _make(self, n: int) -> int:
        names = [pool_names(self._keys()) for _ in range(n)]
        with self._lock:
            shape = self._shape
        made: list[tuple[str, str]] = []
        try:
            for host, container in names:
                self.links.create_pool_veth(host, container, shape)
                made.append((host, container))
            started = self._clock()
            ofports = self.ovs.add_ports(self.bridge, [h for h, _ in made], {EXT_POOL: "1"})
            self.costs.added(self._clock() - started)  # one reconfiguration, however many
        except Exception as e:
            log.error("port pool: cannot make %d ports: %s", n, e)
            for host, _ in made:  # add_ports added none of them
                try:
                    self.links.discard(host)
                except OSError as gone:
                    log.warning("port pool: %s is left (the audit removes it): %s", host, gone)
            raise
        ports = [
            PoolPort(h, c, ofports[h], shape.offloads_off, shape.mtu)
            for h, c in made
            if ofports.get(h, 0) > 0
        ]
        with self._lock:
            self._free.extend(ports)
            self.made += len(ports)
        return len(ports)

    def adopt(self, free: list[PoolPort]) -> list[PoolPort]:
        """At start: keep pool ports no endpoint uses (up to ``size``); the rest, to
        remove."""
        with self._lock:
            room = max(0, self.size - len(self._free))
            self._free.extend(free[:room])
            return free[room:]

    def free(self) -> list[PoolPort]:
        with self._lock:
            return list(self._free)

    def paused(self) -> threading.Lock:
        """Held, no batch is being made (for whoever reads which pool ports exist)."""
        return self._making

    def drain(self) -> list[PoolPort]:
        """At stop: every free port, to remove; the pool is then empty."""
        with self._lock:
            out = list(self._free)
            self._free.clear()
            return out

    def state(self) -> dict[str, int]:
        with self._lock:
            return {
                "free": len(self._free),
                "size": self.size,
                "taken": self.taken,
                "missed": self.missed,
                "reused": self.reused,
                "made": self.made,
            }
