"""Run the benchmarks and write docs/BENCHMARKS.md (method, machine, same-run ratios)."""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench import (
    churn,
    cni,
    control_plane,
    datapath,
    goals27,
    kernel,
    kvxlan,
    leader,
    multihost,
    policy,
    routing,
    scale,
    sections,
    services,
)
from bench.machine import describe

ROOT = Path(__file__).resolve().parent.parent


def _fmt_bytes(n: float) -> str:
    return f"{n / 1024 / 1024:.2f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KiB"


def control_plane_section(r: dict) -> list[str]:
    ms = r["master"]
    out = [
        "## Control plane: address allocation",
        "",
        "Method: a real `netmaster` (gunicorn, 1 worker x 16 threads) on 127.0.0.1, on the",
        "embedded store and on a real etcd started for the run, with group commit (the",
        "default: the allocations of concurrent requests share one transaction) and without",
        "(`--no-group-commit`: one transaction each). An allocation is one",
        "`POST /api/v1/alloc/endpoints`, which creates an endpoint and allocates its address in",
        "one compare-and-swap transaction. Clients are Python threads with keep-alive HTTP",
        "sessions, on the same 2 cores as the master; 500 allocations for 1 client, 2000 for",
        "16. Mean batch: transactions per commit, as the master counted them",
        "(`GET /stats/commits`).",
        "",
        "| backend | group commit | clients | allocations/s | p50 ms | p99 ms | mean batch |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (backend, mode), m in ms.items():
        if mode == "workers2":
            continue
        for clients in (1, 16):
            a = m[f"alloc{clients}"]
            batch = f"{a['meanBatch']:.1f}" if "meanBatch" in a else "1 (off)"
            out.append(
                f"| {backend} | {'on' if mode == 'group' else 'off'} | {clients} "
                f"| {a['rate']:.0f} | {a['p50_ms']:.1f} | {a['p99_ms']:.1f} | {batch} |"
            )
    out += [
        "",
        "Docker's RequestAddress as the plugin sends it to the master (`POST",
        "/api/v1/alloc/addresses`, one address each, no endpoint), same masters:",
        "",
        "| backend | group commit | clients | requests/s | p50 ms | p99 ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (backend, mode), m in ms.items():
        if mode == "workers2":
            continue
        for clients in (1, 16):
            a = m[f"addr{clients}"]
            out.append(
                f"| {backend} | {'on' if mode == 'group' else 'off'} | {clients} "
                f"| {a['rate']:.0f} | {a['p50_ms']:.1f} | {a['p99_ms']:.1f} |"
            )
    svc, lim, raw = r["service"], r["limits"], r["raw"]
    emb = ms[("embedded", "group")]
    rest1, rest16 = emb["rest1"], emb["rest16"]
    w2 = ms[("embedded", "workers2")]["alloc16"]
    out += [
        "",
        "The limits, same run:",
        "",
        "| limit | figure |",
        "|---|---:|",
        f"| SQLite on this disk, WAL, `synchronous=FULL` (an fsync per commit), 1 row per "
        f"commit | {lim[('FULL', 1)]:.0f} commits/s |",
        f"| the same, 16 rows per commit | {lim[('FULL', 16)]:.0f} rows/s |",
        f"| `synchronous=NORMAL` (no fsync per commit), 1 row per commit "
        f"| {lim[('NORMAL', 1)]:.0f} commits/s |",
        f"| the same, 16 rows per commit | {lim[('NORMAL', 16)]:.0f} rows/s |",
        f"| bare create-if-absent txns, 16 threads, no HTTP, no IPAM: embedded "
        f"| {raw['embedded']:.0f}/s |",
        f"| the same on etcd | {raw['etcd']:.0f}/s |",
        f"| an empty route of the master (`GET /version`), 1 client: per call "
        f"| {rest1['p50_ms']:.2f} ms (p50) |",
        f"| the same, 16 clients | {rest16['rate']:.0f} calls/s |",
    ]
    for backend in ("embedded", "etcd"):
        for threads in (1, 16):
            on, off = svc[(backend, "group", threads)], svc[(backend, "single", threads)]
            out.append(
                f"| allocation path in-process (`ClusterState`, no HTTP), {backend}, {threads} "
                f"thread{'s' if threads > 1 else ''}: group commit on / off "
                f"| {on['rate']:.0f} / {off['rate']:.0f} allocations/s |"
            )
    out.append(
        f"| `--workers 2` (embedded, group commit), 16 clients | {w2['rate']:.0f} allocations/s |"
    )
    e16, c16 = ms[("embedded", "group")]["alloc16"], ms[("etcd", "group")]["alloc16"]
    e16off, c16off = ms[("embedded", "single")]["alloc16"], ms[("etcd", "single")]["alloc16"]
    out += [
        "",
        f"Group commit, 16 clients: {e16['rate'] / e16off['rate']:.2f}x the allocations/s of one "
        f"transaction each on the embedded store, {c16['rate'] / c16off['rate']:.2f}x on etcd. "
        f"Through HTTP the embedded store reaches {e16['rate'] / rest16['rate']:.2f} of the empty "
        "route's rate: the REST layer (gunicorn, Flask and the Python clients on the same 2 "
        "cores) is the bound there, not the store; in-process the same path does "
        f"{svc[('embedded', 'group', 16)]['rate']:.0f}/s with 16 threads. `--workers 2`: "
        f"{w2['rate'] / e16['rate']:.2f}x one worker (2 cores, shared with the clients).",
        "",
    ]
    m = r["memory"]
    out += [
        "## IPAM memory: a /8 pool holding 100k allocations",
        "",
        "Method: `tracemalloc` around the pure allocator (`ipam.Allocator`) for a 10.0.0.0/8 pool.",
        "Contiguous = 100k sequential allocations; fragmented = then every third address released",
        "(the worst case for range-compressed state). Baselines, same run: a Python `set` of the",
        "same 100k addresses, and a bitmap of the whole /8.",
        "",
        "| state | memory | vs set of ints |",
        "|---|---:|---:|",
        f"| allocator, contiguous | {_fmt_bytes(m['contiguous_bytes'])} | "
        f"{m['contiguous_bytes'] / m['naive_set_bytes']:.3f} |",
        f"| allocator, fragmented (33k holes) | {_fmt_bytes(m['fragmented_bytes'])} | "
        f"{m['fragmented_bytes'] / m['naive_set_bytes']:.2f} |",
        f"| baseline: Python set of 100k ints | {_fmt_bytes(m['naive_set_bytes'])} | 1.00 |",
        f"| baseline: bitmap of the /8 | {_fmt_bytes(m['bitmap_bytes'])} | "
        f"{m['bitmap_bytes'] / m['naive_set_bytes']:.2f} |",
        "",
        f"Pure allocation cost: {m['alloc_us']:.2f} µs per address (cursor + interval bisect; "
        "independent of pool size).",
        "",
    ]
    return out


def datapath_section(r: dict) -> list[str]:
    run, lat, ip, fl = r["docker_run"], r["latency"], r["iperf"], r["flows"]
    rc = r["reconcile"]
    return [
        "## Single host: the Docker driver on Open vSwitch",
        "",
        f"Method: a real dockerd, Open vSwitch (datapath `{r['datapath_type']}`), netmaster",
        "(embedded store) and netplugin, started for the run. The baseline is Docker's own",
        "bridge driver, measured in the same run on the same host.",
        "",
        "| measure | netplugin | docker bridge (baseline) | netplugin / bridge |",
        "|---|---:|---:|---:|",
        f"| `docker run --rm … true`, median of {run['runs']} | {run['netplugin']:.2f} s | "
        f"{run['bridge']:.2f} s | {run['netplugin'] / run['bridge']:.2f} |",
        f"| iperf3 container to container, 5 s | {ip['netplugin']:.2f} Gbit/s | "
        f"{ip['bridge']:.2f} Gbit/s | {ip['netplugin'] / ip['bridge']:.2f} |",
        *managed_lines(run),
        "",
        f"Driver call latency, {lat['n']} endpoints: Docker's calls sent straight to the plugin",
        "socket, each over a real master and real OVS ports and flows.",
        "",
        "| call | p50 ms | p99 ms |",
        "|---|---:|---:|",
        f"| IpamDriver.RequestAddress | {lat['request_address_p50_ms']:.1f} | "
        f"{lat['request_address_p99_ms']:.1f} |",
        f"| NetworkDriver.CreateEndpoint + Join | {lat['create_join_p50_ms']:.1f} | "
        f"{lat['create_join_p99_ms']:.1f} |",
        f"| Leave + DeleteEndpoint + ReleaseAddress | {lat['teardown_p50_ms']:.1f} | "
        f"{lat['teardown_p99_ms']:.1f} |",
        f"| Plugin.Activate (no work: the socket and Flask) | {lat['activate_p50_ms']:.1f} | "
        f"{lat['activate_p99_ms']:.1f} |",
        "",
        *scaling_section(r["scaling"]),
        f"Flows for 500 endpoints in 10 networks: {fl['flows']} flows, computed in "
        f"{fl['compile_ms']:.1f} ms and diffed against an identical switch state in "
        f"{fl['diff_ms']:.1f} ms (pure computation).",
        "",
        "Flow reconcile with a real switch, 500 endpoints: the in-process controller "
        "(`python -m datapath.ofrunner`) against a private userspace OVS in its own namespace. "
        "*Reconcile* is the controller's own count: read the switch's flows, diff, send the "
        "flow-mods, barrier. *Wall* adds process start, os-ken start and the OpenFlow handshake.",
        "",
        "| case | flows added | reconcile | wall |",
        "|---|---:|---:|---:|",
        f"| empty bridge, every flow installed | {rc['cold']['added']} | "
        f"{rc['cold']['reconcile_s'] * 1000:.0f} ms | {rc['cold']['wall_s']:.2f} s |",
        f"| controller restart, every flow already right | {rc['restart']['added']} | "
        f"{rc['restart']['reconcile_s'] * 1000:.0f} ms | {rc['restart']['wall_s']:.2f} s |",
        f"| one endpoint added (a delta: no read) | {rc['one_more']['added']} | "
        f"{rc['one_more']['reconcile_s'] * 1000:.0f} ms | |",
        "",
        *churn_section(r["churn"]),
        *offload_lines(r),
    ]


def managed_lines(run: dict) -> list[str]:
    """`docker run` on the managed (v2) plugin beside the socket plugin and the bridge."""
    m = run.get("managed")
    if not m:
        return []
    base = (
        "including the Debian base's debootstrap"
        if m.get("base_built")
        else "with the Debian base cached"
    )
    return [
        "",
        f"The managed (v2) plugin (`make plugin`: {m['rootfs_mb']} MB rootfs, "
        f"{m['make_plugin_s']:.0f} s to build and create {base}, "
        f"`docker plugin enable` {m['enable_s']:.1f} s), measured after the socket plugin stopped:",
        "",
        "| `docker run --rm … true`, median of 10 | managed plugin | socket plugin | bridge |"
        " managed / socket | managed / bridge |",
        "|---|---:|---:|---:|---:|---:|",
        f"| seconds | {m['docker_run']:.2f} | {run['netplugin']:.2f} | {run['bridge']:.2f} | "
        f"{m['docker_run'] / run['netplugin']:.2f} | {m['docker_run'] / run['bridge']:.2f} |",
    ]


def offload_lines(r: dict) -> list[str]:
    if r["datapath_type"] != "netdev":
        return ["The kernel datapath (`system`): container interfaces keep their offloads.", ""]
    if r["switch_tso"]:
        return [
            "ovs-vswitchd ran with `userspace-tso-enable` (as `make run` starts it): the",
            "containers of this single host kept TX checksumming and TSO. Without it they",
            "must finish their checksums in the kernel, about 1 Gbit/s per TCP flow here.",
            "",
        ]
    return [
        "ovs-vswitchd ran without `userspace-tso-enable` (it was running already): the",
        "containers had TX checksumming off, about 1 Gbit/s per TCP flow here.",
        "",
    ]


def scaling_section(rows: list[dict]) -> list[str]:
    out = [
        "Scaling: the same calls with N endpoints standing on the host (real veths, OVS ports",
        f"and flows), {rows[0]['samples']} more created and removed one at a time beside them.",
        "*Flows added*: the switch's flow count after one more endpoint minus before. *RSS*:",
        "the agent process and ovs-vswitchd (started with `--mlockall` by ovs-ctl: it keeps",
        "its peak), with the N standing. All N are in one network. *ovs-vsctl add-port*:",
        "OVS's own cost of one more port at that size, without netplugin (a spare veth; the",
        "command returns once ovs-vswitchd has applied it; median of 5, process start included).",
        "",
        "| standing endpoints | switch flows | CreateEndpoint+Join p50 ms | p99 ms "
        "| flows added per endpoint | ovs-vsctl add-port | agent RSS | ovs-vswitchd RSS |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        out.append(
            f"| {row['standing']} | {row['flows']} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} "
            f"| {row['flows_added']} | {row['ovs_add_port_ms']:.1f} ms | {row['rss_mib']:.0f} MiB "
            f"| {row['vswitchd_rss_mib']:.0f} MiB |"
        )
    return [*out, ""]


def churn_section(churn: dict) -> list[str]:
    out = [
        "One more endpoint beside N standing ones (10 networks), in-process with the unit",
        "tests' fakes for OVSDB, links and iptables and their fake switch (no docker, no OVS):",
        "the path before issue 9 (compile every flow and diff; the controller reads every flow",
        "back, diffs and sends) against the incremental one (the flow model recompiles the",
        "units the endpoint touches; the controller sends that delta and a barrier, no read).",
        "Medians.",
        "",
        "| standing endpoints | flows | full compile + diff | incremental | full reconcile "
        "| delta sent | create_endpoint_port + send | flows changed |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, c in sorted(churn.items()):
        out.append(
            f"| {n} | {c['flows']} | {c['full_compile_ms']:.2f} ms | {c['incremental_ms']:.2f} ms "
            f"| {c['full_reconcile_ms']:.1f} ms | {c['delta_send_ms']:.2f} ms "
            f"| {c['agent_create_ms']:.2f} ms | {c['flows_changed']:.0f} |"
        )
    return [*out, ""]


def multihost_section(r: dict, ld: dict) -> list[str]:
    ip, prop, alloc = r["iperf"], r["propagation"], r["alloc"]
    out = [
        "## Several hosts",
        "",
        "Method: the simulated cluster of the integration tests: three host namespaces, each",
        "with its own userspace OVS (datapath `netdev`, VXLAN by userspace tunneling), dockerd",
        "and netplugin agent, on a Linux bridge underlay; etcd and two masters in a control",
        "namespace.",
        "",
        "| measure | netplugin | baseline | netplugin / baseline |",
        "|---|---:|---:|---:|",
        f"| iperf3 between containers on two hosts, {ip['seconds']} s (baseline: a plain Linux "
        f"VXLAN device between the same host namespaces, on an underlay of the same kind) | "
        f"{ip['netplugin']:.2f} Gbit/s | {ip['kernel']:.2f} Gbit/s | "
        f"{ip['netplugin'] / ip['kernel']:.2f} |",
        f"| Docker RequestAddress through each host's plugin socket, one network, 4 threads per "
        f"host (baseline: one host alone) | {alloc['three_hosts']:.0f}/s from 3 hosts | "
        f"{alloc['one_host']:.0f}/s | {alloc['three_hosts'] / alloc['one_host']:.2f} |",
        "",
        f"From `netctl net create` until the network is in the docker of all 3 hosts: median "
        f"{prop['median']:.2f} s, max {prop['max']:.2f} s over {prop['runs']} networks.",
        "",
        "Cross-host TCP runs with TX checksum offload off on container interfaces (OVS 3.1's",
        "userspace TSO does not work through VXLAN); HOST-SETUP measured about 0.75 Gbit/s",
        "for this path. Hosts with the OVS kernel module use kernel VXLAN ports instead.",
        "",
        "### Leader failover",
        "",
        ld["method"],
        "",
        "| case | median | max | runs |",
        "|---|---:|---:|---:|",
    ]
    cases = [(f"kill -9, `--leader-ttl {t}`", ld["kill9"][t]) for t in sorted(ld["kill9"])]
    cases.append(("SIGTERM (lease revoked), `--leader-ttl 10`", ld["graceful"]))
    for label, case in cases:
        out.append(
            f"| {label} | {case['median_s']:.2f} s | {case['max_s']:.2f} s | {ld['repeats']} |"
        )
    return [*out, ""]


def designs_section(rows: list[dict], dp: dict, mh: dict) -> list[str]:
    bridge, kernel = dp["iperf"]["bridge"], mh["iperf"]["kernel"]
    out = [
        "## Datapath designs measured beside the product",
        "",
        "Method: `bench/kvxlan.py`: two private OVS 3.1 (userspace, `userspace-tso-enable`)",
        "in namespaces joined by a veth underlay, a container namespace on each (or both on",
        "one), NORMAL flows or a conntrack table in front (`ct(table=1)`, commit on `+new`,",
        "drop `+inv`); iperf3 4 s. Ratios against this run's Linux bridge (same host) and",
        "kernel VXLAN (two hosts) baselines above.",
        "",
        "| case | Gbit/s | retransmits | vs baseline |",
        "|---|---:|---:|---:|",
    ]
    for r in rows:
        base = bridge if r["case"].startswith("same host") else kernel
        gbps = f"{r['gbps']:.2f}" if r["retransmits"] >= 0 else "stalled"
        out.append(f"| {r['case']} | {gbps} | {r['retransmits']} | {r['gbps'] / base:.2f} |")
    return [
        *out,
        "",
        "The kernel VXLAN device carries TSO segments out, but the receiving ovs-vswitchd",
        "reads the decapsulated stream one MTU-sized frame per AF_PACKET read (no GRO on that",
        "path) and drops under load; it beats userspace tunneling but not the 0.30 goal, and",
        "would move the VTEP address off OVS's underlay bridge, so it is not adopted",
        "(docs/DESIGN.md).",
        "",
    ]


def goals_section(cp: dict, dp: dict, mh: dict) -> list[str]:
    """Issue 9's table, each figure from this run, against its goal."""
    ms, lim = cp["master"], cp["limits"]
    run, lat, ip, scale = dp["docker_run"], dp["latency"], dp["iperf"], dp["scaling"]
    e16, c16 = ms[("embedded", "group")]["alloc16"], ms[("etcd", "group")]["alloc16"]
    rest16 = ms[("embedded", "group")]["rest16"]["rate"]
    svc16 = cp["service"][("embedded", "group", 16)]["rate"]
    flat = ", ".join(f"{r['p99_ms']:.0f} ms at {r['standing']}" for r in scale)
    gap = (run["netplugin"] - run["bridge"]) * 1000
    calls = lat["request_address_p50_ms"] + lat["create_join_p50_ms"] + lat["teardown_p50_ms"]
    port_cost = ", ".join(f"{r['ovs_add_port_ms']:.0f} ms at {r['standing']}" for r in scale)

    def met(ok: bool) -> str:
        return "yes" if ok else "no"

    rows = [
        ("`docker run --rm IMG true`, netplugin ÷ bridge",
         f"{run['netplugin'] / run['bridge']:.2f}", "≤ 1.10",
         met(run["netplugin"] / run["bridge"] <= 1.10),
         f"{gap:.0f} ms more per container than the bridge; netplugin's calls for one "
         f"container take {calls:.0f} ms (p50s: address, endpoint and join, teardown)"),
        ("CreateEndpoint+Join p99 (embedded), one at a time", f"{lat['create_join_p99_ms']:.1f} ms",
         "≤ 25 ms", met(lat["create_join_p99_ms"] <= 25),
         "veth + OVSDB port + flows confirmed on the switch + one master round trip"),
        ("CreateEndpoint+Join p99 at standing endpoints", flat, "flat, ≤ 25 ms",
         met(all(r["p99_ms"] <= 25 for r in scale)),
         f"ovs-vswitchd's own cost of a port (`ovs-vsctl add-port`): {port_cost}; and one "
         "MODIFY of the segment's flood group, which holds its every port"),
        ("RequestAddress p99 (through the socket)", f"{lat['request_address_p99_ms']:.1f} ms",
         "≤ 5 ms", met(lat["request_address_p99_ms"] <= 5),
         f"one master round trip with a fsynced commit; the floors: an empty master route "
         f"{ms[('embedded', 'group')]['rest1']['p50_ms']:.2f} ms, an empty plugin call "
         f"{lat['activate_p50_ms']:.2f} ms (p50s)"),
        ("allocations/s, 16 clients, embedded", f"{e16['rate']:.0f}", "≥ 5,000",
         met(e16["rate"] >= 5000),
         f"REST ceiling {rest16:.0f} calls/s (empty route); in-process {svc16:.0f}/s; "
         f"SQLite {lim[('FULL', 1)]:.0f} fsynced commits/s"),
        ("allocations/s, 16 clients, etcd", f"{c16['rate']:.0f}", "≥ 1,000",
         met(c16["rate"] >= 1000), f"same REST ceiling; etcd txns {cp['raw']['etcd']:.0f}/s bare"),
        ("same-host TCP ÷ Linux bridge", f"{ip['netplugin'] / ip['bridge']:.2f}", "≥ 0.55",
         met(ip["netplugin"] / ip["bridge"] >= 0.55),
         "userspace TSO (this run: " + ("on" if dp["switch_tso"] else "off") + ")"),
        ("cross-host TCP ÷ kernel VXLAN", f"{mh['iperf']['netplugin'] / mh['iperf']['kernel']:.2f}",
         "≥ 0.30", met(mh["iperf"]["netplugin"] / mh["iperf"]["kernel"] >= 0.30),
         "OVS 3.1 userspace tunneling, no TSO into tunnels; kernel VXLAN port measured above"),
    ]  # fmt: skip
    out = [
        "## Issue 9's figures in this run",
        "",
        "| figure | this run | goal | met | what bounds it |",
        "|---|---:|---|---|---|",
    ]
    out += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows]
    return [*out, ""]


# The parts with a marked section of their own: --skip keeps that section from its last run
# (it says when that was), as when a part's lab fails.
OWN_SECTIONS = ("kernel", "routing", "scale")


def main(argv: list[str] | None = None) -> int:
    from testbed.etcd import EtcdServer

    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument(
        "--skip",
        default="",
        help=f"comma-separated parts not to run, of {', '.join(OWN_SECTIONS)}: their "
        "sections stay as the last run wrote them (the kernel's takes ~50 min in emulated "
        "guests)",
    )
    args = p.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    if unknown := skip - set(OWN_SECTIONS):
        p.error(f"--skip: unknown part(s) {', '.join(sorted(unknown))}")

    def part(name: str, what: str, run: Callable[[Path], dict], work: Path) -> dict | None:
        return None if name in skip else measured_or_none(what, run, work)

    started = datetime.datetime.now(datetime.UTC)
    with tempfile.TemporaryDirectory(prefix="netplugin-bench-") as d:
        work = Path(d)
        etcd = EtcdServer(work / "etcd")
        etcd.start()
        try:
            cp = control_plane.run(etcd.endpoint, work)
            ld = leader.run(etcd.endpoint, work)
        finally:
            etcd.stop()
        dp = datapath.run_with_managed(work)
        mh = multihost.run(work)
        kv = kvxlan.run_designs(work)
        kn = part("kernel", "the kernel datapath", kernel.run, work)
        rt = part("routing", "routing mode", routing.run, work)
        sc = part("scale", "the simulated hosts", scale.run, work)
        ch = measured_or_none("the churn burst", churn.run, work)
    lines = [
        "# Benchmarks",
        "",
        f"Written by `make bench` on {started:%Y-%m-%d %H:%M} UTC. Figures are from one run",
        "on the machine below; every ratio compares two figures measured in that same run.",
        "Tests never assert on timings; this file is the only place they are reported.",
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in describe().items()],
        "",
        *control_plane_section(cp),
        *datapath_section(dp),
        *multihost_section(mh, ld),
        *policy.section(dp["policy"], dp["policy_costs"]),
        *services.section(dp["services"]),
        *cni.section(dp["cni"]),
        *designs_section(kv, dp, mh),
        *goals_section(cp, dp, mh),
        *goals27.section(dp, sc, ch),
        *(churn.section(ch) if ch else []),
        *([scale.marked(sc), ""] if sc else []),  # else write_report keeps the last run's
        *([routing.marked(rt), ""] if rt else []),  # else write_report keeps the last run's
        *([kernel.marked(kn), ""] if kn else []),
    ]
    print(write_report(ROOT / "docs" / "BENCHMARKS.md", lines))
    return 0


def measured_or_none(what: str, run: Callable[[Path], dict], work: Path) -> dict | None:
    """A part's figures; None (with the reason on stderr) if its lab failed: the rest of
    the report stands without it, and write_report keeps that part's last section."""
    try:
        return run(work)
    except Exception as e:
        print(f"bench: {what} was not measured: {e!r}", file=sys.stderr)
        return None


def write_report(out: Path, lines: list[str]) -> str:
    """Write ``lines`` to ``out``, keeping the marked sections of ``out`` that ``lines`` lack
    (make fuzz's; the kernel datapath's when its guests failed in this run)."""
    text = "\n".join(lines)
    if out.exists():
        text = sections.keep(out.read_text(), text)
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main())
