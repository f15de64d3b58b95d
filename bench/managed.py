"""`docker run` on the managed (v2) plugin, measured in the same run as the socket plugin
and Docker's bridge (bench.datapath): the plugin is built by `make plugin`'s script,
enabled with its own ports and data directory, and removed afterwards."""

from __future__ import annotations

import re
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from bench.runs import docker_run_seconds


def run(workdir: Path, runs: int = 10) -> dict[str, Any]:
    from testbed.host import TEST_LABEL
    from testbed.managed import Plugin, build, docker

    name = f"netplugin-bench-{uuid.uuid4().hex[:6]}:v2"
    t0 = time.perf_counter()
    out = build(name, workdir / "plugin-build")
    built = time.perf_counter() - t0
    sizes = re.search(r"rootfs (\d+) MB; build (\d+) s, create (\d+) s", out)
    plugin = Plugin(name, workdir / "plugin-data")
    plugin.data.mkdir(exist_ok=True)
    net = f"bench-v2-{uuid.uuid4().hex[:6]}"
    try:
        plugin.configure()
        t0 = time.perf_counter()
        plugin.enable()
        enable = time.perf_counter() - t0
        docker(
            "network", "create", "-d", name, "--ipam-driver", name, "--label", TEST_LABEL,
            "--subnet", "10.152.0.0/16", net,
        )  # fmt: skip
        docker_run_seconds(net, 2)  # warm-up
        times = docker_run_seconds(net, runs)
        return {
            "docker_run": statistics.median(times),
            "runs": runs,
            "enable_s": enable,
            "make_plugin_s": built,
            "rootfs_mb": int(sizes[1]) if sizes else None,
            "create_s": int(sizes[3]) if sizes else None,
            # build-plugin.sh says so when it had to debootstrap the base (not cached yet).
            "base_built": "plugin: debootstrap" in out,
        }
    finally:
        docker("network", "rm", net, check=False)
        plugin.remove()
