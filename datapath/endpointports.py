"""Which switch port each endpoint of this host has, and how it gets and loses it.

An endpoint's port is either its own veth pair (names derived from its ID, datapath.veth),
plugged when it is created, or a pool port (datapath.portpool) plugged ahead of demand.
A deleted endpoint's port is handled after the answer, on the teardown's thread
(datapath.teardown): a pool port whose container end came home serves again; any other
port is removed, in one OVSDB transaction per batch. Plugging an endpoint again (a retried
CreateEndpoint) first waits for that.

At start, ``adopt`` finds each endpoint's port: its own veth's, or the pool port recorded
as serving it (datapath.poollinks). Pool ports that serve no endpoint are kept for the pool if their
container end is home (up to its size) and removed otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from errno import ENODEV

from . import bridgeports as bp
from .effects import Links, Ovsdb
from .local import EndpointState
from .ovs import PortInfo
from .portpool import (
    EXT_POOL,
    PoolLink,
    PoolPort,
    PortPool,
    Shape,
    container_end,
    is_pool_port,
)
from .teardown import Teardown
from .veth import Into, veth_names

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plugged:
    """An endpoint's switch port."""

    ofport: int
    host: str  # the end on the bridge
    container: str  # the end the container gets, here ("": made in the container's namespace)
    pool: PoolPort | None = None  # the pool port it is, if it is one


def port_names(ep: EndpointState) -> tuple[str, str]:
    """(host end, container end) of a local endpoint's port."""
    return (ep.port, container_end(ep.port)) if ep.port else veth_names(ep.id)


