"""Control-plane benchmarks: allocation throughput and IPAM memory."""

from __future__ import annotations

import gc
import ipaddress
import statistics
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from ipam import Allocator, PoolSpec
from store import open_store


def _session_pool(n: int) -> list[requests.Session]:
    return [requests.Session() for _ in range(n)]


def allocation_rate(url: str, clients: int, total: int, network: str) -> dict[str, float]:
    """Create ``total`` endpoints through the REST allocation API with ``clients`` threads."""
    sessions = _session_pool(clients)
    latencies: list[float] = []

    def worker(c: int) -> None:
        s = sessions[c]
        for i in range(c, total, clients):
            t0 = time.perf_counter()
            r = s.post(
                f"{url}/api/v1/alloc/endpoints",
                json={"endpointID": f"{network}-{i}", "networkName": network, "host": "bench"},
                timeout=60,
            )
            latencies.append(time.perf_counter() - t0)
            r.raise_for_status()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return {
        "rate": total / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
    }


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


def service_rate(etcd_endpoints: list[str] | None, total: int) -> float:
    """The allocation path in-process (ClusterState, no HTTP): what the REST layer adds on top."""
    from common.models import EndpointRequest, Network
    from master.service import ClusterState

    with tempfile.TemporaryDirectory() as d:
        store = open_store(etcd_endpoints, d)
        try:
            state = ClusterState(store)
            state.ensure_defaults()
            name = f"svc{time.monotonic_ns() % 10**9}"
            state.put_network(Network(networkName=name, subnet="10.250.0.0/16"))
            t0 = time.perf_counter()
            for i in range(total):
                state.create_endpoint(EndpointRequest(endpointID=f"{name}-{i}", networkName=name))
            rate = total / (time.perf_counter() - t0)
            for i in range(total):
                state.delete_endpoint(f"{name}-{i}")
            state.delete_network("default", name)
            return rate
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


def run(etcd_endpoint: str, workdir: Path) -> dict[str, Any]:
    from integration.master import MasterProcess

    results: dict[str, Any] = {"alloc": {}, "raw": {}, "service": {}}
    for backend, endpoints in (("embedded", ""), ("etcd", etcd_endpoint)):
        master = MasterProcess(workdir / f"master-{backend}", etcd_endpoints=endpoints).start()
        try:
            for clients, total in ((1, 500), (16, 2000)):
                name = f"b{backend[:3]}{clients}"
                octet = 100 + clients + (0 if backend == "embedded" else 50)
                requests.post(
                    f"{master.url}/api/v1/networks/default:{name}",
                    json={"subnet": f"10.{octet}.0.0/16"},
                    timeout=30,
                ).raise_for_status()
                results["alloc"][(backend, clients)] = allocation_rate(
                    master.url, clients, total, name
                )
                results["raw"][(backend, clients)] = raw_cas_rate(
                    [endpoints] if endpoints else None, clients, total
                )
        finally:
            master.stop()
        results["service"][backend] = service_rate([endpoints] if endpoints else None, 500)
    master = MasterProcess(workdir / "master-w2", extra=["--workers", "2"]).start()
    try:
        requests.post(
            f"{master.url}/api/v1/networks/default:bw2",
            json={"subnet": "10.199.0.0/16"},
            timeout=30,
        ).raise_for_status()
        results["workers2"] = allocation_rate(master.url, 16, 2000, "bw2")
    finally:
        master.stop()
    results["memory"] = pool_memory()
    return results
