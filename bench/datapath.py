"""Single-host datapath benchmarks: docker run, driver call latency, throughput, flow compile,
and what one endpoint costs in-process (endpoint_churn)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from bench.runs import docker_run_seconds, sh, socket_agent
from bench.scaling import DockerCalls, scaling
from bench.states import bench_state
from bench.stats import pct
from datapath.flowmodel import Change, FlowModel
from datapath.flows import Flow, diff
from datapath.pipeline import DesiredState, compile_flows
from datapath.veth import tx_checksumming
from testbed.host import CREATE_NETWORK, IPERF_IMAGE, TEST_LABEL


def driver_latency(calls: DockerCalls, n: int) -> dict[str, float]:
    """Docker's call sequence straight at the plugin socket, one endpoint at a time:
    RequestAddress, CreateEndpoint+Join, then Leave, DeleteEndpoint, ReleaseAddress (each
    step timed); and Plugin.Activate, the socket's floor."""
    req_addr: list[float] = []
    create_join: list[float] = []
    teardown: list[float] = []
    for _ in range(n):
        ra, cj, eid, addr = calls.one()
        req_addr.append(ra)
        create_join.append(cj)
        t0 = time.perf_counter()
        calls.remove(eid, addr)
        teardown.append(time.perf_counter() - t0)
    activate = [calls.activate_seconds() for _ in range(n)]
    return {
        "teardown_p50_ms": pct(teardown, 50) * 1000,
        "teardown_p99_ms": pct(teardown, 99) * 1000,
        "activate_p50_ms": pct(activate, 50) * 1000,
        "activate_p99_ms": pct(activate, 99) * 1000,
        "request_address_p50_ms": pct(req_addr, 50) * 1000,
        "request_address_p99_ms": pct(req_addr, 99) * 1000,
        "create_join_p50_ms": pct(create_join, 50) * 1000,
        "create_join_p99_ms": pct(create_join, 99) * 1000,
        "n": n,
    }


def iperf_gbps(network: str, seconds: int = 5) -> float:
    server = f"bench-iperf-{uuid.uuid4().hex[:6]}"
    sh(
        "docker",
        "run",
        "-d",
        "--label",
        TEST_LABEL,
        "--name",
        server,
        "--net",
        network,
        IPERF_IMAGE,
        "iperf3",
        "-s",
    )
    try:
        time.sleep(0.5)
        nets = json.loads(
            sh("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", server)
        )
        ip = next(iter(nets.values()))["IPAddress"]
        out = sh(
            "docker",
            "run",
            "--rm",
            "--net",
            network,
            IPERF_IMAGE,
            "iperf3",
            "-J",
            "-c",
            ip,
            "-t",
            str(seconds),
        )
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    finally:
        subprocess.run(["docker", "rm", "-f", server], capture_output=True)


def flow_compile(endpoints: int = 500) -> dict[str, float]:
    """Compute the desired flows for 500 endpoints and diff them against the switch's."""
    state = bench_state(endpoints)
    t0 = time.perf_counter()
    flows = compile_flows(state)
    t1 = time.perf_counter()
    d = diff(flows, flows)
    t2 = time.perf_counter()
    assert not d.to_add and not d.to_delete
    return {"flows": len(flows), "compile_ms": (t1 - t0) * 1000, "diff_ms": (t2 - t1) * 1000}


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


