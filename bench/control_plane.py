"""Control-plane benchmarks: allocation throughput and latency, their limits, IPAM memory.

Allocation throughput goes through a real master (gunicorn) with 16 clients, with group
commit on and off (``--no-group-commit``) in the same run; the master reports its batch
sizes (GET /stats/commits). The limits it is measured against, same run: what the disk
gives SQLite with synchronous=FULL (and NORMAL), what one REST call costs on an empty
route of the same master, and the allocation path called in-process (no HTTP).
"""

from __future__ import annotations

import gc
import ipaddress
import itertools
import os
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from bench.stats import pct
from ipam import Allocator, PoolSpec
from store import open_store

CLIENTS = 16


def _hammer(
    clients: int, total: int, call: Callable[[requests.Session, int], None]
) -> dict[str, float]:
    """``total`` calls spread over ``clients`` threads with keep-alive sessions: rate, p50,
    p99 (ms)."""
    sessions = [requests.Session() for _ in range(clients)]
    latencies: list[float] = []

    def worker(c: int) -> None:
        for i in range(c, total, clients):
            t0 = time.perf_counter()
            call(sessions[c], i)
            latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    elapsed = time.perf_counter() - t0
    for s in sessions:
        s.close()
    return {
        "rate": total / elapsed,
        "p50_ms": pct(latencies, 50) * 1000,
        "p99_ms": pct(latencies, 99) * 1000,
    }


def allocation_rate(url: str, clients: int, total: int, network: str) -> dict[str, float]:
    """Create ``total`` endpoints through the REST allocation API with ``clients`` threads."""

    def call(s: requests.Session, i: int) -> None:
        s.post(
            f"{url}/api/v1/alloc/endpoints",
            json={"endpointID": f"{network}-{i}", "networkName": network, "host": "bench"},
            timeout=60,
        ).raise_for_status()

    return _hammer(clients, total, call)


def address_latency(url: str, pool: str, clients: int, total: int) -> dict[str, float]:
    """Docker's RequestAddress as the plugin sends it to the master (POST /alloc/addresses)."""
    tag = time.monotonic_ns()

    def call(s: requests.Session, i: int) -> None:
        s.post(
            f"{url}/api/v1/alloc/addresses",
            json={"poolID": pool, "owner": f"bench:{tag}:{i}"},
            timeout=60,
        ).raise_for_status()

    return _hammer(clients, total, call)


def rest_floor(url: str, clients: int, total: int) -> dict[str, float]:
    """An empty route of the same master (GET /version: gunicorn, Flask, no store)."""

    def call(s: requests.Session, _: int) -> None:
        s.get(f"{url}/version", timeout=60).raise_for_status()

    return _hammer(clients, total, call)


def commit_stats(url: str) -> dict[str, Any]:
    r = requests.get(f"{url}/stats/commits", timeout=10)
    r.raise_for_status()
    return dict(r.json())


def raw_cas_rate(etcd_endpoints: list[str] | None, clients: int, total: int) -> float:
    """Baseline: bare create-if-absent transactions on the same backend, no HTTP, no IPAM."""
    with tempfile.TemporaryDirectory() as d:
        store = open_store(etcd_endpoints, d)
        try:
            prefix = f"/bench/raw-{time.monotonic_ns()}/"

            def worker(c: int) -> None:
                for i in range(c, total, clients):
                    assert store.create(f"{prefix}{i}", b"x")

            t0 = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(worker, range(clients)))
            rate = total / (time.perf_counter() - t0)
            store.delete(prefix, prefix=True)
            return rate
        finally:
            store.close()


def sqlite_commits(directory: Path, synchronous: str, rows: int, commits: int = 1000) -> float:
    """Rows/s SQLite commits on this disk in WAL mode: ``rows`` rows per commit, one thread."""
    with tempfile.TemporaryDirectory(dir=directory) as d:
        conn = sqlite3.connect(os.path.join(d, "raw.db"), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("CREATE TABLE kv (key BLOB PRIMARY KEY, value BLOB)")
            t0 = time.perf_counter()
            for c in range(commits):
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT INTO kv VALUES (?, ?)",
                    [(f"{c}/{r}".encode(), b"x" * 200) for r in range(rows)],
                )
                conn.execute("COMMIT")
            return commits * rows / (time.perf_counter() - t0)
        finally:
            conn.close()


def service_rate(
    etcd_endpoints: list[str] | None, threads: int, total: int, group_commit: bool, octet: int
) -> dict[str, Any]:
    """The allocation path in-process (ClusterState, no HTTP) with ``threads`` threads, on a
    network 10.``octet``.0.0/16 of its own."""
    from common.models import EndpointRequest, Network
    from master.state import ClusterState

    with tempfile.TemporaryDirectory() as d:
        store = open_store(etcd_endpoints, d)
        try:
            state = ClusterState(store, group_commit=group_commit)
            state.ensure_defaults()
            name = f"svc{time.monotonic_ns() % 10**9}"
            state.networks.put(Network(networkName=name, subnet=f"10.{octet}.0.0/16"))

            def worker(t: int) -> None:
                for i in range(t, total, threads):
                    state.endpoints.create(
                        EndpointRequest(endpointID=f"{name}-{i}", networkName=name)
                    )

            t0 = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(worker, range(threads)))
            rate = total / (time.perf_counter() - t0)
            return {"rate": rate, "meanBatch": state.commit_stats().get("meanBatch", 1.0)}
        finally:
            store.close()


