"""Leader election among netmasters: one key, keys.LEADER, attached to the leader's lease.

Every worker process of every master runs an ``Elector``. Whoever creates the key (a
create-if-absent transaction) holds the lease and refreshes it; the key vanishes with the
lease (kill -9: after the TTL; a graceful stop revokes it at once), and the next elector to
see it gone takes it. The record names the master (``id``, shared by the workers of one
gunicorn master) and its control URL, so all workers of the leading master know they lead
and every other master knows where to forward requests.

A holder believes it leads only until ``sent + ttl`` of its last successful refresh, which
is never later than the store expires the lease: two masters never both believe they lead
while the store's lease is alive, and a holder that cannot refresh steps down by itself.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from common import keys
from common.records import LeaderRecord, encode_leader, parse_leader
from store import Compare, Lease, LeaseNotFound, Put, Store, StoreError

from .metrics import leader_change, leading

log = logging.getLogger("netmaster.election")

Role = Literal["leader", "follower", "candidate"]

# Set by a follower on the request it forwards (and on the answer it relays): a forwarded
# request is always served where it lands, never forwarded again.
FORWARDED_BY = "X-Netmaster-Forwarded-By"
# Set on every answer by the master that ran the handler (its control URL).
SERVED_BY = "X-Netmaster-Served-By"

API_PREFIX = "/api/v1/"
LEADER_PATH = "/api/v1/leader"


def new_master_id() -> str:
    """A unique id for one master (gunicorn arbiter): host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class View:
    """What one elector knows: its master's role, the leader, and whether it holds the lease."""

    role: Role
    leader: LeaderRecord | None
    holder: bool = False


CANDIDATE = View("candidate", None)


@dataclass(frozen=True, slots=True)
class Decision:
    view: View
    acquire: bool = False  # no live leader: try to take the key
    replace_revision: int = 0  # take it by replacing this stale record (0: create it)
    drop_lease: bool = False  # our lease is not (or no longer) the leader's: let it go


def decide(record: LeaderRecord | None, master_id: str, my_lease: int | None) -> Decision:
    """The next step of an elector, given the leader record it just read."""
    mine = my_lease is not None
    if record is None:
        return Decision(CANDIDATE, acquire=True, drop_lease=mine)
    if mine and record.lease == my_lease:
        return Decision(View("leader", record, holder=True))
    if record.lease == 0:
        # Not attached to a lease, so no live elector wrote it (a hand edit): it would
        # never expire. Replace it, guarded by its revision.
        return Decision(
            CANDIDATE, acquire=True, replace_revision=record.mod_revision, drop_lease=mine
        )
    role: Role = "leader" if record.id == master_id else "follower"
    return Decision(View(role, record), drop_lease=mine)


def forward_target(path: str, forwarded: bool, view: View, self_url: str) -> str | None:
    """The leader URL to forward this request to, or None to serve it here.

    Only /api/v1/ requests are forwarded, never /api/v1/leader, never a request that was
    forwarded already, and never when no leader is known (every write is a CAS, so serving
    locally is always safe; forwarding only keeps the work on one master).
    """
    if not path.startswith(API_PREFIX) or path.rstrip("/") == LEADER_PATH:
        return None
    if forwarded or view.role != "follower" or view.leader is None:
        return None
    url = view.leader.url.rstrip("/")
    if not url or url == self_url.rstrip("/"):
        return None
    return url


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