class EndpointPorts:
    """The endpoints' ports on ``bridge``; ``pool`` (None: none) supplies ready ones."""

    def __init__(
        self,
        ovs: Ovsdb,
        links: Links,
        bridge: str,
        pool: PortPool | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ovs, self.links, self.bridge, self.pool = ovs, links, bridge, pool
        self._clock = clock
        if pool is not None:  # what a port add costs depends on how many there are
            pool.costs.ports = lambda: len(self._ports) + pool.state()["free"]
        self._lock = threading.Lock()
        self._ports: dict[str, Plugged] = {}  # endpoint -> its port
        self._leaving: dict[str, Plugged] = {}  # deleted endpoint -> its port, until handled
        self.teardown = Teardown(self._retire)

    def get(self, endpoint_id: str) -> Plugged | None:
        return self._ports.get(endpoint_id)

    def plug(
        self,
        endpoint_id: str,
        network_id: str,
        mac: str,
        mtu: int,
        offloads_off: bool,
        wait: float,
        into: Into | None = None,
    ) -> Plugged:
        """The endpoint's port (made or taken now, or the one it has): a pool port if the
        pool has or can make one, else its own veth pair. With ``into`` (a CNI pod's
        namespace), whichever costs less now (datapath.plugcost): a free pool port, whose
        container end ``move_in`` then moves there, or its own pair, the container end made
        there. Raises, leaving nothing, if it cannot be plugged, or if its old port (same
        names) is still being removed after ``wait`` seconds."""
        if (have := self._ports.get(endpoint_id)) is not None:
            return have
        if not self.teardown.wait(endpoint_id, wait):  # a retry: its old port goes first
            raise RuntimeError(f"endpoint {endpoint_id}: its old port is still being removed")
        shape = Shape(mtu, offloads_off)
        pool = self.pool
        if pool is not None and into is not None and pool.costs.own_pair():
            pool = None  # a port add is cheaper than a move now
        taken = pool.take(endpoint_id, shape, make=into is None) if pool else None
        if taken is not None:
            plugged = Plugged(taken.ofport, taken.host, taken.container, taken)
        else:  # (the pool's refill makes its ports again after a quiet moment)
            args = self.ovs, self.links, self.bridge, endpoint_id, network_id, mac, mtu
            started = self._clock()
            plugged = Plugged(*bp.plug_endpoint(*args, offloads_off, into))
            if self.pool is not None:
                self.pool.costs.added(self._clock() - started)
        self._ports[endpoint_id] = plugged
        return plugged

    def move_in(self, endpoint_id: str, into: Into) -> str:
        """Move the endpoint's container end into ``into`` (renamed in the move), measuring
        the move for the choice above; "" (no end here). An end that is not here (moved by
        an ADD before a restart, made there) counts as moved. Raises OSError, naming the
        interface and the namespace, if it cannot move (the caller removes the endpoint)."""
        plugged = self._ports.get(endpoint_id)
        if plugged is None or not plugged.container:
            return ""
        started = self._clock()
        try:
            self.links.move_to_netns(plugged.container, into)
        except OSError as e:
            if e.errno != ENODEV:
                where = f"{plugged.container} into {into.netns} as {into.name}"
                raise OSError(e.errno, f"cannot move {where}: {e.strerror or e}") from e
        else:
            if plugged.pool is not None and self.pool is not None:
                self.pool.costs.moved(self._clock() - started)
        if self._ports.get(endpoint_id) is plugged:
            self._ports[endpoint_id] = replace(plugged, container="")
        into.made.set()
        return ""

    def unplug(self, endpoint_id: str) -> None:
        """The endpoint is gone (its flows are, or go now): its port is given back or
        removed in the background. An endpoint whose port is not known (not plugged since
        this start, nor adopted) has its own veth's names removed, if they are there."""
        plugged = self._ports.pop(endpoint_id, None)
        with self._lock:
            if plugged is None and endpoint_id in self._leaving:
                return  # already on its way
            self._leaving[endpoint_id] = plugged or Plugged(0, *veth_names(endpoint_id))
        self.teardown.submit(endpoint_id)

    def _retire(self, endpoint_ids: list[str]) -> None:
        """The teardown's work: give back what can serve again, remove the rest."""
        with self._lock:
            ports = [p for e in endpoint_ids if (p := self._leaving.get(e)) is not None]
        try:
            doomed = [p.host for p in ports if not self._give_back(p)]
            bp.remove_ports(self.ovs, self.links, self.bridge, doomed)
        finally:
            with self._lock:
                for e in endpoint_ids:
                    self._leaving.pop(e, None)

    def _give_back(self, plugged: Plugged) -> bool:
        return (
            plugged.pool is not None and self.pool is not None and self.pool.give_back(plugged.pool)
        )

    # --- start, audit, stop ---

    def adopt(
        self,
        ports: Mapping[str, PortInfo],
        endpoints: Iterable[EndpointState],
    ) -> tuple[dict[str, EndpointState], int, list[str]]:
        """After a (re)start: the endpoints whose ports are on the bridge (their own veth's
        or the pool port recorded as serving it), with ofport and port read back; how many have
        none (their veth vanished: they cannot be re-plugged into their container); and the
        pool ports nothing uses any more, to remove (those the pool keeps are its own).
        Ports plugged for endpoints not among ``endpoints`` (not created yet) stay."""
        with self._pool_paused():
            return self._adopt(ports, list(endpoints))

    def _adopt(
        self, ports: Mapping[str, PortInfo], endpoints: list[EndpointState]
    ) -> tuple[dict[str, EndpointState], int, list[str]]:
        survey = self.pool.links.survey() if self.pool is not None else {}
        serving = {link.endpoint: host for host, link in survey.items() if link.endpoint}
        ids = {ep.id for ep in endpoints}
        kept = {e: p for e, p in self._ports.items() if e not in ids}
        found: dict[str, EndpointState] = {}
        missing = 0
        for ep in endpoints:
            host = serving.get(ep.id) or veth_names(ep.id)[0]
            info = ports.get(host)
            if info is None or not info.ofport or info.ofport < 0:
                missing += 1
                continue
            try:
                self.links.isolate_host_end(host)  # ports made by an older netplugin lack it
            except OSError as e:
                log.warning("endpoint %s: cannot isolate %s from the host: %s", ep.id, host, e)
            pooled = is_pool_port(host)
            found[ep.id] = replace(ep, ofport=info.ofport, port=host if pooled else "")
            pool = PoolPort(host, container_end(host), info.ofport, None) if pooled else None
            kept[ep.id] = Plugged(info.ofport, *port_names(found[ep.id]), pool)
        self._ports = kept
        return found, missing, self._sort_pool(ports, survey, self.owned())

    def _sort_pool(
        self, ports: Mapping[str, PortInfo], survey: Mapping[str, PoolLink], used: set[str]
    ) -> list[str]:
        """Pool ports no endpoint uses: whole ones (a port on the bridge, the container end
        home) go to the pool, up to its size; the names of the rest, to remove. A pool port
        of another bridge is another agent's (a host running several): left alone."""
        names = {n for n, info in ports.items() if EXT_POOL in info.external_ids}
        names |= self._not_elsewhere(survey)
        whole, broken = [], []
        for name in sorted(names - used):
            info, link = ports.get(name), survey.get(name)
            if info and info.ofport and info.ofport > 0 and link and link.home:
                whole.append(PoolPort(name, container_end(name), info.ofport, None))
            else:
                broken.append(name)
        extra = self.pool.adopt(whole) if self.pool is not None else whole
        return broken + [p.host for p in extra]

    def owned(self) -> set[str]:
        """The names of the endpoints' ports, of those being handled and of the pool's."""
        with self._lock:
            leaving = {p.host for p in self._leaving.values()}
        free = {p.host for p in self.pool.free()} if self.pool is not None else set()
        return {p.host for p in self._ports.values()} | leaving | free

    def remove_unowned_pool(self, ports: Mapping[str, PortInfo]) -> int:
        """Remove the pool ports, on the bridge or in the kernel, that no endpoint and not
        the pool has (a failed removal's or a failed batch's); how many. For the audit."""
        if self.pool is None:
            return 0
        with self._pool_paused():
            on_bridge = {n for n, info in ports.items() if EXT_POOL in info.external_ids}
            loose = self._not_elsewhere(self.pool.links.survey())
            stale = sorted((on_bridge | loose) - self.owned())
            bp.remove_ports(self.ovs, self.links, self.bridge, stale)
        return len(stale)

    def _not_elsewhere(self, survey: Mapping[str, PoolLink]) -> set[str]:
        """The surveyed pool pairs that are not ports of another bridge (another agent's,
        on a host that runs several)."""
        return set(survey) - self.ovs.ports_elsewhere(self.bridge)

    def _pool_paused(self) -> AbstractContextManager[object]:
        return self.pool.paused() if self.pool is not None else contextlib.nullcontext()

    def stop(self, timeout: float) -> int:
        """Finish what is pending (up to ``timeout``); how many deleted endpoints' ports are
        left. The pool's free ports stay, for the next start to adopt: removing them would
        change OVSDB, and make ovs-vswitchd reconfigure every running container's port,
        at every restart."""
        return self.teardown.stop(timeout)
