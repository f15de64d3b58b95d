"""Bridge mode's flows are pinned: a rich state (three hosts' worth of VXLAN and VLAN
networks, both ARP modes, groups with rules, a netprofile, a service with a local and a
remote provider, IPv6) compiles to exactly the flows saved in tests/golden/bridge_flows.txt,
which were compiled before routing mode existed (issue 25), plus the one flow routing mode
adds to bridge mode: the route table's miss (nothing goes to that table in bridge mode).
Since issue 27 each segment's flood flows name its flood group (an all group of its
endpoints, in the file too) instead of listing the endpoints. A change that means to alter
bridge mode regenerates the file (``python tests/test_bridge_golden.py --write``) and says
why in its commit."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from datapath_states import E1, E2, NET_A, NET_C, R1, cluster

from datapath.desired import DesiredState
from datapath.flows import Entry
from datapath.pipeline import compile_flows
from datapath.policy import GroupState, RuleState
from datapath.qos import QosState
from datapath.services import ProviderState, ServicePortState, ServiceState
from datapath.tables import PIPELINE, ROUTE

GOLDEN = Path(__file__).parent / "golden" / "bridge_flows.txt"


def rich(arp_mode: str) -> DesiredState:
    state = cluster(arp_mode)
    state.endpoints = [replace(e, group="t:front") if e.id == E1.id else e for e in state.endpoints]
    state.remote_endpoints = [
        replace(r, group="t:back") if r.id == R1.id else r for r in state.remote_endpoints
    ]
    rules = (
        RuleState("in", 5, "allow", peer_tag=8, protocol=6, port=80),
        RuleState("in", 5, "deny", peer_cidrs=("10.9.0.0/16",)),
        RuleState("out", 10, "deny", protocol=17, port=53),
        RuleState("out", 1, "allow", peer_cidrs=("fd00::/8",), protocol=1),
    )
    state.groups = [
        GroupState("t:front", NET_A, 7, rules, QosState(rate_kbps=10_000, burst_kbit=0, dscp=46)),
        GroupState("t:back", NET_A, 8, rules[:2]),
        GroupState("t:vlan", NET_C, 9),
    ]
    web = ServiceState(
        "t:web",
        NET_A,
        "10.1.0.100",
        3,
        (ServicePortState(6, 80, 8080), ServicePortState(17, 53, 5353)),
        (ProviderState(E2.ipv4, E2.mac), ProviderState(R1.ipv4, R1.mac)),
    )
    state.services = [web]
    return state


def render(flows: set[Entry]) -> list[str]:
    return sorted(repr(f) for f in flows)


def compiled() -> list[str]:
    lines: list[str] = []
    for mode in ("proxy", "flood"):
        lines.append(f"# arp_mode={mode}")
        lines += render(compile_flows(rich(mode)))
    return lines


def test_bridge_mode_compiles_to_the_pinned_flows() -> None:
    route_miss = repr(PIPELINE.miss_flow(ROUTE))
    want = GOLDEN.read_text().splitlines()
    got = [line for line in compiled() if line != route_miss]
    assert compiled().count(route_miss) == 2  # once per ARP mode
    assert [line for line in got if line not in want] == []
    assert [line for line in want if line not in got] == []
    assert got == want


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    miss = repr(PIPELINE.miss_flow(ROUTE))
    GOLDEN.write_text("\n".join(line for line in compiled() if line != miss) + "\n")
