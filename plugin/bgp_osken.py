"""plugin.bgp's Speaker over os-ken's BGPSpeaker, in the agent's process (DESIGN, "The
speaker"; the evidence: docs/research/bgp-speaker.md).

os-ken's native hub (plain threads; eventlet is never imported, nothing monkey-patched),
imported only when a speaker is made, so bridge mode never loads it. Its traps, each with
a rule here: an exception escaping a handler stops its core silently (every handler
catches everything); a failed listen bind stops it too (it connects out only,
``bgp_server_port=0``); its default hold time is 40 s (``HOLD_TIME``, 10, its minimum);
``neighbor_del`` races its receive thread (the error it raises then is logged, the
neighbor is gone anyway). One speaker per process (os-ken's core is a singleton), and
shutdown() leaves a few threads behind: make a new one only when the Bgp object changes.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from plugin.bgp import HOLD_TIME, Peering, SpeakerEvents

log = logging.getLogger(__name__)

_FAMILIES = ("ipv4", "ipv6")


# Graceful restart (RFC 4724): the restart state bit (this speaker may have restarted:
# the router should not wait for our End-of-RIB before sending its routes), the time the
# router keeps our routes after the session drops, and the per-family "forwarding state
# preserved" bit.
GR_RESTARTED = 0x8
GR_RESTART_TIME = 20  # seconds: an agent restart takes a few; a dead agent's routes go after it
GR_FORWARDING = 0x80


class _OwnRoutesBack(logging.Filter):
    """os-ken logs an ERROR for every UPDATE whose AS path holds our own AS, and ignores
    it, as it should: a router sends each host's routes back to it (eBGP has no split
    horizon), so that is every container started here. Kept at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and "AS_PATH on UPDATE message has loops" in str(
            record.msg
        ):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def _quiet_own_routes(logger: logging.Logger) -> None:
    if not any(isinstance(f, _OwnRoutesBack) for f in logger.filters):
        logger.addFilter(_OwnRoutesBack())


