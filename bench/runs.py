"""The benchmarks' shell: a command's output, and `docker run` timed on a network."""

from __future__ import annotations

import subprocess
import time

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
