"""Service LBs through a real userspace OVS, with real TCP connections and UDP flows between
network namespaces: the flows netplugin compiles (datapath.services), programmed by
`python -m datapath.ofrunner` on a private OVS.

c1, c2 and c3 are clients, p1 and p2 are providers of VIP 10.71.0.100:80 -> 8080 and
10.71.0.100:53 -> 5353/udp (each a TCP and a UDP server that answer their own name). Each
client's connections and UDP flows to the VIP spread over both, replies come from the VIP,
a provider leaving gets no new connections while the others keep theirs, a provider
reaches its own VIP (hairpin: it may be picked for itself), and a policy that denies the
provider's port blocks it through the VIP too. TX checksum offload is off in the namespaces,
as conntrack on this datapath needs (shared/spec/DATAPATH-FEATURES.md §1).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from datapath.local import gateway_mac
from datapath.ovs import Ovs
from datapath.pipeline import DesiredState, EndpointState, NetworkState
from datapath.policy import GroupState, RuleState
from datapath.services import ProviderState, ServicePortState, ServiceState
from testbed.ovs import ControllerProcess, OvsInstance, run
from testbed.require import require_ovs
from testbed.wait import wait_for

BRIDGE = "br-svc"
NET = "net-s"
GW = ("gw-s", gateway_mac(300), "10.71.0.254")  # the MAC the flows give its gateway
VIP = "10.71.0.100"

SERVER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8080))
s.listen(512)
while True:
    c, _ = s.accept()
    c.sendall(sys.argv[1].encode())
    c.close()
"""

UDP_SERVER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 5353))
while True:
    _, peer = s.recvfrom(64)
    s.sendto(sys.argv[1].encode(), peer)
"""

UDP_CLIENT = """
import socket, sys, collections
got = collections.Counter()
target = (sys.argv[1], int(sys.argv[3]))
for i in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # a new flow: a fresh source port
    s.settimeout(2)
    try:
        s.sendto(b"?", target)
        data, peer = s.recvfrom(64)
        got[data.decode() if peer == target else "elsewhere"] += 1
    except OSError:
        got["error"] += 1
    s.close()
print(" ".join(f"{k}={v}" for k, v in sorted(got.items())))
"""

CLIENT = """
import socket, sys, collections
got = collections.Counter()
for i in range(int(sys.argv[2])):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[3])), timeout=2)
        got[c.recv(64).decode() or "empty"] += 1
        c.close()
    except OSError as e:
        got["error"] += 1
