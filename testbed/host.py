"""Host daemons (Open vSwitch, dockerd) and local test images for integration tests.

The daemons are started by ``scripts/host-daemons.sh`` like system services: in their own
session, left running after the tests. Images come from ``scripts/test-image.sh`` (no registry
is reachable, so they are built locally from busybox-static).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

import docker

from .wait import wait_for

ROOT = Path(__file__).resolve().parent.parent
HOST_DAEMONS_SCRIPT = ROOT / "scripts" / "host-daemons.sh"
TEST_IMAGE_SCRIPT = ROOT / "scripts" / "test-image.sh"

BUSYBOX_IMAGE = "netplugin-test/busybox"
IPERF_IMAGE = "netplugin-test/iperf"
# Image name -> argument of scripts/test-image.sh.
_IMAGE_TARGETS = {BUSYBOX_IMAGE: "busybox", IPERF_IMAGE: "iperf"}

# Every docker container and network a test or benchmark makes carries this label, so a
# run killed half-way leaves objects the next run can find and remove.
TEST_LABEL = "netplugin-test"
# `docker network create` of a labelled netplugin network with netplugin's IPAM.
CREATE_NETWORK = (
    "docker", "network", "create", "--label", TEST_LABEL,
    "-d", "netplugin", "--ipam-driver", "netplugin",
)  # fmt: skip
# A dockerd that restores networks or containers of a netplugin that is not running waits
# about 15 s per lookup for it (a run killed half-way leaves such objects behind): give it
# time, once.
DOCKERD_TIMEOUT = 300.0
MANAGED_CONTAINERD_PIDFILE = Path("/var/run/docker/containerd/containerd.pid")

# Where each daemon writes its PID.
PIDFILES = {
    "ovsdb-server": Path("/var/run/openvswitch/ovsdb-server.pid"),
    "ovs-vswitchd": Path("/var/run/openvswitch/ovs-vswitchd.pid"),
    "dockerd": Path("/var/run/docker.pid"),
}

_lock = threading.Lock()
_daemons_output: str | None = None
_images_done: set[str] = set()


class HostSetupError(RuntimeError):
    """A host script failed; the message carries its output."""


def run_script(
    script: Path, *args: str, timeout: float = 120.0, env: dict[str, str] | None = None
) -> str:
    """Run a host script; return its combined output, raise HostSetupError on failure."""
    cmd = [str(script), *args]
    try:
        proc = subprocess.run(
            cmd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise HostSetupError(f"{script.name} timed out after {timeout}s:\n{out}") from e
    if proc.returncode != 0:
        raise HostSetupError(
            f"{script.name} {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}"
        )
    return proc.stdout


def ensure_host_daemons(force: bool = False) -> str:
    """Start OVS and dockerd if needed (once per test session); return the script output.

    ``force`` runs the script again even if it already ran in this process.
    """
    global _daemons_output
    with _lock:
        if _daemons_output is None or force:
            if os.geteuid() != 0:
                raise HostSetupError(f"{HOST_DAEMONS_SCRIPT.name} needs root")
            _daemons_output = run_script(
                HOST_DAEMONS_SCRIPT,
                env={"DOCKERD_TIMEOUT": str(int(DOCKERD_TIMEOUT))},
                timeout=DOCKERD_TIMEOUT + 60,
            )
        return _daemons_output


def restart_dockerd(timeout: float = 90.0) -> None:
    """Stop dockerd as a service manager would (SIGTERM, wait for it and its containerd to
    exit), then start it again and wait until it answers.

    A dockerd started before the previous one's containerd has exited times out on that
    containerd's socket, so the wait is not optional.
    """
    pid = read_pid(PIDFILES["dockerd"])
    containerd = read_pid(MANAGED_CONTAINERD_PIDFILE)
    try:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        wait_for(
            lambda: not any(p is not None and _alive(p) for p in (pid, containerd)),
            timeout,
            f"dockerd {pid} and its containerd {containerd} exit after SIGTERM",
            interval=0.2,
        )
    finally:
        ensure_host_daemons(force=True)  # also when the wait failed: never leave it stopped


def restart_ovs_vswitchd(cleanup: bool = True, timeout: float = 30.0) -> None:
    """Stop ovs-vswitchd (``--cleanup`` also removes its datapath devices, as before a
    reboot), wait for it to exit, and start it again."""
    pid = read_pid(PIDFILES["ovs-vswitchd"])
    cmd = ["ovs-appctl", "-t", "ovs-vswitchd", "exit", *(["--cleanup"] if cleanup else [])]
    try:
        subprocess.run(cmd, capture_output=True, timeout=timeout, check=True)
        wait_for(
            lambda: pid is None or not _alive(pid),
            timeout,
            f"ovs-vswitchd {pid} exits after ovs-appctl exit",
        )
    finally:
        ensure_host_daemons(force=True)  # also when the stop failed: never leave it stopped


def _alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (PID 1 here reaps orphans late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def sweep_test_leftovers() -> list[str]:
    """Remove containers and networks labelled TEST_LABEL; returns what was removed.

    Call it while a netplugin serves: removing a netplugin network asks its driver.
    """
    removed: list[str] = []
    for kind, ls, rm in (
        ("container", ["docker", "ps", "-aq"], ["docker", "rm", "-f"]),
        ("network", ["docker", "network", "ls", "-q"], ["docker", "network", "rm"]),
    ):
        ids = subprocess.run(
            [*ls, "--filter", f"label={TEST_LABEL}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout.split()
        if ids:
            subprocess.run([*rm, *ids], capture_output=True, timeout=120, check=False)
            removed += [f"{kind} {i}" for i in ids]
    return removed


def docker_client() -> docker.DockerClient:
    """A docker SDK client for the local daemon (DOCKER_HOST etc. honoured)."""
    return docker.from_env()


def ensure_test_image(name: str = BUSYBOX_IMAGE) -> docker.models.images.Image:
    """Build the local test image ``name`` if it is missing; return it."""
    target = _IMAGE_TARGETS.get(name.removesuffix(":latest"))
    if target is None:
        raise ValueError(f"unknown test image {name!r}; known: {sorted(_IMAGE_TARGETS)}")
    ensure_host_daemons()
    with _lock:
        if name not in _images_done:
            run_script(TEST_IMAGE_SCRIPT, target)
            _images_done.add(name)
    return docker_client().images.get(name)


def read_pid(pidfile: Path) -> int | None:
    """The PID in ``pidfile`` if that process is alive (and not a zombie), else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def daemon_pids() -> dict[str, int | None]:
    """PIDs of the host daemons, from their pidfiles (None when not running)."""
    return {name: read_pid(path) for name, path in PIDFILES.items()}