class Elector:
    """One process's part in the election; ``start()`` runs it in a thread until ``stop()``."""

    def __init__(
        self,
        store: Store,
        *,
        master_id: str,
        url: str,
        ttl: int = 10,
        poll_interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.master_id = master_id
        self.url = url
        self.ttl = max(int(ttl), 1)
        # Followers notice a vanished key within one poll; the failover budget is TTL + 2 s.
        self.poll_interval = poll_interval or min(0.25, max(0.05, self.ttl / 10))
        self._clock = clock
        self._lock = threading.Lock()  # serialises steps (the thread's and request threads')
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lease: Lease | None = None
        self._valid_until = 0.0  # our lease certainly lives until then (clock time)
        self._next_refresh = 0.0
        self._view = CANDIDATE
        self._observed_at: float | None = None
        self._store_down = False
        self.term = 0  # counts this process's terms as holder

    # --- queries: any thread, no lock ---

    def is_holder(self) -> bool:
        """Whether this process holds the leader lease right now (time-bounded belief)."""
        return self._view.holder and self._clock() < self._valid_until

    def leadership(self) -> tuple[bool, int]:
        """(holds the lease now, term): a new term means a new, separate tenure."""
        return self.is_holder(), self.term

    def view(self) -> View:
        """The current view; a holder past its lease, or a stale observation, knows nothing."""
        v = self._view
        now = self._clock()
        if v.holder:
            return v if now < self._valid_until else CANDIDATE
        observed = self._observed_at
        if observed is None or now - observed > self.ttl:
            return CANDIDATE
        return v

    def status(self) -> dict[str, Any]:
        """The body of GET /api/v1/leader."""
        v = self.view()
        return {
            "leader": v.leader.model_dump() if v.leader else None,
            "self": {
                "id": self.master_id,
                "url": self.url,
                "role": v.role,
                "holdsLease": v.holder,
            },
            "leaderTTL": self.ttl,
        }

    # --- the state machine ---

    def step(self) -> View:
        """One round: refresh our lease if due, read the key, decide, act. Returns the view."""
        with self._lock:
            if self._lease is not None:
                self._keep_alive()
            read_at = self._clock()
            try:
                kv = self.store.get(keys.LEADER)
            except StoreError as e:
                self._store_error(e)
                return self.view()
            if self._store_down:
                self._store_down = False
                log.info("cluster store reachable again")
            self._observed_at = read_at
            my_lease = self._lease.id if self._lease is not None else None
            d = decide(parse_leader(kv), self.master_id, my_lease)
            if d.drop_lease:
                self._release()
            view = d.view
            if d.acquire and not self._stop.is_set():
                view = self._acquire(d.replace_revision)
            self._set_view(view)
            return self.view()

    def _keep_alive(self) -> None:
        lease = self._lease
        assert lease is not None
        now = self._clock()
        if now >= self._valid_until:
            self._lose("no lease refresh succeeded within the TTL")
            return
        if now < self._next_refresh:
            return
        try:
            ttl = lease.refresh()
        except LeaseNotFound:
            self._lose("the lease expired")
            return
        except StoreError as e:
            log.debug("leader lease %x: refresh failed: %s", lease.id, e)
            self._next_refresh = self._clock() + min(0.5, lease.ttl / 3)
            if self._clock() >= self._valid_until:
                self._lose(f"no lease refresh succeeded within the TTL: {e}")
            return
        # The store restarts the TTL when it receives the refresh, after ``now``.
        self._valid_until = now + max(ttl, 1)
        self._next_refresh = now + lease.ttl / 3

    def _acquire(self, replace_revision: int) -> View:
        sent = self._clock()
        try:
            lease = self.store.lease_grant(self.ttl)
        except StoreError as e:
            self._store_error(e)
            return CANDIDATE
        self._lease = lease
        self._valid_until = sent + lease.ttl
        self._next_refresh = sent + lease.ttl / 3
        since = _now_iso()
        guard = (
            Compare(keys.LEADER, "mod", "==", replace_revision)
            if replace_revision
            else Compare(keys.LEADER, "create", "==", 0)
        )
        value = encode_leader(self.master_id, self.url, since)
        try:
            res = self.store.txn((guard,), (Put(keys.LEADER, value, lease.id),))
        except StoreError as e:
            # The outcome may be unknown: keep the lease; the next read tells whether we won.
            self._store_error(e)
            return CANDIDATE
        if not res.succeeded:
            self._release()
            return CANDIDATE
        mine = LeaderRecord(id=self.master_id, url=self.url, since=since, lease=lease.id)
        return View("leader", mine, True)

    def _set_view(self, view: View) -> None:
        old = self._view
        if view.holder and not old.holder:
            self.term += 1
            leader_change("acquired")
            log.info(
                "this master leads now (%s, lease %x, ttl %ds)",
                self.url,
                self._lease.id if self._lease else 0,
                self._lease.ttl if self._lease else self.ttl,
            )
        elif old.holder and not view.holder:
            leader_change("lost")
            log.warning("this master no longer holds the leader lease")
        new, prev = view.leader, old.leader
        if not view.holder and new is not None and (prev is None or prev.url != new.url):
            log.info("leader is %s (%s); this master is a %s", new.url, new.id, view.role)
        self._view = view

    def _lose(self, reason: str) -> None:
        """Step down at once; revoke the lease in case the store still has it."""
        if self._view.holder:
            leader_change("lost")
            log.warning("stepping down as leader: %s", reason)
        self._view = CANDIDATE
        self._release()

    def _release(self) -> None:
        lease, self._lease = self._lease, None
        self._valid_until = 0.0
        if lease is None:
            return
        # Expired already, or the store is away: then it expires by itself.
        with contextlib.suppress(StoreError):
            lease.revoke()

    def _store_error(self, e: StoreError) -> None:
        if not self._store_down:
            self._store_down = True
            log.warning("election: cluster store unavailable: %s", e)
        else:
            log.debug("election: cluster store unavailable: %s", e)

    # --- lifecycle ---

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="netmaster-election", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                leading(self.step().role == "leader")
            except Exception:
                log.exception("election step failed")
            self._stop.wait(self.poll_interval)
        self._resign()

    def request_stop(self) -> None:
        """Stop taking part (safe in a signal handler): the thread resigns at once."""
        self._stop.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop and give up the lease, so that another master takes over at once."""
        self._stop.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            self._resign()
            return
        thread.join(timeout)  # the thread resigns when it leaves its loop
        if thread.is_alive():
            log.warning("election thread did not stop within %ss; the lease will expire", timeout)

    def _resign(self) -> None:
        with self._lock:
            was_holder = self._view.holder
            self._view = CANDIDATE
            self._observed_at = None
            self._release()
            leading(False)
            if was_holder:
                leader_change("lost")
                log.info("resigned as leader (%s)", self.url)
