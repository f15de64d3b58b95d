"""Netprofiles on one host, end to end: netctl makes a profile and a group that names it,
containers started with `docker run --net GROUP` are limited to the profile's bandwidth for
what they send (iperf3, TCP and UDP, within the issue's 15 %), their IP packets carry its
DSCP (seen by a capture in the receiving container's namespace), and a change of the
profile reaches a running container. Rates are the feature under test, not speed: the
benchmark (bench/netprofiles.py) measures how close.

Run under the docker lock:

    flock /tmp/docker.lock env PYTHONPATH=$PWD \\
        .venv/bin/pytest -q integration/test_docker_netprofiles.py
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from .host import IPERF_IMAGE, ensure_test_image
from .master import MasterProcess
from .plugin import PluginProcess
from .test_docker_single_host import BIN, RUN, ip_of, restart_stopped, serve_stack, sh
from .wait import wait_for

SETTLE = 15.0
TOLERANCE = 0.15  # the issue's: a 10 Mbit/s profile measured within 15 %


def within(measured_mbps: float, profile_mbps: float) -> bool:
    return abs(measured_mbps - profile_mbps) <= TOLERANCE * profile_mbps


@dataclass
class Lab:
    master: MasterProcess
    prefix: str
    subnet: str
    network: str = ""
    containers: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh(str(BIN / "netctl"), "--netmaster", self.master.url, *args, check=check)

    def profile(self, name: str, *opts: str) -> str:
        p = f"{self.prefix}{name}"
        self.netctl("netprofile", "create", *opts, p)
        if p not in self.profiles:
            self.profiles.append(p)
        return p

    def group(self, name: str, *opts: str) -> str:
        g = f"{self.prefix}{name}"
        self.netctl("group", "create", *opts, self.network, g)
        self.groups.append(g)
        wait_for(
            lambda: sh("docker", "network", "inspect", g, check=False).returncode == 0,
            SETTLE,
            f"docker network {g} appears",
        )
        return g

    def container(self, net: str, *cmd: str) -> str:
        name = f"{self.prefix}c{len(self.containers)}"
        sh(*RUN, "--name", name, "--net", net, IPERF_IMAGE, *(cmd or ("sleep", "600")))
        self.containers.append(name)
        return name

    def close(self) -> None:
        for c in self.containers:
            sh("docker", "rm", "-f", c, check=False)
        for g in self.groups:
            self.netctl("group", "rm", g, check=False)
        for p in self.profiles:
            self.netctl("netprofile", "rm", p, check=False)
        if self.network:
            self.netctl("net", "rm", self.network, check=False)


def iperf_mbps(sender: str, server_ip: str, udp: bool = False, seconds: int = 4) -> float:
    """What the iperf3 server in the receiving container counted, in Mbit/s."""
    extra = ["-u", "-b", "20M"] if udp else []
    out = sh(
        "docker", "exec", sender, "iperf3", "-J", "-c", server_ip, "-t", str(seconds), *extra,
        timeout=60,
    ).stdout  # fmt: skip
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def tos_seen(receiver: str, sender: str, target: str) -> set[str]:
    """The IP TOS bytes of the echo requests a capture in ``receiver``'s namespace saw while
    ``sender`` pinged it."""
    pid = sh("docker", "inspect", "-f", "{{.State.Pid}}", receiver).stdout.strip()
    capture = subprocess.Popen(
        ["nsenter", "-t", pid, "-n", "tcpdump", "-l", "-nn", "-v", "-c", "3", "-i", "eth0",
         "icmp[icmptype] = icmp-echo"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        time.sleep(1.0)  # tcpdump attaches before the first packet (nothing to wait on)
        sh("docker", "exec", sender, "ping", "-c", "3", "-i", "0.2", target, check=False)
        out, _ = capture.communicate(timeout=15)
    finally:
        capture.kill()
    return set(re.findall(r"\btos (0x[0-9a-f]+)", out))


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, PluginProcess]]:
    ensure_test_image(IPERF_IMAGE)
    yield from serve_stack(tmp_path_factory)


@pytest.fixture(autouse=True)
def stack_up(stack: tuple[MasterProcess, PluginProcess]) -> None:
    restart_stopped(stack)


_SUBNETS = iter(range(100, 200))


@pytest.fixture
def lab(stack: tuple[MasterProcess, PluginProcess]) -> Iterator[Lab]:
    prefix = f"q{uuid.uuid4().hex[:4]}"
    lab = Lab(stack[0], prefix, f"10.244.{next(_SUBNETS)}.0/24")
    try:
        lab.network = f"{prefix}net"
        lab.netctl("net", "create", "-s", lab.subnet, lab.network)
        yield lab
    finally:
        lab.close()


def test_a_profile_limits_what_its_containers_send_and_follows_changes(lab: Lab) -> None:
    slow = lab.profile("slow", "-b", "10mbps")
    limited, free = lab.group("lim", "-n", slow), lab.group("free")
    server = lab.container(lab.network, "iperf3", "-s")
    sip = ip_of(server)
    capped, open_ = lab.container(limited), lab.container(free)
    wait_for(
        lambda: (
            sh("docker", "exec", capped, "ping", "-c", "1", "-W", "1", sip, check=False).returncode
            == 0
        ),
        SETTLE,
        "the limited container reaches the server",
    )
    tcp = iperf_mbps(capped, sip)
    udp = iperf_mbps(capped, sip, udp=True)
    print(f"10 Mbit/s profile: TCP {tcp:.2f}, UDP {udp:.2f} Mbit/s")
    assert within(tcp, 10) and within(udp, 10), (tcp, udp)
    assert iperf_mbps(open_, sip) > 30  # the group without a profile: unlimited
    # The profile changes under the running container; the group changes profile.
    lab.profile("slow", "-b", "20mbps")
    wait_for(lambda: within(iperf_mbps(capped, sip, seconds=2), 20), SETTLE, "20 Mbit/s applies")
    lab.netctl("group", "update", "--no-netprofile", limited)
    wait_for(lambda: iperf_mbps(capped, sip, seconds=2) > 30, SETTLE, "no profile: unlimited")


def test_a_profile_marks_its_containers_ip_packets_with_its_dscp(lab: Lab) -> None:
    ef = lab.profile("ef", "-d", "46")
    marked = lab.group("ef", "-n", ef)
    receiver = lab.container(lab.network)
    sender, plain = lab.container(marked), lab.container(lab.network)
    rip = ip_of(receiver)
    wait_for(
        lambda: (
            sh("docker", "exec", sender, "ping", "-c", "1", "-W", "1", rip, check=False).returncode
            == 0
        ),
        SETTLE,
        "the marked container reaches the receiver",
    )
    assert tos_seen(receiver, sender, rip) == {"0xb8"}  # DSCP 46 << 2
    assert tos_seen(receiver, plain, rip) == {"0x0"}
    refused = lab.netctl("netprofile", "rm", ef, check=False)
    assert refused.returncode == 1 and marked in refused.stderr
