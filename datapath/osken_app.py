"""os-ken, in-process: the app that hands switch events to the FlowController, starting
and stopping os-ken's process-wide machinery, and a fix to its Datapath for native threads.

os-ken loads apps by module name and instantiates every OSKenApp defined in the module, so
this module defines exactly one.
"""

from __future__ import annotations

import functools
import logging
import socket
import time
from pathlib import Path
from typing import Any, Protocol

from os_ken import cfg
from os_ken.base import app_manager
from os_ken.controller import controller as osken_controller
from os_ken.controller import ofp_event
from os_ken.controller.handler import DEAD_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_5 as ofp

log = logging.getLogger(__name__)

_OFP_HANDLER = "os_ken.controller.ofp_handler"


class SwitchEvents(Protocol):
    """What the app hands switch events to (datapath.ofapp.FlowController)."""

    def switch_connected(self, datapath: Any) -> None: ...
    def switch_disconnected(self, datapath: Any) -> None: ...
    def switch_reply(self, msg: Any) -> None: ...
    def switch_error(self, msg: Any) -> None: ...
    def switch_packet_in(self, msg: Any) -> None: ...


def start_os_ken(controller: SwitchEvents, host: str, port: int) -> None:
    """Start os-ken's OpenFlow server on host:port, its events going to ``controller``;
    returns once it listens."""
    _fix_os_ken_datapath()
    cfg.CONF(args=[], project="os_ken")
    cfg.CONF.set_override("ofp_listen_host", host)
    cfg.CONF.set_override("ofp_tcp_listen_port", port)
    manager = app_manager.AppManager.get_instance()
    manager.load_apps([_OFP_HANDLER, NetpluginOFApp.__module__])
    contexts = manager.create_contexts()
    manager.instantiate_apps(netplugin_controller=controller, **contexts)
    deadline = time.monotonic() + 5
    while not _listening(host, port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"OpenFlow listener on {host}:{port} did not come up")
        time.sleep(0.02)


def stop_os_ken() -> None:
    """Close os-ken's apps (its accept loop and threads stay: see datapath.ofapp)."""
    try:
        app_manager.AppManager.get_instance().close()
    except Exception:
        log.exception("closing os-ken apps")


class NetpluginOFApp(app_manager.OSKenApp):
    """The os-ken app: forwards connection, reply, error and packet-in events to the
    FlowController."""

    OFP_VERSIONS = [ofp.OFP_VERSION]

    def __init__(self, *args: Any, netplugin_controller: SwitchEvents, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.controller = netplugin_controller

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev: Any) -> None:
        if ev.state == MAIN_DISPATCHER:
            self.controller.switch_connected(ev.datapath)
        elif ev.state == DEAD_DISPATCHER:
            self.controller.switch_disconnected(ev.datapath)

    @set_ev_cls(ofp_event.EventOFPFlowDescStatsReply, MAIN_DISPATCHER)
    def _flow_desc_reply(self, ev: Any) -> None:
        self.controller.switch_reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPMeterDescStatsReply, MAIN_DISPATCHER)
    def _meter_desc_reply(self, ev: Any) -> None:
        self.controller.switch_reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPGroupDescStatsReply, MAIN_DISPATCHER)
    def _group_desc_reply(self, ev: Any) -> None:
        self.controller.switch_reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier_reply(self, ev: Any) -> None:
        self.controller.switch_reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, MAIN_DISPATCHER)
    def _error(self, ev: Any) -> None:
        self.controller.switch_error(ev.msg)

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev: Any) -> None:
        self.controller.switch_packet_in(ev.msg)


def _fix_os_ken_datapath() -> None:
    """Make a dead switch connection release its threads and report DEAD promptly.

    With native threads, os-ken's Datapath.serve() joins its send thread after the receive
    loop ends, but that thread blocks forever on its empty send queue: every reconnect leaks
    two threads and an open connection object, and the DEAD event only arrives if something
    is sent to the dead datapath later (often after the new connection is up). Queueing a
    close marker when the receive loop ends wakes the send thread, which then exits.
    """
    dp_cls = osken_controller.Datapath
    if getattr(dp_cls, "_netplugin_fixed", False):
        return
    recv_loop = dp_cls._recv_loop

    @functools.wraps(recv_loop)
    def _recv_loop(self: Any) -> None:
        try:
            recv_loop(self)  # closes the socket when it ends
        finally:
            self.send(b"", close_socket=True)

    dp_cls._recv_loop = _recv_loop
    dp_cls._netplugin_fixed = True


def _listening(host: str, port: int) -> bool:
    """True if a TCP socket listens on host:port in this network namespace (Linux)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    table = "/proc/net/tcp6" if family == socket.AF_INET6 else "/proc/net/tcp"
    want_port = f"{port:04X}"
    try:
        lines = Path(table).read_text().splitlines()[1:]
    except OSError:
        return True  # cannot tell; do not fail start() over it
    for line in lines:
        cols = line.split()
        if cols[3] == "0A" and cols[1].rsplit(":", 1)[1] == want_port:
            return True
    return False
