"""The single-host docker stack a test runs on, on either Docker version the tests cover.

``docker20``: the host's own dockerd (Debian 12's docker.io, 20.10), with a master on the
embedded store and a netplugin agent on the host's OVS, in the root namespaces: what
`make run` makes. ``docker26``: Debian 13's dockerd 26 (testbed/docker26.py) on a
simulated host of testbed/multihost.py, the one host of a cluster of one master: its
own network and mount namespaces, OVS, agent and dockerd (dockerd 26 must not share the
root namespace with the host's 20.10, nor an agent another agent's bridge).

A test talks to either through the same ``Site``: the docker CLI (``docker_host``, which the
tests' fixtures put in DOCKER_HOST), the master's API and netctl, commands run on the host
(``host()``: iptables, ip, ovs-vsctl, curl), and stopping and starting its daemons.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests

from .docker26 import dockerd_command
from .host import (
    AGENT_DATA_DIR,
    ensure_host_daemons,
    ensure_test_image,
    pool_records,
    restart_dockerd,
    restart_ovs_vswitchd,
    sweep_test_leftovers,
)
from .master import VENV_BIN, MasterProcess
from .multihost import Cluster
from .plugin import SOCKET, PluginProcess, serving

DOCKERDS = ("docker20", "docker26")


def dockerd_for(version: str) -> list[str]:
    """The dockerd command of a version the tests run (``DOCKERDS``)."""
    if version == "docker20":
        return ["dockerd"]  # the host's docker.io
    if version == "docker26":
        return dockerd_command()
    raise ValueError(f"unknown docker version {version!r}; known: {DOCKERDS}")


def _run(*cmd: str, check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr or res.stdout}"
        )
    return res


class Site:
    """What the tests use of a single-host stack; ``SystemSite`` and ``SimSite`` are the two."""

    version: str
    docker_host: str  # DOCKER_HOST of its dockerd ("" for the host's default socket)
    agent_log: Path
    agent_data_dir: Path = AGENT_DATA_DIR  # the agent's --data-dir

    def pool_records(self) -> dict[str, str]:
        """Pool port -> the endpoint it serves, as the agent recorded it."""
        return pool_records(self.agent_data_dir)

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        raise NotImplementedError

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        raise NotImplementedError

    def host_cmd(self) -> list[str]:
        """The prefix that runs a command on this host (in its network namespace)."""
        raise NotImplementedError

    def vsctl(self, *args: str) -> str:
        raise NotImplementedError

    def stop_agent(self, sig: int = signal.SIGTERM) -> None:
        raise NotImplementedError

    def start_agent(self) -> None:
        raise NotImplementedError

    def agent_running(self) -> bool:
        raise NotImplementedError

    def stop_master(self) -> None:
        raise NotImplementedError

    def start_master(self) -> None:
        raise NotImplementedError

    def master_running(self) -> bool:
        raise NotImplementedError

    def restart_dockerd(self) -> None:
        raise NotImplementedError

    def restart_ovs_vswitchd(self) -> None:
        raise NotImplementedError

    def host(
        self, *cmd: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``cmd`` on this host: in its network namespace, with the host's files."""
        return _run(*self.host_cmd(), *cmd, check=check, timeout=timeout)

    def host_ip(self) -> str:
        """The host's first global IPv4 address."""
        out = self.host("ip", "-4", "-o", "addr", "show", "scope", "global").stdout
        return out.split()[3].split("/")[0]

    def get(self, path: str) -> Any:
        """The JSON of a GET of the master's API ``path`` (under /api/v1)."""
        r = self.api("GET", path)
        r.raise_for_status()
        return r.json()

    def heal(self) -> None:
        """Every test starts with the master and the agent serving (a test that stops one
        starts it again in its own ``finally``; this only makes a failure there not spread)."""
        if not self.master_running():
            self.stop_master()
            self.start_master()
        if not self.agent_running():
            self.stop_agent()
            self.start_agent()


