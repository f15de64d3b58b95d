"""The benchmarks' shell: a command's output, and `docker run` timed on a network."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testbed.host import BUSYBOX_IMAGE, TEST_LABEL


def sh(*cmd: str) -> str:
    """``cmd``'s standard output; raises if it fails."""
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout


def docker_run_seconds(network: str, runs: int) -> list[float]:
    """The seconds each of ``runs`` `docker run --rm busybox true` on ``network`` took."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sh("docker", "run", "--rm", "--label", TEST_LABEL, "--net", network, BUSYBOX_IMAGE, "true")
        out.append(time.perf_counter() - t0)
    return out


@contextmanager
def socket_agent(work: Path, name: str, *images: str) -> Iterator[tuple[Any, Any]]:
    """(master, plugin): a netmaster on the embedded store and the socket plugin on this
    host's dockerd and OVS, with the test images made; refused if another netplugin serves
    the socket; both stopped on exit."""
    from testbed.host import ensure_host_daemons, ensure_test_image, sweep_test_leftovers
    from testbed.master import MasterProcess
    from testbed.plugin import SOCKET, PluginProcess, serving

    ensure_host_daemons()
    for image in (BUSYBOX_IMAGE, *images):
        ensure_test_image(image)
    if serving(SOCKET):
        raise SystemExit(f"bench: another netplugin serves {SOCKET}; stop it first")
    master = MasterProcess(work / f"{name}-master").start()
    plugin = PluginProcess(master.url, work / f"{name}-plugin.log", data_dir=master.data_dir)
    try:
        plugin.start()
        sweep_test_leftovers()
        yield master, plugin
    finally:
        plugin.stop()
        master.stop()
