"""docs/BENCHMARKS.md's writers: make bench rewrites the file but keeps make fuzz's section
(bench/sections.py, bench/__main__.write_report); make fuzz's counting and its section."""

from __future__ import annotations

import datetime
from pathlib import Path

from hypothesis import strategies as st

from bench import fuzz, sections
from bench.__main__ import managed_lines, write_report
from testbed.fuzz_tally import CRASH, Problem, Tally

FUZZ_TEXT = "## Fuzzing\n\n| API | requests |\n|---|---:|\n| master | 10000 |"


def test_a_section_is_added_then_replaced_in_place() -> None:
    start, end = sections.markers(sections.FUZZ)
    text = sections.replace("# Benchmarks\n\n## Machine\n", sections.FUZZ, FUZZ_TEXT)
    assert text == f"# Benchmarks\n\n## Machine\n\n{start}\n{FUZZ_TEXT}\n{end}\n"
    again = sections.replace(text + "\n## After\n", sections.FUZZ, "## Fuzzing\n\nnew")
    assert again == f"# Benchmarks\n\n## Machine\n\n{start}\n## Fuzzing\n\nnew\n{end}\n\n## After\n"
    assert sections.extract(again, "other") is None


def test_make_bench_keeps_the_fuzz_section(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "BENCHMARKS.md"
    write_report(out, ["# Benchmarks", "", "## Control plane", "old figures"])
    assert sections.extract(out.read_text(), sections.FUZZ) is None
    out.write_text(sections.replace(out.read_text(), sections.FUZZ, FUZZ_TEXT))
    kept = sections.extract(out.read_text(), sections.FUZZ)
    assert kept is not None and FUZZ_TEXT in kept
    written = write_report(out, ["# Benchmarks", "", "## Control plane", "new figures"])
    assert out.read_text() == written
    assert "new figures" in written and "old figures" not in written
    assert sections.extract(written, sections.FUZZ) == kept
    # ... and keeps it once: a second run does not add another.
    assert write_report(out, ["# Benchmarks", "", "newer"]).count(FUZZ_TEXT) == 1


def test_fuzz_plays_until_the_requests_are_sent() -> None:
    tally = Tally()

    def play(n: int, t: Tally) -> None:
        for _ in range(n):
            t.count(200, [])

    scenarios = fuzz.fuzz(st.integers(1, 4), play, 50, seed=7, tally=tally)
    assert tally.requests >= 50 and scenarios >= 13


def test_the_fuzz_section_has_the_counts() -> None:
    master, plugin = Tally(), Tally()
    for _ in range(9):
        master.count(404, [])
    plugin.count(500, [Problem(CRASH, "POST /NetworkDriver.Join '{}'", "500 boom")])
    results = {
        "seed": 42,
        "started": datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC),
        "apis": {
            "master": {"tally": master, "scenarios": 3, "seconds": 12.3},
            "plugin": {"tally": plugin, "scenarios": 1, "seconds": 4.0},
        },
    }
    text = fuzz.section(results, "python -m bench.fuzz --seed 42")
    assert "`python -m bench.fuzz --seed 42` repeats it) on 2026-01-02 03:04 UTC" in text
    assert "| master REST API | 9 | 3 | 0 | 0 | 9 | 0 | 0 | 0 | 0 | n/a | n/a | 12 s |" in text
    assert "| plugin Docker API | 1 | 1 | 0 | 0 | 0 | 1 | 1 | 0 | 0 | 0 | 0 | 4 s |" in text
    assert "- crash: POST /NetworkDriver.Join '{}': 500 boom" in text
    header, rule = (
        line for line in text.splitlines() if line.startswith("| API") or line.startswith("|---")
    )
    assert header.count("|") == rule.count("|")


def test_the_service_and_netprofile_section_reports_ratios_of_one_run() -> None:
    from bench import services

    r = {
        "conns": {"direct": [800.0, 820.0, 810.0], "vip": [700.0, 690.0, 710.0], "n": 500},
        "iperf": {"direct": [4000.0], "vip": [3800.0], "seconds": 4},
        "meter": [{"set": 10, "tcp": 9.9, "udp": 10.1}],
        "profile_apply_s": 0.3,
        "profile_apply_max_s": 0.4,
        "rounds": 3,
    }
    text = "\n".join(services.section(r))
    assert "| connections/s | 810 | 700 | 0.86 |" in text
    assert "| iperf3 Mbit/s | 4000 | 3800 | 0.95 |" in text
    assert "| 10 Mbit/s | 9.90 | 0.990 | 10.10 | 1.010 |" in text
    assert "median 300 ms, at most 400 ms" in text.replace("\n", " ")


def test_the_managed_plugin_line_says_whether_the_base_was_built_in_the_run() -> None:
    m = {"rootfs_mb": 280, "make_plugin_s": 21.0, "enable_s": 3.5, "docker_run": 0.4}
    run = {"netplugin": 0.35, "bridge": 0.32}
    cached = "\n".join(managed_lines({**run, "managed": {**m, "base_built": False}}))
    built = "\n".join(managed_lines({**run, "managed": {**m, "base_built": True}}))
    assert "21 s to build and create with the Debian base cached" in cached
    assert "21 s to build and create including the Debian base's debootstrap" in built
    assert "| seconds | 0.40 | 0.35 | 0.32 | 1.14 | 1.25 |" in cached
    assert managed_lines(run) == []