print(" ".join(f"{k}={v}" for k, v in sorted(got.items())))
"""


@dataclass
class Box:
    """A network namespace with one veth (eth0) whose peer is a bridge port."""

    name: str
    netns: str
    mac: str
    ip: str
    ofport: int = 0
    group: str | None = None

    def endpoint(self) -> EndpointState:
        return EndpointState(
            self.name, NET, self.mac, self.ip, group=self.group, ofport=self.ofport
        )

    def provider(self) -> ProviderState:
        return ProviderState(self.ip, self.mac)

    def connect(self, n: int, target: str = VIP, port: int = 80, udp: bool = False) -> Counter[str]:
        """n TCP connections (or UDP flows, each from a new socket) to target:port, one after
        the other: who answered how often."""
        argv = [target, str(n), str(port)]
        proc = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.netns,
                "python3",
                "-c",
                UDP_CLIENT if udp else CLIENT,
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=60 + 3 * n,
        )
        assert proc.returncode == 0, proc.stderr
        return Counter({k: int(v) for k, v in (kv.split("=") for kv in proc.stdout.split())})


@dataclass
class Lab:
    ovs: OvsInstance
    controller: ControllerProcess
    boxes: dict[str, Box]
    gateway_ofport: int

    def state(
        self, providers: tuple[str, ...], groups: list[GroupState] | None = None
    ) -> DesiredState:
        service = ServiceState(
            "t:web",
            NET,
            VIP,
            1,
            (ServicePortState(6, 80, 8080), ServicePortState(17, 53, 5353)),
            tuple(sorted((self.boxes[p].provider() for p in providers), key=lambda p: p.ip)),
        )
        return DesiredState(
            networks=[NetworkState(NET, 300, gateway=GW[2], gateway_ofport=self.gateway_ofport)],
            endpoints=[b.endpoint() for b in self.boxes.values()],
            services=[service],
            groups=groups or [],
        )

    def apply(self, state: DesiredState) -> None:
        generation = self.controller.wait_status(lambda st: True)["generation"]
        self.controller.write_state(state.to_dict())
        self.controller.reload()
        self.controller.wait_status(
            lambda st: st["last"] and st["last"]["generation"] > generation and not st["last_error"]
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_ovs()
    tag = f"np-sv-{os.getpid()}"
    workdir: Path = tmp_path_factory.mktemp("svc")
    ovs = OvsInstance(tag, workdir)
    boxes = {
        n: Box(n, f"{tag}-{n}", f"02:00:00:00:0b:{i:02x}", f"10.71.0.{i}")
        for i, n in ((1, "c1"), (2, "p1"), (3, "p2"), (4, "c2"), (5, "c3"))
    }
    controller: ControllerProcess | None = None
    servers: list[subprocess.Popen[bytes]] = []
    try:
        ovs.start()
        with Ovs(ovs.db_sock) as db:
            port = _free_port()
            db.ensure_bridge(BRIDGE, controller=f"tcp:127.0.0.1:{port}")
            gateway_ofport = db.add_port(BRIDGE, GW[0], type="internal", mac=GW[1])
            for b in boxes.values():
                host_end = f"np-{b.name}-{os.getpid() % 10000}"
                run("ip", "netns", "add", b.netns)
                run("ip", "-n", b.netns, "link", "set", "lo", "up")
                run(
                    "ip", "link", "add", host_end, "netns", ovs.netns, "type", "veth",
                    "peer", "name", "eth0", "netns", b.netns,
                )  # fmt: skip
                run("ip", "-n", b.netns, "link", "set", "eth0", "address", b.mac, "up")
                run("ip", "-n", b.netns, "addr", "add", f"{b.ip}/24", "dev", "eth0")
                run("ip", "netns", "exec", b.netns, "ethtool", "-K", "eth0", "tx", "off")
                run("ip", "-n", ovs.netns, "link", "set", host_end, "up")
                b.ofport = db.add_port(BRIDGE, host_end)
        for name in ("p1", "p2"):
            for server in (SERVER, UDP_SERVER):
                servers.append(
                    subprocess.Popen(
                        ["ip", "netns", "exec", boxes[name].netns, "python3", "-c", server, name],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        controller = ControllerProcess(ovs, port, name="svc")
        lab = Lab(ovs, controller, boxes, gateway_ofport)
        controller.write_state(lab.state(("p1", "p2")).to_dict())
        controller.start()
        controller.wait_status(lambda st: st["reconcile_count"] >= 1 and not st["last_error"])
        for name in ("p1", "p2"):
            wait_for(
                lambda name=name: (
                    boxes["c1"].connect(1, boxes[name].ip, 8080)[name] == 1
                    and boxes["c1"].connect(1, boxes[name].ip, 5353, udp=True)[name] == 1
                ),
                20,
                f"{name}'s TCP and UDP servers answer directly",
            )
        yield lab
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
        if controller is not None:
            controller.stop()
        for b in boxes.values():
            run("ip", "netns", "del", b.netns, check=False)
        ovs.stop()


@pytest.fixture(autouse=True)
def both_providers(lab: Lab) -> Lab:
    lab.apply(lab.state(("p1", "p2")))
    return lab


def test_connections_to_the_vip_spread_over_the_providers(lab: Lab) -> None:
    got = lab.boxes["c1"].connect(200)
    assert got["error"] == 0, got
    assert got["p1"] + got["p2"] == 200 and min(got["p1"], got["p2"]) >= 60, got


@pytest.mark.parametrize("udp", [False, True], ids=["tcp", "udp"])
def test_each_clients_flows_spread_over_the_providers(lab: Lab, udp: bool) -> None:
    """Per client, not only overall: a select group hashing without the UDP ports would give
    each client's UDP flows one provider (the default of OVS's userspace datapath)."""
    port = 53 if udp else 80
    for client in ("c1", "c2", "c3"):
        got = lab.boxes[client].connect(100, port=port, udp=udp)
        assert got["error"] == got["elsewhere"] == 0, (client, got)
        assert got["p1"] + got["p2"] == 100 and min(got["p1"], got["p2"]) >= 30, (client, got)


def test_a_provider_that_leaves_gets_no_new_connections(lab: Lab) -> None:
    lab.apply(lab.state(("p1",)))
    got = lab.boxes["c1"].connect(40)
    assert got == Counter({"p1": 40}), got
    lab.apply(lab.state(("p1", "p2")))
    got = lab.boxes["c1"].connect(60)
    assert got["p2"] > 0 and got["error"] == 0, got  # and it joins again


def test_a_provider_reaches_its_own_vip(lab: Lab) -> None:
    got = lab.boxes["p1"].connect(40)  # about half of them picked p1 itself: hairpin
    assert got["error"] == 0 and got["p1"] > 0 and got["p2"] > 0, got
    lab.apply(lab.state(("p1",)))
    assert lab.boxes["p1"].connect(10) == Counter({"p1": 10})  # only itself


def test_a_policy_denying_the_providers_port_blocks_it_through_the_vip(lab: Lab) -> None:
    deny = RuleState("in", 10, "deny", protocol=6, port=8080)
    groups = [GroupState("t:db", NET, 7, (deny,))]
    p2 = lab.boxes["p2"]
    lab.boxes["p2"] = replace(p2, group="t:db")
    try:
        lab.apply(lab.state(("p2",), groups))
        assert lab.boxes["c1"].connect(3) == Counter({"error": 3})
        assert lab.boxes["c1"].connect(2, p2.ip, 8080) == Counter({"error": 2})
        lab.apply(lab.state(("p1", "p2"), groups))
        got = lab.boxes["c1"].connect(20)
        assert got["p1"] + got["error"] == 20 and got["p2"] == 0, got
    finally:
        lab.boxes["p2"] = p2
