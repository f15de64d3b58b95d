"""bench/scale.py's pure parts and its report: the figures of a small fixture run."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from bench import scale, sections
from bench.lease_keeper import Kept, LeaseKeeper, Schedule


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


def test_a_run_over_the_thread_or_refresh_budget_is_refused_with_its_need() -> None:
    assert scale.refusal("hub", 1000) == ""
    assert "30,070 threads" in scale.refusal("hub", 10_000)  # 3 an agent, 35 a worker
    # one refresh a host every third of the 10 s TTL, split among the workers' keepers
    assert "600 lease refreshes/s of each" in scale.refusal("hub", 4000, workers=2)
    assert scale.refusal("hub", 4000, workers=8) == ""


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


# ---------------------------------------------------------------- the lease keeper


class _Lease:
    """What the keeper uses of a Lease: its ttl, refresh() and lost."""

    def __init__(self, ttl: int, answers: list[object]) -> None:
        self.id, self.ttl = 1, ttl
        self.lost = threading.Event()
        self._answers = answers
        self.calls = 0

    def refresh(self) -> int:
        self.calls += 1
        answer = self._answers.pop(0) if self._answers else self.ttl
        if isinstance(answer, Exception):
            raise answer
        return int(answer)  # type: ignore[call-overload]


def kept(ttl: float = 9.0) -> Kept:
    return Kept(_Lease(int(ttl), []), ttl)  # type: ignore[arg-type]


def test_the_first_refresh_is_a_random_part_of_a_third_of_the_ttl_early() -> None:
    s = Schedule(rand=lambda: 0.0)
    a = kept()
    assert s.add(a, now=100.0)  # the only one: first due
    assert (a.due, a.deadline) == (103.0, 109.0)
    b = kept()
    assert Schedule(rand=lambda: 1.0).add(b, now=100.0) and b.due == 101.5  # half early


def test_due_leases_come_out_earliest_first_and_an_ended_one_is_dropped() -> None:
    s = Schedule(rand=lambda: 0.0)
    late, early, gone = kept(9.0), kept(3.0), kept(6.0)
    s.add(late, 0.0)  # due 3
    assert s.add(early, 0.0)  # due 1: now the first
    assert not s.add(gone, 0.0)  # due 2
    gone.ended.set()
    assert s.wait(0.5) == 0.5
    assert s.pop_due(2.5) == [early]  # gone dropped, late not due yet
    assert s.pop_due(10.0) == [late]
    assert s.wait(10.0) is None and len(s) == 0


def test_after_a_refresh_the_lease_lives_ttl_from_its_sending_and_goes_again_in_a_third() -> None:
    s = Schedule(rand=lambda: 0.0)
    a = kept(9.0)
    s.add(a, 0.0)
    s.pop_due(3.0)
    a.retry = 2.0
    assert s.refreshed(a, sent=3.0, now=3.5, ttl=12)
    assert (a.deadline, a.due, a.retry, a.ttl) == (15.0, 7.5, 0.25, 12.0)


def test_failures_are_retried_ever_further_apart_and_lost_past_the_ttl() -> None:
    s = Schedule(rand=lambda: 0.0)  # no jitter: the full delays
    a = kept(9.0)
    s.add(a, 0.0)  # deadline 9
    delays = []
    now = 3.0
    while (d := s.failed(a, now)) is not None:
        delays.append(d)
        now += d
    assert delays == [0.5, 1.0, 2.0, 2.5]  # doubling from 0.25; the last cut at the TTL
    assert now >= 9.0 and sum(delays) == now - 3.0  # never retried past the deadline
    assert s.failed(a, 9.0) is None
    jittered = Schedule(rand=lambda: 1.0)
    b = kept(9.0)
    jittered.add(b, 0.0)
    assert jittered.failed(b, 3.0) == 0.25  # cut by up to half


def test_the_keeper_refreshes_retries_and_reports_a_lost_lease() -> None:
    from store.base import LeaseNotFound, StoreUnavailable

    told: list[object] = []
    keeper = LeaseKeeper(workers=2, on_lost=told.append).start()
    try:
        # ttl 1: refreshed every ~1/3 s; an outage is retried; LeaseNotFound loses it.
        lease = _Lease(1, [1, StoreUnavailable("down"), 1, LeaseNotFound("gone")])
        stopped = threading.Event()
        keeper.keep(lease, stopped.wait)  # type: ignore[arg-type]  # returns once lost
        assert lease.lost.is_set() and lease.calls == 4 and told == [lease]
        assert keeper.stats.as_dict()["lost"] == 1 and keeper.stats.failures == 1
        # A stopped caller's keep returns at close(), its lease not lost.
        other = _Lease(1, [])
        done = threading.Thread(target=keeper.keep, args=(other, lambda s: True))
        done.start()
        keeper.close()
        done.join(10)
        assert not done.is_alive() and not other.lost.is_set()
    finally:
        keeper.close()


def test_the_keepers_of_several_workers_add_up() -> None:
    a = {"refreshes": 10, "failures": 0, "lost": 1, "late_over_1s": 0}
    b = {"refreshes": 30, "failures": 0, "lost": 0, "late_over_1s": 2}
    got = scale.keeper_sum(
        [{**a, "late_max_s": 0.5, "late_mean_s": 0.1}, {**b, "late_max_s": 2.0, "late_mean_s": 0.5}]
    )
    assert (got["refreshes"], got["lost"], got["late_over_1s"], got["late_max_s"]) == (
        40,
        1,
        2,
        2.0,
    )
    assert abs(got["late_mean_s"] - 0.4) < 1e-9  # weighted by refreshes sent
