"""kill -9 of a real master (arbiter and workers) in the middle of an allocation storm, then a
restart on the same data: the state holds together, and every client's retry gets what the
first attempt committed.

Clients allocate the ways agents do, through the agent's own client: endpoints (idempotent
by endpoint ID), Docker's address requests (idempotent by owner) and the Docker flow of an
address request adopted by the endpoint created next. After the restart the test scans the
whole store (every key under /netplugin/) with master.decisions.consistency.check_state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from common import keys
from common.client import MasterError
from common.models import AddressRequest, EndpointRequest, Network, PoolRequest
from common.records import OwnerRecord, decode_endpoint
from master.decisions.consistency import check_state
from plugin.master_client import MasterClient
from store import Store, open_store
from testbed.master import MasterProcess
from testbed.wait import wait_for

CLIENTS = 16
PER_CLIENT = 60
KILL_AFTER = 120  # answered allocations before the kill: the storm is well under way
NETWORK = "storm"
SUBNET = "10.80.0.0/20"
DOCKER_POOL = "default:10.81.0.0/20"


Asked = tuple[str, str]  # ("ep", endpoint ID) or ("addr", owner)


@dataclass
class Ledger:
    """What the clients asked for and what they were told, across threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    asked: list[Asked] = field(default_factory=list)  # (kind, id) in order
    answered: dict[Asked, str] = field(default_factory=dict)  # -> address

    def ask(self, kind: str, ident: str) -> None:
        with self.lock:
            self.asked.append((kind, ident))

    def answer(self, kind: str, ident: str, address: str) -> None:
        with self.lock:
            self.answered[(kind, ident)] = address.split("/")[0]

    def count(self) -> int:
        with self.lock:
            return len(self.answered)


def _endpoint(c: int, i: int) -> EndpointRequest:
    return EndpointRequest(endpointID=f"s{c}-{i}", networkName=NETWORK, host=f"h{c % 4}")


def _allocate(client: MasterClient, ledger: Ledger, c: int, i: int) -> None:
    """One allocation of client ``c``: an endpoint, an address request, or the Docker flow."""
    match i % 3:
        case 0:
            req = _endpoint(c, i)
            ledger.ask("ep", req.endpointID)
            ledger.answer("ep", req.endpointID, client.create_endpoint(req).ipAddress)
        case 1:
            owner = f"req:s{c}-{i}"
            ledger.ask("addr", owner)
            got = client.request_address(AddressRequest(poolID=DOCKER_POOL, owner=owner))
            ledger.answer("addr", owner, got)
        case _:
            # Docker: RequestAddress for the container, then CreateEndpoint adopting it.
            owner = f"mac:storm:s{c}-{i}"
            pool = f"default:{SUBNET}"
            ledger.ask("addr", owner)
            got = client.request_address(AddressRequest(poolID=pool, owner=owner))
            ledger.answer("addr", owner, got)
            req = _endpoint(c, i).model_copy(
                update={"ipAddress": got.split("/")[0], "adoptAddress": True}
            )
            ledger.ask("ep", req.endpointID)
            ledger.answer("ep", req.endpointID, client.create_endpoint(req).ipAddress)


def _storm(url: str, ledger: Ledger, c: int) -> None:
    """Allocate until done or until the master stops answering (the kill)."""
    client = MasterClient(url, timeout=10, retries=1)
    for i in range(PER_CLIENT):
        try:
            _allocate(client, ledger, c, i)
        except MasterError:
            return


def _scan(store: Store) -> dict[str, bytes]:
    return {kv.key: kv.value for kv in store.range(keys.ROOT).kvs}


def _committed(scan: dict[str, bytes], kind: str, ident: str) -> str | None:
    """The address an allocation holds in ``scan``, or None if it did not commit."""
    if kind == "ep":
        index = scan.get(keys.endpoint_index(ident))
        return None if index is None else decode_endpoint(scan[index.decode()]).ipAddress
    held = scan.get(keys.owner(ident))
    return None if held is None else OwnerRecord.decode(held).address


