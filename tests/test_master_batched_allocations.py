"""Allocations committed in batches are serialisable: the property, on the real ClusterState.

Concurrent requests (endpoints and Docker's address requests; repeated IDs and owners,
static addresses that collide, an unknown network, pools small enough to run out) each
plan their txn on their own thread, as in the master. A stepped committer stands in for
the group commit's timing: when every request has either parked its txn or finished, it
commits the parked txns in batches whose order and sizes hypothesis chooses (through the
real ``split_batch`` and ``Store.txn_batch``), then lets the losers retry, round after
round. The outcome must be one some serial order gives: replaying the requests that
allocated, in commit order, each asking for the address it got, and then every other
request, gives each request the answer it had, and the same allocations. No address is
given twice, refusals leave nothing behind, and the store holds together (check_state).
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import keys
from common.models import AddressRequest, EndpointRequest, Network, PoolRequest
from common.records import OwnerRecord, decode_endpoint
from master.decisions.consistency import check_state
from master.errors import ApiError
from master.state import ClusterState
from store import Compare, Op, Store, Txn, TxnResult, open_store
from store.batch import split_batch

WAIT = 20.0


@dataclass(frozen=True)
class Ask:
    kind: str  # "ep" or "addr"
    ident: str  # endpoint ID or owner
    where: str = "n"  # network ("ep"); "missing" does not exist
    address: str = ""  # a static address, or "" for the next free one


asks = st.one_of(
    st.builds(
        Ask,
        st.just("ep"),
        st.sampled_from(["e0", "e1", "e2", "e3", "e4", "e5", "e6"]),
        st.sampled_from(["n", "n", "n", "missing"]),
        st.sampled_from(["", "", "10.1.0.2", "10.1.0.3"]),
    ),
    st.builds(
        Ask,
        st.just("addr"),
        st.sampled_from(["o0", "o1", "o2", "o3", "o4", "o5"]),
        st.just(""),
        st.sampled_from(["", "", "10.2.0.2", "10.2.0.3"]),
    ),
)


class Stepped:
    """Parks every txn until the test commits it (``GroupCommit.txn``'s interface)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.cond = threading.Condition()
        self.parked: list[tuple[Txn, list[TxnResult], threading.Event]] = []
        self.finished = 0

    def txn(self, compares: Sequence[Compare], ops: Sequence[Op]) -> TxnResult:
        got: list[TxnResult] = []
        woken = threading.Event()
        with self.cond:
            self.parked.append((Txn(tuple(compares), tuple(ops)), got, woken))
            self.cond.notify_all()
        assert woken.wait(WAIT)
        return got[0]

    def finish(self) -> None:
        with self.cond:
            self.finished += 1
            self.cond.notify_all()

    def settled(self, n: int) -> bool:
        """Wait until each of ``n`` requests has parked or finished; whether all finished."""
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.parked) + self.finished == n, WAIT)
            return self.finished == n

    def commit_round(self, order: list[int], sizes: list[int]) -> list[list[Txn]]:
        """Commit what is parked: in ``order``, in batches of at most ``sizes``; a member
        that conflicts waits for the next batch. Returns the batches committed."""
        with self.cond:
            parked, self.parked = self.parked, []
        queue = [parked[i] for i in order]
        done = []
        step = 0
        while queue:
            size = sizes[step % len(sizes)] if sizes else len(queue)
            step += 1
            taken, waiting = split_batch([p[0] for p in queue[:size]])
            batch = [queue[i] for i in taken]
            queue = [queue[i] for i in waiting] + queue[size:]
            res = self.store.txn_batch([p[0] for p in batch])
            for (_, got, woken), ok in zip(batch, res.succeeded, strict=True):
                got.append(TxnResult(ok, res.revision))
                woken.set()
            done.append([p[0] for p in batch])
        return done


def new_state(d: str, group_commit: bool) -> ClusterState:
    state = ClusterState(open_store(None, d), group_commit=group_commit)
    state.ensure_defaults()
    state.networks.put(Network(networkName="n", subnet="10.1.0.0/29"))
    return state


def pool_of(state: ClusterState) -> str:
    return str(state.pools.request_pool(PoolRequest(pool="10.2.0.0/29"))["poolID"])


def call(state: ClusterState, pool: str, ask: Ask) -> Any:
    """The request's answer: (endpoint ID, address, created), an address, or the refusal."""
    try:
        if ask.kind == "ep":
            req = EndpointRequest(
                endpointID=ask.ident, networkName=ask.where, ipAddress=ask.address
            )
            ep, created = state.endpoints.create(req)
            return (ep.endpointID, ep.ipAddress, created)
        return state.pools.request_address(
            AddressRequest(poolID=pool, owner=ask.ident, address=ask.address)
        )
    except ApiError as e:
        return type(e).__name__


def scan(store: Store) -> dict[str, bytes]:
    return {kv.key: kv.value for kv in store.range(keys.ROOT).kvs}


