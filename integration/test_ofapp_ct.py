"""Conntrack and registers through the OpenFlow engine, against a real userspace OVS.

Layout: a private OVS (ovsdb-server + ovs-vswitchd) in its own network namespace, with one
bridge and two "containers" (network namespaces whose eth0 is a veth peered into it). A
FlowController in a process of its own (os-ken's state is process-wide) writes flows with
every ct form and register match of the model; a second one, started afresh, must read
them all back equal and change nothing. Then a real ping goes through ct in the zone of a
register, which it only passes if registers and metadata survive the recirculation.
Only ICMP, so the userspace datapath's TCP checksum trap does not apply.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from datapath.flows import Flow, flow
from datapath.ofapp import FlowController
from datapath.ovs import Ovs
from testbed.ovs import REPO_ROOT, VENV_PYTHON, OvsInstance, run
from testbed.require import require_ovs
from testbed.wait import wait_for

BRIDGE = "br-ct"
LOCAL_TAG = 1 << 31
TAG_1, TAG_2, ZONE_REG = LOCAL_TAG | 5, LOCAL_TAG | 6, LOCAL_TAG | 0x0102  # zone 0x0102
REG_ZONE = ("reg", "reg6", 0, 16)
MARK = 0x55
TRK_NEW, TRK_EST = (0x21, 0x21), (0x22, 0x22)


@dataclass
class Peer:
    """A network namespace with one veth (eth0) whose peer is a bridge port."""

    netns: str
    port_name: str
    mac: str
    ip: str
    ofport: int = 0

    def ping(self, dst_ip: str, count: int) -> bool:
        """True if the echo requests to dst_ip were answered."""
        cmd = ["ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "1", dst_ip]
        proc = subprocess.run(["ip", "netns", "exec", self.netns, *cmd], capture_output=True)
        return proc.returncode == 0


@dataclass
class CtLab:
    ovs: OvsInstance
    port: int  # where the bridge looks for its controller
    k1: Peer
    k2: Peer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plug(ovs: OvsInstance, db: Ovs, peer: Peer) -> None:
    run("ip", "netns", "add", peer.netns)
    run(
        "ip", "link", "add", peer.port_name, "netns", ovs.netns, "type", "veth",
        "peer", "name", "eth0", "netns", peer.netns,
    )  # fmt: skip
    run("ip", "-n", peer.netns, "link", "set", "eth0", "address", peer.mac, "up")
    run("ip", "-n", peer.netns, "addr", "add", f"{peer.ip}/24", "dev", "eth0")
    run("ip", "-n", ovs.netns, "link", "set", peer.port_name, "up")
    peer.ofport = db.add_port(BRIDGE, peer.port_name)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CtLab]:
    require_ovs()
    tag = f"np-ct-{os.getpid()}"
    ovs = OvsInstance(tag, tmp_path_factory.mktemp("ofapp-ct"))
    k1 = Peer(f"{tag}-k1", "np-k1", "02:00:00:00:01:01", "10.77.0.1")
    k2 = Peer(f"{tag}-k2", "np-k2", "02:00:00:00:01:02", "10.77.0.2")
    try:
        ovs.start()
        port = _free_port()
        with Ovs(ovs.db_sock) as db:
            db.ensure_bridge(BRIDGE, controller=f"tcp:127.0.0.1:{port}")
            _plug(ovs, db, k1)
            _plug(ovs, db, k2)
        yield CtLab(ovs, port, k1, k2)
    finally:
        for peer in (k1, k2):
            run("ip", "netns", "del", peer.netns, check=False)
        ovs.stop()


def ct_flows(p1: int, p2: int) -> set[Flow]:
    """A ping between ports p1 and p2 through ct in the zone of reg6 (the path: tables 0,
    10, 20), and beside it every other ct form the model has (table 30, never hit)."""
    unnat = ("nat", "", None, None, None, None, ())
    path = {
        flow(0, 50, [("output", p2)], in_port=p1, eth_type=0x0806),
        flow(0, 50, [("output", p1)], in_port=p2, eth_type=0x0806),
        *(
            flow(
                0,
                100,
                [
                    ("set_field", "reg5", tag),
                    ("set_field", "reg6", ZONE_REG),
                    ("write_metadata", meta, 0xFF),
                    ("goto", 10),
                ],
                in_port=port,
                eth_type=0x0800,
            )
            for port, tag, meta in ((p1, TAG_1, 0x2A), (p2, TAG_2, 0x2B))
        ),
        flow(10, 100, [("ct", False, REG_ZONE, 20, [unnat])], eth_type=0x0800),
        # What the recirculated packet must still carry: reg5, reg6 and the metadata.
        flow(
            20,
            100,
            [("ct", True, REG_ZONE, None, [("set_field", "ct_mark", MARK)]), ("output", p2)],
            ct_state=TRK_NEW,
            reg5=TAG_1,
            reg6=ZONE_REG,
            metadata=(0x2A, 0xFF),
            eth_type=0x0800,
        ),
        flow(20, 90, [("output", p2)], ct_state=TRK_EST, reg5=TAG_1, metadata=(0x2A, 0xFF)),
        flow(
            20,
            90,
            [("output", p1)],
            ct_state=TRK_EST,
            ct_mark=MARK,
            ct_zone=0x0102,
            reg5=(TAG_2, 0xFFFFFFFF),
            reg6=(LOCAL_TAG, LOCAL_TAG),
            metadata=(0x2B, 0xFF),
        ),
    }
    forms = [
        ("ct", False, 9, 20),
        ("ct", True, 9, None),
        ("ct", True, 0xFFFF, 20, [("nat", "dst", "10.77.0.3", None, 8080, None, ())]),
        ("ct", True, ("reg", "reg0", 16, 16), None, [("set_field", "ct_label", (1 << 127) | 3)]),
        (
            "ct",
            True,
            ("reg", "reg7", 16, 16),
            20,
            [
                ("nat", "src", "10.77.0.3", "10.77.0.9", 1024, 2048, ("random", "persistent")),
                ("set_field", "ct_mark", 1),
                ("set_field", "ct_label", 2),
            ],
        ),
    ]
    v6 = ("nat", "src", "fd00::1", "fd00::ff", None, None, ("hash",))
    matches: list[dict[str, Any]] = [
        {"reg0": (0, 1 << 31), "ct_state": (0, 0x20)},  # untracked
        {"ct_label": (1 << 100, 1 << 100), "ct_zone": 9},
        {"ct_state": (0x30, 0x30), "reg15": 0xFFFFFFFF},  # +trk+inv
        {"conj_id": 7},
    ]
    forms_flows = {flow(30, 100 + i, [ct], eth_type=0x0800) for i, ct in enumerate(forms)}
    forms_flows.add(flow(30, 99, [("ct", True, 3, None, [v6])], eth_type=0x86DD))
    forms_flows.update(flow(30, 10 + i, [("output", p1)], **m) for i, m in enumerate(matches))
    return path | forms_flows


def serve_flows_once(port: int, flows_file: str, result_file: str) -> None:
    """In a process of its own (os-ken is process-wide): a FlowController on ``port`` makes
    the switch hold the pickled flows, writes its reconcile's stats, and exits."""
    logging.basicConfig(level=logging.DEBUG, format="%(name)s: %(message)s")
    flows = pickle.loads(Path(flows_file).read_bytes())
    ctl = FlowController("127.0.0.1", port, retry_interval=0.5)
    generation = ctl.set_desired(flows)
    ctl.start()
    try:
        ctl.wait_connected(20)
        ctl.wait_reconciled(generation, 20)
        Path(result_file).write_text(json.dumps(ctl.snapshot()))
    finally:
        ctl.stop()
        logging.shutdown()
        os._exit(0)


