"""bench/goals27.py: issue 27's goal table from a run's figures, including parts not
measured."""

from __future__ import annotations

from typing import Any

from bench import goals27


def datapath(run: float = 0.95, cj_p99: tuple[float, ...] = (12.0, 18.0, 24.0)) -> dict[str, Any]:
    return {
        "docker_run": {"netplugin": run, "bridge": 1.0, "runs": 10},
        "latency": {
            "request_address_p50_ms": 4.0,
            "create_join_p50_ms": 12.0,
            "teardown_p50_ms": 14.0,
        },
        "scaling": [
            {"standing": n, "p99_ms": p, "ovs_add_port_ms": n / 6}
            for n, p in zip((10, 100, 1000), cj_p99, strict=True)
        ],
        "cni": {"netplugin": {"add": [0.029, 0.031, 0.033]}, "ptp": {"add": [0.010, 0.010, 0.010]}},
    }


def scale_row(hosts: int, ep_p99: float, net_p99: float) -> dict[str, Any]:
    spread = {"p50": 0.01, "max": 0.5, "missing": 0}
    return {
        "mode": "hub",
        "hosts": hosts,
        "synced": True,
        "propagation": {
            "endpoint": {**spread, "p99": ep_p99},
            "network": {**spread, "p99": net_p99},
        },
        "idle_etcd_cpu": 12.0,
        "idle_leader_cpu": 1.0,
        "watch": {"etcd_debugging_mvcc_watcher_total": float(hosts)},
    }


class table:
    def __init__(self, rows: list[tuple]) -> None:
        self.rows = rows

    def __getitem__(self, start: str) -> tuple:
        (row,) = [r for r in self.rows if r[0].startswith(start)]
        return row

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (r[0] for r in self.rows)


def test_each_goal_is_judged_from_this_runs_figures() -> None:
    sc = {"rows": [scale_row(300, 0.2, 0.5), scale_row(1000, 1.5, 1.2)]}
    ch = {"standing": 1000, "burst": 100, "netplugin": {"last_s": 33.0}, "bridge": {"last_s": 22.0}}
    got = table(goals27.rows(datapath(), sc, ch))
    assert got["`docker run --rm IMG true`"][1:4] == ("0.95", "≤ 1.00", "yes")
    assert got["CreateEndpoint+Join p99 at 10"][3] == "yes"
    assert got["CNI ADD p50"][1] == "3.10" and got["CNI ADD p50"][3] == "no"
    ep = got["1,000 simulated hosts: an endpoint reaches every view"]
    net = got["1,000 simulated hosts: a network reaches every view"]
    assert ep[1:4] == ("1.50 s", "≤ 2 s", "yes") and net[1:4] == ("1.20 s", "≤ 1 s", "no")
    projected = got["5,000 hosts"]
    assert "etcd 0.6 cores idle" in projected[1] and "5,000 watchers" in projected[1]
    assert got["100 containers beside 1,000 standing"][1] == "1.50"


def test_one_slow_level_misses_the_flat_goal() -> None:
    got = table(goals27.rows(datapath(run=1.05, cj_p99=(12, 18, 80)), None, None))
    assert got["`docker run --rm IMG true`"][3] == "no"
    assert got["CreateEndpoint+Join p99 at 10"][3] == "no"


def test_hosts_not_measured_say_why_and_meet_nothing() -> None:
    sc = {"rows": [scale_row(300, 0.2, 0.5), {"mode": "hub", "hosts": 1000, "refused": "x"}]}
    got = table(goals27.rows(datapath(), sc, None))
    ep = got["1,000 simulated hosts: an endpoint reaches every view"]
    assert ep[1] == "not measured: x" and ep[3] == "no"
    assert "from 300" in next(k for k in got if k.startswith("5,000"))
    burst = got["100 containers beside 1,000 standing"]  # its part failed
    assert burst[1] == "not measured in this run" and burst[3] == "no"
    lines = goals27.section(datapath(), sc, None)
    assert lines[0] == "## Issue 27's figures in this run" and lines[-1] == ""
    skipped = table(goals27.rows(datapath(), None, None))  # --skip scale
    ep = skipped["1,000 simulated hosts: an endpoint reaches every view"]
    assert ep[1] == "not measured in this run" and ep[3] == "not measured"
    assert "section keeps its last run's" in ep[4]


def test_the_cni_row_says_which_pair_the_pods_got_and_why() -> None:
    from bench.cni import pair_said

    own = {"port_add_ms": 12.5, "port_adds": 4, "move_ms": 20.0, "moves": 0, "cni_pair": "own"}
    said = pair_said(own)
    assert said.startswith("their own pair, made in their namespace")
    assert "port add 12.5 ms against a move of 20.0 ms, its prior" in said
    moved = {**own, "port_add_ms": 158.0, "move_ms": 31.2, "moves": 33, "cni_pair": "pool"}
    assert pair_said(moved).startswith("a pool port, its end moved in (")
    assert "prior" not in pair_said(moved)
    assert pair_said({}) == "their own pair (no port pool)"
    dp = datapath()
    dp["cni"]["costs"] = moved
    cni_row = next(r for r in goals27.rows(dp, None, None) if r[0].startswith("CNI ADD"))
    assert "a pool port, its end moved in" in cni_row[4]
