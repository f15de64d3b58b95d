"""Docker's endpoint calls straight at the plugin socket, and the scaling table of issue 9:
CreateEndpoint+Join at 10, 100 and 1,000 endpoints standing on one host, with the flows one
endpoint adds to the switch and the agent's resident memory."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import requests_unixsocket

from bench.stats import pct


class DockerCalls:
    """The calls dockerd makes for one container's endpoint, in its order."""

    def __init__(self, socket_path: str, network_id: str, pool_id: str) -> None:
        self.session = requests_unixsocket.Session()
        self.base = "http+unix://" + socket_path.replace("/", "%2F")
        self.network_id, self.pool_id = network_id, pool_id

    def _post(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.session.post(f"{self.base}/{method}", data=json.dumps(body))
        r.raise_for_status()
        reply: dict[str, Any] = r.json()
        if reply.get("Err"):
            raise RuntimeError(f"{method}: {reply['Err']}")
        return reply

    def request_address(self) -> str:
        body = {"PoolID": self.pool_id, "Address": "", "Options": None}
        return str(self._post("IpamDriver.RequestAddress", body)["Address"])

    def create_join(self, eid: str, addr: str) -> None:
        net = self.network_id
        body = {"NetworkID": net, "EndpointID": eid, "Interface": {"Address": addr}}
        self._post("NetworkDriver.CreateEndpoint", {**body, "Options": None})
        join = {"NetworkID": net, "EndpointID": eid, "SandboxKey": "", "Options": None}
        self._post("NetworkDriver.Join", join)

    def remove(self, eid: str, addr: str) -> None:
        """Leave, DeleteEndpoint, ReleaseAddress."""
        ep = {"NetworkID": self.network_id, "EndpointID": eid}
        self._post("NetworkDriver.Leave", ep)
        self._post("NetworkDriver.DeleteEndpoint", ep)
        self._post("IpamDriver.ReleaseAddress", {"PoolID": self.pool_id, "Address": addr})

    def activate_seconds(self) -> float:
        """The plugin's floor: Plugin.Activate, answered without any work."""
        t0 = time.perf_counter()
        self._post("Plugin.Activate", {})
        return time.perf_counter() - t0

    def one(self) -> tuple[float, float, str, str]:
        """One endpoint made: (RequestAddress seconds, CreateEndpoint+Join seconds, id, address)."""
        eid = uuid.uuid4().hex * 2
        t0 = time.perf_counter()
        addr = self.request_address()
        t1 = time.perf_counter()
        self.create_join(eid, addr)
        return t1 - t0, time.perf_counter() - t1, eid, addr


def flow_count(bridge: str = "netplugin") -> int:
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "dump-aggregate", bridge],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = re.search(r"flow_count=(\d+)", out)
    if not found:
        raise RuntimeError(f"ovs-ofctl dump-aggregate {bridge}: {out!r}")
    return int(found.group(1))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def ovs_add_port_ms(bridge: str = "netplugin", samples: int = 5) -> float:
    """ovs-vswitchd's own cost of one more port at the current size: `ovs-vsctl add-port`
    (which returns once ovs-vswitchd has applied it) of a spare veth, median
    (the process start is in it, the same at every size)."""
    host, peer = "npbenchp0", "npbenchp1"
    subprocess.run(["ip", "link", "add", host, "type", "veth", "peer", "name", peer], check=True)
    try:
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            subprocess.run(["ovs-vsctl", "--timeout=30", "add-port", bridge, host], check=True)
            times.append(time.perf_counter() - t0)
            subprocess.run(["ovs-vsctl", "--timeout=30", "del-port", bridge, host], check=True)
        return pct(times, 50) * 1000
    finally:
        subprocess.run(["ip", "link", "del", host], check=False)


def vswitchd_pid() -> int:
    for rundir in ("/var/run/openvswitch", "/run/openvswitch"):
        pidfile = Path(rundir) / "ovs-vswitchd.pid"
        if pidfile.exists():
            return int(pidfile.read_text().split()[0])
    raise RuntimeError("no ovs-vswitchd.pid")


def scaling(
    calls: DockerCalls,
    plugin_pid: int,
    levels: tuple[int, ...] = (10, 100, 1000),
    samples: int = 50,
    deadline: float | None = None,
    keep: bool = False,
) -> list[dict[str, Any]]:
    """For each level: stand endpoints up to it, then ``samples`` more created and removed one
    at a time beside them. Past ``deadline`` (a time.monotonic() value) no more endpoints are
    stood up: the level being reached is measured at the count it got to (its row's
    ``standing``; ``level`` is the one asked for) and the levels after it are left out.
    ``keep``: leave the standing endpoints (a throw-away host: removing them takes as long)."""
    standing: list[tuple[str, str]] = []
    rows = []
    try:
        for level in levels:
            while len(standing) < level:
                if deadline is not None and time.monotonic() > deadline:
                    break
                _, _, eid, addr = calls.one()
                standing.append((eid, addr))
            add_port_ms = ovs_add_port_ms()
            before = flow_count()
            times, added = [], []
            for _ in range(samples):
                _, cj, eid, addr = calls.one()
                times.append(cj)
                added.append(flow_count() - before)
                calls.remove(eid, addr)
            rows.append(
                {
                    "level": level,
                    "standing": len(standing),
                    "flows": before,
                    "p50_ms": pct(times, 50) * 1000,
                    "p99_ms": pct(times, 99) * 1000,
                    "flows_added": max(added),
                    "rss_mib": rss_mib(plugin_pid),
                    "vswitchd_rss_mib": rss_mib(vswitchd_pid()),
                    "ovs_add_port_ms": add_port_ms,
                    "samples": samples,
                }
            )
            if len(standing) < level:
                break
    finally:
        for eid, addr in [] if keep else standing:
            calls.remove(eid, addr)
    return rows
