"""Swarm spike (issue 26): three simulated hosts (testbed.multihost) form a swarm (h1
manager, h2 and h3 workers, over the underlay); a recording v2 plugin (recorder.py) on
each; one swarm-scoped network, a service of 3 replicas, an attachable `docker run`, then
everything removed. Every call Docker made, with its node, goes to OUT/calls.jsonl.

    python docs/research/swarm-spike/spike.py OUT [--docker26]

Run as root from the checkout, with the docker lock held (it starts private dockerds)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from testbed.host import IPERF_IMAGE, TEST_LABEL  # noqa: E402
from testbed.multihost import Cluster  # noqa: E402

HERE = Path(__file__).resolve().parent


def plugin_dir(work: Path) -> Path:
    d = work / "plugin"
    if not (d / "rootfs" / "usr" / "bin" / "python3").exists():
        (d / "rootfs").mkdir(parents=True, exist_ok=True)
        base = sorted((ROOT / "build").glob("plugin-base-*.tar"))[0]
        subprocess.run(["tar", "-C", str(d / "rootfs"), "-xf", str(base)], check=True)
    shutil.copy(HERE / "recorder.py", d / "rootfs" / "recorder.py")
    (d / "rootfs" / "log").mkdir(exist_ok=True)
    (d / "rootfs" / "run" / "docker" / "plugins").mkdir(parents=True, exist_ok=True)
    config = {
        "description": "records Docker's network and IPAM calls (swarm spike)",
        "documentation": "docs/research/swarm-spike",
        "entrypoint": ["/usr/bin/python3", "/recorder.py"],
        "interface": {
            "types": ["docker.networkdriver/1.0", "docker.ipamdriver/1.0"],
            "socket": "recorder.sock",
        },
        "network": {"type": "host"},
        "env": [
            {"name": "NODE", "settable": ["value"], "value": "?"},
            {"name": "SCOPE", "settable": ["value"], "value": "global"},
        ],
        "mounts": [
            {"name": "log", "source": str(work / "log"), "destination": "/log",
             "type": "bind", "options": ["rbind", "rw"], "settable": ["source"]},
        ],
    }  # fmt: skip
    (d / "config.json").write_text(json.dumps(config, indent=1))
    (work / "log").mkdir(exist_ok=True)
    return d


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    d26 = "--docker26" in sys.argv
    pdir = plugin_dir(out)
    kwargs = {}
    if d26:
        from testbed.site import dockerd_for

        kwargs["dockerd"] = dockerd_for("docker26")
    cluster = Cluster(out / "cluster", hosts=3, masters=1, **kwargs).start()
    steps: list[tuple[str, str]] = []

    def step(h, *args: str, check: bool = True) -> str:  # type: ignore[no-untyped-def]
        res = h.docker_res(*args)
        steps.append((f"{h.name}: docker {' '.join(args)}", (res.stdout + res.stderr).strip()))
        print(steps[-1][0], "->", steps[-1][1][:300], flush=True)
        if check and res.returncode != 0:
            raise SystemExit(f"failed: {steps[-1]}")
        return res.stdout.strip()

    try:
        h1, h2, h3 = cluster.hosts
        for h in cluster.hosts:
            h.load_image(IPERF_IMAGE)
            step(h, "plugin", "create", "recorder", str(pdir))
            step(h, "plugin", "set", "recorder", f"NODE={h.name}")
            step(h, "plugin", "enable", "recorder")
        step(
            h1,
            "swarm",
            "init",
            "--advertise-addr",
            h1.vtep_ip,
            "--listen-addr",
            f"{h1.vtep_ip}:2377",
        )
        token = step(h1, "swarm", "join-token", "-q", "worker")
        for h in (h2, h3):
            step(
                h,
                "swarm",
                "join",
                "--token",
                token,
                "--advertise-addr",
                h.vtep_ip,
                f"{h1.vtep_ip}:2377",
            )
        step(h1, "node", "ls")
        step(h1, "network", "create", "-d", "recorder:latest", "--ipam-driver", "recorder:latest",
             "--scope", "swarm", "--attachable", "--subnet", "10.99.0.0/24", "-o", "foo=bar",
             "--ipam-opt", "x=y", "--label", TEST_LABEL, "snet")  # fmt: skip
        step(h1, "network", "create", "-d", "recorder:latest", "--ipam-driver", "recorder:latest",
             "--label", TEST_LABEL, "plainnet", check=False)  # fmt: skip
        step(h2, "network", "create", "-d", "recorder:latest", "--ipam-driver", "recorder:latest",
             "--label", TEST_LABEL, "workernet", check=False)  # fmt: skip
        step(h1, "service", "create", "--detach", "--name", "web", "--replicas", "3",
             "--restart-condition", "none", "--network", "snet", IPERF_IMAGE, "sleep", "3600")  # fmt: skip
        time.sleep(20)
        step(h1, "service", "ps", "--no-trunc", "web", check=False)
        step(h1, "service", "inspect", "web", check=False)
        step(h2, "run", "-d", "--label", TEST_LABEL, "--network", "snet", "--name", "att",
             IPERF_IMAGE, "sleep", "3600", check=False)  # fmt: skip
        time.sleep(5)
        step(h1, "service", "update", "--detach", "--endpoint-mode", "dnsrr", "web", check=False)
        time.sleep(5)
        step(h1, "service", "rm", "web", check=False)
        step(h2, "rm", "-f", "att", check=False)
        time.sleep(10)
        step(h1, "network", "rm", "snet", check=False)
        time.sleep(5)
    finally:
        (out / "steps.json").write_text(json.dumps(steps, indent=1))
        for h in reversed(cluster.hosts):
            h.docker_res("swarm", "leave", "--force")
            h.docker_res("plugin", "disable", "-f", "recorder")
            h.docker_res("plugin", "rm", "-f", "recorder")
        cluster.stop()
        if (out / "log" / "calls.jsonl").exists():
            shutil.copy(out / "log" / "calls.jsonl", out / "calls.jsonl")


if __name__ == "__main__":
    main()
