"""CNI benchmarks, on the single-host stack: ADD and DEL latency of netplugin-cni (the
launcher `netplugin-cni install` writes, exec'ed as a runtime runs it, through the agent)
against Debian's ptp with host-local doing the same in the same run, and what the
executable's start costs (VERSION, which needs no agent, against ptp's; the console script's
too)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from typing import Any

from bench.stats import pct
from cni.launcher import chosen, install
from testbed.lab import BIN, NetctlLab

PTP = "/usr/lib/cni/ptp"


def _exec(plugin: str, command: str, cid: str, netns: str, config: dict[str, Any]) -> float:
    env = {
        "PATH": os.environ["PATH"],
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": netns,
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/usr/lib/cni",
    }
    t0 = time.perf_counter()
    proc = subprocess.run(
        [plugin], input=json.dumps(config), capture_output=True, text=True, env=env, timeout=60
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{plugin} {command}: {proc.stdout} {proc.stderr}")
    return seconds


def _cycle(plugin: str, config: dict[str, Any], n: int) -> dict[str, list[float]]:
    add, delete = [], []
    for _ in range(n):
        ns = f"np-bench-{uuid.uuid4().hex[:6]}"
        subprocess.run(["ip", "netns", "add", ns], check=True)
        try:
            cid = uuid.uuid4().hex
            add.append(_exec(plugin, "ADD", cid, f"/run/netns/{ns}", config))
            delete.append(_exec(plugin, "DEL", cid, f"/run/netns/{ns}", config))
        finally:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return {"add": add, "del": delete}


def _plug_costs() -> dict[str, Any]:
    """The agent's measured port-add and move costs, and which pair its pods got (netctl
    host inspect teardown's); {} without a port pool."""
    netctl = [str(BIN / "netctl"), "host", "inspect", "--json", "teardown"]
    out = subprocess.run(netctl, capture_output=True, text=True, timeout=30, check=True)
    return json.loads(out.stdout).get("costs") or {}


def pair_said(costs: dict[str, Any]) -> str:
    """Which pair the pods got, and why, in words."""
    if not costs:
        return "their own pair (no port pool)"
    pair = (
        "their own pair, made in their namespace"
        if costs["cni_pair"] == "own"
        else "a pool port, its end moved in"
    )
    return (
        f"{pair} (the agent's measured port add {costs['port_add_ms']} ms against a move "
        f"of {costs['move_ms']} ms{'' if costs['moves'] else ', its prior'})"
    )


def live(master_url: str, n: int = 50) -> dict[str, Any]:
    script = str(BIN / "netplugin-cni")  # the console script: Python's start with site
    with NetctlLab(master_url, "10.154.0.0/24") as lab, tempfile.TemporaryDirectory() as d:
        ours = install(d)  # as the README installs it
        conf = {"cniVersion": "1.0.0", "name": "b", "type": "netplugin-cni", "network": lab.network}
        ref = {
            "cniVersion": "1.0.0",
            "name": "ref",
            "type": "ptp",
            "ipam": {"type": "host-local", "subnet": "10.155.0.0/24", "dataDir": d},
        }
        _cycle(ours, conf, 3)  # warm-up (the agent's network port, page cache)
        _cycle(PTP, ref, 3)
        result = {"netplugin": _cycle(ours, conf, n), "ptp": _cycle(PTP, ref, n), "n": n}
        result["launcher"] = chosen("auto")
        result["costs"] = _plug_costs()
        result["version"] = {
            "netplugin": [
                _exec(ours, "VERSION", "", "", {"cniVersion": "1.0.0"}) for _ in range(n)
            ],
            "ptp": [_exec(PTP, "VERSION", "", "", {"cniVersion": "1.0.0"}) for _ in range(n)],
            "script": [_exec(script, "VERSION", "", "", {"cniVersion": "1.0.0"}) for _ in range(n)],
        }
        return result


def section(r: dict[str, Any]) -> list[str]:
    """docs/BENCHMARKS.md's CNI section."""

    def ms(values: list[float], p: int) -> str:
        return f"{pct(values, p) * 1000:.1f}"

    rows = []
    for label, key in (("ADD", "add"), ("DEL", "del")):
        ours, ref = r["netplugin"][key], r["ptp"][key]
        rows.append(
            f"| {label} | {ms(ours, 50)} | {ms(ours, 99)} | {ms(ref, 50)} | {ms(ref, 99)} "
            f"| {pct(ours, 50) / pct(ref, 50):.2f} |"
        )
    v = r["version"]
    for label, key in (("VERSION", "netplugin"), ("VERSION, the console script", "script")):
        ours, ref = v[key], v["ptp"]
        rows.append(
            f"| {label} | {ms(ours, 50)} | {ms(ours, 99)} "
            f"| {ms(ref, 50)} | {ms(ref, 99)} | {pct(ours, 50) / pct(ref, 50):.2f} |"
        )
    return [
        "## CNI (issue 13)",
        "",
        f"Method: {r['n']} ADD then DEL of a fresh network namespace each, by exec'ing the",
        "plugin as a runtime does (the CNI_* environment, the configuration on stdin), timed",
        "from exec to exit. netplugin-cni is the launcher `netplugin-cni install` writes",
        f"({r.get('launcher', 'python')}): it hands each call, unparsed, to the agent of the",
        "single-host stack above, which books the address with the master, plugs an OVS port",
        f"and waits for its flows. The pods got {pair_said(r.get('costs') or {})}.",
        "Debian's ptp (containernetworking-plugins 1.1.1) with host-local makes a veth",
        "pair and routes, in the same run. VERSION needs no agent: it is the plugin's own",
        "start and its JSON (Python's, for netplugin-cni, which the Perl launcher starts for",
        "it; a Go binary for ptp); the console script's start adds site-packages.",
        "",
        "| call | netplugin-cni p50 ms | p99 ms | ptp + host-local p50 ms | p99 ms | ratio p50 |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]