class SystemSite(Site):
    """The host's dockerd 20.10, a master on the embedded store, an agent on the host's OVS."""

    version = "docker20"
    docker_host = ""

    def __init__(self, master: MasterProcess, plugin: PluginProcess) -> None:
        self.master, self.plugin = master, plugin
        self.agent_log = plugin.log
        self.agent_data_dir = plugin.data_dir or AGENT_DATA_DIR

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        url = f"{self.master.url}/api/v1/{path.lstrip('/')}"
        return requests.request(method, url, timeout=30, **kw)

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(
            str(VENV_BIN / "netctl"), "--netmaster", self.master.url, *args, check=check, timeout=60
        )

    def host_cmd(self) -> list[str]:
        return []

    def vsctl(self, *args: str) -> str:
        return _run("ovs-vsctl", *args, check=True, timeout=30).stdout

    def stop_agent(self, sig: int = signal.SIGTERM) -> None:
        self.plugin.stop(sig)

    def start_agent(self) -> None:
        self.plugin.start()

    def agent_running(self) -> bool:
        return self.plugin.running()

    def stop_master(self) -> None:
        self.master.stop()

    def start_master(self) -> None:
        self.master.start()

    def master_running(self) -> bool:
        return self.master.running()

    def restart_dockerd(self) -> None:
        restart_dockerd()

    def restart_ovs_vswitchd(self) -> None:
        restart_ovs_vswitchd(cleanup=True)


class SimSite(Site):
    """Docker 26 on the one simulated host of a cluster of one master (etcd-backed, TLS)."""

    version = "docker26"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sim = cluster.hosts[0]
        self.docker_host = f"unix://{self.sim.docker_sock}"
        self.agent_log = self.sim.agent_log

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        return self.cluster.api(method, path, **kw)

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.cluster.netctl(*args, check=check)

    def host_cmd(self) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.sim.netns}"]

    def vsctl(self, *args: str) -> str:
        return self.sim.ovs.vsctl(*args)

    def stop_agent(self, sig: int = signal.SIGTERM) -> None:
        self.sim.stop_agent(sig)

    def start_agent(self) -> None:
        self.cluster.start_agent(self.sim)

    def agent_running(self) -> bool:
        return self.sim.agent_running()

    def stop_master(self) -> None:
        self.cluster.masters[0].stop()

    def start_master(self) -> None:
        self.cluster.masters[0].start()

    def master_running(self) -> bool:
        return self.cluster.masters[0].running()

    def restart_dockerd(self) -> None:
        self.sim.restart_dockerd()

    def restart_ovs_vswitchd(self) -> None:
        raise NotImplementedError("the simulated host's OVS restart is not covered")


def serve_stack(
    tmp_path_factory: pytest.TempPathFactory, extra: Sequence[str] = ()
) -> Iterator[tuple[MasterProcess, PluginProcess]]:
    """A master on the embedded store and the netplugin on the host's dockerd and OVS (with
    ``extra`` flags)."""
    ensure_host_daemons()
    ensure_test_image()
    if serving(SOCKET):
        pytest.fail(f"another netplugin already serves {SOCKET}; stop it (e.g. `make run`) first")
    work = tmp_path_factory.mktemp("stack")
    master = MasterProcess(work / "master")
    plugin = PluginProcess(
        master.url, work / "netplugin.log", data_dir=master.data_dir, extra=list(extra)
    )
    try:
        master.start()
        plugin.start()
        sweep_test_leftovers()  # of an earlier run that was killed half-way
        yield master, plugin
    finally:
        plugin.stop()
        master.stop()


def restart_stopped(stack: tuple[MasterProcess, PluginProcess]) -> None:
    """Every test starts with the master and the plugin serving (a test that stops one
    starts it again in its own ``finally``; this only makes a failure there not spread)."""
    SystemSite(*stack).heal()


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[MasterProcess, PluginProcess]]:
    """The host's stack (Docker 20.10) of a module that runs on no other."""
    yield from serve_stack(tmp_path_factory)


@pytest.fixture(autouse=True)  # in the modules that import it
def stack_up(stack: tuple[MasterProcess, PluginProcess]) -> None:
    restart_stopped(stack)


def serve_site(version: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The single-host stack on ``version`` (``DOCKERDS``), stopped afterwards."""
    if version == "docker20":
        stack = serve_stack(tmp_path_factory)
        try:
            yield SystemSite(*next(stack))
        finally:
            stack.close()
        return
    # The test image is built by the host's dockerd and loaded into the simulated host's.
    cluster = Cluster(
        tmp_path_factory.mktemp(version), hosts=1, masters=1, dockerd=dockerd_for(version)
    )
    cluster.start()
    try:
        yield SimSite(cluster)
    finally:
        cluster.stop()


def use_site(site: Site, monkeypatch: pytest.MonkeyPatch) -> Site:
    """The test's docker CLI (every `docker` it runs) talks to ``site``'s dockerd."""
    site.heal()
    if site.docker_host:
        monkeypatch.setenv("DOCKER_HOST", site.docker_host)
    else:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    return site
