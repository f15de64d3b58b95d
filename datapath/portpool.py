"""Switch ports plugged ahead of demand (issue 27): CreateEndpoint takes one, DeleteEndpoint
gives it back, and neither writes to OVSDB.

Why: ovs-vswitchd reconfigures every port of the bridge after any change of its database
(11 ms at 10 ports, 175 ms at 1,000 here), and handles no OpenFlow message meanwhile, so
a port added or removed on Docker's path costs that much and delays every other
endpoint's flows. A pool port is a veth pair with names of its own (``vq…`` on the
bridge, ``vr…`` for the container), already an OVS port with a known ofport:
- taking one sets the container end's MAC and MTU and the host end's kernel alias (the
  endpoint's ID: how a restarted agent finds which endpoint a pool port serves) by
  netlink, and the endpoint's flows go out with the known ofport;
- giving one back (Docker has moved the container end back to the host's namespace under
  its own name, as libnetwork does when it releases a sandbox) clears the alias and keeps
  it for the next endpoint; a port whose container end did not come back is the caller's
  to remove;
- ``refill`` makes what is missing, in one OVSDB transaction, only when no endpoint was
  taken for ``quiet`` seconds: the reconfiguration then delays nobody.

Decisions are here; the effects are the ``PoolLinks`` and ``PoolOvs`` given.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

HOST_PREFIX = "vq"  # a pool port's end on the bridge
CONTAINER_PREFIX = "vr"  # and the end a container gets
EXT_POOL = "netplugin-pool"  # on a pool port's OVSDB row


def pool_names(key: str) -> tuple[str, str]:
    """(host end, container end) of the pool port ``key`` (11 hex characters)."""
    return HOST_PREFIX + key, CONTAINER_PREFIX + key


def new_key() -> str:
    return secrets.token_hex(6)[:11]


@dataclass(frozen=True)
class PoolPort:
    host: str  # the host end: a port of the bridge
    container: str  # the end Docker moves into the container and renames
    ofport: int


class PoolLinks(Protocol):
    def create_pool_veth(self, host: str, container: str) -> None:
        """A new pair, the host end up and kept off the host's IP stack."""
        ...

    def claim(self, port: PoolPort, endpoint_id: str, mac: str, mtu: int) -> None:
        """Ready ``port`` for the endpoint: the container end's MAC and MTU, the host end's
        MTU and its alias (the endpoint's ID)."""
        ...

    def release(self, port: PoolPort) -> bool:
        """Clear the host end's alias; True if the container end is back in the host's
        namespace under its name (the port can serve again)."""
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
        keys: Callable[[], str] = new_key,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ovs, self.links, self.bridge = ovs, links, bridge
        self.size, self.batch, self.quiet = size, batch, quiet
        self._keys, self._clock = keys, clock
        self._lock = threading.Lock()
        self._free: deque[PoolPort] = deque()
        self._last_take = float("-inf")
        self.taken = 0  # ports handed to endpoints, since start
        self.missed = 0  # endpoints that found the pool empty
        self.reused = 0  # ports given back and kept
        self.made = 0  # ports made

    def take(self, endpoint_id: str, mac: str, mtu: int) -> PoolPort | None:
        """A free port readied for the endpoint, or None (the pool is empty, or readying
        the port failed: that port is dropped, and the caller plugs a port of its own)."""
        with self._lock:
            self._last_take = self._clock()
            if not self._free:
                self.missed += 1
                return None
            port = self._free.popleft()
        try:
            self.links.claim(port, endpoint_id, mac, mtu)
        except OSError as e:
            log.warning("pool port %s: cannot ready it for %s: %s", port.host, endpoint_id[:12], e)
            return None
        with self._lock:
            self.taken += 1
        return port

    def give_back(self, port: PoolPort) -> bool:
        """Keep ``port`` for the next endpoint; False if it cannot serve again or the pool
        is full (the caller removes it)."""
        try:
            home = self.links.release(port)
        except OSError as e:
            log.info("pool port %s: not reused: %s", port.host, e)
            return False
        with self._lock:
            if not home or len(self._free) >= self.size:
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
        n = self.missing()
        if n == 0:
            return 0
        names = [pool_names(self._keys()) for _ in range(n)]
        made: list[tuple[str, str]] = []
        try:
            for host, container in names:
                self.links.create_pool_veth(host, container)
                made.append((host, container))
            ofports = self.ovs.add_ports(self.bridge, [h for h, _ in made], {EXT_POOL: "1"})
        except Exception:
            log.exception("pool: making %d ports failed; the next start removes what is left", n)
            raise
        ports = [PoolPort(h, c, ofports[h]) for h, c in made if ofports.get(h, 0) > 0]
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
