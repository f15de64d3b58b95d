"""make fuzz: the long fuzz run of the master's REST API and the plugin's Docker API, with its
counts written into docs/BENCHMARKS.md (a section of its own, which make bench keeps).

    python -m bench.fuzz [--master 10000] [--plugin 2000] [--seed N] [--no-write]

FUZZ_MASTER, FUZZ_PLUGIN and FUZZ_SEED give the defaults. The scenarios and the properties are
the unit suite's (testbed/fuzz_master.py, testbed/fuzz_plugin.py); here they run with a random seed
(printed, and written down so a run can be repeated) until the given number of requests was
sent, and every problem is counted instead of stopping at the first. Exits 1 if any was found.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench import sections
from bench.machine import describe
from testbed import fuzz_master, fuzz_plugin
from testbed.fuzz_tally import CHANGED, CRASH, LEAK, SHAPE, STRAY, Tally

ROOT = Path(__file__).resolve().parent.parent

COLUMNS = [(CRASH, "crashes"), (SHAPE, "bad error shape"), (CHANGED, "state changed on refusal")]
COLUMNS += [(LEAK, "leaks"), (STRAY, "stray changes")]
CHECKED = {"master": {CRASH, SHAPE, CHANGED}, "plugin": {kind for kind, _ in COLUMNS}}


def fuzz(
    strategy: st.SearchStrategy[Any],
    play: Callable[[Any, Tally], None],
    target: int,
    seed: int,
    tally: Tally,
) -> int:
    """Play scenarios drawn from ``strategy`` until ``target`` requests were sent; returns
    how many scenarios that took. Hypothesis draws them (generation only: nothing fails, so
    nothing is shrunk), in batches sized by the requests a scenario has sent so far."""
    scenarios = 0
    batch = 0
    while tally.requests < target:
        per_scenario = tally.requests / scenarios if scenarios else 3.0
        examples = int((target - tally.requests) / per_scenario) + 1

        def one(scenario: Any) -> None:
            nonlocal scenarios
            scenarios += 1
            play(scenario, tally)

        run = settings(
            max_examples=examples,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(given(strategy)(one))
        hypothesis.seed(seed + batch)(run)()
        batch += 1
    return scenarios


def run(master_requests: int, plugin_requests: int, seed: int) -> dict[str, Any]:
    started = datetime.datetime.now(datetime.UTC)
    results: dict[str, Any] = {"seed": seed, "started": started, "apis": {}}
    doc = fuzz_master.openapi_doc()
    for name, strategy, play, target in (
        ("master", fuzz_master.scenarios(doc), fuzz_master.run_scenario, master_requests),
        ("plugin", fuzz_plugin.scenarios(), fuzz_plugin.run_scenario, plugin_requests),
    ):
        tally = Tally()
        t0 = time.monotonic()
        scenarios = fuzz(strategy, play, target, seed, tally)
        results["apis"][name] = {
            "tally": tally,
            "scenarios": scenarios,
            "seconds": time.monotonic() - t0,
        }
        print(f"{name}: {tally.requests} requests, {dict(tally.by_class)}, {dict(tally.problems)}")
    return results


def section(results: dict[str, Any], command: str) -> str:
    """The BENCHMARKS.md section for ``results``."""
    machine = describe()
    apis = results["apis"]
    lines = [
        "## Fuzzing: the master's REST API and the plugin's Docker API",
        "",
        f"Written by `make fuzz` (`{command}` repeats it) on "
        f"{results['started']:%Y-%m-%d %H:%M} UTC, on "
        f"{machine['CPU']}, {machine['Memory']}, kernel {machine['Kernel']}, "
        f"Python {machine['Python']}, hypothesis {hypothesis.__version__}.",
        "",
        "Method: property-based (hypothesis). Each scenario is a fresh real master (master.app",
        "on a temporary SQLite store) seeded with objects, then 1-6 requests drawn from its",
        "own `/api/v1/openapi.json`: declared routes and others, odd keys and methods, bodies",
        "from the request schemas with right-ish and wrong values, arbitrary, truncated,",
        "deeply nested, non-UTF-8 and oversized bodies, odd content types. For the plugin, a",
        "fresh plugin app, its Driver and the datapath agent over fakes in front of a real",
        "master, on which Docker made a network and ran a container; then 1-5 Docker calls of",
        "every NetworkDriver/IpamDriver/Plugin method, Docker-shaped or not, with known, new",
        "and hostile IDs. Properties of every answer: no 5xx and no unhandled exception",
        "(*crashes*); every error in its documented shape; a refusal changes nothing in the",
        "store (every key, value and the revision); a refused Docker call leaves no OVS port,",
        "veth, NAT rule, flow or driver memory behind (*leaks*); a Docker call that only reads",
        "or names nothing known changes nothing (*stray changes*). Seeding requests are not",
        "counted.",
        "",
        "| API | requests | scenarios | 2xx | 3xx | 4xx | 5xx | "
        + " | ".join(label for _, label in COLUMNS)
        + " | duration |",
        "|---|" + "---:|" * (7 + len(COLUMNS)),
    ]
    for name, label in (("master", "master REST API"), ("plugin", "plugin Docker API")):
        r = apis[name]
        tally: Tally = r["tally"]
        classes = [str(tally.by_class.get(c, 0)) for c in ("2xx", "3xx", "4xx", "5xx")]
        found = [
            str(tally.problems.get(kind, 0)) if kind in CHECKED[name] else "n/a"
            for kind, _ in COLUMNS
        ]
        lines.append(
            f"| {label} | {tally.requests} | {r['scenarios']} | {' | '.join(classes)} | "
            f"{' | '.join(found)} | {r['seconds']:.0f} s |"
        )
    examples = [p for name in ("master", "plugin") for p in apis[name]["tally"].examples]
    lines += ["", "Problems found: none." if not examples else "Problems found (the first few):"]
    lines += [f"- {p}" for p in examples[:10]]
    lines += ["", "3xx: werkzeug's redirect of a path with doubled slashes to the merged one."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--master", type=int, default=int(os.environ.get("FUZZ_MASTER", 10_000)))
    p.add_argument("--plugin", type=int, default=int(os.environ.get("FUZZ_PLUGIN", 2_000)))
    p.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", 0)) or None)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "BENCHMARKS.md")
    p.add_argument("--no-write", action="store_true", help="print the section only")
    args = p.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    print(f"fuzzing with seed {seed}")
    results = run(args.master, args.plugin, seed)
    command = f"python -m bench.fuzz --master {args.master} --plugin {args.plugin} --seed {seed}"
    text = section(results, command)
    print(text)
    if not args.no_write:
        old = args.out.read_text() if args.out.exists() else "# Benchmarks\n"
        args.out.write_text(sections.replace(old, sections.FUZZ, text))
    clean = all(r["tally"].clean for r in results["apis"].values())
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