class _SendsWhenWaited:
    """The controller without its worker thread: the agent's wait for an endpoint's flows
    runs the controller's turn that sends them (to the fake switch, which answers at once)."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ctl, name)

    def wait_reconciled(self, generation: int | None = None, timeout: float = 10.0) -> Any:
        self.ctl._run_once()
        return self.ctl.wait_reconciled(generation, 0)


def endpoint_churn(standing: tuple[int, ...] = (0, 100, 1000), runs: int = 20) -> dict[int, Any]:
    """What one more endpoint costs beside ``standing`` ones (10 networks), in-process: no
    docker, OVS, netlink or iptables (the unit tests' fakes and fake switch stand in).

    Per standing count, medians of ``runs`` adds (each undone before the next):
    - full_compile_ms: the path before issue 9: compile every flow, diff against the last set;
    - incremental_ms: the flow model's apply(): the touched units and their delta;
    - full_reconcile_ms: the controller reads all flows from the (fake) switch, diffs, sends;
    - delta_send_ms: the controller sends the delta's flow-mods and a barrier;
    - agent_create_ms: HostDatapath.create_endpoint_port with the fakes, plus the
      controller's turn that sends its delta;
    - flows_changed: the delta's flow-mods; switch_reads: flow-stats reads of the
      incremental path (the full one reads every flow each time).
    """
    from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
    from datapath.ofapp import FlowController
    from testbed.fakes_datapath import FakeIptables, FakeLinks, FakeOvs
    from testbed.fakeswitch import FakeSwitch

    out: dict[int, Any] = {}
    for n in standing:
        state = bench_state(n)
        new = EndpointState("new", "t:n3", "02:42:0b:00:00:01", "10.3.250.250", ofport=90_000)
        bigger = DesiredState(state.networks, [*state.endpoints, new])
        base = compile_flows(state)
        with_new = frozenset(compile_flows(bigger))
        model = FlowModel()
        model.replace(state)
        ctl = FlowController()
        switch = FakeSwitch(ctl, base)
        ctl.switch_connected(switch)
        ctl._run_once()
        ctl.set_desired(base)
        ctl._run_once()
        full, incremental, reconcile, send, changed = [], [], [], [], []
        reads = 0
        for _ in range(runs):
            t0 = time.perf_counter()
            diff(compile_flows(bigger), base)
            t1 = time.perf_counter()
            before = switch.stats_requests
            delta = model.apply(Change(endpoints={new.id: new}))
            t2 = time.perf_counter()
            ctl.apply(delta)
            ctl._run_once()
            t3 = time.perf_counter()
            ctl.apply(model.apply(Change(endpoints={new.id: None})))
            ctl._run_once()
            t4 = time.perf_counter()
            reads += switch.stats_requests - before
            ctl._reconcile(switch, 1, with_new, 0)
            t5 = time.perf_counter()
            ctl.resync()
            ctl._run_once()
            full.append(t1 - t0)
            incremental.append(t2 - t1)
            send.append(t3 - t2)
            reconcile.append(t5 - t4)
            changed.append(len(delta.to_add) + len(delta.to_delete))
        assert reads == 0, f"the incremental path read the switch {reads} times"

        agent_ctl = FlowController()
        agent_switch = FakeSwitch(agent_ctl)
        agent_ctl.switch_connected(agent_switch)
        agent = HostDatapath(
            HostConfig(datapath_type="system"),
            FakeOvs(),
            _SendsWhenWaited(agent_ctl),
            FakeIptables(),
            FakeLinks(),
        )
        agent.resync(
            [NetworkState(f"t:n{i}", 100 + i, f"10.{i}.0.0/16", f"10.{i}.0.1") for i in range(10)],
            [],
        )
        agent_ctl._run_once()
        for j, ep in enumerate(state.endpoints):
            agent.create_endpoint_port(
                EndpointState(f"{j:011x}{'0' * 53}", ep.network_id, ep.mac, ep.ipv4 or "")
            )
        agent_ctl._run_once()
        created = []
        one = EndpointState("f" * 64, new.network_id, new.mac, new.ipv4 or "")
        for _ in range(runs):
            t0 = time.perf_counter()
            agent.create_endpoint_port(one)
            agent_ctl._run_once()
            created.append(time.perf_counter() - t0)
            agent.delete_endpoint_port(one.id)
            agent_ctl._run_once()
        assert agent_switch.flows == compile_flows(agent.desired())
        out[n] = {
            "flows": len(base),
            "full_compile_ms": _ms(full),
            "incremental_ms": _ms(incremental),
            "full_reconcile_ms": _ms(reconcile),
            "delta_send_ms": _ms(send),
            "agent_create_ms": _ms(created),
            "flows_changed": statistics.median(changed),
            "switch_reads": reads,  # by the incremental path: none
        }
    return out


def reconcile_round_trip(workdir: Path, endpoints: int = 500) -> dict[str, Any]:
    """The controller against a real switch: a private userspace OVS in its own namespace,
    programmed by `python -m datapath.ofrunner` for ``endpoints`` endpoints.

    cold: an empty bridge gets every flow; restart: a new controller finds every flow
    right (the plugin-restart path); one more: a single endpoint is added.
    """
    from datapath.ovs import Ovs
    from testbed.ovs import ControllerProcess, OvsInstance

    ovs = OvsInstance(f"np-bench-{os.getpid()}", workdir / "reconcile-ovs").start()
    ctl: ControllerProcess | None = None
    try:
        port = 6690
        with Ovs(ovs.db_target) as db:
            db.ensure_bridge("br-bench", datapath_type="netdev", controller=f"tcp:127.0.0.1:{port}")
        state = bench_state(endpoints)
        ctl = ControllerProcess(ovs, port, name="bench")
        ctl.write_state(state.to_dict())
        # Flows only: the compiled entries hold the flood groups and meters too.
        flows = sum(isinstance(e, Flow) for e in compile_flows(state))
        out: dict[str, Any] = {"flows": flows}

        def reconciled(generation: int = 1) -> dict[str, Any]:
            assert ctl is not None
            st = ctl.wait_status(
                lambda st: (st.get("last") or {}).get("generation", 0) >= generation,
                timeout=120,
            )
            return st["last"]

        for phase in ("cold", "restart"):
            t0 = time.perf_counter()
            ctl.start()
            last = reconciled()
            out[phase] = {
                "reconcile_s": last["seconds"],
                "wall_s": time.perf_counter() - t0,
                "added": last["added"],
                "deleted": last["deleted"],
            }
            if phase == "cold":
                ctl.stop()
        on_switch = ovs.dump_flows("br-bench")
        assert len(on_switch) == out["flows"], (len(on_switch), out["flows"], on_switch[:5])
        bigger = bench_state(endpoints + 1)
        ctl.write_state(bigger.to_dict())
        ctl.reload()
        last = reconciled(2)
        out["one_more"] = {"reconcile_s": last["seconds"], "added": last["added"]}
        return out
    finally:
        if ctl is not None:
            ctl.stop()
        ovs.stop()


def run(workdir: Path) -> dict[str, Any]:
    with socket_agent(workdir, "dp", IPERF_IMAGE) as (master, plugin):
        return _run(workdir, master, plugin)


def _run(workdir: Path, master: Any, plugin: Any) -> dict[str, Any]:
    from testbed.plugin import SOCKET

    ours, bridge = f"bench-np-{uuid.uuid4().hex[:6]}", f"bench-br-{uuid.uuid4().hex[:6]}"
    try:
        sh(
            *CREATE_NETWORK,
            "--subnet",
            "10.150.0.0/16",
            ours,
        )
        sh(
            "docker",
            "network",
            "create",
            "--label",
            TEST_LABEL,
            "-d",
            "bridge",
            "--subnet",
            "10.151.0.0/16",
            bridge,
        )
        runs = 10
        docker_run_seconds(ours, 2)  # warm-up
        docker_run_seconds(bridge, 2)
        np_runs, br_runs = docker_run_seconds(ours, runs), docker_run_seconds(bridge, runs)
        nid = sh("docker", "network", "inspect", "-f", "{{.Id}}", ours).strip()
        calls = DockerCalls(SOCKET, nid, "default:10.150.0.0/16")
        latency = driver_latency(calls, 200)
        assert plugin.proc is not None
        scale = scaling(calls, plugin.proc.pid)
        np_gbps, br_gbps = iperf_gbps(ours), iperf_gbps(bridge)
        from bench import cni, policy, services

        policy_live = policy.live(master.url)
        services_live = services.live(master.url)
        cni_live = cni.live(master.url)
        return {
            "docker_run": {
                "netplugin": statistics.median(np_runs),
                "bridge": statistics.median(br_runs),
                "runs": runs,
            },
            "latency": latency,
            "scaling": scale,
            "switch_tso": tx_checksumming("netplugin"),
            "iperf": {"netplugin": np_gbps, "bridge": br_gbps},
            "flows": flow_compile(),
            "reconcile": reconcile_round_trip(workdir),
            "churn": endpoint_churn(),
            "policy": policy_live,
            "services": services_live,
            "cni": cni_live,
            "policy_costs": policy.compile_costs(),
            "datapath_type": sh("ovs-vsctl", "get", "bridge", "netplugin", "datapath_type").strip(),
        }
    finally:
        subprocess.run(["docker", "network", "rm", ours, bridge], capture_output=True)


def run_with_managed(workdir: Path) -> dict[str, Any]:
    """run(), then `docker run` on the managed plugin (once the socket plugin has stopped:
    two agents on one host would share our iptables chains)."""
    from bench import managed

    result = run(workdir)
    result["docker_run"]["managed"] = managed.run(workdir)
    return result