def allocations(kvs: dict[str, bytes]) -> dict[str, str]:
    """address -> holder, for every allocation (endpoint ID or owner)."""
    out = {}
    for key, value in kvs.items():
        if key.startswith(keys.ENDPOINTS):
            ep = decode_endpoint(value)
            out[ep.ipAddress] = ep.endpointID
        elif key.startswith(keys.owner("")):
            out[OwnerRecord.decode(value).address] = key[len(keys.owner("")) :]
    return out


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(asks, min_size=2, max_size=12), st.integers(0, 2**32))
def test_batched_allocations_are_some_serial_order(requests: list[Ask], seed: int) -> None:
    # How many txns park in each round depends on the threads' timing, so the batches'
    # order and sizes come from a generator seeded up front, not from hypothesis draws.
    rnd = random.Random(seed)
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        state = new_state(d1, group_commit=False)
        pool = pool_of(state)
        stepped = Stepped(state.store)
        state.endpoints.txn.group = stepped  # type: ignore[assignment]
        answers: list[Any] = [None] * len(requests)

        def run(i: int) -> None:
            try:
                answers[i] = call(state, pool, requests[i])
            finally:
                stepped.finish()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        while not stepped.settled(len(requests)):
            order = list(range(len(stepped.parked)))
            rnd.shuffle(order)
            stepped.commit_round(order, [rnd.randint(1, 5) for _ in range(rnd.randint(0, 3))])
        for t in threads:
            t.join(WAIT)
        after = scan(state.store)
        state.store.close()

        assert [str(p) for p in check_state(after)] == []
        held = allocations(after)
        # What each request was told is what the store holds, and nothing else is held.
        told: dict[str, str] = {}
        for ask, got in zip(requests, answers, strict=True):
            if isinstance(got, tuple):
                told[got[1]] = ask.ident
            elif isinstance(got, str) and "/" in got:
                told[got.split("/")[0]] = ask.ident
        assert told == held
        # A repeated ID or owner got the same answer each time, and one request created it.
        for ident in {a.ident for a in requests}:
            mine = [g for a, g in zip(requests, answers, strict=True) if a.ident == ident]
            won = {g[:2] if isinstance(g, tuple) else g for g in mine if g[0] != "C"}
            won.discard("NotFound")
            assert len(won) <= 1, (ident, mine)
            if any(isinstance(g, tuple) for g in mine):
                assert sum(1 for g in mine if isinstance(g, tuple) and g[2]) == 1

        # The serial order: the allocations in the order they committed, each asking for
        # the address it got. Every other request (a repeat, a refusal) changes nothing, so
        # it fits in that order wherever the state gives it the answer it had.
        first = {}
        for i, (ask, got) in enumerate(zip(requests, answers, strict=True)):
            created = isinstance(got, tuple) and got[2]
            granted = isinstance(got, str) and "/" in got and ask.ident not in first
            if created or granted:
                first[ask.ident] = i
        revision = {}
        for ident in first:
            kind = requests[first[ident]].kind
            revision[ident] = after_revision(
                d1, keys.endpoint_index(ident) if kind == "ep" else keys.owner(ident)
            )
        serial = new_state(d2, group_commit=False)
        snapshots = [snapshot(serial, d2)]
        try:
            assert pool_of(serial) == pool
            for ident in sorted(first, key=lambda i: (revision[i], first[i])):
                i = first[ident]
                got = answers[i]
                address = got[1] if isinstance(got, tuple) else got.split("/")[0]
                ask = Ask(requests[i].kind, ident, requests[i].where, address)
                again = call(serial, pool, ask)
                assert again == got, (ask, again, got)
                snapshots.append(snapshot(serial, d2))
            assert allocations(scan(serial.store)) == held
        finally:
            serial.store.close()
        tries = [snapshots[-1], *snapshots[:-1]]
        for i, ask in enumerate(requests):
            if first.get(ask.ident) != i:
                assert any(answer_at(snap, pool, ask) == answers[i] for snap in tries), (
                    ask,
                    answers[i],
                )


def snapshot(state: ClusterState, d: str) -> str:
    """A copy of ``state``'s store file in a new directory; its path."""
    out = tempfile.mkdtemp(dir=d)
    src = sqlite3.connect(f"{d}/state.db")
    dst = sqlite3.connect(f"{out}/state.db")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return out


def answer_at(snap: str, pool: str, ask: Ask) -> Any:
    """The answer ``ask`` gets in a copy of the snapshot (which stays as it is)."""
    copy = snapshot(None, snap)  # type: ignore[arg-type]
    state = ClusterState(open_store(None, copy), group_commit=False)
    try:
        return call(state, pool, ask)
    finally:
        state.store.close()


def after_revision(d: str, key: str) -> int:
    store = open_store(None, d)
    try:
        kv = store.get(key)
        assert kv is not None
        return kv.create_revision
    finally:
        store.close()
