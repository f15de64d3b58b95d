"""A netctl network of a test's (or a benchmark's) own on the single-host stack, and what it
makes on it: endpoint groups (docker networks on the host), policies, netprofiles,
services, containers and the servers in them. close() removes all of it, whatever the test
did: containers first, then services, then groups' policies and profiles, groups, and the
network."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from .host import BUSYBOX_IMAGE, TEST_LABEL
from .probe import ContainerNet, EchoServer, NameServer
from .wait import wait_for

BIN = Path(sys.executable).parent
SETTLE = 15.0  # how long a change may take to show (benchmarks measure it; tests wait)


def run(*cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {res.stderr.strip() or res.stdout.strip()}")
    return res


def docker_has_network(name: str) -> bool:
    return run("docker", "network", "inspect", name, check=False).returncode == 0


def ip_of(container: str) -> str:
    nets = json.loads(
        run("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", container).stdout
    )
    return str(next(iter(nets.values()))["IPAddress"])


def ipv6_of(container: str) -> str:
    nets = json.loads(
        run("docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}", container).stdout
    )
    return str(next(iter(nets.values()))["GlobalIPv6Address"])


class NetctlLab:
    """A network named PREFIXnet (subnet ``subnet``) and the objects made on it, all named
    with ``prefix`` (unique per lab, so labs never meet)."""

    def __init__(self, master_url: str, subnet: str, prefix: str = "", subnetv6: str = "") -> None:
        self.master_url = master_url
        self.prefix = prefix or f"l{uuid.uuid4().hex[:4]}"
        self.subnet = subnet
        self.subnetv6 = subnetv6
        self.network = ""
        self.containers: list[str] = []
        self.nets: dict[str, ContainerNet] = {}
        self.servers: list[EchoServer | NameServer] = []
        self.groups: list[str] = []
        self.policies: list[str] = []
        self.profiles: list[str] = []
        self.services: list[str] = []

    def __enter__(self) -> NetctlLab:
        network = f"{self.prefix}net"
        v6 = ("--subnetv6", self.subnetv6) if self.subnetv6 else ()
        self.netctl("net", "create", "-s", self.subnet, *v6, network)
        self.network = network
        # The agent's docker sync makes the docker network a moment later.
        wait_for(lambda: docker_has_network(network), SETTLE, f"docker network {network} appears")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def netctl_cmd(self) -> list[str]:
        return [str(BIN / "netctl"), "--netmaster", self.master_url]

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(*self.netctl_cmd, *args, check=check)

    def inspect(self, kind: str, name: str) -> dict[str, Any]:
        """The Oper part of ``netctl KIND inspect NAME``."""
        return dict(json.loads(self.netctl("--json", kind, "inspect", name).stdout)["Oper"])

    def group(self, name: str, *opts: str) -> str:
        """A group of the network, once it is a docker network here."""
        group = f"{self.prefix}{name}"
        self.netctl("group", "create", *opts, self.network, group)
        self.groups.append(group)
        wait_for(lambda: docker_has_network(group), SETTLE, f"docker network {group} appears")
        return group

    def policy(self, name: str, *rules: tuple[str, ...]) -> str:
        policy = f"{self.prefix}{name}"
        self.netctl("policy", "create", policy)
        self.policies.append(policy)
        for r in rules:
            self.netctl("policy", "rule-add", policy, *r)
        return policy

    def profile(self, name: str, *opts: str) -> str:
        """Create the netprofile, or change it."""
        profile = f"{self.prefix}{name}"
        self.netctl("netprofile", "create", *opts, profile)
        if profile not in self.profiles:
            self.profiles.append(profile)
        return profile

    def service(self, name: str, *opts: str) -> str:
        """Create the service, or change it."""
        svc = f"{self.prefix}{name}"
        self.netctl("service", "create", "-s", self.network, *opts, svc)
        if svc not in self.services:
            self.services.append(svc)
        return svc

    def container(
        self,
        net: str,
        *cmd: str,
        image: str = BUSYBOX_IMAGE,
        labels: tuple[str, ...] = (),
        docker_args: tuple[str, ...] = (),
    ) -> str:
        """A container on ``net`` (``sleep`` unless ``cmd``); its name."""
        name = f"{self.prefix}c{len(self.containers)}"
        extra = [f for label in labels for f in ("--label", label)]
        run("docker", "run", "-d", "--label", TEST_LABEL, "--name", name, "--net", net,
            *extra, *docker_args, image, *(cmd or ("sleep", "3600")))  # fmt: skip
        self.containers.append(name)
        return name

    def net(self, container: str) -> ContainerNet:
        """The container's network namespace, to make sockets in."""
        if container not in self.nets:
            self.nets[container] = ContainerNet(container)
        return self.nets[container]

    def echo(self, container: str, port: int) -> None:
        """TCP and UDP echo on ``port`` in the container."""
        self.servers.append(EchoServer(self.net(container), port))

    def names(self, container: str, port: int) -> None:
        """TCP on ``port`` in the container answers with the container's name."""
        self.servers.append(NameServer(self.net(container), port, container))

    def close(self) -> None:
        for s in self.servers:
            s.close()
        for n in self.nets.values():
            n.close()
        for c in self.containers:
            run("docker", "rm", "-f", c, check=False)
        for s in self.services:
            self.netctl("service", "rm", s, check=False)
        for g in self.groups:
            self.netctl("group", "update", "--no-policy", "--no-netprofile", g, check=False)
        for p in self.policies:
            self.netctl("policy", "rm", p, check=False)
        for p in self.profiles:
            self.netctl("netprofile", "rm", p, check=False)
        for g in reversed(self.groups):
            self.netctl("group", "rm", g, check=False)
        if self.network:
            with contextlib.suppress(AssertionError):
                self.netctl("net", "rm", self.network, check=False)