def ovs_datapath() -> str:
    """The datapath netplugin bridges should use: "system" with the kernel module, else "netdev"."""
    return "system" if Path("/sys/module/openvswitch").is_dir() else "netdev"


AGENT_DATA_DIR = Path("/var/lib/netplugin")  # the agent's --data-dir unless given
LIST_POOL_RECORDS = "cd {root}/pool-ports 2>/dev/null && grep -r . || true"


def pool_records(*roots: Path) -> dict[str, str]:
    """Pool port -> the endpoint it serves, from the agents' records under these data
    directories (``<data-dir>/pool-ports/<host>/<port>``; every host's: port names are
    unique)."""
    out: dict[str, str] = {}
    for root in roots or (AGENT_DATA_DIR,):
        for path in (root / "pool-ports").glob("*/*"):
            with contextlib.suppress(OSError):
                if not path.name.startswith("."):
                    out[path.name] = path.read_text().strip()
    return out


def parse_pool_records(listing: str) -> dict[str, str]:
    """The same from ``LIST_POOL_RECORDS``'s output, run where the agent is (a VM)."""
    out = {}
    for line in listing.splitlines():
        path, sep, endpoint = line.partition(":")
        name = path.rsplit("/", 1)[-1]
        if sep and not name.startswith("."):
            out[name] = endpoint.strip()
    return out


def endpoint_port(records: Mapping[str, str], endpoint_id: str) -> str:
    """The switch port of an endpoint: the pool port recorded as serving it (``records``:
    pool_records'), else its own veth's host end (vp + the ID's first 11)."""
    for port, endpoint in records.items():
        if endpoint == endpoint_id:
            return port
    return "vp" + endpoint_id[:11]


def spare_pool_ports(ip_link: str, records: Mapping[str, str]) -> set[str]:
    """From `ip -o link`'s lines: the port pool's pairs that serve no endpoint (the agent
    makes and keeps these as it likes: leak checks leave them out)."""
    spare = set()
    for line in ip_link.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith("vr") or (name.startswith("vq") and name not in records):
            spare.add(name)
    return spare
