"""A managed (v2) netplugin under test or benchmark: `make plugin`'s build, and one plugin
configured through `docker plugin set` with its own OpenFlow port, netmaster port and data
directory. It uses the bridge every docker test uses ("netplugin"): gateway ports are named
by tag alone, so a second bridge would clash with the ones earlier tests left there (one
netplugin per host; an agent adopts or removes what it finds, as at any restart)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from common.kinds import NETWORKS
from netctl.client import MasterClient

from .host import TEST_LABEL
from .master import VENV_BIN, free_port
from .wait import wait_for

ROOT = Path(__file__).resolve().parent.parent


def docker(*args: str, check: bool = True, timeout: float = 120, host: str = "") -> str:
    """The docker CLI against the host's dockerd (or the one at ``host``, a -H URL)."""
    argv = ["docker", *(["-H", host] if host else []), *args]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {res.stderr.strip() or res.stdout}")
    return res.stdout.strip()


def build(name: str, build_dir: Path, push: bool = False) -> str:
    """`make plugin` (scripts/build-plugin.sh) for ``name``; returns its output."""
    env = {
        **os.environ,
        "VENV": str(VENV_BIN.parent),
        "PLUGIN": name,
        "BUILD": str(build_dir),
        "PUSH": "1" if push else "",
    }
    res = subprocess.run(
        ["scripts/build-plugin.sh"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    return res.stdout


class Plugin:
    """One managed netplugin under test, configured away from the host's own netplugin."""

    def __init__(self, name: str, data: Path) -> None:
        self.name = name
        self.data = data
        self.master_port = free_port()
        self.master_url = f"http://127.0.0.1:{self.master_port}"
        self.settings = [
            f"data.source={data}",
            f"NETPLUGIN_OF_PORT={free_port()}",
            f"NETPLUGIN_MASTER_LISTEN=127.0.0.1:{self.master_port}",
            "NETPLUGIN_AUDIT_INTERVAL=0",
            "args=--host-ttl 12",
        ]

    def configure(self) -> None:
        docker("plugin", "set", self.name, *self.settings)

    def enable(self) -> None:
        docker("plugin", "enable", self.name, timeout=60)

    def enabled(self) -> bool:
        return docker("plugin", "inspect", "-f", "{{.Enabled}}", self.name, check=False) == "true"

    def netctl(self, *args: str) -> str:
        res = subprocess.run(
            [str(VENV_BIN / "netctl"), "--netmaster", self.master_url, *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        return res.stdout

    def network(self, name: str, subnet: str) -> None:
        docker(
            "network", "create", "-d", self.name, "--ipam-driver", self.name,
            "--subnet", subnet, "--label", TEST_LABEL, name,
        )  # fmt: skip

    def remove(self, keep: bool = False) -> None:
        """Everything on the plugin, then the plugin (only disabled with ``keep``). A plugin
        removed while docker still has networks of its driver leaves networks nobody can
        remove any more, so it is removed only once they are gone."""
        for c in docker("ps", "-aq", "--filter", f"label={TEST_LABEL}", check=False).split():
            docker("rm", "-f", c, check=False)
        if self.enabled():
            # The cluster's networks first: the docker sync would make their docker copies again.
            client = MasterClient(self.master_url)
            with contextlib.suppress(Exception):
                for net in client.list(NETWORKS):
                    with contextlib.suppress(Exception):
                        client.delete(NETWORKS, str(net["tenantName"]), str(net["networkName"]))

        def networks() -> str:
            return docker("network", "ls", "-q", "--filter", f"driver={self.name}", check=False)

        def removed() -> bool:
            left = networks()
            for n in left.split():
                docker("network", "rm", n, check=False)
            return not left

        try:
            wait_for(removed, 30, f"no docker network of {self.name} left", 0.5, networks)
        except TimeoutError:
            docker("plugin", "disable", "-f", self.name, check=False)
            raise
        if keep:
            docker("plugin", "disable", "-f", self.name, check=False)
        else:
            docker("plugin", "rm", "-f", self.name, check=False)


@contextlib.contextmanager
def private_dockerd(timeout: float = 60) -> Iterator[str]:
    """A second dockerd that never saw any plugin: its own data and exec roots, socket and
    containerd, no bridge and no iptables (it runs no container). Yields its -H URL; it is
    stopped by its PID and its directories removed afterwards."""
    # Short: containerd's socket lives under the exec root and unix paths stop at 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="npdk-", dir="/tmp"))
    url = f"unix://{root}/docker.sock"
    log = (root / "dockerd.log").open("w")
    # A bridge of its own: with --bridge=none dockerd deletes the host's docker0 at start.
    bridge = f"npdk{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    proc = subprocess.Popen(
        ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "x"),
         "--pidfile", str(root / "dockerd.pid"), "-H", url, "--bridge", bridge,
         "--iptables=false", "--ip-masq=false", "--ip-forward=false"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def tail() -> str:
            return (root / "dockerd.log").read_text()[-2000:]

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the private dockerd exited: {tail()}")
            return docker("version", "-f", "{{.Server.Version}}", host=url, check=False) != ""

        wait_for(up, timeout, "the private dockerd answered", 0.3, tail)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run(["umount", "-R", "-l", str(root / "x")], capture_output=True)
        subprocess.run(["umount", "-R", "-l", str(root / "data")], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
