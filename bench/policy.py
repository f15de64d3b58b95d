"""Policy benchmarks: what a stateful allow rule costs in throughput, how long a rule takes
from `netctl policy rule-add` to a denied connection, and the flow cost of rules and
endpoints at scale (in-process, the same FlowModel the agent runs)."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from bench.runs import sh
from testbed.host import IPERF_IMAGE
from testbed.lab import NetctlLab, ip_of
from testbed.probe import ContainerNet, EchoServer, tcp_opens
from testbed.wait import wait_for


def timed(call: Any) -> float:
    """Run ``call()``; the seconds it took."""
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def _iperf(client_group: str, server_ip: str, seconds: int) -> float:
    out = sh("docker", "run", "--rm", "--net", client_group, IPERF_IMAGE,
              "iperf3", "-J", "-c", server_ip, "-t", str(seconds))  # fmt: skip
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e9


def live(master_url: str, rounds: int = 6, seconds: int = 5, samples: int = 20) -> dict[str, Any]:
    """Throughput through an allow rule against no policy, and rule-add to enforcement."""
    with NetctlLab(master_url, "10.152.0.0/24") as lab:
        app, open_, web = lab.group("app"), lab.group("open"), lab.group("web")
        # web: every new TCP connection is judged: deny all TCP, allow iperf's port from app.
        p = lab.policy(
            "web",
            ("1", "-d", "in", "-l", "tcp", "-j", "deny"),
            ("2", "-d", "in", "-g", app, "-l", "tcp", "-P", "5201", "-p", "10"),
        )
        iperf_server = lab.container(web, "iperf3", "-s", image=IPERF_IMAGE)
        client, server = lab.container(app), lab.container(open_)
        web_ip, server_ip = ip_of(iperf_server), ip_of(server)
        cnet, snet, inet = lab.net(client), lab.net(server), ContainerNet(iperf_server)
        echo, probe = EchoServer(snet, 7000), EchoServer(inet, 7001)  # 7001: denied by p
        # The same server with and without the policy, in turn (each first every other
        # round), so the ratio compares paths, not containers or drift.
        plain: list[float] = []
        through: list[float] = []
        for i in range(rounds):
            for attached in (True, False) if i % 2 == 0 else (False, True):
                if attached:
                    lab.netctl("group", "update", "-p", p, web)
                else:
                    lab.netctl("group", "update", "--no-policy", web)
                wait_for(lambda a=attached: tcp_opens(cnet, web_ip, 7001, 0.2) != a, 10,
                         f"policy {'on' if attached else 'off'}")  # fmt: skip
                (through if attached else plain).append(_iperf(app, web_ip, seconds))
        probe.close()
        inet.close()
        # Rule add -> a new connection is denied; rule rm -> it opens again.
        q = lab.policy("probe")
        lab.netctl("group", "update", "-p", q, open_)
        to_deny, to_allow, netctl_s = [], [], []
        try:
            for i in range(samples):
                t0 = time.perf_counter()
                deny = ("-d", "in", "-l", "tcp", "-P", "7000", "-j", "deny")
                netctl_s.append(
                    timed(lambda d=deny, i=i: lab.netctl("policy", "rule-add", q, f"r{i}", *d))
                )
                wait_for(lambda: not tcp_opens(cnet, server_ip, 7000, 0.05), 10, "denied",
                         interval=0.0)  # fmt: skip
                to_deny.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                lab.netctl("policy", "rule-rm", q, f"r{i}")
                wait_for(lambda: tcp_opens(cnet, server_ip, 7000, 0.05), 10, "allowed",
                         interval=0.0)  # fmt: skip
                to_allow.append(time.perf_counter() - t0)
        finally:
            echo.close()
        return {
            "iperf": {"plain": plain, "through": through, "seconds": seconds},
            "rule_add_s": statistics.median(to_deny),
            "rule_add_max_s": max(to_deny),
            "rule_rm_s": statistics.median(to_allow),
            "netctl_s": statistics.median(netctl_s),
            "samples": samples,
        }


def scale_state(endpoints: int = 500, rules: int = 100, networks: int = 10) -> Any:
    """``endpoints`` endpoints in ``networks`` networks, one group per network holding its
    endpoints, every group attaching one policy of ``rules`` rules (in and out, by peer
    group, CIDR, protocol and port)."""
    from dataclasses import replace

    from bench.states import bench_state
    from datapath.policy import GroupState, RuleState, sorted_rules

    base = bench_state(endpoints, networks)
    policy = []
    for i in range(rules):
        peer = 1 + (i % networks)
        policy.append(
            RuleState(
                direction="in" if i % 2 == 0 else "out",
                priority=1 + i % 100,
                action="deny" if i % 3 == 0 else "allow",
                peer_tag=peer if i % 4 != 3 else 0,
                peer_cidrs=(f"10.{peer - 1}.0.0/16",) if i % 4 == 3 else (),
                protocol=6 if i % 2 else 17,
                port=1000 + i,
            )
        )
    groups = [
        GroupState(f"t:g{i}", n.id, i + 1, sorted_rules(policy))
        for i, n in enumerate(base.networks)
    ]
    tag_of = {g.network_id: g.id for g in groups}
    eps = [replace(e, group=tag_of[e.network_id]) for e in base.endpoints]
    return replace(base, endpoints=eps, groups=groups)


def compile_costs(endpoints: int = 500, rules: int = 100, runs: int = 10) -> dict[str, Any]:
    """Flows, full compile time and what one endpoint or one rule more changes, with the
    same FlowModel the agent runs (in-process; medians of ``runs``)."""
    from dataclasses import replace

    from datapath.flowmodel import Change, FlowModel
    from datapath.pipeline import EndpointState, compile_flows
    from datapath.policy import RuleState, sorted_rules

    state = scale_state(endpoints, rules)
    plain = replace(state, groups=[], endpoints=[replace(e, group=None) for e in state.endpoints])
    t0 = time.perf_counter()
    flows = compile_flows(state)
    compile_s = time.perf_counter() - t0
    model = FlowModel()
    model.replace(state)
    net = state.networks[3]
    new = EndpointState(
        "new", net.id, "02:42:0b:00:00:01", "10.3.250.250", group=state.groups[3].id, ofport=90_000
    )
    extra = RuleState("in", 50, "deny", peer_tag=2, protocol=6, port=65000)
    ep_flows, ep_s, rule_flows, rule_s = [], [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        d = model.apply(Change(endpoints={"new": new}))
        ep_s.append(time.perf_counter() - t0)
        ep_flows.append(len(d.to_add) + len(d.to_delete))
        model.apply(Change(endpoints={"new": None}))
        # One rule more in the policy every group attaches.
        wider = {g.id: replace(g, rules=sorted_rules([*g.rules, extra])) for g in state.groups}
        t0 = time.perf_counter()
        d = model.apply(Change(groups=wider))
        rule_s.append(time.perf_counter() - t0)
        rule_flows.append(len(d.to_add) + len(d.to_delete))
        model.apply(Change(groups={g.id: g for g in state.groups}))
    assert model.flows() == flows  # the model is back where it started
    return {
        "endpoints": endpoints,
        "rules": rules,
        "groups": len(state.groups),
        "flows": len(flows),
        "flows_without_policy": len(compile_flows(plain)),
        "compile_ms": compile_s * 1000,
        "endpoint_flows": statistics.median(ep_flows),
        "endpoint_ms": statistics.median(ep_s) * 1000,
        "rule_flows": statistics.median(rule_flows),
        "rule_ms": statistics.median(rule_s) * 1000,
    }


def section(live_r: dict[str, Any], costs: dict[str, Any]) -> list[str]:
    """docs/BENCHMARKS.md's policy section."""
    ip = live_r["iperf"]
    plain, through = statistics.median(ip["plain"]), statistics.median(ip["through"])
    ratio = through / plain
    c = costs
    return [
        "## Policy (issue 10)",
        "",
        "Method: the single-host stack above (real dockerd, OVS, master and plugin). Groups",
        "are docker networks made by `netctl group create`; containers run with",
        "`docker run --net GROUP`. Every network's IP traffic goes through conntrack whether",
        "or not a policy applies, so *no policy* still includes conntrack.",
        "",
        "| figure | this run | goal | met |",
        "|---|---:|---|---|",
        f"| iperf3 through an allow rule ÷ no policy: one server, its group's policy attached "
        f"and detached in turn, median of {len(ip['through'])} {ip['seconds']} s runs each "
        f"({through:.2f} vs {plain:.2f} Gbit/s) | "
        f"{ratio:.2f} | ≥ 0.95 | {'yes' if ratio >= 0.95 else 'no'} |",
        f"| `netctl policy rule-add` (deny) to a refused connection, median of "
        f"{live_r['samples']} | {live_r['rule_add_s'] * 1000:.0f} ms (max "
        f"{live_r['rule_add_max_s'] * 1000:.0f} ms) | ≤ 1 s | "
        f"{'yes' if live_r['rule_add_max_s'] <= 1 else 'no'} |",
        "",
        f"The rule-add time includes netctl's own run ({live_r['netctl_s'] * 1000:.0f} ms "
        f"median: Python start-up and one REST call); `rule-rm` to the connection opening "
        f"again took {live_r['rule_rm_s'] * 1000:.0f} ms (median).",
        "",
        f"Flow cost at scale, in-process (the agent's FlowModel): {c['endpoints']} endpoints in "
        f"{c['groups']} networks, one group per network, every group attaching one policy of "
        f"{c['rules']} rules (in and out; peers by group tag and by CIDR; TCP/UDP ports).",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| flows, with the policy (without) | {c['flows']} ({c['flows_without_policy']}) |",
        f"| full compile | {c['compile_ms']:.0f} ms |",
        f"| one endpoint more: flows changed, time | {c['endpoint_flows']:.0f}, "
        f"{c['endpoint_ms']:.1f} ms |",
        f"| one rule more in the shared policy: flows changed, time | {c['rule_flows']:.0f}, "
        f"{c['rule_ms']:.1f} ms |",
        "",
        "An endpoint costs its own flows plus one tag flow per direction (by its MAC),",
        "whatever the rules; a rule costs flows per group that attaches it (per peer CIDR and",
        "address family), never per endpoint, because rules match the groups' register tags.",
        "",
    ]
