"""Leader failover: kill -9 the leader of two netmasters, time until the survivor allocates."""

from __future__ import annotations

import random
import signal
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from testbed.wait import wait_for

METHOD = (
    "Two real `netmaster`s (gunicorn, 1 worker each) share a real etcd on 127.0.0.1, with "
    "`--leader-ttl` 3 s and 10 s. Once both name the same leader, the leader's arbiter and "
    "workers are killed with SIGKILL at a random point of the lease's refresh cycle (a "
    "dying machine: nothing is revoked), and a client "
    "posts one allocation (`POST /api/v1/alloc/endpoints`, idempotent by endpoint ID) to "
    "the survivor every 20 ms. The failover time runs from the kill to the first allocation "
    "the survivor answers with success; until then it answers 503 (leader unreachable). It "
    "is bounded by the TTL left on the dead leader's lease (refreshed every TTL/3), plus "
    "etcd's expiry check (500 ms) and the survivor's election poll (250 ms). A graceful stop "
    "(SIGTERM, TTL 10 s) is timed the same way: the stopping leader revokes its lease, so "
    "the TTL does not apply. Each figure is repeated; median and max over the runs."
)


def _leader_of(masters: list[Any]) -> Any | None:
    """The master that all of ``masters`` name as leader, if one of them."""
    urls = set()
    for m in masters:
        try:
            r = requests.get(m.url + "/api/v1/leader", timeout=2)
            leader = r.json().get("leader") if r.ok else None
        except (requests.RequestException, ValueError):
            return None
        if not leader:
            return None
        urls.add(leader["url"])
    if len(urls) != 1:
        return None
    return next((m for m in masters if m.url in urls), None)


def failover_once(
    etcd_endpoint: str,
    workdir: Path,
    ttl: int,
    graceful: bool = False,
    rng: random.Random | None = None,
) -> float:
    """One run: seconds from stopping the leader to the survivor's first allocation."""
    rng = rng or random.Random()
    from testbed.master import MasterProcess

    extra = ["--leader-ttl", str(ttl), "--host-reclaim-grace", "0"]
    masters = [
        MasterProcess(workdir / f"m{i}", etcd_endpoints=etcd_endpoint, extra=extra)
        for i in range(2)
    ]
    tenant = f"fo{uuid.uuid4().hex[:8]}"
    try:
        for m in masters:
            m.start()
        # A leader left by an earlier run (killed) may hold the key until its TTL runs out.
        leader = wait_for(
            lambda: _leader_of(masters), 2 * ttl + 10, "a leader among the new masters", 0.05
        )
        survivor = next(m for m in masters if m is not leader)
        s = requests.Session()
        api = survivor.url + "/api/v1"
        s.post(f"{api}/tenants/{tenant}", json={}, timeout=10).raise_for_status()
        net = {"subnet": "10.99.0.0/24"}
        s.post(f"{api}/networks/{tenant}:net", json=net, timeout=10).raise_for_status()
        body = {"endpointID": f"{tenant}-warm", "tenantName": tenant, "networkName": "net"}
        s.post(f"{api}/alloc/endpoints", json=body, timeout=10).raise_for_status()
        body["endpointID"] = f"{tenant}-after"
        # Kill at a random point of the lease's refresh cycle (every TTL/3).
        time.sleep(rng.uniform(0, ttl / 3))
        t0 = time.monotonic()
        if graceful:
            assert leader.proc is not None
            leader.proc.send_signal(signal.SIGTERM)
        else:
            leader.kill_all()

        def allocated() -> bool:
            try:
                return s.post(f"{api}/alloc/endpoints", json=body, timeout=2).status_code < 300
            except requests.RequestException:
                return False

        wait_for(allocated, 4 * ttl + 30, "an allocation after the leader went", 0.02)
        elapsed = time.monotonic() - t0
        leader.stop()
        # Leave the store as found.
        for eid in (f"{tenant}-warm", f"{tenant}-after"):
            s.delete(f"{api}/alloc/endpoints/{eid}", timeout=10)
        s.delete(f"{api}/networks/{tenant}:net", timeout=10)
        s.delete(f"{api}/tenants/{tenant}", timeout=10)
        return elapsed
    finally:
        for m in masters:
            m.stop()


def _summary(runs: list[float]) -> dict[str, Any]:
    return {
        "runs_s": [round(r, 3) for r in runs],
        "median_s": round(statistics.median(runs), 3),
        "max_s": round(max(runs), 3),
    }


def run(etcd_endpoint: str, workdir: Path, repeats: int = 3) -> dict[str, Any]:
    """Failover times after kill -9 (TTL 3 s and 10 s) and after SIGTERM (TTL 10 s)."""
    out: dict[str, Any] = {"kill9": {}, "method": METHOD, "repeats": repeats}
    for ttl in (3, 10):
        runs = [
            failover_once(etcd_endpoint, workdir / f"kill-ttl{ttl}-{i}", ttl)
            for i in range(repeats)
        ]
        out["kill9"][ttl] = {"ttl_s": ttl, **_summary(runs)}
    runs = [
        failover_once(etcd_endpoint, workdir / f"term-ttl10-{i}", 10, graceful=True)
        for i in range(repeats)
    ]
    out["graceful"] = {"ttl_s": 10, **_summary(runs)}
    return out


if __name__ == "__main__":
    import json
    import tempfile

    from testbed.etcd import EtcdServer

    with tempfile.TemporaryDirectory() as d:
        etcd = EtcdServer(Path(d) / "etcd")
        etcd.start()
        try:
            print(json.dumps(run(etcd.endpoint, Path(d)), indent=2))
        finally:
            etcd.cleanup()
