"""Sketch of the agent side: one worker thread owns every call into os-ken's BGPSpeaker.

Callers (container events, from any thread) only change the desired set; the worker applies
the net difference, so an add and a del of one prefix inside one pass cancel out, leaves the
processor time to run between passes (os-ken drops a withdrawal that arrives before the
add of the same prefix was processed), and every `verify_every` seconds compares the desired
set with the speaker's own RIB and repairs any difference (a stuck prefix is re-added, then
withdrawn on the next pass).
"""
from __future__ import annotations

import json
import logging
import threading
import time

log = logging.getLogger(__name__)


class RouteAnnouncer:
    def __init__(self, speaker, next_hop4: str, next_hop6: str | None = None,
                 settle: float = 0.02, verify_every: float = 2.0) -> None:
        self._speaker = speaker
        self._nh4, self._nh6 = next_hop4, next_hop6
        self._settle, self._verify_every = settle, verify_every
        self._want: set[str] = set()
        self._told: set[str] = set()     # what os-ken was last told to announce
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="bgp-announcer", daemon=True)
        self._thread.start()

    # -- callers ---------------------------------------------------------------
    def announce(self, prefix: str) -> None:
        with self._cond:
            self._want.add(prefix)
            self._cond.notify()

    def withdraw(self, prefix: str) -> None:
        with self._cond:
            self._want.discard(prefix)
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join()

    # -- worker ----------------------------------------------------------------
    def _run(self) -> None:
        last_verify = time.monotonic()
        while True:
            with self._cond:
                if self._want == self._told and not self._stop:
                    self._cond.wait(timeout=self._verify_every)
                if self._stop:
                    return
                want = set(self._want)
            try:
                self._apply(want)
                if time.monotonic() - last_verify >= self._verify_every:
                    self._verify(want)
                    last_verify = time.monotonic()
            except Exception:  # never let it die; the next pass retries
                log.exception("bgp announcer pass")
            time.sleep(self._settle)  # lets os-ken's processor thread catch up

    def _apply(self, want: set[str]) -> None:
        for p in sorted(want - self._told):
            self._speaker.prefix_add(p, next_hop=self._nh6 if ":" in p else self._nh4)
            self._told.add(p)
        for p in sorted(self._told - want):
            self._speaker.prefix_del(p)
            self._told.discard(p)

    def _verify(self, want: set[str]) -> None:
        rib = json.loads(self._speaker.rib_get())
        local = set()
        for fam in ("ipv4", "ipv6"):
            for dest in rib.get(fam, []):
                for path in dest["paths"]:
                    if path["best"] and not path["aspath"]:  # originated here
                        local.add(dest["prefix"])
        for p in local - want:  # a lost withdrawal: announce again, withdraw next pass
            log.warning("bgp: %s still announced; withdrawing again", p)
            self._speaker.prefix_add(p, next_hop=self._nh6 if ":" in p else self._nh4)
            self._told.add(p)
        for p in want - local:  # announced nowhere: tell again
            self._told.discard(p)
