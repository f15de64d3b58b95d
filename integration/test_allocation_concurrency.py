"""64 concurrent allocators, in threads and in processes, never receive the same address."""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pytest

from common.models import EndpointRequest, Network
from master.service import ClusterState
from store import open_store


def _open(data_dir: str, endpoints: str) -> ClusterState:
    return ClusterState(open_store([endpoints] if endpoints else None, data_dir))


def _allocate(args: tuple[str, str, int, int]) -> list[str]:
    """One process: 16 threads, each creating endpoints on the shared store."""
    data_dir, endpoints, proc, per_thread = args
    state = _open(data_dir, endpoints)

    def thread(t: int) -> list[str]:
        out = []
        for i in range(per_thread):
            req = EndpointRequest(
                endpointID=f"p{proc}t{t}i{i}", networkName="race", host=f"h{proc}"
            )
            out.append(state.create_endpoint(req)[0].ipAddress)
        return out

    with ThreadPoolExecutor(16) as pool:
        addrs = [a for chunk in pool.map(thread, range(16)) for a in chunk]
    state.store.close()
    return addrs


@pytest.mark.parametrize("backend", ["embedded", "etcd"])
def test_64_allocators_in_threads_and_processes(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    endpoints = ""
    if backend == "etcd":
        etcd = request.getfixturevalue("etcd_server")
        etcd.wipe()
        endpoints = etcd.endpoint
    state = _open(str(tmp_path), endpoints)
    state.ensure_defaults()
    state.put_network(
        Network(networkName="race", subnet="10.60.0.0/22")
    )  # 1021 usable after gateway
    per_thread = 4
    # ProcessPoolExecutor fails (BrokenProcessPool) if a worker dies, where Pool would hang.
    with ProcessPoolExecutor(4, mp_context=mp.get_context("spawn")) as pool:
        futures = [
            pool.submit(_allocate, (str(tmp_path), endpoints, p, per_thread)) for p in range(4)
        ]
        chunks = [f.result(timeout=120) for f in futures]
    addrs = [a for c in chunks for a in c]
    assert len(addrs) == 4 * 16 * per_thread
    assert len(set(addrs)) == len(addrs), "an address was handed out twice"
    stored = {e.ipAddress for e in state.list_endpoints()}
    assert stored == set(addrs)
    oper = state.inspect_network("default", "race")["Oper"]
    assert oper["allocatedAddressesCount"] == len(addrs) + 1  # + the gateway
    state.store.close()
