"""The OpenFlow engine against a real userspace OVS, with real packets.

Layout: a private OVS (ovsdb-server + ovs-vswitchd) in its own network namespace, its
bridge programmed by `python -m datapath.ofrunner` running in that same namespace (so the
bridge's tcp:127.0.0.1 controller target reaches it), and three "containers": network
namespaces whose eth0 is a veth peered into the bridge. c1 and c2 are on network A (with
the host-side gateway port gw-a), c3 is on network B but, on purpose, in the same subnet.
Only ICMP is used, so the userspace datapath's TCP checksum trap does not apply.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from datapath.flood import flood_group_id
from datapath.flows import Entry, Flow, diff
from datapath.local import gateway_mac
from datapath.ovs import (
    CONTROLLER_BURST_LIMIT,
    CONTROLLER_INACTIVITY_PROBE_MS,
    CONTROLLER_RATE_LIMIT,
    Ovs,
)
from datapath.pipeline import DesiredState, EndpointState, NetworkState, compile_flows
from testbed.ovs import ControllerProcess, OvsInstance, run
from testbed.require import require_ovs
from testbed.wait import wait_for

BRIDGE = "br-np"
SUBNET_PREFIX = 24
GW_A = ("gw-a", gateway_mac(100), "10.1.0.254")  # the MAC the flows give net-a's gateway


@dataclass
class Container:
    """A network namespace with one veth (eth0) whose peer is a bridge port."""

    name: str
    netns: str
    port_name: str
    mac: str
    ip: str
    network: str
    ofport: int = 0

    def endpoint(self) -> EndpointState:
        return EndpointState(self.name, self.network, self.mac, self.ip, ofport=self.ofport)


@dataclass
class Lab:
    ovs: OvsInstance
    db: Ovs
    controller: ControllerProcess
    containers: dict[str, Container]
    gateway_ofport: int
    controller_target: str

    def state(self, *names: str) -> DesiredState:
        return DesiredState(
            networks=[
                NetworkState("net-a", 100, gateway=GW_A[2], gateway_ofport=self.gateway_ofport),
                NetworkState("net-b", 200),
            ],
            endpoints=[self.containers[n].endpoint() for n in names],
        )

    def apply(self, *names: str) -> dict[str, Any]:
        """Make the state with these endpoints the controller's desired state, and wait until
        it has reconciled it; returns that status."""
        generation = self.controller.wait_status(lambda st: True)["generation"]
        self.controller.write_state(self.state(*names).to_dict())
        self.controller.reload()
        return self.controller.wait_status(
            lambda st: st["last"] and st["last"]["generation"] > generation
        )

    def ping(self, src: str, dst_ip: str, count: int = 2, source: str | None = None) -> bool:
        """True if every echo request of src to dst_ip was answered."""
        cmd = ["ping", "-n", "-q", "-c", str(count), "-i", "0.2", "-W", "1", dst_ip]
        if source:
            cmd[1:1] = ["-I", source]
        proc = subprocess.run(
            ["ip", "netns", "exec", self.containers[src].netns, *cmd],
            capture_output=True,
            timeout=30,
        )
        return proc.returncode == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _add_container(ovs: OvsInstance, c: Container) -> None:
    run("ip", "netns", "add", c.netns)
    run("ip", "-n", c.netns, "link", "set", "lo", "up")
    run(
        "ip", "link", "add", c.port_name, "netns", ovs.netns, "type", "veth",
        "peer", "name", "eth0", "netns", c.netns,
    )  # fmt: skip
    run("ip", "-n", c.netns, "link", "set", "eth0", "address", c.mac, "up")
    run("ip", "-n", c.netns, "addr", "add", f"{c.ip}/{SUBNET_PREFIX}", "dev", "eth0")
    run("ip", "-n", ovs.netns, "link", "set", c.port_name, "up")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_ovs()
    tag = f"np-of-{os.getpid()}"
    workdir: Path = tmp_path_factory.mktemp("ofapp")
    ovs = OvsInstance(tag, workdir)
    containers = {
        "c1": Container("c1", f"{tag}-c1", "np-c1", "02:00:00:00:00:11", "10.1.0.11", "net-a"),
        "c2": Container("c2", f"{tag}-c2", "np-c2", "02:00:00:00:00:12", "10.1.0.12", "net-a"),
        "c3": Container("c3", f"{tag}-c3", "np-c3", "02:00:00:00:00:13", "10.1.0.13", "net-b"),
    }
    controller: ControllerProcess | None = None
    db: Ovs | None = None
    try:
        ovs.start()
        db = Ovs(ovs.db_sock)
        port = _free_port()
        target = f"tcp:127.0.0.1:{port}"
        assert db.ensure_bridge(BRIDGE, controller=target) is True
        gw_name, gw_mac, gw_ip = GW_A
        gateway_ofport = db.add_port(BRIDGE, gw_name, type="internal", mac=gw_mac)
        ovs.ns_exec("ip", "addr", "add", f"{gw_ip}/{SUBNET_PREFIX}", "dev", gw_name)
        ovs.ns_exec("ip", "link", "set", gw_name, "up")
        for c in containers.values():
            _add_container(ovs, c)
            c.ofport = db.add_port(BRIDGE, c.port_name, external_ids={"endpoint": c.name})
        controller = ControllerProcess(ovs, port)
        lab = Lab(ovs, db, controller, containers, gateway_ofport, target)
        controller.write_state(lab.state("c1", "c2", "c3").to_dict())
        controller.start()
        controller.wait_status(lambda st: st["reconcile_count"] >= 1 and not st["last_error"])
        yield lab
    finally:
        if controller is not None:
            controller.stop()
        if db is not None:
            db.close()
        for c in containers.values():
            run("ip", "netns", "del", c.netns, check=False)
        ovs.stop()


ALL = ("c1", "c2", "c3")  # the endpoints of the desired state every test starts from


@pytest.fixture(autouse=True)
def as_set_up(lab: Lab) -> Lab:
    """Every test starts from the lab as the module set it up: vswitchd and the controller
    running, the gateway's address in place, the desired state with all three endpoints.
    (A test that changes one of these restores it in its own ``finally``; this only keeps
    a failure there from spreading to the next test.)"""
    if not lab.ovs.vswitchd_running():
        lab.ovs.start_vswitchd()
    if not lab.controller.running():
        lab.controller.stop()
        lab.controller.start()
    restore_gateway(lab)
    lab.apply(*ALL)
    return lab


def restore_gateway(lab: Lab) -> None:
    """Put back the gateway's address (the agent's job; a vswitchd restart loses it)."""
    gw_name, _, gw_ip = GW_A
    lab.ovs.ns_exec("ip", "addr", "replace", f"{gw_ip}/{SUBNET_PREFIX}", "dev", gw_name)
    lab.ovs.ns_exec("ip", "link", "set", gw_name, "up")


_COUNTERS = re.compile(r"\b(duration|n_packets|n_bytes|idle_age|hard_age)=[^,\s]+,?\s*")


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in {text!r}"
    return float(found.group(1))


def flow_table(ovs: OvsInstance) -> dict[str, tuple[float, int]]:
    """dump-flows as {flow without counters: (duration seconds, n_packets)}."""
    return {
        _COUNTERS.sub("", line): (
            _number(r"duration=([\d.]+)s", line),
            int(_number(r"n_packets=(\d+)", line)),
        )
        for line in ovs.dump_flows(BRIDGE)
    }


def n_flows(entries: set[Entry]) -> int:
    """How many of compiled entries are flows (the rest: each segment's flood group)."""
    return sum(isinstance(e, Flow) for e in entries)


def test_same_network_talks_other_network_and_spoofers_cannot(lab: Lab) -> None:
    assert lab.ping("c1", "10.1.0.12")
    assert lab.ping("c2", "10.1.0.11")
    assert lab.ping("c1", GW_A[2])
    assert not lab.ping("c1", "10.1.0.13")
    assert not lab.ping("c3", "10.1.0.11")
    assert not lab.ping("c3", GW_A[2])
    # c1 borrowing an address that is not its own is dropped at the bridge.
    c1 = lab.containers["c1"]
    run("ip", "-n", c1.netns, "addr", "add", "10.1.0.50/32", "dev", "eth0")
    try:
        assert not lab.ping("c1", "10.1.0.12", source="10.1.0.50")
    finally:
        run("ip", "-n", c1.netns, "addr", "del", "10.1.0.50/32", "dev", "eth0")


def echo_requests_received(c: Container) -> int:
    """How many ICMP echo requests ``c``'s kernel has received (its netns's /proc/net/snmp)."""
    snmp = run("ip", "netns", "exec", c.netns, "cat", "/proc/net/snmp").splitlines()
    names, values = (line.split() for line in snmp if line.startswith("Icmp:"))
    return int(values[names.index("InEchos")])


def test_a_broadcast_reaches_its_network_through_the_flood_group_and_no_other(lab: Lab) -> None:
    """c1's broadcast ping goes out through net A's flood group, whose buckets are c1 and c2:
    c2 receives it, c3 of net B hears nothing. (c1's own kernel counts its broadcasts too,
    looped back before the wire, so it tells nothing about OVS skipping its bucket. No
    reply is expected: conntrack finds an echo reply to a broadcast invalid, and net A is
    tracked.)"""
    groups = lab.ovs.ofctl("dump-groups", BRIDGE)
    c1, c2, c3 = (lab.containers[n] for n in ("c1", "c2", "c3"))
    net_a = f"group_id={flood_group_id(100)},type=all,"
    (line,) = [g for g in groups.splitlines() if net_a in g]
    assert f"actions=output:{c1.ofport}" in line and f"actions=output:{c2.ofport}" in line
    assert f"output:{c3.ofport}" not in line
    sysctl = ("sysctl", "-qw", "net.ipv4.icmp_echo_ignore_broadcasts=0")
    for c in (c2, c3):
        run("ip", "netns", "exec", c.netns, *sysctl)
    before = {c.name: echo_requests_received(c) for c in (c2, c3)}
    subprocess.run(
        ["ip", "netns", "exec", c1.netns, "ping", "-n", "-b", "-c", "3", "-i", "0.3", "-W", "1",
         "10.1.0.255"],
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    got = {c.name: echo_requests_received(c) - before[c.name] for c in (c2, c3)}
    assert got == {"c2": 3, "c3": 0}


def test_bridge_and_ports_are_never_recreated(lab: Lab) -> None:
    def uuids() -> tuple[str, str]:
        return (
            lab.ovs.vsctl("get", "Bridge", BRIDGE, "controller"),
            lab.ovs.vsctl("get", "Interface", "np-c1", "_uuid"),
        )

    before, connection = uuids(), lab.controller.status()["connection"]
    assert lab.db.ensure_bridge(BRIDGE, controller=lab.controller_target) is False
    assert lab.db.ensure_bridge(BRIDGE) is False  # controller=None: leave it alone
    c1 = lab.containers["c1"]
    assert lab.db.add_port(BRIDGE, c1.port_name, external_ids={"endpoint": c1.name}) == c1.ofport
    # A negative check: give a wrongly applied controller change the time to show as a
    # reconnect in the status (refreshed every 0.5 s) before asserting there was none.
    time.sleep(1)
    assert uuids() == before
    assert lab.controller.status()["connection"] == connection  # no reconnect

    assert lab.db.del_port(BRIDGE, "np-missing") is False
    with pytest.raises(RuntimeError, match="np-missing does not exist"):
        lab.db.del_port(BRIDGE, "np-missing", if_exists=False)
    try:
        ofport = lab.db.add_port(BRIDGE, "np-tmp", type="internal", external_ids={"k": "v"})
        info = lab.db.list_ports(BRIDGE)["np-tmp"]
        assert (info.ofport, info.external_ids) == (ofport, {"k": "v"})
        assert lab.db.del_port(BRIDGE, "np-tmp") is True
        assert "np-tmp" not in lab.db.list_ports(BRIDGE)
    finally:
        lab.db.del_port(BRIDGE, "np-tmp")  # if_exists: a no-op unless an assertion failed
    names = ["np-tmp1", "np-tmp2", "np-tmp3"]
    try:  # the teardown's batch: one transaction, the missing ones skipped
        for n in names:
            lab.db.add_port(BRIDGE, n, type="internal")
        assert lab.db.del_ports(BRIDGE, ["np-tmp1", "np-missing", "np-tmp3"]) == 2
        assert {n for n in names if n in lab.db.list_ports(BRIDGE)} == {"np-tmp2"}
        assert lab.db.del_ports(BRIDGE, []) == 0
    finally:
        lab.db.del_ports(BRIDGE, names)
    from datapath.portpool import pool_names

    pairs = [pool_names(f"0ddba11{i:04x}") for i in range(3)]
    ns = lab.ovs.netns
    try:  # the pool's batch: Linux devices added in one transaction, ofports read back
        for host, container in pairs:
            run("ip", "-n", ns, "link", "add", host, "type", "veth", "peer", "name", container)
            run("ip", "-n", ns, "link", "set", host, "up")
        ofports = lab.db.add_ports(BRIDGE, [h for h, _ in pairs], {"netplugin-pool": "1"})
        assert sorted(ofports) == sorted(h for h, _ in pairs) and all(ofports.values())
        listed = lab.db.list_ports(BRIDGE)
        assert all(listed[h].external_ids == {"netplugin-pool": "1"} for h, _ in pairs)
        with pytest.raises(RuntimeError, match="np-nodev"):  # one fails: none is left
            lab.db.add_ports(BRIDGE, ["np-nodev", "np-nodev2"], {})
        assert not {"np-nodev", "np-nodev2"} & set(lab.db.list_ports(BRIDGE))
    finally:
        lab.db.del_ports(BRIDGE, [h for h, _ in pairs])
        for host, _ in pairs:
            run("ip", "-n", ns, "link", "del", host, check=False)
    with pytest.raises(RuntimeError, match="np-nodev: could not open network device"):
        lab.db.add_port(BRIDGE, "np-nodev", timeout=5)
    assert "np-nodev" not in lab.db.list_ports(BRIDGE)  # a failed add leaves nothing behind


def answers(log: Path) -> int:
    """How many echo replies a ping writing to ``log`` has had so far."""
    return log.read_text().count("bytes from")


def test_controller_crash_and_restart_leave_flows_and_traffic_alone(
    lab: Lab, tmp_path: Path
) -> None:
    before = flow_table(lab.ovs)
    entries = compile_flows(lab.state("c1", "c2", "c3"))
    assert len(before) == n_flows(entries)
    log = tmp_path / "ping.out"
    with open(log, "w") as out:
        pinger = subprocess.Popen(
            ["ip", "netns", "exec", lab.containers["c1"].netns,
             "ping", "-n", "-i", "0.1", "10.1.0.12"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: answers(log) > 0, 10, "c1's first ping answered by c2")
        killed_at = time.monotonic()
        lab.controller.kill()
        try:
            time.sleep(1.0)  # downtime on top of the restart itself: traffic must not care
        finally:
            lab.controller.start()
        st = lab.controller.wait_status(lambda st: st["reconcile_count"] >= 1)
        downtime = time.monotonic() - killed_at
        seen = answers(log)
        wait_for(lambda: answers(log) > seen, 10, "c1's pings answered after the restart")
    finally:
        pinger.send_signal(signal.SIGINT)
        pinger.wait(10)
    out = log.read_text()
    sent = _number(r"(\d+) packets transmitted", out)
    received = _number(r"(\d+) received", out)
    assert sent >= 10 * downtime * 0.8
    assert sent - received <= max(1, int(downtime)), out

    last = st["last"]
    # The flood groups read back equal to what was written: nothing rewritten either.
    assert (last["found"], last["added"], last["deleted"], last["replaced"]) == (
        len(entries),
        0,
        0,
        0,
    )
    after = flow_table(lab.ovs)
    assert after.keys() == before.keys()
    for key, (duration, packets) in before.items():
        # Durations kept growing: no flow was deleted and re-added behind our back.
        assert after[key][0] >= duration + downtime - 0.5, key
        assert after[key][1] >= packets, key
    assert lab.ping("c1", "10.1.0.12")


def test_a_controller_silent_for_12s_keeps_its_connection(lab: Lab) -> None:
    """A controller may say nothing to the switch for a while: os-ken's receive loop answers
    the switch's echo only after parsing what came before it, and a read of thousands of
    flows on a loaded host takes seconds. ovs-vswitchd's default probe (5 s, then 5 s more)
    cut such a controller, and every re-read after the reconnect was cut again (seen at
    ~700 endpoints in a TCG guest). The bridge's controller row sets a longer one."""
    connection = lab.controller.status()["connection"]
    # A bridge made by an older netplugin has OVS's default; the agent's start sets ours on
    # the row it has, and the connection stays.
    row = lab.ovs.vsctl("--bare", "--columns=_uuid", "list", "Controller").strip()
    lab.ovs.vsctl("clear", "Controller", row, "inactivity_probe")
    assert lab.db.ensure_bridge(BRIDGE, controller=lab.controller_target) is False
    lab.ovs.vsctl("clear", "Controller", row, "controller_rate_limit", "controller_burst_limit")
    assert lab.db.ensure_bridge(BRIDGE, controller=lab.controller_target) is False
    columns = "_uuid,inactivity_probe,controller_rate_limit,controller_burst_limit"
    probe = lab.ovs.vsctl("--bare", f"--columns={columns}", "list", "Controller")
    # The packets sent to the controller (IPv6 solicitations) are limited too.
    assert probe.split() == [
        row,
        str(CONTROLLER_INACTIVITY_PROBE_MS),
        str(CONTROLLER_RATE_LIMIT),
        str(CONTROLLER_BURST_LIMIT),
    ]
    lab.apply(*ALL)
    assert lab.controller.status()["connection"] == connection
    vswitchd_log = lab.ovs.workdir / "ovs-vswitchd.log"
    logged = vswitchd_log.stat().st_size
    lab.controller.freeze(12)
    assert lab.ping("c1", "10.1.0.12")  # fail_mode secure: the flows never cared
    lab.apply(*ALL)  # the controller answers again, on the connection it had
    assert lab.controller.status()["connection"] == connection
    with open(vswitchd_log, "rb") as f:
        f.seek(logged)
        assert b"inactivity probe" not in f.read()


def test_removed_endpoint_deletes_exactly_its_flows(lab: Lab) -> None:
    old = compile_flows(lab.state("c1", "c2", "c3"))
    new = compile_flows(lab.state("c1", "c3"))
    expected = diff(new, old)
    try:
        last = lab.apply("c1", "c3")["last"]
        assert last["deleted"] == len(expected.to_delete) > 0
        # Net A's flood group is modified in place; nothing else is touched.
        assert last["added"] == last["replaced"] == len(expected.to_add) == 1
        assert last["errors"] == []

        c2_port = lab.containers["c2"].ofport
        flows = lab.ovs.dump_flows(BRIDGE)
        assert len(flows) == n_flows(new)
        assert not [f for f in flows if f"in_port={c2_port}," in f or f"output:{c2_port}" in f]
        assert f"output:{c2_port}" not in lab.ovs.ofctl("dump-groups", BRIDGE)
        assert not lab.ping("c1", "10.1.0.12")
        assert lab.ping("c1", GW_A[2])
    finally:
        lab.apply(*ALL)


def test_a_change_is_a_delta_and_resync_reads_the_switch_back(lab: Lab) -> None:
    """The controller sends a change's flow-mods without reading the switch: a flow deleted
    behind its back stays deleted through a delta, and comes back with a resync."""
    c1, c2 = lab.containers["c1"], lab.containers["c2"]
    every, fewer = compile_flows(lab.state(*ALL)), compile_flows(lab.state("c1", "c3"))
    try:
        last = lab.apply("c1", "c3")["last"]
        expected = diff(fewer, every)
        assert not last["full"] and last["errors"] == []
        assert (last["added"], last["replaced"], last["deleted"]) == (
            len(expected.to_add),
            len(expected.to_add),
            len(expected.to_delete),
        )
        assert len(lab.ovs.dump_flows(BRIDGE)) == n_flows(fewer)
        assert not lab.ping("c1", c2.ip) and lab.ping("c1", GW_A[2])

        # c1's classify flow goes behind the controller's back; c2 comes back as a delta.
        lab.ovs.ofctl("del-flows", BRIDGE, "--strict", f"table=0,priority=100,in_port={c1.ofport}")
        last = lab.apply(*ALL)["last"]
        assert not last["full"] and last["found"] == len(fewer)  # its model, not a read
        assert len(lab.ovs.dump_flows(BRIDGE)) == n_flows(every) - 1
        assert not lab.ping("c1", c2.ip)

        generation = lab.controller.status()["generation"]
        lab.controller.resync()
        st = lab.controller.wait_status(
            lambda st: st["last"] and st["last"]["generation"] > generation
        )
        assert st["last"]["full"] and st["last"]["found"] == len(every) - 1
        assert (st["last"]["added"], st["last"]["deleted"]) == (1, 0)
        assert len(lab.ovs.dump_flows(BRIDGE)) == n_flows(every)
        assert lab.ping("c1", c2.ip)
    finally:
        lab.controller.resync()
        lab.apply(*ALL)


def test_switch_restarts_are_resynced_without_leaking_threads(lab: Lab) -> None:
    entries = compile_flows(lab.state("c1", "c3"))
    desired = len(entries)
    try:
        lab.apply("c1", "c3")
        first = lab.controller.status()
        ports = lab.db.list_ports(BRIDGE)
        for _ in range(3):
            connection = lab.controller.status()["connection"]
            lab.ovs.stop_vswitchd()
            lab.ovs.start_vswitchd()
            st = lab.controller.wait_status(
                lambda st, c=connection: (
                    st["connected"] and st["last"]["connection"] > c and not st["last_error"]
                )
            )
            # The userspace datapath keeps no flows across a vswitchd restart: all come back.
            assert (st["last"]["found"], st["last"]["added"]) == (0, desired)
        assert lab.db.list_ports(BRIDGE) == ports
        assert len(lab.ovs.dump_flows(BRIDGE)) == n_flows(entries)
        # On the userspace datapath an internal port is a tap that vswitchd recreates, so
        # its address is gone: the agent has to put it back.
        restore_gateway(lab)
        assert lab.ping("c1", GW_A[2])
        assert not lab.ping("c1", "10.1.0.13")
        # Threads of the dead connections are gone (the status is refreshed every 0.5 s).
        wait_for(
            lambda: lab.controller.status()["threads"] <= first["threads"],
            5,
            f"the controller back to its {first['threads']} threads",
            last=lambda: lab.controller.status()["threads"],
        )
        assert lab.controller.status()["threads"] <= first["threads"]
    finally:
        if not lab.ovs.vswitchd_running():
            lab.ovs.start_vswitchd()
        restore_gateway(lab)
        lab.apply(*ALL)
