"""The managed (v2) plugin as the agent of every simulated host (testbed.multihost): built
once by `make plugin`'s script, created in each host's dockerd, and configured through its
settable mounts and env to that host's Open vSwitch, dockerd and the cluster's etcd and
masters (TLS and token included). Swarm accepts only such a plugin (issue 26), and it is
what users run on several hosts.

    with managed_cluster(workdir, 2) as cluster:      # swarm=True: in swarm mode, a swarm
        ... docker -H <host> network create -d netplugin:latest ...
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .managed import ROOT
from .master import VENV_BIN
from .multihost import Cluster, SimHost

PLUGIN = "netplugin:latest"


class ManagedAgents:
    def __init__(
        self, cluster: Cluster, build_dir: Path, name: str = PLUGIN, swarm: bool = False
    ) -> None:
        self.cluster = cluster
        self.build_dir = build_dir
        self.name = name
        self.swarm = swarm  # NETPLUGIN_SWARM: every host's agent serves swarm mode

    def install(self) -> ManagedAgents:
        """Build the plugin (its rootfs from the cached Debian base), create it in every
        host's dockerd, configure and enable it."""
        first, *rest = self.cluster.hosts
        env = {
            **os.environ,
            "VENV": str(VENV_BIN.parent),
            "PLUGIN": self.name,
            "BUILD": str(self.build_dir),
            "DOCKER_HOST": f"unix://{first.docker_sock}",  # its step 3 creates it there
        }
        res = subprocess.run(
            ["scripts/build-plugin.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=900,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr + res.stdout
        for h in rest:
            h.docker("plugin", "create", self.name, str(self.build_dir), timeout=300)
        for h in self.cluster.hosts:
            h.docker("plugin", "set", self.name, *self.settings(h))
            h.docker("plugin", "enable", self.name, timeout=120)
        return self

    def settings(self, h: SimHost) -> list[str]:
        """`docker plugin set` for host ``h``: its OVS and dockerd, a data directory of its
        own (holding the masters' CA and the agent's token, which the plugin reads under
        its data mount), the cluster's etcd and masters, and the agent flags the process
        agents of testbed.multihost get."""
        data = h.workdir / "plugin-data"
        data.mkdir(exist_ok=True)
        secured = []
        if h.security is not None:
            shutil.copy(h.security.ca, data / "ca.pem")
            shutil.copy(h.security.token_file("agent"), data / "agent.token")
            secured = [
                "NETPLUGIN_TLS_CA=/host/var/lib/ca.pem",
                "NETPLUGIN_AUTH_TOKEN_FILE=/host/var/lib/agent.token",
            ]
        args = f"--host {h.name} --vtep-ip {h.vtep_ip} --vlan-if eth2 --host-ttl 3"
        return [
            f"ovsrun.source={h.ovs.workdir}",
            f"docker.source={h.docker_sock}",
            f"data.source={data}",
            f"NETPLUGIN_ETCD_ENDPOINTS={self.cluster.etcd.endpoint}",
            f"NETPLUGIN_NETMASTER={self.cluster.master_url}",
            f"NETPLUGIN_PLUGIN_NAME={self.name}",
            "NETPLUGIN_AUDIT_INTERVAL=0",
            f"NETPLUGIN_SWARM={'1' if self.swarm else ''}",
            f"args={args}",
            *secured,
        ]

    def form_swarm(self) -> None:
        """The hosts' dockerds form a swarm over the underlay: the first host its manager,
        the others workers."""
        manager, *workers = self.cluster.hosts
        addr = manager.vtep_ip
        manager.docker("swarm", "init", "--advertise-addr", addr, "--listen-addr", f"{addr}:2377")
        token = manager.docker("swarm", "join-token", "-q", "worker").strip()
        for h in workers:
            h.docker("swarm", "join", "--token", token, "--advertise-addr", h.vtep_ip,
                     f"{addr}:2377", timeout=120)  # fmt: skip

    def remove(self) -> None:
        """Disable and remove the plugin everywhere (its networks and containers first)."""
        for h in self.cluster.hosts:
            if self.swarm:
                h.docker_res("swarm", "leave", "--force")  # its services and networks go
            for c in h.docker("ps", "-aq", check=False).split():
                h.docker_res("rm", "-f", c)
            for n in h.docker("network", "ls", "-q", "--filter", f"driver={self.name}").split():
                h.docker_res("network", "rm", n)
            h.docker_res("plugin", "disable", "-f", self.name)
            h.docker_res("plugin", "rm", "-f", self.name)


@contextmanager
def managed_cluster(
    workdir: Path, hosts: int, swarm: bool = False, **cluster: Any
) -> Iterator[Cluster]:
    """A cluster of ``hosts`` simulated hosts (one master) whose agents are the managed
    plugin, each with the test image; with ``swarm``, in swarm mode and formed into a swarm.
    Removed, with the plugin, on exit."""
    c = Cluster(workdir, hosts=hosts, masters=1, **cluster).start(agents=False)
    agents = None
    try:
        agents = ManagedAgents(c, workdir / "plugin", swarm=swarm).install()
        for h in c.hosts:
            h.load_image()
        if swarm:
            agents.form_swarm()
        yield c
    finally:
        if agents is not None:
            agents.remove()
        c.stop()
