"""bench/kernel.py's pure parts: its statistics, its section of docs/BENCHMARKS.md and how that
section is written alone (python -m bench.kernel) or with the rest (make bench); and
bench/scaling.py's budget, which bench/kernel_guest.py runs it with."""

from __future__ import annotations

import copy
import itertools
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from bench import kernel, scaling, sections
from bench.__main__ import write_report


def _row(n: int, flows: int, p50: float, p99: float, add_port: float) -> dict[str, Any]:
    return {
        "level": n, "standing": n, "flows": flows, "p50_ms": p50, "p99_ms": p99,
        "flows_added": 6, "rss_mib": 126.4, "vswitchd_rss_mib": 40.1,
        "ovs_add_port_ms": add_port, "samples": 30,
    }  # fmt: skip


RESULT: dict[str, Any] = {
    "started": "2026-01-02T03:04+00:00",
    "accel": "tcg",
    "guests": 2,
    "host_cpu": "Some CPU (2 cores)",
    "host_load": 1.04,
    "setup_s": 180.0,
    "wall_s": 1500.0,
    "machine": {
        "kernel": "6.1.0-50-amd64",
        "vcpus": 1,
        "memory_mib": 1967,
        "memory_mb_given": 2048,
        "ovs": "3.1.0",
        "docker": "20.10.24+dfsg1",
        "datapath": "system",
        "vxlan_port": "vxlan_sys_4789",
        "underlay_mtu": "1500",
    },
    "throughput": {
        "seconds": 5,
        "same_guest": {
            "netplugin": {"gbps": [1.0, 0.9, 1.1], "retransmits": [0, 2, 0]},
            "bridge": {"gbps": [1.2, 1.25, 0.8], "retransmits": [0, 0, 0]},
            "mtu": {"netplugin": 1450, "bridge": 1500},
        },
        "cross_guest": {
            "netplugin": {"gbps": [0.1, 0.12, 0.11], "retransmits": [60, 70, 80]},
            "kernel_vxlan": {"gbps": [0.125, 0.13, 0.09], "retransmits": [1, 2, 3]},
            "mtu": {"netplugin": 1450, "kernel_vxlan": 1450},
        },
    },
    "docker_run": {"netplugin": [12.0, 13.0, 11.0], "bridge": [10.0, 9.0, 8.0]},
    "scaling": {
        "rows": [_row(10, 107, 1000.0, 1350.0, 400.0), _row(100, 650, 1100.0, 1500.0, 440.0)],
        "seconds": 700.0,
        "levels": [10, 100, 1000],
        "budget_s": 600.0,
        "logged": {
            "not_confirmed": 0,
            "reconcile_failed": 0,
            "disconnected": 0,
            "probe_timeouts": 0,
        },
    },
}


