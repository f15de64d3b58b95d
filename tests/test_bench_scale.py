"""bench/scale.py's pure parts and its report: the figures of a small fixture run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import scale, sections


def row(mode: str, hosts: int, endpoint_p99: float, network_p99: float = 0.1) -> dict[str, Any]:
    def s(p99: float) -> dict[str, Any]:
        return {"p50": p99 / 2, "p99": p99, "max": p99 * 1.5, "missing": 0}

    return {
        "mode": mode,
        "hosts": hosts,
        "endpoints": hosts * 3,
        "propagation": {"network": s(network_p99), "group": s(0.05), "endpoint": s(endpoint_p99)},
        "watch": {
            "etcd_debugging_mvcc_watcher_total": hosts * (11 if mode == "legacy" else 1),
            "etcd_debugging_mvcc_watch_stream_total": hosts * (11 if mode == "legacy" else 1),
        },
        "idle_etcd_cpu": 10.0,
        "busy_etcd_cpu": 50.0,
        "etcd_rss_mb": 60.0,
        "idle_leader_cpu": 1.0,
        "busy_leader_cpu": 20.0,
        "leader_rss_mb": 96.0,
        "agent_mb_per_host": 1.25,
        "sync_s": 3.0,
    }


RUN = {
    "rows": [
        row("legacy", 10, 0.02),
        row("hub", 10, 0.01),
        row("legacy", 100, 2.5),
        row("hub", 100, 0.3),
        {"mode": "legacy", "hosts": 1000, "refused": "needs ~24,000 threads"},
        row("hub", 1000, 0.9, network_p99=1.2),
    ],
    "per_host": 30,
    "cap": 3000,
    "workers": 2,
}


def test_standing_endpoints_are_per_host_up_to_the_cap() -> None:
    assert scale.standing_endpoints(10, 30, 3000) == 300
    assert scale.standing_endpoints(1000, 30, 3000) == 3000


def test_a_run_over_the_thread_budget_is_refused_with_its_need() -> None:
    assert scale.refusal("hub", 500) == ""
    assert "30,000 threads" in scale.refusal("hub", 10_000)
    assert "300 lease refreshes/s" in scale.refusal("hub", 1000)
    assert scale.refusal("hub", 1000, refreshes=300) == ""


def test_spread_is_over_the_agents_that_saw_it_and_counts_the_others() -> None:
    s = scale.spread([0.1, 0.2, None, 0.3])
    assert (s["p50"], s["max"], s["missing"]) == (0.2, 0.3, 1)
    assert scale.spread([None])["missing"] == 1


def test_metrics_are_summed_over_their_labels() -> None:
    text = (
        "# HELP etcd_debugging_mvcc_watcher_total x\n"
        "etcd_debugging_mvcc_watcher_total 12\n"
        'etcd_network_client_grpc_sent_bytes_total{type="a"} 1.5e+06\n'
        'etcd_network_client_grpc_sent_bytes_total{type="b"} 500000\n'
        "etcd_debugging_mvcc_watcher_total_other 99\n"
    )
    got = scale.parse_metrics(text)
    assert got["etcd_debugging_mvcc_watcher_total"] == 12
    assert got["etcd_network_client_grpc_sent_bytes_total"] == 2e6
    assert got["etcd_debugging_mvcc_watch_stream_total"] == 0


def test_cpu_ticks_read_past_a_name_with_spaces() -> None:
    stat = "42 (etcd (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 9 0 1 2 3"
    assert scale.cpu_ticks(stat) == 12


def test_the_knee_is_the_first_size_that_misses_a_goal_and_not_a_size_not_run() -> None:
    refused = {"mode": "hub", "hosts": 300, "refused": "needs ~4,500 threads"}
    assert scale.knee([row("hub", 10, 0.1), refused], "hub") is None
    lines = scale.goal_lines({"rows": [row("hub", 10, 0.1), refused]})
    assert "no knee up to the largest run (not run at 300 hosts" in lines[0]
    assert scale.knee(RUN["rows"], "legacy") == 100  # endpoint p99 2.5 s > 2 s
    assert scale.knee(RUN["rows"], "hub") == 1000  # network p99 1.2 s > 1 s
    assert scale.knee([row("hub", 10, 0.1)], "hub") is None


def test_the_section_has_every_row_and_the_goals_beside_the_largest_run() -> None:
    text = "\n".join(scale.section(RUN))
    assert "| 1000 | legacy | not run: needs ~24,000 threads |" in text
    assert "| 10 | hub | 30 | 50 / 100 / 150 | 25 / 50 / 75 | 5 / 10 / 15 | 10 / 10 |" in text
    assert "10% / 50% | 60 MiB | 1% / 20% | 96 MiB | 1.25 | 3.0 s |" in text
    assert "`hub`, 1000 hosts: endpoint p99 900 ms (goal ≤ 2,000), network p99 1200 ms" in text
    assert "not met; goals first missed at 1000 hosts" in text
    # 5,000 hosts from the 1,000-host run: 5x its watchers and CPU
    assert "5,000 etcd watchers, etcd 0.5 cores idle (keep-alives) and 2.5 while" in text
    assert "`legacy`, 100 hosts" in text and "goals first missed at 100 hosts" in text


def test_bench_scale_rewrites_only_its_section_and_make_bench_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    routing = sections.wrap(sections.ROUTING, "routing figures")
    out.write_text(f"# Benchmarks\n\nthe rest\n\n{routing}\n")
    sections.write(out, scale.SCALE, scale.section(RUN), before=sections.ROUTING)
    text = out.read_text()
    assert text.index("## Simulated hosts") < text.index("routing figures")
    assert sections.extract(text, scale.SCALE) == scale.marked(RUN)
    assert sections.extract(sections.keep(text, "# Benchmarks\n"), scale.SCALE)


def test_etcd_keeps_its_data_in_memory_when_the_machine_has_a_tmpfs(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    assert scale.etcd_dir(tmp_path / "run", shm) == tmp_path / "run" / "etcd"  # none
    shm.mkdir()
    d = scale.etcd_dir(tmp_path / "run", shm)
    assert d.parent == shm and d.is_dir()