def _retry(client: MasterClient, scan: dict[str, bytes], c: int, i: int) -> dict[Asked, str]:
    """Allocation ``i`` of client ``c`` asked again with the same IDs, as its client would
    after the restart; returns the addresses it got, by what was asked."""
    req = _endpoint(c, i)
    match i % 3:
        case 0:
            return {("ep", req.endpointID): client.create_endpoint(req).ipAddress}
        case 1:
            owner = f"req:s{c}-{i}"
            got = client.request_address(AddressRequest(poolID=DOCKER_POOL, owner=owner))
            return {("addr", owner): got.split("/")[0]}
    owner = f"mac:storm:s{c}-{i}"
    address = _committed(scan, "ep", req.endpointID)
    got: dict[Asked, str] = {}
    if address is None:  # the endpoint never took it: Docker asks for the address again
        pool = f"default:{SUBNET}"
        address = client.request_address(AddressRequest(poolID=pool, owner=owner)).split("/")[0]
        got[("addr", owner)] = address
    adopt = req.model_copy(update={"ipAddress": address, "adoptAddress": True})
    got[("ep", req.endpointID)] = client.create_endpoint(adopt).ipAddress
    return got


def test_kill9_in_an_allocation_storm_leaves_whole_objects_and_idempotent_retries(
    backend: str, tmp_path: Path
) -> None:
    etcd = backend
    extra = ["--workers", "2", "--threads", "8", "--leader-ttl", "2"]
    master = MasterProcess(tmp_path / "data", etcd_endpoints=etcd, extra=extra)
    store: Store | None = None
    try:
        master.start()
        setup = MasterClient(master.url, timeout=30)
        setup.create_network(Network(networkName=NETWORK, subnet=SUBNET))
        setup.request_pool(PoolRequest(pool=DOCKER_POOL.split(":", 1)[1]))

        ledger = Ledger()
        threads = [
            threading.Thread(target=_storm, args=(master.url, ledger, c), daemon=True)
            for c in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        wait_for(lambda: ledger.count() >= KILL_AFTER, 120, f"{KILL_AFTER} allocations answered")
        master.kill_all()
        for t in threads:
            t.join(60)
            assert not t.is_alive(), "a client hangs on the killed master"
        assert len(ledger.asked) < CLIENTS * PER_CLIENT * 4 // 3, "the storm was over already"

        master.start()
        store = open_store([etcd] if etcd else None, str(tmp_path / "data"))
        before = _scan(store)
        # Each client's last request was in flight at the kill: some committed, some not.
        assert len(ledger.asked) > len(ledger.answered)
        assert [str(p) for p in check_state(before)] == []

        # What a client was told is in the store, with the same address.
        for (kind, ident), address in ledger.answered.items():
            if kind == "ep":
                ep_key = before[keys.endpoint_index(ident)].decode()
                assert f'"ipAddress":"{address}"' in before[ep_key].decode(), ident
            else:
                assert f'"address":"{address}"' in before.get(keys.owner(ident), b"").decode() or (
                    ident.startswith("mac:") and _adopted(before, ident, address)
                ), ident

        # Every retry (same IDs) succeeds and gets what the first attempt committed.
        client = MasterClient(master.url, timeout=30, retries=5, backoff=0.5)
        units = sorted({_unit(ident) for _, ident in ledger.asked})
        for c, i in units:
            for (kind, ident), again in _retry(client, before, c, i).items():
                first = ledger.answered.get((kind, ident)) or _committed(before, kind, ident)
                assert first in (None, again), (kind, ident, first, again)
        after = _scan(store)
        assert [str(p) for p in check_state(after)] == []
        assert len(ledger.answered) >= KILL_AFTER
    finally:
        if store is not None:
            store.close()
        master.stop()


def _unit(ident: str) -> tuple[int, int]:
    """(client, allocation) of an endpoint ID or owner name."""
    c, i = ident.rsplit("s", 1)[1].split("-")
    return int(c), int(i)


def _adopted(scan: dict[str, bytes], owner: str, address: str) -> bool:
    """Whether the endpoint of the Docker flow took the address ``owner`` was given."""
    ident = owner.removeprefix("mac:storm:")
    index = scan.get(keys.endpoint_index(ident))
    return index is not None and f'"ipAddress":"{address}"' in scan[index.decode()].decode()
