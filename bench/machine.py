"""Describe the machine a benchmark ran on."""

from __future__ import annotations

import os
import platform
import subprocess


def describe() -> dict[str, str]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu
            )
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
            mem = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass

    def version(cmd: list[str]) -> str:
        try:
            return subprocess.run(
                cmd, capture_output=True, text=True, timeout=5
            ).stdout.splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "not installed"

    return {
        "CPU": f"{cpu} ({os.cpu_count()} cores)",
        "Memory": mem,
        "Kernel": platform.release(),
        "Python": platform.python_version(),
        "etcd": version(["etcd", "--version"]),
        "Storage": "embedded SQLite (WAL, synchronous=FULL) on the VM disk",
    }
