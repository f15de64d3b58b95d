"""The agent's BGP session (issue 25, item 3): what this host announces to its router, and
the loop that keeps the speaker telling exactly that. plugin.bgp_host runs it.

The decisions are pure: ``wanted_routes`` (each local endpoint's /32 on networks routed by
BGP, its /128 only when an IPv6 next hop is known) and ``route_diff``. The speaker is an
effect (``Speaker``; os-ken's in plugin.bgp_osken, a fake in testbed.fakes_bgp), and so is
the kernel's route table (``datapath.effects.RouteTable``).

``BgpSession`` is one ``common.loop.Reconciler``. Its pass, the only caller of prefix_add
and prefix_del: applies the net difference between wanted and told (an add and a withdraw
of one prefix between two passes cancel out); when it changed nothing, re-reads the
speaker's RIB and repairs it (os-ken loses a withdrawal issued right after the add of the
same prefix: such a prefix is announced again, then withdrawn by the next pass; a prefix
told but missing from two reads in a row is told again); reads the neighbor's state; and
makes the kernel hold the routes learned from the neighbor. The speaker's handlers
(os-ken's threads) only record and poke: they never raise, never call into the speaker.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from common.loop import Reconciler

if TYPE_CHECKING:
    from common.models import Bgp
    from datapath.effects import RouteTable
    from datapath.local import EndpointState, NetworkState

log = logging.getLogger(__name__)

HOLD_TIME = 10  # seconds, os-ken's minimum; its default (40) keeps a dead host's routes 40 s
UNKNOWN_STATE = "Unknown"
ESTABLISHED = "Established"
# How long a restarted agent keeps the kernel routes its predecessor learned once its
# session is up, for the router to send them again (a few passes of the session).
ADOPTED_GRACE = 5.0  # the neighbor's state before the first pass read it
# A route wrong in the speaker's RIB this long is repaired (os-ken takes seconds to work
# through a burst on a loaded host; what is merely queued must not be repaired).
REPAIR_AFTER = 3.0
# No session this long: the speaker's connect loop is re-armed if it stopped. os-ken
# retries a lost connection every few seconds, except when its own peer-down handling
# fails (a dictionary changed size during iteration, seen when a hold time expired in a
# burst of withdrawals): the loop then waits for an event nothing sets. (Making a new
# speaker instead would leak os-ken's threads: five per speaker, never stopped.)
REARM_AFTER = 10.0


# -- decisions -----------------------------------------------------------------------


def routed_by_bgp(fwd_mode: str, network: NetworkState) -> bool:
    """Whether the fabric learns this network's endpoints by BGP: VLAN networks in routing
    mode (VXLAN networks are routed between the hosts' switches, without the router), but
    not internal ones (they do not reach outside their host)."""
    return fwd_mode == "routing" and network.encap == "vlan" and not network.internal


def wanted_routes(
    fwd_mode: str,
    networks: Iterable[NetworkState],
    endpoints: Iterable[EndpointState],
    next_hop: str,
    next_hop6: str = "",
) -> dict[str, str]:
    """prefix -> next hop for every route this host announces: the /32 of each local
    endpoint on a network routed by BGP, with ``next_hop`` (the Bgp object's router IP);
    its /128 only with ``next_hop6`` (an IPv4 next hop for a /128 is sent as
    ::ffff:a.b.c.d, which routers take into BGP but not into their kernel)."""
    routed = {n.id for n in networks if routed_by_bgp(fwd_mode, n)}
    routes: dict[str, str] = {}
    for ep in endpoints:
        if ep.network_id not in routed:
            continue
        if ep.ipv4:
            routes[f"{ipaddress.IPv4Address(ep.ipv4.split('/')[0])}/32"] = next_hop
        if ep.ipv6 and next_hop6:
            routes[f"{ipaddress.IPv6Address(ep.ipv6.split('/')[0])}/128"] = next_hop6
    return routes


def route_diff(
    wanted: Mapping[str, str], told: Mapping[str, str]
) -> tuple[dict[str, str], set[str]]:
    """(to add, with their next hops; to withdraw): a prefix whose next hop changed is
    added again (the speaker replaces its own path)."""
    add = {p: nh for p, nh in wanted.items() if told.get(p) != nh}
    return add, set(told) - set(wanted)


def kernel_routes(learned: Mapping[str, str]) -> dict[str, str]:
    """The learned routes the kernel can take: a next hop of the prefix's family, not an
    IPv4-mapped one (what an IPv6 path over an IPv4 session may carry; the kernel has no
    route to it)."""
    out = {}
    for prefix, via in learned.items():
        try:
            net = ipaddress.ip_network(prefix, strict=False)
            hop = ipaddress.ip_address(via)
        except ValueError:
            continue
        mapped = isinstance(hop, ipaddress.IPv6Address) and hop.ipv4_mapped is not None
        if net.version == hop.version and not mapped:
            out[str(net)] = str(hop)
    return out


@dataclass(frozen=True)
class Peering:
    """What the speaker needs from a Bgp object: the host's AS and address on the router's
    link (its router id and the next hop of its routes), the neighbor and its AS."""

    local_as: int
    router_ip: str  # an address, without the prefix length
    neighbor: str
    neighbor_as: int
    next_hop6: str = ""  # the host's IPv6 address on the link; "" announces no /128

    @classmethod
    def of(cls, bgp: Bgp) -> Peering:
        return cls(
            local_as=int(bgp.as_),
            router_ip=bgp.routerip.split("/")[0],
            neighbor=bgp.neighbor,
            neighbor_as=int(bgp.neighbor_as),
            next_hop6=bgp.routeripv6.split("/")[0],
        )


# -- effects -------------------------------------------------------------------------


class Speaker(Protocol):
    """A BGP speaker: the host's own routes, its neighbors, and its RIB."""

    def prefix_add(self, prefix: str, next_hop: str) -> None: ...
    def prefix_del(self, prefix: str) -> None: ...

    def rib_prefixes(self) -> set[str]:
        """The prefixes this speaker originates (in its RIB with an empty AS path)."""
        ...

    def neighbor_add(self, address: str, remote_as: int) -> None: ...
    def neighbor_del(self, address: str) -> None: ...

    def neighbor_state(self, address: str) -> str:
        """The session's FSM state ("Idle", "Connect", "Active", ..., "Established")."""
        ...

    def rearm(self, address: str) -> bool:
        """Make the speaker try to connect to the neighbor again if it stopped trying;
        whether it had."""
        ...

    def end_of_rib(self, address: str) -> None:
        """Tell the neighbor every route is announced (graceful restart's End-of-RIB)."""
        ...

    def shutdown(self) -> None: ...


class SpeakerEvents(Protocol):
    """What a speaker reports, from its own threads: never raise, never call it back."""

    def best_path_changed(self, prefix: str, next_hop: str, withdraw: bool) -> None: ...
    def peer_changed(self, address: str, up: bool) -> None: ...


SpeakerFactory = Callable[[Peering, SpeakerEvents], Speaker]


@dataclass(frozen=True)
class SessionStatus:
    """For `netctl bgp inspect`: the neighbor's state, what is announced and learned."""

    neighbor: str
    state: str
    announced: tuple[str, ...]
    learned: dict[str, str] = field(default_factory=dict)  # prefix -> next hop


# -- the session ---------------------------------------------------------------------


class BgpSession:
    """One host's peering: start() makes the speaker and the neighbor, set_wanted() says
    what to announce, status() what is, stop() shuts the speaker down."""

    def __init__(
        self,
        peering: Peering,
        make_speaker: SpeakerFactory,
        route_table: RouteTable,
        *,
        interval: float = 2.0,
        settle: float = 0.1,
        coalesce: float = 0.02,
        adopted_grace: float = ADOPTED_GRACE,
        repair_after: float = REPAIR_AFTER,
        rearm_after: float = REARM_AFTER,
    ) -> None:
        self.peering = peering
        self.adopted_grace = adopted_grace
        self.repair_after = repair_after
        self.rearm_after = rearm_after
        self._make_speaker = make_speaker
        self._routes = route_table
        self._settle = settle
        self._lock = threading.Lock()
        self._wanted: dict[str, str] = {}
        self._learned: dict[str, str] = {}
        self._state = UNKNOWN_STATE
        self._announced: tuple[str, ...] = ()  # what the last pass left told
        self._speaker: Speaker | None = None
        self._told: dict[str, str] = {}  # pass thread only: what the speaker was told
        # pass thread only: our routes in the kernel. A previous agent's are adopted, and
        # kept until the session has been Established for ADOPTED_GRACE (the router sends
        # its table in the moments after): then what it learned is the truth.
        self._installed: dict[str, str] = {}
        self._adopted: set[str] = set()
        self._established_at: float | None = None
        self._down_since: float | None = None  # pass thread only: not Established since
        self.rearms = 0  # connect loops re-armed after a session stayed down
        self._eor_sent = False  # pass thread only: End-of-RIB sent in this session
        # pass thread only: since when a prefix has been in the RIB untold (stale) or told
        # and not in it (missing), as the RIB reads saw it
        self._stale: dict[str, float] = {}
        self._missing: dict[str, float] = {}
        self.repairs = 0  # lost withdrawals announced again to be withdrawn
        self.loop = Reconciler(
            "bgp", self._pass, interval=interval, coalesce=coalesce, run_at_start=True
        )

    def start(self) -> BgpSession:
        self._installed = self._routes.learned()
        self._adopted = set(self._installed)
        speaker = self._make_speaker(self.peering, self)
        speaker.neighbor_add(self.peering.neighbor, self.peering.neighbor_as)
        self._speaker = speaker
        self.loop.start()
        return self

    def set_wanted(self, routes: Mapping[str, str]) -> None:
        """The routes to announce (prefix -> next hop); any thread."""
        with self._lock:
            self._wanted = dict(routes)
        self.loop.poke()

    def status(self) -> SessionStatus:
        with self._lock:
            return SessionStatus(
                neighbor=self.peering.neighbor,
                state=self._state,
                announced=self._announced,
                learned=dict(sorted(self._learned.items())),
            )

    def stop(self, timeout: float = 5.0, forget: bool = False) -> None:
        """End the loop, then shut the speaker down (the router drops our routes with
        the session). The kernel routes learned stay (a restarted agent adopts them), or
        with ``forget`` (the peering is gone) are removed."""
        self.loop.stop()
        self.loop.join(timeout)
        if self._speaker is not None:
            try:
                self._speaker.shutdown()
            except Exception:
                log.exception("bgp: speaker shutdown")
        if forget:
            for prefix in sorted(self._routes.learned()):
                self._routes.delete(prefix)

    # SpeakerEvents: the speaker's threads. Record and poke; never raise.

    def best_path_changed(self, prefix: str, next_hop: str, withdraw: bool) -> None:
        try:
            with self._lock:
                if withdraw:
                    self._learned.pop(prefix, None)
                else:
                    self._learned[prefix] = next_hop
            self.loop.poke()
        except Exception:
            log.exception("bgp: best path change for %s", prefix)

    def peer_changed(self, address: str, up: bool) -> None:
        try:
            log.info("bgp: peer %s %s", address, "up" if up else "down")
            self.loop.poke()
        except Exception:
            log.exception("bgp: peer change of %s", address)

    # the pass

    def _pass(self) -> float | None:
        speaker = self._speaker
        assert speaker is not None, "start() makes the speaker before the loop"
        with self._lock:
            wanted = dict(self._wanted)
        again = None
        add, withdraw = route_diff(wanted, self._told)
        for prefix, next_hop in sorted(add.items()):
            speaker.prefix_add(prefix, next_hop)
            self._told[prefix] = next_hop
        for prefix in sorted(withdraw):
            speaker.prefix_del(prefix)
            del self._told[prefix]
        if add or withdraw:
            again = self._settle  # check the RIB once the speaker has processed them
        else:
            with self._lock:
                learned = set(self._learned)  # an iBGP neighbor's paths have no AS path either
            if self._repair(speaker.rib_prefixes() - learned):
                again = self._settle
        state = speaker.neighbor_state(self.peering.neighbor)
        with self._lock:
            self._state = state
            self._announced = tuple(sorted(self._told))
            learned = kernel_routes(self._learned)
        if state == ESTABLISHED and self._established_at is None:
            self._established_at = time.monotonic()
        self._end_of_rib(speaker, state, settled=again is None)
        self._sync_kernel(learned)
        if self._down_too_long(state) and speaker.rearm(self.peering.neighbor):
            log.warning(
                "bgp: no session with %s for %.0f s and the speaker had stopped trying; "
                "it connects again",
                self.peering.neighbor,
                time.monotonic() - (self._down_since or 0.0),
            )
            self.rearms += 1
        return again

    def _down_too_long(self, state: str) -> bool:
        """Whether the session has been down for ``rearm_after``."""
        now = time.monotonic()
        if state == ESTABLISHED:
            self._down_since = None
        elif self._down_since is None:
            self._down_since = now
        return self._down_since is not None and now - self._down_since >= self.rearm_after

    def _end_of_rib(self, speaker: Speaker, state: str, settled: bool) -> None:
        """Once per session, when it is up and everything wanted is told: End-of-RIB (the
        router then drops what it kept from before a restart that is no longer ours)."""
        if state != ESTABLISHED:
            self._eor_sent = False
        elif settled and not self._eor_sent:
            speaker.end_of_rib(self.peering.neighbor)
            self._eor_sent = True

    def _repair(self, rib: set[str]) -> bool:
        """Bring what we believe told in line with the speaker's RIB; whether it changed.
        Only what has stayed wrong for ``repair_after``: a busy speaker works through a
        burst of changes for a while (100 withdrawals take os-ken seconds on a loaded
        host), and repairing what is merely queued would queue more."""
        now = time.monotonic()
        self._stale = {p: self._stale.get(p, now) for p in rib - set(self._told)}
        self._missing = {p: self._missing.get(p, now) for p in set(self._told) - rib}
        changed = False
        for prefix in sorted(p for p, t in self._stale.items() if now - t >= self.repair_after):
            # A lost withdrawal: announce it again (processed before the next pass's
            # withdrawal, which then works).
            log.warning("bgp: %s still announced; withdrawing it again", prefix)
            self.repairs += 1
            speaker = self._speaker
            assert speaker is not None
            speaker.prefix_add(prefix, self._next_hop_for(prefix))
            self._told[prefix] = self._next_hop_for(prefix)
            del self._stale[prefix]
            changed = True
        for prefix in sorted(p for p, t in self._missing.items() if now - t >= self.repair_after):
            log.warning("bgp: %s missing from the speaker; announcing it again", prefix)
            del self._told[prefix], self._missing[prefix]
            changed = True
        return changed

    def _next_hop_for(self, prefix: str) -> str:
        if ":" in prefix and self.peering.next_hop6:
            return self.peering.next_hop6
        return self.peering.router_ip

    def _sync_kernel(self, learned: Mapping[str, str]) -> None:
        for prefix, via in sorted(learned.items()):
            if self._installed.get(prefix) != via:
                self._routes.replace(prefix, via)
                self._installed[prefix] = via
        self._adopted -= set(learned)
        up = self._established_at
        if self._adopted and (up is None or time.monotonic() - up < self.adopted_grace):
            keep = self._adopted  # what a previous agent installed waits for the router
        else:
            keep, self._adopted = set(), set()
        for prefix in sorted(set(self._installed) - set(learned) - keep):
            self._routes.delete(prefix)
            del self._installed[prefix]
