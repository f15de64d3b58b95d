"""Designs measured for issue 9 beside the product, on two private userspace OVS 3.1 in
network namespaces (no docker, no agent): the same-host path with userspace TSO, with and
without a conntrack table, and cross-host TCP through a kernel VXLAN device attached to
OVS as a port (encapsulation by the kernel) against OVS's userspace tunneling."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from testbed.ovs import OvsInstance, run

CT_FLOWS = (
    "table=0,priority=10,ip,actions=ct(table=1,zone=5)",
    "table=0,priority=1,actions=normal",
    "table=1,priority=10,ct_state=+trk+new,ip,actions=ct(commit,zone=5),normal",
    "table=1,priority=10,ct_state=+trk+est,ip,actions=normal",
    "table=1,priority=20,ct_state=+trk+inv,ip,actions=drop",
)


def _ns(ns: str, *cmd: str, check: bool = True) -> str:
    return run("ip", "netns", "exec", ns, *cmd, check=check)


class TwoHosts:
    """Two namespaces with their own OVS (userspace TSO on), a veth underlay between them,
    and a container namespace on each (c1 on h1; c2 on h2, or on h1 for the same-host case)."""

    def __init__(self, workdir: Path, tag: str) -> None:
        self.tag = tag
        self.hosts = [
            OvsInstance(f"{tag}h{i}", workdir / f"{tag}h{i}", userspace_tso=True) for i in (1, 2)
        ]
        self.containers: list[str] = []

    def start(self, same_host: bool, mode: str, ct: bool) -> TwoHosts:
        t = self.tag
        for o in self.hosts:
            shutil.rmtree(o.workdir, ignore_errors=True)
            o.workdir.mkdir(parents=True)
            o.start()
            o.vsctl("add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev",
                    "fail_mode=secure")  # fmt: skip
        h1, h2 = self.hosts
        run("ip", "link", "add", f"{t}u1", "netns", h1.netns, "type", "veth", "peer", "name",
            f"{t}u2", "netns", h2.netns)  # fmt: skip
        for i, o in enumerate(self.hosts, 1):
            _ns(o.netns, "ip", "addr", "add", f"192.168.79.{i}/24", "dev", f"{t}u{i}")
            _ns(o.netns, "ip", "link", "set", f"{t}u{i}", "up")
        mtu = 1500 if same_host else 1450
        self._container(h1, f"{t}c1", "10.209.0.1", mtu)
        self._container(
            h1 if same_host else h2, f"{t}c2", "10.209.0.2", mtu, offloads=mode != "userspace"
        )
        for i, o in enumerate(self.hosts, 1):
            peer = f"192.168.79.{3 - i}"
            if not same_host and mode == "kernel":
                local = f"192.168.79.{i}"
                _ns(o.netns, "ip", "link", "add", "vx100", "type", "vxlan", "id", "100",
                    "dstport", "4789", "local", local, "remote", peer, "nolearning")  # fmt: skip
                _ns(o.netns, "ip", "link", "set", "vx100", "up")
                o.vsctl("add-port", "br0", "vx100")
            elif not same_host:
                mac = _ns(o.netns, "cat", f"/sys/class/net/{t}u{i}/address").strip()
                o.vsctl("add-br", "brphy", "--", "set", "bridge", "brphy",
                        "datapath_type=netdev", f"other_config:hwaddr={mac}")  # fmt: skip
                o.vsctl("add-port", "brphy", f"{t}u{i}")
                _ns(o.netns, "ip", "addr", "flush", "dev", f"{t}u{i}")
                _ns(o.netns, "ip", "addr", "add", f"192.168.79.{i}/24", "dev", "brphy")
                _ns(o.netns, "ip", "link", "set", "brphy", "up")
                o.vsctl("add-port", "br0", "vx100", "--", "set", "interface", "vx100",
                        "type=vxlan", f"options:remote_ip={peer}", "options:key=100")  # fmt: skip
            for flow in CT_FLOWS if ct else ("priority=1,actions=normal",):
                o.ofctl("add-flow", "br0", flow)
        if mode == "userspace":  # the sender too: OVS 3.1 cannot segment into its tunnels
            _ns(f"{t}c1", "ethtool", "-K", "eth0", "tx", "off")
        return self

    def _container(
        self, host: OvsInstance, name: str, ip: str, mtu: int, offloads: bool = True
    ) -> None:
        run("ip", "netns", "add", name)
        self.containers.append(name)
        run("ip", "link", "add", f"v{name}", "netns", host.netns, "type", "veth", "peer", "name",
            "eth0", "netns", name)  # fmt: skip
        _ns(name, "ip", "link", "set", "lo", "up")
        _ns(name, "ip", "link", "set", "eth0", "mtu", str(mtu), "up")
        _ns(name, "ip", "addr", "add", f"{ip}/24", "dev", "eth0")
        _ns(host.netns, "ip", "link", "set", f"v{name}", "mtu", str(mtu), "up")
        if not offloads:
            _ns(name, "ethtool", "-K", "eth0", "tx", "off")
        host.vsctl("add-port", "br0", f"v{name}")

    def iperf(self, seconds: int) -> dict[str, float]:
        t = self.tag
        _ns(f"{t}c1", "ping", "-c", "2", "-W", "2", "10.209.0.2", check=False)
        server = subprocess.Popen(["ip", "netns", "exec", f"{t}c2", "iperf3", "-s", "-1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            time.sleep(0.5)
            out = subprocess.run(
                ["ip", "netns", "exec", f"{t}c1", "iperf3", "-c", "10.209.0.2", "-t", str(seconds),
                 "-J"],
                capture_output=True, text=True, timeout=seconds + 30,
            ).stdout  # fmt: skip
            end = json.loads(out)["end"]
            return {
                "gbps": end["sum_received"]["bits_per_second"] / 1e9,
                "retransmits": end["sum_sent"].get("retransmits", 0),
            }
        except (subprocess.TimeoutExpired, ValueError, KeyError):
            return {"gbps": 0.0, "retransmits": -1}  # TCP stalled
        finally:
            server.kill()
            server.wait()

    def stop(self) -> None:
        for name in self.containers:
            run("ip", "netns", "del", name, check=False)
        for o in self.hosts:
            o.stop()


CASES = (
    ("same host, userspace TSO, NORMAL", True, "", False),
    ("same host, userspace TSO, conntrack table", True, "", True),
    ("two hosts, OVS userspace VXLAN (containers' TX offload off)", False, "userspace", False),
    ("two hosts, kernel VXLAN device as an OVS port, userspace TSO", False, "kernel", False),
)


def run_designs(workdir: Path, seconds: int = 4) -> list[dict[str, Any]]:
    rows = []
    for label, same_host, mode, ct in CASES:
        lab = TwoHosts(workdir, f"kv{os.getpid() % 1000}")
        try:
            lab.start(same_host, mode, ct)
            rows.append({"case": label, **lab.iperf(seconds)})
        finally:
            lab.stop()
    return rows
