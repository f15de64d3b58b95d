"""Spike: os-ken's BGPSpeaker in-process, the way the netplugin agent would run it.

No eventlet, no monkey-patching (os-ken 4.x hub is 'native' = threading by default).
The same process first starts os-ken's OpenFlow app manager exactly as the agent does
(datapath.osken_app.start_os_ken from /work/main, unmodified), and a fake OF1.5 switch
connects to it, so the two run side by side.

Control: a line-JSON unix socket (CTL), one command per connection:
  {"op": "add", "prefix": "10.99.0.5/32", "next_hop": "50.1.1.1"}
  {"op": "del", "prefix": "10.99.0.5/32"}
  {"op": "bulk_add", "prefixes": [...], "next_hop": ...} / {"op": "bulk_del", ...}
  {"op": "state"}  {"op": "events", "since": 0}  {"op": "rib"}  {"op": "threads"}
Events (peer up/down, best path change) are kept with wall-clock times.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, "/work/main")

from os_ken.lib import hub  # noqa: E402
from os_ken.services.protocols.bgp.api.base import call  # noqa: E402
from os_ken.services.protocols.bgp.bgpspeaker import BGPSpeaker  # noqa: E402
from os_ken.services.protocols.bgp.rtconf import neighbors as nconf  # noqa: E402
from os_ken.services.protocols.bgp.rtconf.base import HOLD_TIME  # noqa: E402
from os_ken.services.protocols.bgp.rtconf.common import BGP_CONN_RETRY_TIME  # noqa: E402

EVENTS: list[dict] = []
EV_LOCK = threading.Lock()


def record(kind: str, **kw) -> None:
    with EV_LOCK:
        EVENTS.append({"t": time.time(), "kind": kind, "thread": threading.current_thread().name, **kw})


class Speaker(BGPSpeaker):
    """BGPSpeaker whose connect-retry time can be set (BGPSpeaker.__init__ does not expose it)."""

    conn_retry = 30

    def _core_start(self, settings):
        settings[BGP_CONN_RETRY_TIME] = self.conn_retry
        super()._core_start(settings)


class DummyController:
    def switch_connected(self, dp):
        record("of_switch_connected", dpid=dp.id)

    def switch_disconnected(self, dp):
        record("of_switch_disconnected", dpid=getattr(dp, "id", None))

    def switch_reply(self, msg):
        record("of_reply", type=type(msg).__name__)

    def switch_error(self, msg):
        record("of_error")


def fake_switch(port: int) -> None:
    """A minimal OpenFlow 1.5 switch: hello, features, port desc, echo."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(struct.pack("!BBHI", 6, 0, 8, 1))  # HELLO
    buf = b""
    while True:
        data = s.recv(65536)
        if not data:
            record("fake_switch_closed")
            return
        buf += data
        while len(buf) >= 8:
            ver, typ, length, xid = struct.unpack("!BBHI", buf[:8])
            if len(buf) < length:
                break
            body, buf = buf[8:length], buf[length:]
            if typ == 5:  # FEATURES_REQUEST
                s.sendall(struct.pack("!BBHI", 6, 6, 32, xid) + struct.pack("!QIBB2xII", 0xB6B, 0, 254, 0, 0, 0))
            elif typ == 18:  # MULTIPART_REQUEST
                mp_type = struct.unpack("!H", body[:2])[0]
                s.sendall(struct.pack("!BBHI", 6, 19, 16, xid) + struct.pack("!HH4x", mp_type, 0))
            elif typ == 2:  # ECHO_REQUEST
                s.sendall(struct.pack("!BBHI", 6, 3, length, xid) + body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--as", dest="asn", type=int, default=65001)
    ap.add_argument("--router-id", default="50.1.1.1")
    ap.add_argument("--neighbor", default="50.1.1.2")
    ap.add_argument("--neighbor-as", type=int, default=65000)
    ap.add_argument("--hold-time", type=int, default=40)
    ap.add_argument("--listen-port", type=int, default=0, help="0 = do not listen, connect out only")
    ap.add_argument("--conn-retry", type=int, default=30)
    ap.add_argument("--ipv6", action="store_true", help="negotiate IPv6 unicast (MP-BGP) too")
    ap.add_argument("--of-port", type=int, default=16653, help="0 = no OpenFlow")
    ap.add_argument("--ctl", default="/tmp/bgpspike/ctl.sock")
    ap.add_argument("--log", default="/tmp/bgpspike/speaker.log")
    args = ap.parse_args()

    logging.basicConfig(filename=args.log, level=getattr(logging, os.environ.get("SPIKE_LOG", "INFO")),
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    record("start", hub=hub.HUB_TYPE, eventlet_imported="eventlet" in sys.modules)

    if args.of_port:
        from datapath import osken_app  # the agent's own module, unmodified
        osken_app.start_os_ken(DummyController(), "127.0.0.1", args.of_port)
        record("of_listening", port=args.of_port)
        threading.Thread(target=fake_switch, args=(args.of_port,), daemon=True, name="fake-switch").start()

    def best_path(ev):
        # GOTCHA: an exception escaping this handler stops os-ken's BGP processor and with
        # it the whole core (silently with the native hub): always catch.
        try:
            if os.environ.get("SPIKE_BAD_HANDLER"):
                ev.route_type  # EventPrefix has no such attribute: AttributeError
            record("best_path", prefix=ev.prefix, nexthop=ev.nexthop, remote_as=ev.remote_as,
                   withdraw=ev.is_withdraw)
        except Exception:
            logging.exception("best path handler")

    Speaker.conn_retry = args.conn_retry
    t0 = time.time()
    speaker = Speaker(
        as_number=args.asn, router_id=args.router_id,
        bgp_server_hosts=(args.router_id,), bgp_server_port=args.listen_port,
        best_path_change_handler=best_path,
        peer_down_handler=lambda ip, asn: record("peer_down", ip=ip, asn=asn),
        peer_up_handler=lambda ip, asn: record("peer_up", ip=ip, asn=asn),
    )
    record("speaker_started", secs=time.time() - t0)
    # neighbor.create directly: BGPSpeaker.neighbor_add has no hold_time parameter.
    call("neighbor.create", **{
        nconf.IP_ADDRESS: args.neighbor, nconf.REMOTE_AS: args.neighbor_as,
        nconf.CAP_MBGP_IPV4: True, nconf.CAP_MBGP_IPV6: args.ipv6,
        nconf.CONNECT_MODE: nconf.CONNECT_MODE_ACTIVE if args.listen_port == 0 else nconf.CONNECT_MODE_BOTH,
        HOLD_TIME: args.hold_time,
    })
    record("neighbor_added")

    def handle(conn: socket.socket) -> None:
        with conn:
            req = json.loads(conn.makefile().readline())
            op = req["op"]
            try:
                if op == "add":
                    res = speaker.prefix_add(req["prefix"], next_hop=req.get("next_hop"))
                elif op == "del":
                    res = speaker.prefix_del(req["prefix"])
                elif op == "bulk_add":
                    t = time.time()
                    for p in req["prefixes"]:
                        speaker.prefix_add(p, next_hop=req.get("next_hop"))
                    res = {"api_secs": time.time() - t}
                elif op == "bulk_del":
                    t = time.time()
                    for p in req["prefixes"]:
                        speaker.prefix_del(p)
                    res = {"api_secs": time.time() - t}
                elif op == "state":
                    res = json.loads(speaker.neighbor_state_get())
                elif op == "state_cli":
                    res = speaker.neighbor_state_get(format="cli")
                elif op == "rib":
                    res = json.loads(speaker.rib_get())
                elif op == "events":
                    with EV_LOCK:
                        res = EVENTS[req.get("since", 0):]
                elif op == "threads":
                    res = sorted(t.name for t in threading.enumerate())
                else:
                    res = {"error": f"unknown op {op}"}
                out = {"ok": True, "result": res}
            except Exception as e:  # report, keep serving
                out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            conn.sendall((json.dumps(out, default=str) + "\n").encode())

    if os.path.exists(args.ctl):
        os.unlink(args.ctl)
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(args.ctl)
    srv.listen(8)
    record("ctl_ready")
    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