def reconcile_once(lab: CtLab, flows: set[Flow], workdir: Path) -> dict[str, Any]:
    """Run serve_flows_once in the switch's namespace; its last reconcile's stats, with its
    log (DEBUG: it names every flow it replaces)."""
    flows_file, result_file = workdir / "flows.pickle", workdir / "result.json"
    flows_file.write_bytes(pickle.dumps(flows))
    result_file.unlink(missing_ok=True)
    code = (
        "from integration.test_ofapp_ct import serve_flows_once; "
        f"serve_flows_once({lab.port}, {str(flows_file)!r}, {str(result_file)!r})"
    )
    proc = subprocess.run(
        ["ip", "netns", "exec", lab.ovs.netns, str(VENV_PYTHON), "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=90,
    )
    assert result_file.exists(), proc.stderr[-4000:]
    status = json.loads(result_file.read_text())
    assert status["last"] and not status["last_error"], proc.stderr[-4000:]
    return {**status["last"], "log": proc.stderr}


def n_packets(lab: CtLab, table: int, actions: str) -> int:
    """The packet count of the one flow of ``table`` whose actions are ``actions``."""
    (line,) = [
        f
        for f in lab.ovs.dump_flows(BRIDGE)
        if f"table={table}," in f and f.endswith(f"actions={actions}")
    ]
    found = re.search(r"n_packets=(\d+)", line)
    assert found, line
    return int(found.group(1))


def test_conntrack_and_registers_round_trip_and_survive_recirculation(
    lab: CtLab, tmp_path: Path
) -> None:
    """Every ct form and register match, written through the controller, reads back equal:
    a second controller finds them and changes nothing. And a ping through ct in the zone
    of reg6 passes only because reg5, reg6 and the metadata survive the recirculation and
    the replies find the ct_mark the first request committed."""
    flows = ct_flows(lab.k1.ofport, lab.k2.ofport)
    first = reconcile_once(lab, flows, tmp_path)
    assert (first["found"], first["added"], first["errors"]) == (0, len(flows), [])
    again = reconcile_once(lab, flows, tmp_path)
    changed = (again["added"], again["replaced"], again["deleted"])
    assert (again["found"], *changed) == (len(flows), 0, 0, 0), again["log"][-6000:]

    assert lab.k1.ping(lab.k2.ip, count=3)
    # Flow stats reach OpenFlow a little after the packets.
    back = f"output:{lab.k1.ofport}"
    wait_for(
        lambda: n_packets(lab, 20, back) >= 3,
        10,
        "3 replies counted on the +est flow back to k1",
        last=lambda: n_packets(lab, 20, back),
    )
    assert not lab.k2.ping(lab.k1.ip, count=1)  # no flow lets k2's +new through

    # The unit tests' walker agrees with OVS on these flows (for the ICMP ids it does not
    # model, k1's echo requests and k2's replies are one connection). Imported here: the
    # controller's process imports this module without conftest's path to tests/.
    from testbed.fakeoftable import FakeConntrack, walk

    ct = FakeConntrack()
    icmp = {"eth_type": 0x0800, "ip_proto": 1}
    request = {**icmp, "in_port": lab.k1.ofport, "ipv4_src": lab.k1.ip, "ipv4_dst": lab.k2.ip}
    reply = {**icmp, "in_port": lab.k2.ofport, "ipv4_src": lab.k2.ip, "ipv4_dst": lab.k1.ip}
    for packet, port in (
        (request, lab.k2.ofport),
        (reply, lab.k1.ofport),
        (request, lab.k2.ofport),
    ):
        assert walk(flows, packet, conntrack=ct).outputs == [port]
    assert walk(flows, {**reply, "ipv4_src": "10.77.0.9"}, conntrack=ct).outputs == []


def test_meters_and_select_groups_round_trip_and_change_in_place(
    lab: CtLab, tmp_path: Path
) -> None:
    """A meter and a select group whose buckets set a MAC and ct(commit, nat) to a provider,
    and flows naming them, written through the controller: a second controller reads them
    back equal and changes nothing; a third, wanting another band and another bucket,
    modifies both in place (the flows naming them stay, their counters too)."""
    from datapath.flows import group, meter

    p1 = lab.k1.ofport
    nat = ("nat", "dst", "10.77.0.2", None, 8080, None, ())
    bucket = [("set_field", "eth_dst", lab.k2.mac), ("ct", True, 5, 20, [nat])]
    entries = {
        meter(7, 10_000, 3_000),
        group(33, [bucket]),
        flow(0, 200, [("meter", 7), ("goto", 10)], in_port=p1, eth_type=0x0800, ip_proto=6),
        flow(10, 200, [("group", 33)], eth_type=0x0800, ip_proto=6, ipv4_dst="10.77.0.100"),
    }
    first = reconcile_once(lab, entries, tmp_path)
    assert (first["added"], first["errors"]) == (4, []), first["log"][-4000:]
    again = reconcile_once(lab, entries, tmp_path)
    changed = (again["added"], again["replaced"], again["deleted"])
    assert (again["found"], *changed) == (4, 0, 0, 0), again["log"][-6000:]
    assert "rate=10000" in lab.ovs.ofctl("dump-meters", BRIDGE)
    other = [("set_field", "eth_dst", lab.k1.mac), ("ct", True, 5, 20, [nat])]
    moved = {
        *(e for e in entries if not hasattr(e, "buckets") and not hasattr(e, "rate_kbps")),
        meter(7, 20_000, 6_000),
        group(33, [bucket, other]),
    }
    third = reconcile_once(lab, moved, tmp_path)
    assert (third["added"], third["replaced"], third["deleted"]) == (2, 2, 0), third["log"][-4000:]
    groups = lab.ovs.ofctl("dump-groups", BRIDGE)
    assert groups.count("bucket=") == 2, groups
    assert reconcile_once(lab, set(), tmp_path)["deleted"] == 4
    assert "meter=7" not in lab.ovs.ofctl("dump-meters", BRIDGE)
    assert "group_id=33" not in lab.ovs.ofctl("dump-groups", BRIDGE)


def test_an_older_netplugins_bridge_and_groups_are_upgraded_in_place(
    lab: CtLab, tmp_path: Path
) -> None:
    """A bridge an older netplugin left (OpenFlow 1.3 only, select groups with OVS's default
    selection, which leaves UDP ports out): the agent's ensure_bridge allows 1.5 again, and
    the first reconcile modifies the group in place (dp_hash) and changes no flow."""
    from datapath.flows import group, meter

    nat = ("nat", "dst", "10.77.0.2", None, 53, None, ())
    bucket = [("set_field", "eth_dst", lab.k2.mac), ("ct", True, 5, 20, [nat])]
    entries = {
        meter(8, 10_000, 3_000),
        group(34, [bucket]),
        flow(0, 201, [("meter", 8), ("goto", 10)], in_port=lab.k1.ofport, eth_type=0x0800),
        flow(10, 201, [("group", 34)], eth_type=0x0800, ip_proto=17, ipv4_dst="10.77.0.100"),
    }
    assert reconcile_once(lab, entries, tmp_path)["errors"] == []

    def groups15() -> str:
        target = f"unix:{lab.ovs.workdir / (BRIDGE + '.mgmt')}"
        return run("ovs-ofctl", "-O", "OpenFlow15", "dump-groups", target)

    assert "group_id=34,type=select,selection_method=dp_hash" in groups15()
    # What the older netplugin left: its group as OpenFlow 1.3 writes it, a 1.3-only bridge.
    (line,) = [g for g in lab.ovs.ofctl("dump-groups", BRIDGE).splitlines() if "group_id=34" in g]
    lab.ovs.ofctl("mod-group", BRIDGE, line.strip())
    assert "selection_method" not in groups15()
    run("ovs-vsctl", f"--db={lab.ovs.db_target}", "set", "bridge", BRIDGE, "protocols=OpenFlow13")
    flows_before = sorted(f.split(" actions=")[1] for f in lab.ovs.dump_flows(BRIDGE))
    with Ovs(lab.ovs.db_sock) as db:
        assert db.ensure_bridge(BRIDGE, controller=f"tcp:127.0.0.1:{lab.port}") is False
    upgraded = reconcile_once(lab, entries, tmp_path)
    changed = (upgraded["added"], upgraded["replaced"], upgraded["deleted"])
    assert (upgraded["found"], *changed) == (4, 1, 1, 0), upgraded["log"][-4000:]
    assert "group_id=34,type=select,selection_method=dp_hash" in groups15()
    assert sorted(f.split(" actions=")[1] for f in lab.ovs.dump_flows(BRIDGE)) == flows_before
    assert reconcile_once(lab, set(), tmp_path)["deleted"] == 4
