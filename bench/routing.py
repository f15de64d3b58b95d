"""Routing mode (issue 25) on the simulated cluster: TCP across hosts in routing mode against
bridge mode in the same run, routes announced while containers start, BGP convergence
when a host dies and when its agent is killed.

Two host namespaces with their own userspace OVS, dockerd and agent (testbed/multihost.py),
and FRR as their router (testbed/frr.py). The cluster starts in bridge mode; its networks are
measured, removed, and the cluster switched to routing mode, peered with the router, and
measured again. ``python -m bench.routing`` runs it alone and rewrites only its section of
docs/BENCHMARKS.md; make bench runs it with the rest.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.frr import Fabric, router_ip
from testbed.host import IPERF_IMAGE, TEST_LABEL
from testbed.multihost import Cluster, sh, wait_for

from . import sections
from .multihost import iperf_gbps

ROOT = Path(__file__).resolve().parent.parent
IPERF_SECONDS = 5
CONTAINERS = 100


def _net(cluster: Cluster, subnet: str, *opts: str) -> str:
    name = f"br{uuid.uuid4().hex[:6]}"
    cluster.netctl("net", "create", "-s", subnet, *opts, name)
    return name


def tcp(cluster: Cluster, mode: str) -> dict[str, float]:
    """Gbit/s of one iperf3 flow between containers of h1 and h2, VXLAN and VLAN."""
    out = {}
    for encap, subnet, opts in (
        ("vxlan", "10.230.0.0/24", ()),
        ("vlan", "10.231.0.0/24", ("-e", "vlan", "-p", "430")),
    ):
        net = _net(cluster, subnet, *opts)
        try:
            out[encap] = iperf_gbps(cluster, net, IPERF_SECONDS)
        finally:
            cluster.netctl("net", "rm", net, check=False)
        wait_for(lambda net=net: not _has_network(cluster, net), 30, f"{net} gone")
    print(f"bench: routing: TCP in {mode} mode: {out}", file=sys.stderr)
    return out


def _has_network(cluster: Cluster, net: str) -> bool:
    return any(net in h.docker("network", "ls", "--format", "{{.Name}}") for h in cluster.hosts)


def _host_routes(fabric: Fabric, prefix: str) -> set[str]:
    return {p for p in fabric.frr.routes() if p.startswith(prefix) and p.endswith("/32")}


def announcements(cluster: Cluster, fabric: Fabric, n: int) -> dict[str, float]:
    """``n`` containers started on h1 (4 at a time) on a VLAN network: when they were
    running, and when the router had all their routes."""
    h1 = cluster.hosts[0]
    net = _net(cluster, "10.232.0.0/24", "-e", "vlan", "-p", "432")
    wait_for(lambda: _has_network(cluster, net), 30, net)
    names = [f"rt{uuid.uuid4().hex[:6]}" for _ in range(n)]
    seen: list[float] = []
    done = threading.Event()

    def watch(t0: float) -> None:
        count = 0
        while not done.is_set() and count < n:
            now = len(_host_routes(fabric, "10.232.0."))
            seen.extend([time.perf_counter() - t0] * (now - count))
            count = max(count, now)
            time.sleep(0.05)

    def start(batch: list[str]) -> None:
        for name in batch:
            h1.docker("run", "-d", "--label", TEST_LABEL, "--name", name, "--net", net,
                      IPERF_IMAGE, "sleep", "3600")  # fmt: skip

    t0 = time.perf_counter()
    watcher = threading.Thread(target=watch, args=(t0,), daemon=True)
    watcher.start()
    try:
        _parallel(start, names, 4)
        started = time.perf_counter() - t0
        wait_for(lambda: len(seen) >= n, 60, f"{n} routes at the router", interval=0.1)
        return {
            "containers": n,
            "started_s": started,
            "all_routes_s": seen[-1],
            "routes_per_s": n / seen[-1],
            "lag_s": seen[-1] - started,
        }
    finally:
        done.set()
        _parallel(lambda b: [h1.docker_res("rm", "-f", x) for x in b], names, 4)
        cluster.netctl("net", "rm", net, check=False)


def _parallel(work: Callable[[list[str]], object], items: list[str], threads: int) -> None:
    batches = [items[i::threads] for i in range(threads)]
    workers = [threading.Thread(target=work, args=(b,)) for b in batches]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def convergence(cluster: Cluster, fabric: Fabric) -> dict[str, float]:
    """How long the router keeps a host's container route after the host dies (its VLAN
    link cut: no session close, the hold time runs out, then graceful restart's time) and
    after its agent is killed (the session closes at once; graceful restart's time)."""
    h2 = cluster.hosts[1]
    net = _net(cluster, "10.233.0.0/24", "-e", "vlan", "-p", "433")
    wait_for(lambda: _has_network(cluster, net), 30, net)
    name = f"cv{uuid.uuid4().hex[:6]}"
    h2.docker("run", "-d", "--label", TEST_LABEL, "--name", name, "--net", net,
              IPERF_IMAGE, "sleep", "3600")  # fmt: skip
    prefix = f"{cluster.ip_of(h2, name)}/32"
    out: dict[str, float] = {}
    link = f"{cluster.tag}{h2.index}2"  # h2's VLAN uplink in the root namespace
    try:
        for case, cut, heal in (
            ("host_dies", lambda: sh("ip", "link", "set", link, "down"),
             lambda: sh("ip", "link", "set", link, "up")),
            ("agent_killed", lambda: h2.stop_agent(9), lambda: cluster.start_agent(h2)),
        ):  # fmt: skip
            wait_for(lambda: prefix in fabric.frr.routes(), 60, f"{prefix} announced")
            t0 = time.perf_counter()
            cut()
            wait_for(
                lambda: fabric.frr.peer_state(router_ip(h2)) != "Established",
                60,
                "h2's session down",
                interval=0.05,
            )
            down = time.perf_counter() - t0
            wait_for(lambda: prefix not in fabric.frr.routes(), 90, "route gone", interval=0.05)
            out[f"{case}_session_down_s"] = down
            out[f"{case}_route_gone_s"] = time.perf_counter() - t0
            heal()
        wait_for(lambda: prefix in fabric.frr.routes(), 60, f"{prefix} announced again")
        return out
    finally:
        sh("ip", "link", "set", link, "up", check=False)
        cluster.ensure_agent(h2)
        h2.docker_res("rm", "-f", name)
        cluster.netctl("net", "rm", net, check=False)


def run(workdir: Path) -> dict[str, Any]:
    cluster = Cluster(workdir / "routing", hosts=2, masters=1).start()
    fabric = None
    try:
        for h in cluster.hosts:
            h.load_image(IPERF_IMAGE)
        bridge = tcp(cluster, "bridge")
        cluster.netctl("global", "set", "--fwd-mode", "routing")
        fabric = Fabric(cluster).peer_hosts()
        for h in cluster.hosts:
            wait_for(lambda h=h: fabric.frr.peer_state(router_ip(h)) == "Established", 30, h.name)
        routing = tcp(cluster, "routing")
        ann = announcements(cluster, fabric, CONTAINERS)
        conv = convergence(cluster, fabric)
        return {"tcp": {"bridge": bridge, "routing": routing}, "announce": ann, "converge": conv}
    finally:
        if fabric is not None:
            fabric.stop(workdir / "routing" / "frr")
        cluster.stop()


def section(r: dict[str, Any]) -> list[str]:
    tcp, ann, conv = r["tcp"], r["announce"], r["converge"]
    b, rt = tcp["bridge"], tcp["routing"]
    return [
        "## Routing mode (issue 25)",
        "",
        "Two simulated hosts (userspace OVS, `--vtep-ip` and `--vlan-if`), one master, FRR 8.4",
        "as their router on the VLAN uplinks (`testbed/frr.py`). One iperf3 flow for",
        f"{IPERF_SECONDS} s between a container on each host, first in bridge mode, then after",
        "`global set --fwd-mode routing` and a Bgp object per host, in the same run. In",
        "routing mode a VXLAN network is routed by the two switches over the tunnel; a VLAN",
        "network goes through both host kernels and the router (which forwards in its",
        "namespace's kernel).",
        "",
        "| Gbit/s, one flow | bridge mode | routing mode | routing / bridge |",
        "|---|---|---|---|",
        f"| VXLAN | {b['vxlan']:.2f} | {rt['vxlan']:.2f} | {rt['vxlan'] / b['vxlan']:.2f} |",
        f"| VLAN (routing: via the router) | {b['vlan']:.2f} | {rt['vlan']:.2f} "
        f"| {rt['vlan'] / b['vlan']:.2f} |",
        "",
        f"**Announcements.** {ann['containers']} containers started on one host, 4 `docker run`",
        f"at a time, on a VLAN network: all running after {ann['started_s']:.1f} s; the router",
        f"had every /32 after {ann['all_routes_s']:.1f} s ({ann['routes_per_s']:.1f} routes/s), "
        + _lag(ann["lag_s"]),
        "",
        "**Convergence.** How long the router keeps a host's container route:",
        "",
        "| the host ... | session down after | route gone after |",
        "|---|---|---|",
        f"| dies (its link cut: no close, the hold time runs out) "
        f"| {conv['host_dies_session_down_s']:.1f} s | {conv['host_dies_route_gone_s']:.1f} s |",
        f"| keeps running, its agent SIGKILLed and not restarted "
        f"| {conv['agent_killed_session_down_s']:.1f} s "
        f"| {conv['agent_killed_route_gone_s']:.1f} s |",
        "",
        "A closed session (the agent gone, the host running) leaves the route for graceful",
        "restart's 20 s on purpose: the host's switch and kernel keep forwarding, and an agent",
        "restarted within it loses no packet (`integration/test_routing_mode.py`). A silent",
        "host's session ends at the hold time (the router's `timers 3 9`), and FRR drops its",
        "routes with it.",
    ]


def _lag(lag: float) -> str:
    if lag < 0:
        return (
            f"{-lag:.2f} s before the last `docker run` returned: a route is announced once "
            "the master has allocated the address, before the container runs. The rate is "
            "docker's pace, not the speaker's."
        )
    return f"{lag:.2f} s after the last `docker run` returned: the speaker's lag."


def marked(r: dict[str, Any]) -> str:
    """The section with its markers, as docs/BENCHMARKS.md holds it."""
    return sections.wrap(sections.ROUTING, "\n".join(section(r)))


def write(out: Path, r: dict[str, Any]) -> str:
    """Replace only this section of ``out`` (before the kernel's, if it is new)."""
    return sections.write(out, sections.ROUTING, section(r), before=sections.KERNEL)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    p.add_argument("--no-write", action="store_true", help="print the section only")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="netplugin-bench-") as d:
        r = run(Path(d))
    print("\n".join(section(r)))
    if not args.no_write:
        write(args.out, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