def test_median_ratio_and_iperf_json() -> None:
    assert kernel.median([3.0, 1.0, 2.0]) == 2.0
    assert kernel.median([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert kernel.ratio(1.0, 4.0) == 0.25
    assert math.isnan(kernel.ratio(1.0, 0.0))
    out = json.dumps(
        {"end": {"sum_received": {"bits_per_second": 1.5e9}, "sum_sent": {"retransmits": 7}}}
    )
    assert kernel.iperf_result(out) == (1.5, 7)


def test_the_two_sides_run_in_turn() -> None:
    order: list[str] = []
    xs, ys = kernel.alternate(
        lambda: order.append("a") or len(order), lambda: order.append("b") or len(order), 3
    )
    assert order == ["a", "b"] * 3
    assert (xs, ys) == ([1, 3, 5], [2, 4, 6])


def test_the_section_is_labelled_emulated_with_its_machine_and_ratios() -> None:
    lines = kernel.section(RESULT)
    text = "\n".join(lines)
    assert lines[0] == "## The kernel datapath, in QEMU guests (emulated)"
    assert "**Emulated.**" in text
    assert "QEMU TCG guests, Debian 12 kernel 6.1.0-50-amd64, 1 vCPU, 2048 MiB" in text
    assert "load average before they started: 1.0)" in text
    assert "on 2026-01-02 03:04 UTC; the run took 25 min" in text
    # Medians and ratios: same guest 1.0 / 1.2, across 0.11 / 0.125, docker run 12 / 9.
    assert "| 1.000 Gbit/s | 1.200 Gbit/s | 0.83 |" in text
    assert "| 0.110 Gbit/s | 0.125 Gbit/s | 0.88 |" in text
    assert "| 12.00 s | 9.00 s | 1.33 |" in text
    assert "netplugin 1.000, 0.900 (2), 1.100; bridge 1.200, 1.250, 0.800" in text
    assert "| 10 | 107 | 1000 | 1350 | 400 | 2.50 | 6 | 126 MiB | 40 MiB |" in text
    for header, rule in itertools.pairwise(lines):
        if rule.startswith("|---"):
            assert header.count("|") == rule.count("|"), header


def test_the_section_says_when_a_count_was_not_reached() -> None:
    text = "\n".join(kernel.section(RESULT))
    assert "Not reached: 1000 standing endpoints" in text
    assert "budgeted 10 min" in text and "the guest got to 100" in text
    r = copy.deepcopy(RESULT)
    r["scaling"]["levels"] = [10, 100]
    assert "Not reached" not in "\n".join(kernel.section(r))


def test_no_emulation_note_on_kvm() -> None:
    r = {**RESULT, "accel": "kvm"}
    lines = kernel.section(r)
    assert lines[0] == "## The kernel datapath, in QEMU guests"
    assert "**Emulated.**" not in "\n".join(lines)
    assert "QEMU KVM guests" in "\n".join(lines)


def test_bench_kernel_alone_rewrites_only_its_section(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    fuzz = sections.wrap(sections.FUZZ, "## Fuzzing\n\ncounts")
    out.write_text(f"# Benchmarks\n\n## Control plane\n\nfigures\n\n{fuzz}\n")
    first = kernel.write(out, RESULT)
    section = sections.extract(first, sections.KERNEL)
    assert section is not None and section == kernel.marked(RESULT)
    # New: placed before make fuzz's section, the rest untouched.
    assert first == f"# Benchmarks\n\n## Control plane\n\nfigures\n\n{section}\n\n{fuzz}\n"
    r = copy.deepcopy(RESULT)
    r["docker_run"]["bridge"] = [12.0, 12.0, 12.0]
    second = kernel.write(out, r)
    assert "| 12.00 s | 12.00 s | 1.00 |" in second and "| 12.00 s | 9.00 s |" not in second
    assert second.replace(kernel.marked(r), section) == first


def test_make_bench_writes_the_kernel_section_and_keeps_fuzz(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    write_report(out, ["# Benchmarks", "", "old figures"])
    out.write_text(sections.replace(out.read_text(), sections.FUZZ, "## Fuzzing\n\ncounts"))
    fuzz = sections.extract(out.read_text(), sections.FUZZ)
    written = write_report(out, ["# Benchmarks", "", "new figures", kernel.marked(RESULT), ""])
    assert sections.extract(written, sections.FUZZ) == fuzz
    assert sections.extract(written, sections.KERNEL) == kernel.marked(RESULT)
    assert written.index(kernel.marked(RESULT)) < written.index(fuzz or "")
    assert written.count("<!-- section") == 2
    # A make bench whose guests failed: the last run's kernel section stays, once.
    again = write_report(out, ["# Benchmarks", "", "newer figures"])
    assert sections.extract(again, sections.KERNEL) == kernel.marked(RESULT)
    assert sections.extract(again, sections.FUZZ) == fuzz
    assert again.count("<!-- section kernel") == 1 and "new figures" not in again


class FakeCalls:
    def __init__(self) -> None:
        self.live: set[str] = set()
        self.n = 0

    def one(self) -> tuple[float, float, str, str]:
        self.n += 1
        self.live.add(str(self.n))
        return 0.001, 0.002, str(self.n), f"10.0.0.{self.n}"

    def remove(self, eid: str, addr: str) -> None:
        self.live.remove(eid)


@pytest.fixture
def no_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scaling, "flow_count", lambda bridge="netplugin": 0)
    monkeypatch.setattr(scaling, "ovs_add_port_ms", lambda bridge="netplugin", samples=5: 1.0)
    monkeypatch.setattr(scaling, "rss_mib", lambda pid: 1.0)
    monkeypatch.setattr(scaling, "vswitchd_pid", lambda: 1)


@pytest.mark.usefixtures("no_switch")
def test_scaling_measures_at_the_count_reached_by_its_deadline() -> None:
    calls = FakeCalls()
    rows = scaling.scaling(calls, 1, (3, 5), samples=2)  # type: ignore[arg-type]
    assert [(r["level"], r["standing"]) for r in rows] == [(3, 3), (5, 5)]
    assert not calls.live  # removed after
    calls = FakeCalls()
    past = time.monotonic() - 1
    rows = scaling.scaling(calls, 1, (3, 5), samples=2, deadline=past, keep=True)  # type: ignore[arg-type]
    assert [(r["level"], r["standing"]) for r in rows] == [(3, 0)]  # the levels after: left out
    assert calls.n == 2 and not calls.live  # the samples only, each removed


def test_the_section_reports_late_flows_from_the_logs() -> None:
    assert "logged no endpoint whose flows were late" in "\n".join(kernel.section(RESULT))
    r = copy.deepcopy(RESULT)
    r["scaling"]["logged"] = {
        "not_confirmed": 219, "reconcile_failed": 120, "disconnected": 40, "probe_timeouts": 68,
    }  # fmt: skip
    text = " ".join(kernel.section(r))
    assert "the agent logged 219 endpoints whose flows the switch had not confirmed" in text
    assert "120 failed reconciles" in text and "40 switch disconnects" in text
    assert "68 unanswered inactivity probes" in text
    r["scaling"]["logged"] = {
        "not_confirmed": 1, "reconcile_failed": 0, "disconnected": 0, "probe_timeouts": 0,
    }  # fmt: skip
    text = " ".join(kernel.section(r))
    assert "logged 1 endpoint whose" in text and "0 failed reconciles" in text
