"""Churn at scale on one host (issue 27, item 4): a burst of containers started at once
beside standing endpoints, timed until the last of them has pinged its gateway; the same
burst on Docker's bridge beside as many standing ports on its Linux bridge.

Standing endpoints on netplugin are made with Docker's own call sequence at the plugin
socket (RequestAddress, CreateEndpoint, Join: real veths, OVS ports and flows, as
bench.scaling does); on the bridge they are veth pairs enslaved to the network's Linux
bridge. The burst is ``docker run`` (no --rm: removal is not timed) of a container that
pings the gateway until it answers, from ``parallel`` clients at once.

Alone: ``python -m bench.churn --standing 100 --burst 20`` (prints JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.runs import sh, socket_agent
from bench.scaling import DockerCalls
from testbed.host import BUSYBOX_IMAGE, CREATE_NETWORK, TEST_LABEL

BRIDGE_PREFIX = "bench-br-"
PING_UNTIL_UP = "until ping -c 1 -W 1 {gw} >/dev/null 2>&1; do sleep 0.02; done"


def burst(network: str, gateway: str, count: int, parallel: int) -> dict[str, float]:
    """``count`` containers started at once on ``network``: seconds until the last one
    (and the median one) pinged ``gateway``."""
    names = [f"churn-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    cmd = PING_UNTIL_UP.format(gw=gateway)

    def one(name: str) -> float:
        sh("docker", "run", "--name", name, "--label", TEST_LABEL, "--net", network,
           BUSYBOX_IMAGE, "sh", "-c", cmd)  # fmt: skip
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(parallel) as pool:
            done = list(pool.map(one, names))
    finally:
        for chunk in range(0, len(names), 50):
            subprocess.run(["docker", "rm", "-f", *names[chunk : chunk + 50]],
                           capture_output=True)  # fmt: skip
    return {"last_s": max(done), "median_s": statistics.median(done), "count": count}


def remove_bridge(name: str) -> None:
    """Remove bridge network ``name``, disconnecting by force whatever dockerd still lists
    on it first: a container that is gone can leave a stale endpoint behind, which keeps the
    network (and its subnet) from being removed."""
    if subprocess.run(["docker", "network", "rm", name], capture_output=True).returncode == 0:
        return
    listed = subprocess.run(
        ["docker", "network", "inspect", "-f", "{{range .Containers}}{{.Name}} {{end}}", name],
        capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    for endpoint in listed:
        subprocess.run(["docker", "network", "disconnect", "-f", name, endpoint],
                       capture_output=True)  # fmt: skip
    subprocess.run(["docker", "network", "rm", name], capture_output=True)


def leftover_bridges() -> None:
    """Remove the bridge networks an earlier run of this benchmark left (theirs would
    overlap this run's subnet)."""
    out = sh("docker", "network", "ls", "--filter", f"label={TEST_LABEL}",
             "--filter", "driver=bridge", "--format", "{{.Name}}")  # fmt: skip
    for name in out.split():
        if name.startswith(BRIDGE_PREFIX):
            remove_bridge(name)


def bridge_ports(network: str, count: int) -> list[str]:
    """``count`` veth pairs enslaved to the Linux bridge of docker network ``network``."""
    bridge = "br-" + sh("docker", "network", "inspect", "-f", "{{.Id}}", network).strip()[:12]
    made = []
    for i in range(count):
        host = f"chb{i}"
        sh("ip", "link", "add", host, "type", "veth", "peer", "name", f"chc{i}")
        made.append(host)
        sh("ip", "link", "set", host, "master", bridge, "up")
    return made


def run(work: Path, standing: int = 1000, count: int = 100, parallel: int = 10) -> dict[str, Any]:
    """Both drivers under the same burst; the netplugin agent and master are started here."""
    with socket_agent(work, "churn"):
        return _run(standing, count, parallel)


def _run(standing: int, count: int, parallel: int) -> dict[str, Any]:
    from testbed.plugin import SOCKET

    ours, bridge = f"bench-np-{uuid.uuid4().hex[:6]}", f"{BRIDGE_PREFIX}{uuid.uuid4().hex[:6]}"
    standing_eps: list[tuple[str, str]] = []
    links: list[str] = []
    calls: DockerCalls | None = None
    leftover_bridges()
    try:
        sh(*CREATE_NETWORK, "--subnet", "10.152.0.0/16", ours)
        sh("docker", "network", "create", "--label", TEST_LABEL, "-d", "bridge",
           "--subnet", "10.153.0.0/16", bridge)  # fmt: skip
        nid = sh("docker", "network", "inspect", "-f", "{{.Id}}", ours).strip()
        calls = DockerCalls(SOCKET, nid, "default:10.152.0.0/16")
        t0 = time.perf_counter()
        for _ in range(standing):
            _, _, eid, addr = calls.one()
            standing_eps.append((eid, addr))
        np_standing_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        links = bridge_ports(bridge, standing)
        br_standing_s = time.perf_counter() - t0
        burst(ours, "10.152.0.1", min(count, 10), parallel)  # warm-up
        burst(bridge, "10.153.0.1", min(count, 10), parallel)
        np = burst(ours, "10.152.0.1", count, parallel)
        br = burst(bridge, "10.153.0.1", count, parallel)
        return {
            "standing": standing,
            "burst": count,
            "parallel": parallel,
            "netplugin": {**np, "standing_s": np_standing_s},
            "bridge": {**br, "standing_s": br_standing_s},
        }
    finally:
        for host in links:
            subprocess.run(["ip", "link", "del", host], capture_output=True)
        if calls is not None:
            for eid, addr in standing_eps:
                calls.remove(eid, addr)
        subprocess.run(["docker", "network", "rm", ours], capture_output=True)
        remove_bridge(bridge)


def section(r: dict[str, Any]) -> list[str]:
    np, br = r["netplugin"], r["bridge"]
    return [
        "## Churn: a burst of containers beside standing endpoints",
        "",
        f"Method: {r['standing']} endpoints stand on the host (netplugin: Docker's calls at the",
        "plugin socket, real veths, OVS ports and flows; bridge: veth pairs on the network's",
        f"Linux bridge). Then {r['burst']} `docker run` of a container that pings its gateway",
        f"until it answers, from {r['parallel']} clients at once; the time from the first start",
        "until the last (and the median) container had its answer. A warm-up burst of 10 first.",
        "",
        "| driver | last pinged its gateway | median | standing ports made in |",
        "|---|---:|---:|---:|",
        f"| netplugin | {np['last_s']:.1f} s | {np['median_s']:.1f} s | {np['standing_s']:.0f} s |",
        f"| bridge | {br['last_s']:.1f} s | {br['median_s']:.1f} s | {br['standing_s']:.0f} s |",
        "",
        f"netplugin ÷ bridge, last container: {np['last_s'] / br['last_s']:.2f}.",
        "",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--standing", type=int, default=1000)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--parallel", type=int, default=10)
    a = p.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="netplugin-churn-") as d:
        r = run(Path(d), a.standing, a.burst, a.parallel)
    print(json.dumps(r, indent=1))
    print("\n".join(section(r)))


if __name__ == "__main__":
    main()
