"""bench.churn's section: rendered from a run's figures (the bench itself needs dockerd)."""

from __future__ import annotations

from bench.churn import PING_UNTIL_UP, section

RUN = {
    "standing": 1000,
    "burst": 100,
    "parallel": 10,
    "netplugin": {"last_s": 31.5, "median_s": 16.0, "count": 100, "standing_s": 70.2},
    "bridge": {"last_s": 21.0, "median_s": 11.1, "count": 100, "standing_s": 22.9},
}


def test_the_section_has_both_drivers_and_their_ratio() -> None:
    lines = section(RUN)
    assert lines[0].startswith("## Churn")
    assert "| netplugin | 31.5 s | 16.0 s | 70 s |" in lines
    assert "| bridge | 21.0 s | 11.1 s | 23 s |" in lines
    assert "netplugin ÷ bridge, last container: 1.50." in lines
    assert "1000 endpoints stand" in " ".join(lines)


def test_the_container_pings_the_gateway_it_is_given() -> None:
    assert "ping -c 1 -W 1 10.0.0.1 " in PING_UNTIL_UP.format(gw="10.0.0.1")