class OsKenSpeaker:
    """plugin.bgp.Speaker: os-ken's BGPSpeaker, started on construction."""

    def __init__(
        self, peering: Peering, events: SpeakerEvents, *, hold_time: int = HOLD_TIME
    ) -> None:
        from os_ken.services.protocols.bgp.api.base import call
        from os_ken.services.protocols.bgp.bgpspeaker import BGPSpeaker
        from os_ken.services.protocols.bgp.rtconf import neighbors as nconf
        from os_ken.services.protocols.bgp.rtconf.base import HOLD_TIME as HOLD_TIME_KEY

        # os-ken logs every API call (each pass reads the RIB and the neighbor) at INFO.
        logging.getLogger("bgpspeaker.api.base").setLevel(logging.WARNING)
        _quiet_own_routes(logging.getLogger("bgpspeaker.peer"))
        self._call = call
        self._nconf = nconf
        self._hold_key = HOLD_TIME_KEY
        self._events = events
        self._ipv6 = bool(peering.next_hop6)
        self._hold_time = hold_time
        self._speaker = BGPSpeaker(
            as_number=peering.local_as,
            router_id=peering.router_ip,
            bgp_server_hosts=(peering.router_ip,),
            bgp_server_port=0,  # connect out only: a failed bind would stop the core
            best_path_change_handler=self._best_path,
            peer_up_handler=self._peer_up,
            peer_down_handler=self._peer_down,
        )

    # os-ken's threads call these: an exception escaping one stops its core, silently.

    def _best_path(self, ev: Any) -> None:
        try:
            self._events.best_path_changed(str(ev.prefix), str(ev.nexthop), bool(ev.is_withdraw))
        except Exception:
            log.exception("bgp: best path handler")

    def _peer_up(self, address: Any, remote_as: Any) -> None:
        # os-ken names the peer by its BGP identifier (router id) here, not its address.
        try:
            self._events.peer_changed(str(address), True)
        except Exception:
            log.exception("bgp: peer up handler")

    def _peer_down(self, address: Any, remote_as: Any) -> None:
        try:
            self._events.peer_changed(str(address), False)
        except Exception:
            log.exception("bgp: peer down handler")

    # Speaker

    def prefix_add(self, prefix: str, next_hop: str) -> None:
        self._speaker.prefix_add(prefix, next_hop=next_hop)

    def prefix_del(self, prefix: str) -> None:
        self._speaker.prefix_del(prefix)

    def rib_prefixes(self) -> set[str]:
        rib = json.loads(self._speaker.rib_get())
        return {
            dest["prefix"]
            for family in _FAMILIES
            for dest in rib.get(family, [])
            if any(path.get("best") and not path.get("aspath") for path in dest["paths"])
        }

    def neighbor_add(self, address: str, remote_as: int) -> None:
        # neighbor.create, not BGPSpeaker.neighbor_add: only it takes the hold time. Graceful
        # restart is added right after: os-ken's connect loop waits 1 s before its first
        # connection, so no OPEN leaves without it. (Creating it disabled and enabling it
        # after does not work: os-ken's enable leaves the loop in a state it never leaves.)
        nconf = self._nconf
        self._call(
            "neighbor.create",
            **{
                nconf.IP_ADDRESS: address,
                nconf.REMOTE_AS: remote_as,
                nconf.CAP_MBGP_IPV4: True,
                nconf.CAP_MBGP_IPV6: self._ipv6,
                nconf.CONNECT_MODE: nconf.CONNECT_MODE_ACTIVE,
                self._hold_key: self._hold_time,
            },
        )
        self._graceful_restart(address)

    def _graceful_restart(self, address: str) -> None:
        """Announce graceful restart (RFC 4724) to the neighbor: os-ken has the capability's
        encoding but never sends it, so this neighbor's configured capabilities get it. The
        router then keeps this host's routes through an agent restart (the switch and the
        kernel keep forwarding meanwhile: forwarding state preserved for every family),
        and drops them if no agent is back within the restart time."""
        from os_ken.lib.packet.bgp import (
            BGP_CAP_GRACEFUL_RESTART,
            BGPOptParamCapabilityGracefulRestart,
        )
        from os_ken.services.protocols.bgp.core_manager import CORE_MANAGER

        families = [(1, 1)] + ([(2, 1)] if self._ipv6 else [])  # (AFI, SAFI) unicast
        capability = BGPOptParamCapabilityGracefulRestart(
            GR_RESTARTED, GR_RESTART_TIME, [(afi, safi, GR_FORWARDING) for afi, safi in families]
        )
        conf = CORE_MANAGER.neighbors_conf.get_neighbor_conf(address)
        configured = conf.get_configured_capabilities

        def with_graceful_restart() -> dict[int, list[Any]]:
            capabilities = dict(configured())
            capabilities[BGP_CAP_GRACEFUL_RESTART] = [capability]
            return capabilities

        conf.get_configured_capabilities = with_graceful_restart

    def end_of_rib(self, address: str, wait: float = 3.0) -> None:
        """Tell the neighbor every route is announced (RFC 4724's End-of-RIB): it drops at
        once what it kept from before a restart and this host no longer announces. Sent
        once the routes in our RIB are on their way to it (os-ken queues a route to a
        peer after its own table has processed it; an End-of-RIB ahead of them would make
        the router drop them until they come)."""
        from os_ken.lib.packet.bgp import RF_IPv4_UC, RF_IPv6_UC
        from os_ken.services.protocols.bgp.core_manager import CORE_MANAGER

        peer = CORE_MANAGER.get_core_service().peer_manager.get_by_addr(address)
        if peer is None:
            return
        deadline = time.monotonic() + wait
        while not self.rib_prefixes() <= self._sent(address) and time.monotonic() < deadline:
            time.sleep(0.05)
        for family in (RF_IPv4_UC, *([RF_IPv6_UC] if self._ipv6 else [])):
            peer.enque_end_of_rib(family)

    def rearm(self, address: str) -> bool:
        # os-ken's peer-down handling re-arms the connect loop last; when an exception
        # escapes before (its stale-route cleanup iterating a table that changes), the loop
        # waits forever. Set what it would have set.
        from os_ken.services.protocols.bgp import constants as const
        from os_ken.services.protocols.bgp.core_manager import CORE_MANAGER

        peer = CORE_MANAGER.get_core_service().peer_manager.get_by_addr(address)
        if peer is None or not peer._neigh_conf.enabled or peer._connect_retry_event.is_set():
            return False
        if peer.state.bgp_state not in (const.BGP_FSM_IDLE, const.BGP_FSM_ACTIVE):
            return False
        peer._connect_retry_event.set()
        return True

    def neighbor_del(self, address: str) -> None:
        try:
            self._speaker.neighbor_del(address)
        except Exception as e:
            if "has no attribute 'stop'" not in str(e):
                raise
            log.info("bgp: neighbor %s removed (os-ken's close race: %s)", address, e)

    def _sent(self, address: str) -> set[str]:
        """The prefixes queued or sent to the neighbor and not withdrawn."""
        sent = json.loads(self._speaker.neighbor_get("sent-routes", address))
        return {str(v["path"]["nlri"]["prefix"]) for v in sent if v.get("path")}

    def neighbor_state(self, address: str) -> str:
        states = json.loads(self._speaker.neighbor_state_get(address))
        return str(states.get(address, {}).get("info", {}).get("bgp_state", "Idle"))

    def shutdown(self) -> None:
        self._speaker.shutdown()


def make_speaker(peering: Peering, events: SpeakerEvents) -> OsKenSpeaker:
    """plugin.bgp.SpeakerFactory for BgpSession."""
    return OsKenSpeaker(peering, events)
