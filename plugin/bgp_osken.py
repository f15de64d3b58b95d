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
from typing import Any

from plugin.bgp import HOLD_TIME, Peering, SpeakerEvents

log = logging.getLogger(__name__)

_FAMILIES = ("ipv4", "ipv6")


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
        # neighbor.create, not BGPSpeaker.neighbor_add: only it takes the hold time.
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

    def neighbor_del(self, address: str) -> None:
        try:
            self._speaker.neighbor_del(address)
        except Exception as e:
            if "has no attribute 'stop'" not in str(e):
                raise
            log.info("bgp: neighbor %s removed (os-ken's close race: %s)", address, e)

    def neighbor_state(self, address: str) -> str:
        states = json.loads(self._speaker.neighbor_state_get(address))
        return str(states.get(address, {}).get("info", {}).get("bgp_state", "Idle"))

    def shutdown(self) -> None:
        self._speaker.shutdown()


def make_speaker(peering: Peering, events: SpeakerEvents) -> OsKenSpeaker:
    """plugin.bgp.SpeakerFactory for BgpSession."""
    return OsKenSpeaker(peering, events)
