"""What one endpoint change costs a real ovs-vswitchd (userspace, datapath_type=netdev) in
a segment of N local endpoints (issue 27): rewriting the 3 flood flows of N outputs, as
netplugin did, against one whole-group MODIFY of the segment's all group, against one
INSERT_BUCKET or REMOVE_BUCKET of it.

Each change is sent on the bridge's management socket as raw OpenFlow 1.5 (encoded by
os-ken before the clock starts), followed by a barrier; the time is until the barrier's
reply, so it covers vswitchd's work on the message. Changes alternate between N and N+1
endpoints, so each is a real change, and the three ways take turns. Not part of `make
bench`: run it by hand (as root), ``python -m bench.flood_groups [N ...]``; it prints a
markdown table.
"""

from __future__ import annotations

import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from os_ken.ofproto import ofproto_protocol
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as parser

from datapath.flood import flood_groups
from datapath.flows import flow
from datapath.ofcodec import flow_mod, group_mod
from testbed.ovs import OvsInstance

BRIDGE = "br-fg"
REPEAT = 100
SEGMENT = 5000
_DP = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)


def _encode(msg: Any, xid: int) -> bytes:
    msg.set_xid(xid)
    msg.serialize()
    return bytes(msg.buf)


class Wire:
    """An OpenFlow 1.5 connection to a bridge's management socket."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.xid = 1
        self.sock.sendall(_encode(parser.OFPHello(_DP), self.xid))
        self._read()  # the switch's hello
        self.errors = 0

    def _read(self) -> tuple[int, int]:
        head = self._exactly(8)
        _, kind, length, xid = struct.unpack("!BBHI", head)
        self._exactly(length - 8)
        return kind, xid

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the switch closed the connection")
            data += chunk
        return data

    def transact(self, messages: Iterable[bytes]) -> None:
        """Send encoded messages and a barrier; return once the barrier is answered."""
        self.xid += 1
        self.sock.sendall(b"".join(messages) + _encode(parser.OFPBarrierRequest(_DP), self.xid))
        while True:
            kind, xid = self._read()
            if kind == ofp.OFPT_ERROR:
                self.errors += 1
            elif kind == ofp.OFPT_BARRIER_REPLY and xid == self.xid:
                return

    def timed(self, steps: list[list[bytes]]) -> list[float]:
        """Milliseconds each step (its messages and a barrier) took."""
        out = []
        for messages in steps:
            start = time.perf_counter()
            self.transact(messages)
            out.append((time.perf_counter() - start) * 1000)
        return out


def _flood_flows(n: int, segment: int, group_id: int | None) -> list[bytes]:
    """The 3 flood flows of a segment of ``n`` endpoints (ports 1..n), with a gateway (port
    60000) and a tunnel: listing the endpoints, or naming the group."""
    listed = [("output", p) for p in range(1, n + 1)]
    outputs = [("group", group_id)] if group_id is not None else listed
    actions = [
        [*outputs, ("output", 60_000), ("set_field", "tunnel_id", segment), ("output", 60_001)],
        outputs,
        outputs,
    ]
    metadata = [(segment | origin << 32, 0x3_FFFF_FFFF) for origin in (0, 1, 2)]
    return [
        _encode(flow_mod(_DP, flow(0, 10, acts, metadata=meta)), 0)
        for meta, acts in zip(metadata, actions, strict=True)
    ]


def _bucket_mod(group_id: int, command: int, port: int) -> bytes:
    bucket = parser.OFPBucket(bucket_id=port, actions=[parser.OFPActionOutput(port)], properties=[])
    buckets = [bucket] if command == ofp.OFPGC_INSERT_BUCKET else []
    target = ofp.OFPG_BUCKET_LAST if command == ofp.OFPGC_INSERT_BUCKET else port
    msg = parser.OFPGroupMod(_DP, command, ofp.OFPGT_ALL, group_id, target, buckets)
    return _encode(msg, 0)


WAYS = ("3 flows of N outputs", "group MODIFY", "INSERT/REMOVE_BUCKET")


def measure(wire: Wire, n: int) -> dict[str, list[float]]:
    """Per-change milliseconds of the three ways, for a segment of ``n`` endpoints: each on
    a segment of its own, taking turns, so a busy host slows them alike."""
    listing, grouped, bucketed = SEGMENT, SEGMENT + 1, SEGMENT + 2
    setup: list[bytes] = []
    for segment in (grouped, bucketed):
        (g,) = flood_groups(segment, range(1, n + 1))
        setup.append(_encode(group_mod(_DP, g, ofp.OFPGC_ADD), 0))
        setup += _flood_flows(n, segment, g.id)
    wire.transact([*setup, *_flood_flows(n, listing, None)])
    flows = {k: _flood_flows(k, listing, None) for k in (n, n + 1)}
    modify = {
        k: _encode(group_mod(_DP, flood_groups(grouped, range(1, k + 1))[0], ofp.OFPGC_MODIFY), 0)
        for k in (n, n + 1)
    }
    gid = flood_groups(bucketed, [])[0].id
    bucket = {
        0: _bucket_mod(gid, ofp.OFPGC_INSERT_BUCKET, n + 1),
        1: _bucket_mod(gid, ofp.OFPGC_REMOVE_BUCKET, n + 1),
    }
    results: dict[str, list[float]] = {way: [] for way in WAYS}
    for i in range(REPEAT):
        for way, messages in zip(
            WAYS, (flows[n + 1 - i % 2], [modify[n + 1 - i % 2]], [bucket[i % 2]]), strict=True
        ):
            results[way] += wire.timed([messages])
    for segment in (grouped, bucketed):  # deleting a group deletes its flows
        wire.transact([_encode(group_mod(_DP, flood_groups(segment, [])[0], ofp.OFPGC_DELETE), 0)])
    return results


def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="np-fg-") as tmp:
        ovs = OvsInstance(f"np-fg-{os.getpid()}", Path(tmp))
        ovs.start()
        try:
            ovs.vsctl("add-br", BRIDGE, "--", "set", "Bridge", BRIDGE, "datapath_type=netdev",
                      "fail_mode=secure", "protocols=OpenFlow15")  # fmt: skip
            wire = Wire(Path(tmp) / f"{BRIDGE}.mgmt")
            print("| N | way | median ms | p90 ms |")
            print("|---|---|---|---|")
            for n in sizes:
                for way, ms in measure(wire, n).items():
                    p90 = statistics.quantiles(ms, n=10)[-1]
                    print(f"| {n} | {way} | {statistics.median(ms):.2f} | {p90:.2f} |")
            if wire.errors:
                print(f"\n{wire.errors} error replies: the figures are not valid")
        finally:
            ovs.stop()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000, 2000])