def pool_memory(allocations: int = 100_000) -> dict[str, Any]:
    """Memory of a /8 pool holding ``allocations`` addresses, vs a plain Python set of them."""
    net = ipaddress.ip_network("10.0.0.0/8")
    gc.collect()
    tracemalloc.start()
    alloc = Allocator(PoolSpec(name="bench:/8", network=net))
    t0 = time.perf_counter()
    for _ in range(allocations):
        alloc.allocate()
    alloc_s = time.perf_counter() - t0
    # Release every third address so the allocated set is fragmented, the worst case for ranges.
    for i in range(1, allocations, 3):
        alloc.release(ipaddress.ip_address(int(net.network_address) + 1 + i))
    frag_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del alloc
    gc.collect()

    tracemalloc.start()
    contiguous = Allocator(PoolSpec(name="bench:/8", network=net))
    for _ in range(allocations):
        contiguous.allocate()
    contiguous_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del contiguous
    gc.collect()

    tracemalloc.start()
    naive = {int(net.network_address) + 1 + i for i in range(allocations)}
    naive_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del naive
    return {
        "allocations": allocations,
        "alloc_us": alloc_s / allocations * 1e6,
        "contiguous_bytes": contiguous_bytes,
        "fragmented_bytes": frag_bytes,
        "naive_set_bytes": naive_bytes,
        "bitmap_bytes": net.num_addresses // 8,
    }


def _through_master(
    workdir: Path, name: str, etcd_endpoint: str, extra: list[str], octets: Iterator[int]
) -> dict[str, Any]:
    """One master: allocations/s with 1 and 16 clients, RequestAddress latency with 1 and 16
    clients, its batch sizes, and (embedded, group commit on) the empty route's cost."""
    from testbed.master import MasterProcess

    master = MasterProcess(workdir / f"master-{name}", etcd_endpoints=etcd_endpoint, extra=extra)
    master.start()
    out: dict[str, Any] = {}
    try:
        url = master.url
        warm = f"w{name}"  # a fresh master's first calls pay for imports and connections
        requests.post(
            f"{url}/api/v1/networks/default:{warm}",
            json={"subnet": f"10.{next(octets)}.0.0/16"},
            timeout=30,
        ).raise_for_status()
        allocation_rate(url, CLIENTS, 200, warm)
        for clients, total in ((1, 500), (CLIENTS, 2000)):
            net = f"b{name}{clients}"
            requests.post(
                f"{url}/api/v1/networks/default:{net}",
                json={"subnet": f"10.{next(octets)}.0.0/16"},
                timeout=30,
            ).raise_for_status()
            before = commit_stats(url)
            out[f"alloc{clients}"] = allocation_rate(url, clients, total, net)
            after = commit_stats(url)
            if after.get("groupCommit"):
                batches = after["batches"] - before["batches"]
                txns = after["txns"] - before["txns"]
                out[f"alloc{clients}"]["meanBatch"] = txns / batches if batches else 0.0
                out[f"alloc{clients}"]["maxBatch"] = after["maxBatch"]
        pool = requests.post(
            f"{url}/api/v1/alloc/pools", json={"pool": f"10.{next(octets)}.0.0/16"}, timeout=30
        )
        pool.raise_for_status()
        pool_id = pool.json()["poolID"]
        out["addr1"] = address_latency(url, pool_id, 1, 500)
        out[f"addr{CLIENTS}"] = address_latency(url, pool_id, CLIENTS, 2000)
        out["stats"] = commit_stats(url)
        if not etcd_endpoint and "--no-group-commit" not in extra:
            out["rest1"] = rest_floor(url, 1, 1000)
            out[f"rest{CLIENTS}"] = rest_floor(url, CLIENTS, 4000)
    finally:
        master.stop()
    return out


def run(etcd_endpoint: str, workdir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"master": {}, "raw": {}, "service": {}, "limits": {}}
    octets = itertools.count(100)  # a /16 of its own for every network and pool
    for backend, endpoint in (("embedded", ""), ("etcd", etcd_endpoint)):
        eps = [endpoint] if endpoint else None
        for mode, extra in (("group", []), ("single", ["--no-group-commit"])):
            results["master"][(backend, mode)] = _through_master(
                workdir, f"{backend[:3]}{mode[:3]}", endpoint, extra, octets
            )
        results["raw"][backend] = raw_cas_rate(eps, CLIENTS, 2000)
        for mode in ("group", "single"):
            for threads in (1, CLIENTS):
                total = 500 if threads == 1 else 2000
                results["service"][(backend, mode, threads)] = service_rate(
                    eps, threads, total, mode == "group", next(octets)
                )
    results["master"][("embedded", "workers2")] = _through_master(
        workdir, "w2", "", ["--workers", "2"], octets
    )
    for sync in ("FULL", "NORMAL"):
        for rows in (1, CLIENTS):
            results["limits"][(sync, rows)] = sqlite_commits(workdir, sync, rows)
    results["memory"] = pool_memory()
    return results
