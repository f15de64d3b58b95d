"""Policy benchmarks: what a stateful allow rule costs in throughput, how long a rule takes
from `netctl policy rule-add` to a denied connection, and the flow cost of rules and
endpoints at scale (in-process, the same FlowModel the agent runs)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from integration.host import TEST_LABEL
from integration.probe import ContainerNet, EchoServer, tcp_opens
from integration.wait import wait_for

IMAGE = "netplugin-test/busybox"
IPERF = "netplugin-test/iperf"
BIN = Path(sys.executable).parent


def _sh(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout


class _Lab:
    """A netctl network with groups, as docker networks, and the containers made on them."""

    def __init__(self, master_url: str, subnet: str) -> None:
        self.netctl_cmd = [str(BIN / "netctl"), "--netmaster", master_url]
        self.prefix = f"bp{uuid.uuid4().hex[:4]}"
        self.network = f"{self.prefix}net"
        self.groups: list[str] = []
        self.policies: list[str] = []
        self.containers: list[str] = []
        self.netctl("net", "create", "-s", subnet, self.network)

    def netctl(self, *args: str) -> float:
        """Run netctl; the seconds it took."""
        t0 = time.perf_counter()
        _sh(*self.netctl_cmd, *args)
        return time.perf_counter() - t0

    def group(self, name: str) -> str:
        group = f"{self.prefix}{name}"
        self.netctl("group", "create", self.network, group)
        self.groups.append(group)
        wait_for(
            lambda: (
                subprocess.run(
                    ["docker", "network", "inspect", group], capture_output=True
                ).returncode
                == 0
            ),
            20,
            f"docker network {group}",
        )
        return group

    def policy(self, name: str, *rules: tuple[str, ...]) -> str:
        policy = f"{self.prefix}{name}"
        self.netctl("policy", "create", policy)
        self.policies.append(policy)
        for r in rules:
            self.netctl("policy", "rule-add", policy, *r)
        return policy

    def container(self, group: str, image: str, *cmd: str) -> tuple[str, str]:
        name = f"{self.prefix}c{len(self.containers)}"
        _sh("docker", "run", "-d", "--label", TEST_LABEL, "--name", name, "--net", group,
            image, *cmd)  # fmt: skip
        self.containers.append(name)
        nets = json.loads(
            _sh("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", name)
        )
        return name, next(iter(nets.values()))["IPAddress"]

    def close(self) -> None:
        for c in self.containers:
            subprocess.run(["docker", "rm", "-f", c], capture_output=True)
        for g in self.groups:
            subprocess.run([*self.netctl_cmd, "group", "update", "--no-policy", g],
                           capture_output=True)  # fmt: skip
        for p in self.policies:
            subprocess.run([*self.netctl_cmd, "policy", "rm", p], capture_output=True)
        for g in self.groups:
            subprocess.run([*self.netctl_cmd, "group", "rm", g], capture_output=True)
        subprocess.run([*self.netctl_cmd, "net", "rm", self.network], capture_output=True)


def _iperf(client_group: str, server_ip: str, seconds: int) -> float:
    out = _sh("docker", "run", "--rm", "--net", client_group, IPERF,
              "iperf3", "-J", "-c", server_ip, "-t", str(seconds))  # fmt: skip
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e9


def live(master_url: str, rounds: int = 3, seconds: int = 5, samples: int = 20) -> dict[str, Any]:
    """Throughput through an allow rule against no policy, and rule-add to enforcement."""
    lab = _Lab(master_url, "10.152.0.0/24")
    try:
        app, open_, web = lab.group("app"), lab.group("open"), lab.group("web")
        # web: every new TCP connection is judged: deny all TCP, allow iperf's port from app.
        p = lab.policy(
            "web",
            ("1", "-d", "in", "-l", "tcp", "-j", "deny"),
            ("2", "-d", "in", "-g", app, "-l", "tcp", "-P", "5201", "-p", "10"),
        )
        lab.netctl("group", "update", "-p", p, web)
        _, open_ip = lab.container(open_, IPERF, "iperf3", "-s")
        _, web_ip = lab.container(web, IPERF, "iperf3", "-s")
        time.sleep(0.5)  # iperf3 -s listening (its image has no shell to ask)
        plain, through = [], []
        for _ in range(rounds):  # interleaved, so drift hits both alike
            plain.append(_iperf(app, open_ip, seconds))
            through.append(_iperf(app, web_ip, seconds))
        # Rule add -> a new connection is denied; rule rm -> it opens again.
        client, _ = lab.container(app, IMAGE, "sleep", "3600")
        server, server_ip = lab.container(open_, IMAGE, "sleep", "3600")
        cnet, snet = ContainerNet(client), ContainerNet(server)
        echo = EchoServer(snet, 7000)
        q = lab.policy("probe")
        lab.netctl("group", "update", "-p", q, open_)
        to_deny, to_allow, netctl_s = [], [], []
        try:
            for i in range(samples):
                t0 = time.perf_counter()
                deny = ("-d", "in", "-l", "tcp", "-P", "7000", "-j", "deny")
                netctl_s.append(lab.netctl("policy", "rule-add", q, f"r{i}", *deny))
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
            cnet.close()
            snet.close()
        return {
            "iperf": {"plain": plain, "through": through, "seconds": seconds},
            "rule_add_s": statistics.median(to_deny),
            "rule_add_max_s": max(to_deny),
            "rule_rm_s": statistics.median(to_allow),
            "netctl_s": statistics.median(netctl_s),
            "samples": samples,
        }
    finally:
        lab.close()
