"""bench/routing.py's report: the section says what was measured in one run, with its ratios,
and `python -m bench.routing` rewrites only its own section of docs/BENCHMARKS.md."""

from __future__ import annotations

from pathlib import Path

from bench import routing, sections

RUN = {
    "tcp": {"bridge": {"vxlan": 0.8, "vlan": 2.0}, "routing": {"vxlan": 0.76, "vlan": 1.5}},
    "announce": {
        "containers": 100,
        "started_s": 60.0,
        "all_routes_s": 60.5,
        "routes_per_s": 1.65,
        "lag_s": 0.5,
    },
    "converge": {
        "host_dies_session_down_s": 9.1,
        "host_dies_route_gone_s": 29.2,
        "agent_killed_session_down_s": 0.1,
        "agent_killed_route_gone_s": 20.1,
    },
}


def test_the_section_has_both_modes_and_their_ratio() -> None:
    text = "\n".join(routing.section(RUN))
    assert "| VXLAN | 0.80 | 0.76 | 0.95 |" in text
    assert "| VLAN (routing: via the router) | 2.00 | 1.50 | 0.75 |" in text
    assert "had every /32 after 60.5 s (1.6 routes/s), 0.50 s after the last" in text
    early = {**RUN, "announce": {**RUN["announce"], "lag_s": -0.4}}
    assert "0.40 s before the last `docker run` returned" in "\n".join(routing.section(early))
    assert "| 9.1 s | 29.2 s |" in text and "| 0.1 s | 20.1 s |" in text


def test_bench_routing_alone_rewrites_only_its_section(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    kernel = sections.wrap(sections.KERNEL, "kernel figures")
    out.write_text(f"# Benchmarks\n\nthe rest\n\n{kernel}\n")
    routing.write(out, RUN)
    text = out.read_text()
    assert text.index("## Routing mode") < text.index("kernel figures")
    assert "the rest" in text
    again = {**RUN, "tcp": {**RUN["tcp"], "routing": {"vxlan": 0.4, "vlan": 1.0}}}
    routing.write(out, again)
    text = out.read_text()
    assert text.count("## Routing mode") == 1 and "| VXLAN | 0.80 | 0.40 | 0.50 |" in text
    # make bench keeps it when its own run could not measure routing mode
    assert sections.extract(sections.keep(text, "# Benchmarks\n"), sections.ROUTING)
