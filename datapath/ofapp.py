"""The OpenFlow 1.5 controller that keeps one bridge's flows equal to a desired set.

os-ken runs in-process on native threads (never eventlet/gevent monkey patching). On every
(re)connect, on every set_desired(), on resync() and after an error reply, the controller
reads the switch's flows (only those carrying our cookie), diffs them against the desired
set, sends strict deletes for stale ones and adds for missing or changed ones in the order
datapath.tables.write_plan gives, then a barrier: a full reconcile. Flows that are already
right are never touched, so their counters and durations survive controller restarts.
Between full reconciles, apply() sends only a delta's flow-mods (same order, then a
barrier), diffed against what the controller knows the switch holds (datapath.ofstate):
one endpoint costs its own flow-mods, not a read of every flow.

os-ken keeps process-wide state (its config, AppManager and service registry) and leaves
non-daemon threads behind (its accept loop cannot be stopped), so: one FlowController per
process, and a process that is done should call stop() and then os._exit().

`python -m datapath.ofrunner` runs it standalone from a state file.

The codec between Flows and os-ken objects lives in datapath.ofcodec, the os-ken app in
datapath.osken_app, the messages of a reconcile in datapath.ofwire; their public names are
re-exported here.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from common.loop import Reconciler
from datapath.flows import Flow, FlowDiff, diff, replaced
from datapath.ndp import advertisement
from datapath.ofcodec import flow_mod, from_ofp_flow, to_ofp_instructions, to_ofp_match
from datapath.ofstate import Job, ReconcileStats, SwitchBook
from datapath.ofwire import Disconnected, ReconcileError, SwitchWire
from datapath.osken_app import NetpluginOFApp, start_os_ken, stop_os_ken
from datapath.pipeline import PIPELINE, write_plan
from datapath.routing import ROUTER_MAC

__all__ = [
    "DEFAULT_LISTEN_HOST",
    "DEFAULT_LISTEN_PORT",
    "FlowController",
    "NetpluginOFApp",
    "ReconcileError",
    "ReconcileStats",
    "flow_mod",
    "from_ofp_flow",
    "to_ofp_instructions",
    "to_ofp_match",
]

log = logging.getLogger(__name__)

DEFAULT_LISTEN_HOST = "127.0.0.1"
DEFAULT_LISTEN_PORT = 6653

_started_lock = threading.Lock()
_started = False


# ---------------------------------------------------------------- the controller


class FlowController:
    """Keeps the flows of the (one) bridge connected to it equal to set_desired()."""

    def __init__(
        self,
        listen_host: str = DEFAULT_LISTEN_HOST,
        listen_port: int = DEFAULT_LISTEN_PORT,
        reply_timeout: float = 10.0,
        retry_interval: float = 2.0,
        on_change: Callable[[], None] | None = None,
        on_connect: Callable[[], None] | None = None,
    ) -> None:
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.reply_timeout = reply_timeout
        self.retry_interval = retry_interval
        self._on_change = on_change
        # Called in a thread of its own after each switch handshake (e.g. to redo what an
        # ovs-vswitchd restart lost outside the flow tables).
        self.on_connect = on_connect
        # Called in the reconcile thread with the stats of each completed job (metrics).
        self.on_reconcile: Callable[[ReconcileStats], None] | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._book = SwitchBook()
        self._datapath: Any = None
        self._connection = 0
        self._wire = SwitchWire(self._lock, reply_timeout, lambda: self._datapath)
        self._last: ReconcileStats | None = None
        self._last_error: str | None = None
        self._reconcile_count = 0
        # Reconciles when poked (a new desired state, a connection), and retry_interval
        # after a failure; started by start().
        self._worker = Reconciler("flow reconcile", self._run_once, coalesce=0)

    # -- public API

    def start(self) -> None:
        """Listen for the switch and start reconciling; returns once listening."""
        global _started
        with _started_lock:
            if _started:
                raise RuntimeError("os-ken state is process-wide: one FlowController per process")
            self._check_port_free()
            _started = True
        self._worker.start()
        start_os_ken(self, self.listen_host, self.listen_port)
        log.info("OpenFlow controller listening on %s:%d", self.listen_host, self.listen_port)

    def _check_port_free(self) -> None:
        family = socket.AF_INET6 if ":" in self.listen_host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.listen_host, self.listen_port))
            except OSError as e:
                raise RuntimeError(
                    f"cannot listen for OpenFlow on {self.listen_host}:{self.listen_port}: {e}; "
                    "pick another port"
                ) from e

    def set_desired(self, flows: Iterable[Flow]) -> int:
        """Replace the desired flows; a full reconcile follows at once if a switch is
        connected.

        Returns the generation number to pass to wait_reconciled(). Raises ValueError
        if two flows share one identity (table, priority, match).
        """
        with self._lock:
            generation = self._book.set_desired(flows)
        self._worker.poke()
        return generation

    def apply(self, delta: FlowDiff) -> int:
        """Change some desired flows: delete the identities of delta.to_delete, add (or
        replace in place) delta.to_add. Only their flow-mods are sent, unless a full
        reconcile is due anyway. Returns the generation for wait_reconciled()."""
        with self._lock:
            before = self._book.generation
            generation = self._book.apply(delta)
        if generation != before:
            self._worker.poke()
        return generation

    def resync(self) -> int:
        """Read the switch's flows and diff them against the desired ones (a full
        reconcile), e.g. when something else may have touched them; the generation."""
        with self._lock:
            generation = self._book.resync()
        self._worker.poke()
        return generation

    def wait_connected(self, timeout: float) -> bool:
        """Wait until a switch has completed the handshake."""
        with self._changed:
            return self._changed.wait_for(lambda: self._datapath is not None, timeout)

    def wait_reconciled(
        self, generation: int | None = None, timeout: float = 10.0
    ) -> ReconcileStats | None:
        """Wait for a clean reconcile of (at least) generation on the current connection."""

        def done() -> bool:
            last = self._last
            return (
                last is not None
                and self._datapath is not None
                and last.connection == self._connection
                and last.generation >= (generation or self._book.generation)
                and not last.errors
            )

        with self._changed:
            return self._last if self._changed.wait_for(done, timeout) else None

    @property
    def connected(self) -> bool:
        """True while a switch is connected."""
        return self._datapath is not None

    @property
    def reconcile_count(self) -> int:
        """How many reconciles have completed (with or without errors)."""
        return self._reconcile_count

    @property
    def last_reconcile(self) -> ReconcileStats | None:
        """Stats of the last completed reconcile."""
        return self._last

    def snapshot(self) -> dict[str, Any]:
        """The controller's state as plain data (for status files and logs)."""
        with self._lock:
            dp = self._datapath
            return {
                "connected": dp is not None,
                "dpid": dp.id if dp is not None else None,
                "connection": self._connection,
                "generation": self._book.generation,
                "desired": len(self._book.desired),
                "switch_known": self._book.known,
                "reconcile_count": self._reconcile_count,
                "last": asdict(self._last) if self._last else None,
                "last_error": self._last_error,
                "threads": threading.active_count(),
            }

    def read_back(self) -> tuple[frozenset[Flow], set[Flow], int] | None:
        """(the desired flows, our flows on the switch now, the generation they were read
        at) for a report: nothing is changed. None while no switch is connected. Raises
        ReconcileError if the switch does not answer."""
        with self._lock:
            dp, generation = self._datapath, self._book.generation
            desired = frozenset(self._book.desired.values())
        if dp is None:
            return None
        try:
            return desired, self._wire.read_entries(dp), generation
        except Disconnected:
            return None

    def stop(self) -> None:
        """Stop reconciling and drop the switch connection (its flows stay: fail_mode=secure).

        os-ken's accept loop cannot be stopped and its threads are not daemons, so the
        process should end with os._exit() after this.
        """
        self._worker.stop()
        with self._lock:
            dp, self._datapath = self._datapath, None
            self._fail_pending()
        if dp is not None:
            dp.close()
        stop_os_ken()
        self._worker.join(self.reply_timeout)

    # -- called by the os-ken app (its event thread)

    def switch_connected(self, datapath: Any) -> None:
        with self._changed:
            previous = self._datapath
            if previous is not None and previous.id != datapath.id:
                log.warning(
                    "switch %016x connected while %016x is; only the latest is programmed",
                    datapath.id,
                    previous.id,
                )
            self._datapath = datapath
            self._connection += 1
            self._changed.notify_all()
        log.info("switch %016x connected from %s", datapath.id, datapath.address)
        self._worker.poke()
        self._notify()
        if self.on_connect is not None:
            threading.Thread(
                target=self._call_on_connect, name="ofapp-on-connect", daemon=True
            ).start()

    def _call_on_connect(self) -> None:
        try:
            assert self.on_connect is not None
            self.on_connect()
        except Exception:
            log.exception("on_connect callback failed")

    def switch_disconnected(self, datapath: Any) -> None:
        with self._changed:
            # A DEAD event can come after the next connection's handshake: only the
            # connection we are using counts.
            if datapath is not self._datapath:
                log.debug("ignoring DEAD of a previous connection from %s", datapath.address)
                return
            self._datapath = None
            self._fail_pending()
            self._changed.notify_all()
        log.warning("switch %s disconnected", datapath.address)
        self._notify()

    def switch_reply(self, msg: Any) -> None:
        self._wire.on_reply(msg)

    def switch_error(self, msg: Any) -> None:
        text = self._wire.on_error(msg)
        if text is not None:
            log.warning("%s (xid %s)", text, msg.xid)

    def switch_packet_in(self, msg: Any) -> None:
        """A packet the flows sent here: routing mode's IPv6 neighbour solicitations for the
        VRF's addresses (datapath.routing.nd_answer), answered with the router MAC on the
        port they came from. os-ken's thread: never raises."""
        try:
            reply = advertisement(bytes(msg.data), ROUTER_MAC)
            if reply is None:
                return
            dp = msg.datapath
            parser, ofp = dp.ofproto_parser, dp.ofproto
            dp.send_msg(
                parser.OFPPacketOut(
                    dp,
                    buffer_id=ofp.OFP_NO_BUFFER,
                    match=parser.OFPMatch(in_port=ofp.OFPP_CONTROLLER),
                    actions=[parser.OFPActionOutput(msg.match["in_port"])],
                    data=reply,
                )
            )
        except Exception:
            log.exception("answering a packet from the switch")

    def _fail_pending(self) -> None:
        self._wire.fail_pending()

    def _notify(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:
                log.exception("on_change callback failed")

    # -- the reconcile worker

    def _run_once(self) -> float | None:
        """Take the next job and do it: a full reconcile or a delta's flow-mods; when to
        try again after a failure."""
        with self._lock:
            dp, connection = self._datapath, self._connection
            # Before the first set_desired nobody has said what the flows should be (e.g. a
            # restarted agent still reading its state): touching the switch now would wipe
            # running containers' flows; secure fail-mode keeps them until it is known.
            job = self._book.next_job(connection) if dp is not None else None
        if job is None:
            return None
        try:
            if job.full is not None:
                stats = self._reconcile(dp, connection, job.full, job.generation)
            else:
                stats = self._send_delta(dp, connection, job)
        except Disconnected:
            with self._lock:
                self._book.forget()
            return None  # the next connection triggers a fresh reconcile
        except Exception as e:
            if not isinstance(e, ReconcileError):
                log.exception("reconcile crashed")
            log.error("reconcile failed, retrying in %.0fs: %s", self.retry_interval, e)
            with self._changed:
                self._book.forget()
                self._last_error = str(e)
                self._changed.notify_all()
            return self.retry_interval
        with self._changed:
            # After an error reply the switch may hold anything: the retry reads it back.
            self._book.done(job, connection, clean=not stats.errors)
            self._last = stats
            self._last_error = "; ".join(stats.errors) or None
            self._reconcile_count += 1
            self._changed.notify_all()
        if stats.errors:
            log.error("switch refused %d flow(s): %s", len(stats.errors), stats.errors[:5])
        if self.on_reconcile is not None:
            try:
                self.on_reconcile(stats)
            except Exception:
                log.exception("on_reconcile callback failed")
        self._notify()
        return self.retry_interval if stats.errors else None

    def _reconcile(
        self, dp: Any, connection: int, desired: frozenset[Flow], generation: int
    ) -> ReconcileStats:
        started = time.monotonic()
        actual = self._wire.read_entries(dp)
        flow_diff = diff(desired, actual)
        changed = replaced(flow_diff, actual)
        n_replaced = len(changed)
        if changed and log.isEnabledFor(logging.DEBUG):
            have = {f.identity: f for f in actual}
            for f in changed:
                log.debug("replacing flow\n  switch: %s\n  wanted: %s", have[f.identity], f)
        present = {e.identity for e in actual}
        errors = self._wire.send_plan(dp, write_plan(flow_diff, PIPELINE, present))
        stats = ReconcileStats(
            connection=connection,
            dpid=dp.id,
            generation=generation,
            desired=len(desired),
            found=len(actual),
            added=len(flow_diff.to_add),
            replaced=n_replaced,
            deleted=len(flow_diff.to_delete),
            seconds=round(time.monotonic() - started, 4),
            errors=errors,
        )
        log.info(
            "reconciled switch %016x: %d desired, %d found, %d added (%d replaced), %d deleted",
            dp.id,
            stats.desired,
            stats.found,
            stats.added,
            stats.replaced,
            stats.deleted,
        )
        return stats

    def _send_delta(self, dp: Any, connection: int, job: Job) -> ReconcileStats:
        """Send a delta's flow-mods in write_plan's order, then a barrier; no read."""
        assert job.delta is not None
        started = time.monotonic()
        errors: tuple[str, ...] = ()
        if job.delta.to_add or job.delta.to_delete:
            errors = self._wire.send_plan(dp, write_plan(job.delta, PIPELINE, job.present))
        stats = ReconcileStats(
            connection=connection,
            dpid=dp.id,
            generation=job.generation,
            desired=job.desired,
            found=job.found,
            added=len(job.delta.to_add),
            replaced=job.replaced,
            deleted=len(job.delta.to_delete),
            seconds=round(time.monotonic() - started, 4),
            errors=errors,
            full=False,
        )
        log.debug(
            "sent switch %016x a delta: %d added (%d replaced), %d deleted",
            dp.id,
            stats.added,
            stats.replaced,
            stats.deleted,
        )
        return stats
