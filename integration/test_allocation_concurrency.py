"""Concurrent allocators, in threads and in processes (a master's gunicorn workers among
them), never receive the same address."""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from common import keys
from common.client import MasterError
from common.models import AddressRequest, EndpointRequest, Network, PoolRequest
from common.records import OwnerRecord, decode_endpoint
from master.decisions.consistency import check_state
from master.state import ClusterState
from plugin.master_client import MasterClient
from store import open_store
from testbed.master import MasterProcess


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
            out.append(state.endpoints.create(req)[0].ipAddress)
        return out

    with ThreadPoolExecutor(16) as pool:
        addrs = [a for chunk in pool.map(thread, range(16)) for a in chunk]
    state.store.close()
    return addrs


def test_64_allocators_in_threads_and_processes(backend: str, tmp_path: Path) -> None:
    endpoints = backend
    state = _open(str(tmp_path), endpoints)
    state.ensure_defaults()
    state.networks.put(
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
    stored = {e.ipAddress for e in state.endpoints.list()}
    assert stored == set(addrs)
    oper = state.networks.inspect("default", "race")["Oper"]
    assert oper["allocatedAddressesCount"] == len(addrs) + 1  # + the gateway
    state.store.close()


def _contend(client: MasterClient, c: int, rounds: int) -> list[tuple[str, str, str]]:
    """Client ``c``: endpoints and address requests whose IDs and owners clients c and c^1
    share (each asks for the same ones), with a static address now and then that every
    client asks for. Returns (kind, id, address or refusal status) per request."""
    pair = c // 2
    out = []
    for i in range(rounds):
        static = f"10.61.0.{200 + i % 4}" if i % 5 == 4 else ""
        req = EndpointRequest(endpointID=f"x{pair}-{i}", networkName="race2", ipAddress=static)
        try:
            out.append(("ep", req.endpointID, client.create_endpoint(req).ipAddress))
        except MasterError as e:
            out.append(("ep", req.endpointID, str(e.status)))
        owner = f"req:x{pair}-{i}"
        try:
            got = client.request_address(AddressRequest(poolID="default:10.62.0.0/22", owner=owner))
            out.append(("addr", owner, got.split("/")[0]))
        except MasterError as e:
            out.append(("addr", owner, str(e.status)))
    return out


def test_batches_from_two_workers_and_another_process_share_one_store(
    backend: str, tmp_path: Path
) -> None:
    """Group commit in several processes at once: a master's two gunicorn workers, and this
    process allocating straight on the same store. Requests with the same endpoint ID or
    owner race each other in different batches and processes: each gets one answer, no
    address is given twice, and the whole store holds together."""
    endpoints = backend
    master = MasterProcess(tmp_path / "data", etcd_endpoints=endpoints, extra=["--workers", "2"])
    state: ClusterState | None = None
    try:
        master.start()
        setup = MasterClient(master.url, timeout=30)
        setup.create_network(Network(networkName="race2", subnet="10.61.0.0/22"))
        setup.request_pool(PoolRequest(pool="10.62.0.0/22"))
        state = _open(str(tmp_path / "data"), endpoints)

        def here(t: int) -> list[str]:
            assert state is not None
            reqs = [EndpointRequest(endpointID=f"h{t}-{i}", networkName="race2") for i in range(20)]
            return [state.endpoints.create(r)[0].ipAddress for r in reqs]

        with ThreadPoolExecutor(24) as pool:
            remote = [
                pool.submit(_contend, MasterClient(master.url, timeout=60), c, 20)
                for c in range(16)
            ]
            local = [pool.submit(here, t) for t in range(8)]
            answers = [a for f in remote for a in f.result(timeout=300)]
            mine = [a for f in local for a in f.result(timeout=300)]

        by_id: dict[tuple[str, str], set[str]] = {}
        for kind, ident, got in answers:
            by_id.setdefault((kind, ident), set()).add(got)
        # The two clients asking with one ID or owner got the same answer.
        assert all(len(v) == 1 for v in by_id.values()), [k for k, v in by_id.items() if len(v) > 1]
        given = [next(iter(v)) for v in by_id.values() if "." in next(iter(v))] + mine
        assert len(given) == len(set(given)), "an address was given twice"
        scan = {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}
        assert [str(p) for p in check_state(scan)] == []
        held = {
            decode_endpoint(v).ipAddress for k, v in scan.items() if k.startswith(keys.ENDPOINTS)
        }
        held |= {
            OwnerRecord.decode(v).address for k, v in scan.items() if k.startswith(keys.owner(""))
        }
        assert held == set(given)
        # This process's 8 threads did commit together (so batches were what raced).
        assert state.commit_stats()["maxBatch"] > 1, state.commit_stats()
    finally:
        if state is not None:
            state.store.close()
        master.stop()
