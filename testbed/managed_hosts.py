"""The managed (v2) plugin as the agent of every simulated host (testbed.multihost): built
once by `make plugin`'s script, created in each host's dockerd, and configured through its
settable mounts and env to that host's Open vSwitch, dockerd and the cluster's etcd and
masters (TLS and token included). Swarm accepts only such a plugin (issue 26), and it is
what users run on several hosts.

    cluster = Cluster(workdir, hosts=2, masters=1).start(agents=False)
    agents = ManagedAgents(cluster, workdir / "plugin").install()
    ... docker -H <host> network create -d netplugin:latest ...
    agents.remove(); cluster.stop()
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .managed import ROOT
from .master import VENV_BIN
from .multihost import Cluster, SimHost

PLUGIN = "netplugin:latest"


class ManagedAgents:
    def __init__(self, cluster: Cluster, build_dir: Path, name: str = PLUGIN) -> None:
        self.cluster = cluster
        self.build_dir = build_dir
        self.name = name

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
            f"args={args}",
            *secured,
        ]

    def remove(self) -> None:
        """Disable and remove the plugin everywhere (its networks and containers first)."""
        for h in self.cluster.hosts:
            for c in h.docker("ps", "-aq", check=False).split():
                h.docker_res("rm", "-f", c)
            for n in h.docker("network", "ls", "-q", "--filter", f"driver={self.name}").split():
                h.docker_res("network", "rm", n)
            h.docker_res("plugin", "disable", "-f", self.name)
            h.docker_res("plugin", "rm", "-f", self.name)
