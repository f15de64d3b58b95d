"""make bench's figures on the OVS kernel datapath (issue 23), measured in the VM lab's QEMU
guests (testbed/vm) as ratios against baselines measured in the same guests, same run:

1. TCP container to container on one guest: a netplugin network against Docker's bridge;
2. TCP container to container across the two guests over netplugin's VXLAN (the kernel's
   VXLAN port) against a plain kernel VXLAN device between the same guests;
3. `docker run --rm IMAGE true` on a netplugin network against Docker's bridge;
4. CreateEndpoint+Join at 10, 100 and 1,000 standing endpoints (bench/scaling.py, run in
   the guest by bench/kernel_guest.py) beside `ovs-vsctl add-port` at the same counts.

    python -m bench.kernel [--no-write] [--json FILE] [--from-json FILE]

runs this part alone and rewrites only its section of docs/BENCHMARKS.md (make bench writes
it too). KERNEL_BENCH_BUDGET: seconds to stand endpoints up in (default 600; under TCG the
count reached in that time is measured and the report says so).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import sections

ROOT = Path(__file__).resolve().parent.parent
GUESTS, VCPUS, MEMORY_MB = 2, 1, 2048
IPERF_SECONDS, IPERF_REPEATS, RUN_REPEATS = 5, 5, 7
LEVELS, SAMPLES = (10, 100, 1000), 30
BUDGET_S = float(os.environ.get("KERNEL_BENCH_BUDGET", "600"))
NET, NET_SUBNET = "kbench", "10.160.0.0/16"
BRIDGE, BRIDGE_SUBNET = "kbench-br", "10.161.0.0/16"
KVX, KVX_PREFIX, KVX_VNI, KVX_PORT = "kbvx", "10.162.0", 4242, 4790
IPERF_PIDFILE = "/run/kbench-iperf3.pid"
AGENT_LOG, VSWITCHD_LOG = "/var/log/netplugin.log", "/var/log/openvswitch/ovs-vswitchd.log"


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def ratio(a: float, b: float) -> float:
    """``a / b``; NaN when the baseline is 0 (nothing measured)."""
    return a / b if b else float("nan")


def iperf_result(out: str) -> tuple[float, int]:
    """Gbit/s received and the sender's retransmits, from ``iperf3 -J``'s output."""
    end = json.loads(out)["end"]
    return end["sum_received"]["bits_per_second"] / 1e9, int(end["sum_sent"].get("retransmits", 0))


def alternate(
    a: Callable[[], Any], b: Callable[[], Any], repeats: int
) -> tuple[list[Any], list[Any]]:
    """``a`` and ``b`` run in turn ``repeats`` times each, so drift on the machine (other
    guests, the host's other work) falls on both alike."""
    xs, ys = [], []
    for _ in range(repeats):
        xs.append(a())
        ys.append(b())
    return xs, ys


# ----------------------------------------------------------------------------- in the guests


def _docker_ip(node: Any, container: str) -> str:
    return str(node.ip(container))


def _iperf_exec(
    node: Any, client: str, server_ip: str, seconds: int = IPERF_SECONDS
) -> tuple[float, int]:
    """iperf3 from the container ``client`` (or the guest's root namespace if "")."""
    exec_in = f"docker exec {client} " if client else ""
    out = node.sh(f"{exec_in}iperf3 -J -c {server_ip} -t {seconds}", timeout=seconds + 120)
    return iperf_result(out)


def _paired_iperf(node: Any, a: tuple[str, str], b: tuple[str, str]) -> tuple[list, list]:
    """(client, server address) ``a`` and ``b`` in turn, after a short warm-up of each."""
    for client, server in (a, b):
        _iperf_exec(node, client, server, seconds=2)
    return alternate(lambda: _iperf_exec(node, *a), lambda: _iperf_exec(node, *b), IPERF_REPEATS)


def guest_machine(node: Any) -> dict[str, Any]:
    out = node.sh(
        "uname -r; nproc; awk '/MemTotal/ {print $2}' /proc/meminfo; "
        "ovs-vswitchd --version | head -1 | awk '{print $NF}'; "
        "docker version --format '{{.Server.Version}}'; "
        "ovs-vsctl get bridge netplugin datapath_type; "
        "ovs-dpctl show | grep -o 'vxlan_sys_[0-9]*' | head -1; "
        "ip -o link show eth1 | grep -o 'mtu [0-9]*'"
    ).split("\n")
    kernel, cpus, mem_kb, ovs, docker, datapath, vxlan, mtu = (x.strip() for x in out[:8])
    return {
        "kernel": kernel, "vcpus": int(cpus), "memory_mib": int(mem_kb) // 1024,
        "memory_mb_given": MEMORY_MB, "ovs": ovs, "docker": docker,
        "datapath": datapath.strip('"'), "vxlan_port": vxlan, "underlay_mtu": mtu.split()[-1],
    }  # fmt: skip


def _container_mtu(node: Any, container: str) -> int:
    return int(node.sh(f"docker exec {container} cat /sys/class/net/eth0/mtu").strip())


def throughput(one: Any, two: Any) -> dict[str, Any]:
    """Same guest (netplugin vs bridge) and across guests (netplugin VXLAN vs kernel VXLAN)."""
    from testbed.host import IPERF_IMAGE

    for name, node, net in (
        ("kb-srv", one, NET), ("kb-cli", one, NET), ("kb-srvb", one, BRIDGE),
        ("kb-clib", one, BRIDGE), ("kb-xcli", two, NET),
    ):  # fmt: skip
        cmd = ("iperf3", "-s") if "srv" in name else ()
        node.box(name, net, *cmd, image=IPERF_IMAGE)
    srv, srvb = _docker_ip(one, "kb-srv"), _docker_ip(one, "kb-srvb")
    same = _paired_iperf(one, ("kb-cli", srv), ("kb-clib", srvb))
    for node, me, peer in ((one, one.g.ip, two.g.ip), (two, two.g.ip, one.g.ip)):
        index = 1 if node is one else 2
        node.sh(
            f"ip link add {KVX} type vxlan id {KVX_VNI} local {me} remote {peer} "
            f"dstport {KVX_PORT} dev eth1 && ip addr add {KVX_PREFIX}.{index}/24 dev {KVX} && "
            f"ip link set {KVX} up"
        )
    one.sh(f"iperf3 -s -D --pidfile {IPERF_PIDFILE}")
    try:
        cross = _paired_iperf(two, ("kb-xcli", srv), ("", f"{KVX_PREFIX}.1"))
        kvx_mtu = int(two.sh(f"cat /sys/class/net/{KVX}/mtu").strip())
    finally:
        one.sh(f"kill $(cat {IPERF_PIDFILE}) 2>/dev/null; ip link del {KVX}; true")
        two.sh(f"ip link del {KVX}; true")

    def split(runs: list[tuple[float, int]]) -> dict[str, list[float] | list[int]]:
        return {"gbps": [g for g, _ in runs], "retransmits": [r for _, r in runs]}

    return {
        "seconds": IPERF_SECONDS,
        "same_guest": {
            "netplugin": split(same[0]), "bridge": split(same[1]),
            "mtu": {"netplugin": _container_mtu(one, "kb-cli"),
                    "bridge": _container_mtu(one, "kb-clib")},
        },
        "cross_guest": {
            "netplugin": split(cross[0]), "kernel_vxlan": split(cross[1]),
            "mtu": {"netplugin": _container_mtu(two, "kb-xcli"), "kernel_vxlan": kvx_mtu},
        },
    }  # fmt: skip


def docker_run_seconds(node: Any, net: str) -> float:
    """`docker run --rm IMAGE true`, timed in the guest (no ssh in it)."""
    from testbed.host import BUSYBOX_IMAGE, TEST_LABEL

    ns = node.sh(
        f"s=$(date +%s%N); docker run --rm --label {TEST_LABEL} --net {net} {BUSYBOX_IMAGE} "
        f"true >/dev/null; e=$(date +%s%N); echo $((e - s))",
        timeout=300,
    )
    return int(ns.strip()) / 1e9


def docker_runs(node: Any) -> dict[str, list[float]]:
    alternate(lambda: docker_run_seconds(node, NET), lambda: docker_run_seconds(node, BRIDGE), 1)
    np, br = alternate(
        lambda: docker_run_seconds(node, NET), lambda: docker_run_seconds(node, BRIDGE),
        RUN_REPEATS,
    )  # fmt: skip
    return {"netplugin": np, "bridge": br}


# What the agent and ovs-vswitchd log when an endpoint's flows lag (grep -E patterns): counted
# over the scaling run.
TROUBLE = {
    "not_confirmed": (AGENT_LOG, "flows are not confirmed on the switch"),
    "reconcile_failed": (AGENT_LOG, "reconcile failed"),
    "disconnected": (AGENT_LOG, "ofapp: switch .* disconnected"),
    "probe_timeouts": (VSWITCHD_LOG, "no response to inactivity probe"),
}


def log_counts(node: Any, since: dict[str, int]) -> dict[str, int]:
    """How many lines of each TROUBLE kind the logs got after the sizes ``since``."""
    counts = {}
    for kind, (log, text) in TROUBLE.items():
        out = node.sh(f"tail -c +{since[log] + 1} {log} | grep -c -E {shlex.quote(text)} || true")
        counts[kind] = int(out.strip() or 0)
    return counts


def endpoint_scaling(node: Any, pool_id: str) -> dict[str, Any]:
    """bench/kernel_guest.py in the guest: its JSON, and what the logs said meanwhile."""
    from testbed.vm.node import AGENT_PID, CHECKOUT, LAB_PYTHON

    since = {log: node.log_size(log) for log in (AGENT_LOG, VSWITCHD_LOG)}
    net_id = node.sh(f"docker network inspect -f '{{{{.Id}}}}' {NET}").strip()
    levels = ",".join(str(n) for n in LEVELS)
    out = node.sh(
        f"cd {CHECKOUT} && {LAB_PYTHON} -m bench.kernel_guest --network-id {net_id} "
        f"--pool-id {shlex.quote(pool_id)} --plugin-pid $(cat {AGENT_PID}) --levels {levels} "
        f"--samples {SAMPLES} --budget {BUDGET_S:.0f}",
        timeout=BUDGET_S + 3600,
    )
    logged = log_counts(node, since)
    return {**json.loads(out), "levels": list(LEVELS), "budget_s": BUDGET_S, "logged": logged}


def run(workdir: Path) -> dict[str, Any]:
    """Two guests, the cluster of testbed/vm/node.py, the measurements; stopped after."""
    from bench.machine import describe
    from testbed.vm.image import ensure_image
    from testbed.vm.lab import ACCEL, Lab
    from testbed.vm.node import save_logs, start_cluster

    started = datetime.datetime.now(datetime.UTC)
    t0 = time.monotonic()
    host_load = os.getloadavg()[0]  # other work on the host's cores, besides the guests
    lab_dir = workdir / "kernel-lab"
    lab = Lab(ensure_image(), lab_dir, GUESTS, cpus=VCPUS, memory_mb=MEMORY_MB)
    lab.start()
    try:
        nodes = start_cluster(lab)
        one, two = nodes
        for n in nodes:
            n.sh("cd /root/netplugin && scripts/test-image.sh iperf", timeout=600)
        one.netctl("net", "create", "-s", NET_SUBNET, NET)
        for n in nodes:
            n.wait_network(NET)
        one.sh(
            f"docker network create --label netplugin-test -d bridge --subnet {BRIDGE_SUBNET} "
            f"{BRIDGE}"
        )
        pool = json.loads(one.netctl("--json", "net", "inspect", NET).stdout)["Oper"]["ipv4Pool"]
        result: dict[str, Any] = {
            "started": started.isoformat(timespec="minutes"),
            "accel": ACCEL, "guests": GUESTS, "host_cpu": describe()["CPU"],
            "host_load": host_load,
            "machine": guest_machine(one),
            "setup_s": time.monotonic() - t0,
        }  # fmt: skip
        if result["machine"]["datapath"] != "system" or not result["machine"]["vxlan_port"]:
            raise RuntimeError(f"not the kernel datapath in the guests: {result['machine']}")
        result["throughput"] = throughput(one, two)
        result["docker_run"] = docker_runs(one)
        result["scaling"] = endpoint_scaling(one, pool)
        result["wall_s"] = time.monotonic() - t0
        return result
    finally:
        try:
            save_logs(lab, lab_dir)
        finally:
            lab.stop()


# ----------------------------------------------------------------------------- the report


def _runs(values: list[float], fmt: str = "{:.2f}") -> str:
    return ", ".join(fmt.format(v) for v in values)


def machine_line(r: dict[str, Any]) -> str:
    m = r["machine"]
    accel = "TCG" if r["accel"] == "tcg" else r["accel"].upper()
    return (
        f"QEMU {accel} guests, Debian 12 kernel {m['kernel']}, {m['vcpus']} vCPU, "
        f"{m['memory_mb_given']} MiB"
    )


def section(r: dict[str, Any]) -> list[str]:
    """docs/BENCHMARKS.md's lines for a run() result (without the section markers)."""
    m, tp, run = r["machine"], r["throughput"], r["docker_run"]
    same, cross = tp["same_guest"], tp["cross_guest"]
    emulated = r["accel"] == "tcg"
    s_np, s_br = median(same["netplugin"]["gbps"]), median(same["bridge"]["gbps"])
    x_np, x_kv = median(cross["netplugin"]["gbps"]), median(cross["kernel_vxlan"]["gbps"])
    d_np, d_br = median(run["netplugin"]), median(run["bridge"])
    n_ip, n_run = len(same["netplugin"]["gbps"]), len(run["netplugin"])
    out = [
        "## The kernel datapath, in QEMU guests" + (" (emulated)" if emulated else ""),
        "",
        f"Written by `python -m bench.kernel` (`make bench` writes it too) on "
        f"{r['started'][:16].replace('T', ' ')} UTC; the run took {r['wall_s'] / 60:.0f} min, "
        f"{r['setup_s'] / 60:.0f} of them to boot the guests and start the cluster. The same "
        "ratios on the userspace datapath (this machine's kernel) are in the sections above.",
        "",
    ]
    if emulated:
        out += [
            "**Emulated.** Every figure in this section was measured inside QEMU guests under",
            "TCG, software CPU emulation (KVM guests hang on this machine), many times slower",
            "than the same work on real hardware. The absolute figures are not a host's; what",
            "carries over is each ratio against a baseline measured in the same guests in the",
            "same run, and even those only roughly: emulation does not slow every kind of work",
            "alike.",
            "",
        ]
    out += [
        f"- Machine: {machine_line(r)} ({r['guests']} guests, on {r['host_cpu']}; its load "
        f"average before they started: {r['host_load']:.1f})",
        f"- Open vSwitch {m['ovs']}, datapath `{m['datapath']}` (openvswitch.ko); netplugin's "
        f"tunnels are the kernel's VXLAN port `{m['vxlan_port']}`. Docker {m['docker']}.",
        f"- Underlay: each guest's eth1 (MTU {m['underlay_mtu']}, virtio-net without TSO or TX "
        "checksum offload) on a QEMU socket segment between the guests.",
        "",
        "Method: the VM lab's cluster (testbed/vm/node.py): etcd and netmaster on guest 1,",
        "a netplugin agent on each guest, one VXLAN network made by `netctl net create`.",
        f"iperf3 ({tp['seconds']} s) runs between long-running containers (the client's by",
        "`docker exec`), netplugin and its baseline in turn, median of "
        f"{n_ip}. The cross-guest baseline is a plain kernel VXLAN device on both guests",
        f"(`ip link add {KVX} type vxlan id {KVX_VNI} local SELF remote PEER dstport {KVX_PORT} "
        "dev eth1`),",
        "iperf3 between the guests' root namespaces. `docker run` is timed in guest 1, "
        f"netplugin and bridge in turn after one warm-up each, median of {n_run}.",
        "",
        "| measure | netplugin (kernel datapath) | baseline | netplugin / baseline |",
        "|---|---:|---:|---:|",
        f"| TCP container to container, same guest (baseline: Docker's bridge network) "
        f"| {s_np:.3f} Gbit/s | {s_br:.3f} Gbit/s | {ratio(s_np, s_br):.2f} |",
        f"| TCP container to container across guests, VXLAN (baseline: kernel VXLAN device, "
        f"root namespaces) | {x_np:.3f} Gbit/s | {x_kv:.3f} Gbit/s | {ratio(x_np, x_kv):.2f} |",
        f"| `docker run --rm … true`, same guest (baseline: Docker's bridge network) "
        f"| {d_np:.2f} s | {d_br:.2f} s | {ratio(d_np, d_br):.2f} |",
        "",
        "The runs, in order (Gbit/s; retransmits in brackets where the sender counted any):",
        "",
        f"- same guest: netplugin {_iperf_runs(same['netplugin'])}; "
        f"bridge {_iperf_runs(same['bridge'])} (container MTU {same['mtu']['netplugin']} "
        f"on netplugin's network, {same['mtu']['bridge']} on the bridge)",
        f"- across guests: netplugin {_iperf_runs(cross['netplugin'])}; kernel VXLAN "
        f"{_iperf_runs(cross['kernel_vxlan'])} (MTU {cross['mtu']['netplugin']} and "
        f"{cross['mtu']['kernel_vxlan']})",
        f"- `docker run` seconds: netplugin {_runs(run['netplugin'])}; bridge "
        f"{_runs(run['bridge'])}",
        "",
        *scaling_lines(r["scaling"]),
    ]
    return out


def _iperf_runs(runs: dict[str, list[Any]]) -> str:
    return ", ".join(
        f"{g:.3f}" + (f" ({rt})" if rt else "")
        for g, rt in zip(runs["gbps"], runs["retransmits"], strict=True)
    )


def scaling_lines(sc: dict[str, Any]) -> list[str]:
    rows = sc["rows"]
    out = [
        "Endpoint scaling on the kernel datapath: `python -m bench.kernel_guest` in guest 1,",
        "bench/scaling.py's calls sent straight to the plugin socket (no dockerd in the path):",
        "endpoints stood up one at a time to each count, all in the one network, then "
        f"{rows[0]['samples'] if rows else SAMPLES} more",
        "created (RequestAddress, then CreateEndpoint+Join timed) and removed one at a time",
        "beside them. *ovs-vsctl add-port*: OVS's own cost of one more port at that count, a",
        "spare veth on the same bridge, median of 5, process start included. *Flows added*:",
        "the switch's flow count after one more endpoint minus before. p99 of "
        f"{rows[0]['samples'] if rows else SAMPLES} samples is their slowest.",
        "",
        "| standing endpoints | switch flows | CreateEndpoint+Join p50 ms | p99 ms "
        "| ovs-vsctl add-port ms | CreateEndpoint+Join p50 / add-port | flows added per endpoint "
        "| agent RSS | ovs-vswitchd RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        out.append(
            f"| {row['standing']} | {row['flows']} | {row['p50_ms']:.0f} | {row['p99_ms']:.0f} "
            f"| {row['ovs_add_port_ms']:.0f} | {ratio(row['p50_ms'], row['ovs_add_port_ms']):.2f} "
            f"| {row['flows_added']} | {row['rss_mib']:.0f} MiB "
            f"| {row['vswitchd_rss_mib']:.0f} MiB |"
        )
    reached = rows[-1]["standing"] if rows else 0
    wanted = max(sc["levels"])
    out += ["", *trouble_lines(sc.get("logged", {}))]
    if reached < wanted:
        out += [
            f"Not reached: {wanted} standing endpoints. Standing them up one at a time is "
            f"budgeted {sc['budget_s'] / 60:.0f} min under emulation (KERNEL_BENCH_BUDGET); "
            f"in that time the guest got to {reached}, the last row.",
            "",
        ]
    return out


def _n(count: int, what: str) -> str:
    return f"{count} {what}" if count == 1 else f"{count} {what}s"


def trouble_lines(logged: dict[str, int]) -> list[str]:
    if not any(logged.values()):
        return [
            "Meanwhile the agent logged no endpoint whose flows were late, no failed reconcile",
            "and no switch disconnect.",
            "",
        ]
    return [
        f"Meanwhile the agent logged {_n(logged['not_confirmed'], 'endpoint')} whose flows the "
        "switch had not confirmed within 2 s (CreateEndpoint+Join then returns without them; "
        "they follow once the controller gets them through), "
        f"{_n(logged['reconcile_failed'], 'failed reconcile')} (a read of the switch's flows "
        "refused or left unanswered) and "
        f"{_n(logged['disconnected'], 'switch disconnect')}; ovs-vswitchd logged "
        f"{_n(logged['probe_timeouts'], 'unanswered inactivity probe')} of the controller.",
        "",
    ]


def marked(r: dict[str, Any]) -> str:
    """The section with its markers, as docs/BENCHMARKS.md holds it."""
    return sections.wrap(sections.KERNEL, "\n".join(section(r)))


def write(out: Path, r: dict[str, Any]) -> str:
    """Replace only this section of ``out`` (before make fuzz's, if it is new)."""
    return sections.write(out, sections.KERNEL, section(r), before=sections.FUZZ)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kernel", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    p.add_argument("--no-write", action="store_true", help="print the section only")
    p.add_argument("--json", type=Path, help="also save the raw figures here")
    p.add_argument("--workdir", type=Path, help="keep the guests' consoles and logs here")
    p.add_argument("--from-json", type=Path, help="no run: the section of a --json file")
    args = p.parse_args(argv)
    if args.from_json:
        result = json.loads(args.from_json.read_text())
    elif args.workdir:
        result = run(args.workdir)
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="netplugin-bench-kernel-") as d:
            result = run(Path(d))
    if args.json and not args.from_json:
        args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result), file=sys.stderr)
    print("\n".join(section(result)))
    if not args.no_write:
        write(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
