"""The OpenFlow 1.3 controller that keeps one bridge's flows equal to a desired set.

os-ken runs in-process on native threads (never eventlet/gevent monkey patching). On every
(re)connect and on every set_desired() the controller reads the switch's flows (only those
carrying our cookie), diffs them against the desired set, sends strict deletes for stale
ones and adds for missing or changed ones in the order datapath.tables.write_plan gives,
then a barrier. Flows that are already right are
never touched, so their counters and durations survive controller restarts.

os-ken keeps process-wide state (its config, AppManager and service registry) and leaves
non-daemon threads behind (its accept loop cannot be stopped), so: one FlowController per
process, and a process that is done should call stop() and then os._exit().

`python -m datapath.ofapp` runs it standalone from a state file (datapath.ofrunner).

The codec between Flows and os-ken objects lives in datapath.ofcodec and the os-ken app in
datapath.osken_app; their public names are re-exported here.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from datapath.flows import COOKIE, COOKIE_MASK, Flow, diff, index_by_identity, replaced
from datapath.ofcodec import flow_mod, from_ofp_flow, to_ofp_instructions, to_ofp_match
from datapath.osken_app import NetpluginOFApp, start_os_ken, stop_os_ken
from datapath.pipeline import PIPELINE, write_plan

__all__ = [
    "DEFAULT_LISTEN_HOST",
    "DEFAULT_LISTEN_PORT",
    "FlowController",
    "NetpluginOFApp",
    "ReconcileError",
    "ReconcileStats",
    "flow_mod",
    "from_ofp_flow",
    "main",
    "to_ofp_instructions",
    "to_ofp_match",
]

log = logging.getLogger(__name__)

DEFAULT_LISTEN_HOST = "127.0.0.1"
DEFAULT_LISTEN_PORT = 6653

_started_lock = threading.Lock()
_started = False


# ---------------------------------------------------------------- the controller


@dataclass(frozen=True)
class ReconcileStats:
    """What one reconcile found and changed."""

    connection: int  # sequence number of the switch connection it ran on (1 = first)
    dpid: int
    generation: int  # the set_desired() generation it applied
    desired: int
    found: int  # our flows on the switch before it
    added: int  # missing or changed flows sent as ADD (changed ones are also in replaced)
    replaced: int
    deleted: int
    seconds: float
    errors: tuple[str, ...] = ()


class ReconcileError(RuntimeError):
    """The switch refused a flow or did not answer in time."""


class _Disconnected(Exception):
    pass


@dataclass
class _Pending:
    datapath: Any
    done: threading.Event = field(default_factory=threading.Event)
    replies: list[Any] = field(default_factory=list)
    error: str | None = None
    disconnected: bool = False


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
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._desired: frozenset[Flow] = frozenset()
        self._generation = 0
        self._datapath: Any = None
        self._connection = 0
        self._pending: dict[int, _Pending] = {}
        self._flow_mods: dict[int, str] = {}
        self._flow_mod_errors: list[str] = []
        self._last: ReconcileStats | None = None
        self._last_error: str | None = None
        self._reconcile_count = 0
        self._worker: threading.Thread | None = None

    # -- public API

    def start(self) -> None:
        """Listen for the switch and start reconciling; returns once listening."""
        global _started
        with _started_lock:
            if _started:
                raise RuntimeError("os-ken state is process-wide: one FlowController per process")
            self._check_port_free()
            _started = True
        self._worker = threading.Thread(target=self._work, name="ofapp-reconcile", daemon=True)
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
        """Replace the desired flows; reconciles at once if a switch is connected.

        Returns the generation number to pass to wait_reconciled(). Raises ValueError
        if two flows share one identity (table, priority, match).
        """
        desired = frozenset(flows)
        index_by_identity(desired)
        with self._lock:
            self._desired = desired
            self._generation += 1
            generation = self._generation
        self._wake.set()
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
                and last.generation >= (generation or self._generation)
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
                "generation": self._generation,
                "desired": len(self._desired),
                "reconcile_count": self._reconcile_count,
                "last": asdict(self._last) if self._last else None,
                "last_error": self._last_error,
                "threads": threading.active_count(),
            }

    def stop(self) -> None:
        """Stop reconciling and drop the switch connection (its flows stay: fail_mode=secure).

        os-ken's accept loop cannot be stopped and its threads are not daemons, so the
        process should end with os._exit() after this.
        """
        self._stopping.set()
        self._wake.set()
        with self._lock:
            dp, self._datapath = self._datapath, None
            self._fail_pending()
        if dp is not None:
            dp.close()
        stop_os_ken()
        if self._worker is not None:
            self._worker.join(self.reply_timeout)

    # -- called by the os-ken app (its event thread)

    def _on_connect(self, datapath: Any) -> None:
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
        self._wake.set()
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

    def _on_disconnect(self, datapath: Any) -> None:
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

    def _on_reply(self, msg: Any) -> None:
        with self._lock:
            pending = self._pending.get(msg.xid)
            if pending is None or pending.datapath is not msg.datapath:
                return
            pending.replies.append(msg)
            if not getattr(msg, "flags", 0) & ofp.OFPMPF_REPLY_MORE:
                pending.done.set()

    def _on_error(self, msg: Any) -> None:
        text = (
            f"switch error {ofp.ofp_error_type_to_str(msg.type)}"
            f"/{ofp.ofp_error_code_to_str(msg.type, msg.code)}"
        )
        with self._lock:
            pending = self._pending.get(msg.xid)
            if pending is not None:
                pending.error = text
                pending.done.set()
            elif msg.xid in self._flow_mods:
                self._flow_mod_errors.append(f"{text} for {self._flow_mods[msg.xid]}")
                return
        log.warning("%s (xid %s)", text, msg.xid)

    def _fail_pending(self) -> None:
        for pending in self._pending.values():
            pending.disconnected = True
            pending.done.set()

    def _notify(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:
                log.exception("on_change callback failed")

    # -- the reconcile worker

    def _work(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set():
                return
            with self._lock:
                dp, connection = self._datapath, self._connection
                desired, generation = self._desired, self._generation
            # Generation 0: nobody has said what the flows should be yet (e.g. a restarted
            # agent still reading its state). Touching the switch now would wipe running
            # containers' flows; secure fail-mode keeps them until desired state is known.
            if dp is None or generation == 0:
                continue
            try:
                stats = self._reconcile(dp, connection, desired, generation)
            except _Disconnected:
                continue  # the next connection triggers a fresh reconcile
            except Exception as e:
                if not isinstance(e, ReconcileError):
                    log.exception("reconcile crashed")
                log.error("reconcile failed, retrying in %.0fs: %s", self.retry_interval, e)
                with self._changed:
                    self._last_error = str(e)
                    self._changed.notify_all()
                self._retry_later()
                continue
            with self._changed:
                self._last = stats
                self._last_error = "; ".join(stats.errors) or None
                self._reconcile_count += 1
                self._changed.notify_all()
            if stats.errors:
                log.error("switch refused %d flow(s): %s", len(stats.errors), stats.errors[:5])
                self._retry_later()
            self._notify()

    def _retry_later(self) -> None:
        timer = threading.Timer(self.retry_interval, self._wake.set)
        timer.daemon = True
        timer.start()

    def _reconcile(
        self, dp: Any, connection: int, desired: frozenset[Flow], generation: int
    ) -> ReconcileStats:
        started = time.monotonic()
        actual = self._read_flows(dp)
        flow_diff = diff(desired, actual)
        changed = replaced(flow_diff, actual)
        n_replaced = len(changed)
        if changed and log.isEnabledFor(logging.DEBUG):
            have = {f.identity: f for f in actual}
            for f in changed:
                log.debug("replacing flow\n  switch: %s\n  wanted: %s", have[f.identity], f)
        with self._lock:
            self._flow_mods.clear()
            self._flow_mod_errors.clear()
        try:
            plan = write_plan(flow_diff, PIPELINE)
            for f in plan.delete_first:
                self._send_flow_mod(dp, f, ofp.OFPFC_DELETE_STRICT)
            for f in plan.add:
                self._send_flow_mod(dp, f, ofp.OFPFC_ADD)
            for f in plan.delete_last:
                self._send_flow_mod(dp, f, ofp.OFPFC_DELETE_STRICT)
            # Errors for the flow-mods arrive before the barrier's reply.
            self._request(dp, parser.OFPBarrierRequest(dp))
        finally:
            with self._lock:
                errors = tuple(self._flow_mod_errors)
                self._flow_mods.clear()
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

    def _read_flows(self, dp: Any) -> set[Flow]:
        request = parser.OFPFlowStatsRequest(
            dp,
            table_id=ofp.OFPTT_ALL,
            out_port=ofp.OFPP_ANY,
            out_group=ofp.OFPG_ANY,
            cookie=COOKIE,
            cookie_mask=COOKIE_MASK,
        )
        flows: set[Flow] = set()
        for reply in self._request(dp, request):
            for stat in reply.body:
                flows.add(
                    from_ofp_flow(
                        stat.table_id, stat.priority, stat.cookie, stat.match, stat.instructions
                    )
                )
        return flows

    def _send_flow_mod(self, dp: Any, flow: Flow, command: int) -> None:
        msg = flow_mod(dp, flow, command)
        dp.set_xid(msg)
        verb = "delete" if command == ofp.OFPFC_DELETE_STRICT else "add"
        with self._lock:
            self._flow_mods[msg.xid] = f"{verb} {flow}"
        if not dp.send_msg(msg):
            raise _Disconnected

    def _request(self, dp: Any, msg: Any) -> list[Any]:
        pending = _Pending(dp)
        dp.set_xid(msg)
        with self._lock:
            if self._datapath is not dp:
                raise _Disconnected
            self._pending[msg.xid] = pending
        try:
            if not dp.send_msg(msg):
                raise _Disconnected
            if not pending.done.wait(self.reply_timeout):
                raise ReconcileError(
                    f"no reply to {type(msg).__name__} within {self.reply_timeout}s"
                )
            if pending.disconnected:
                raise _Disconnected
            if pending.error:
                raise ReconcileError(f"{type(msg).__name__} failed: {pending.error}")
            return pending.replies
        finally:
            with self._lock:
                self._pending.pop(msg.xid, None)


def main(argv: list[str] | None = None) -> int:
    """The standalone runner (datapath.ofrunner)."""
    from datapath.ofrunner import main as run

    return run(argv)


if __name__ == "__main__":
    # The runner imports datapath.ofapp, the copy the rest of datapath uses, so the process
    # has one FlowController class and one start guard.
    from datapath.ofrunner import main as run

    sys.exit(run())
