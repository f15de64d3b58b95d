"""store/batch.py: which txns may share one commit, and why that is safe.

The model store below applies txns by the contract's rules (store/base.py). The property:
for the members ``split_batch`` puts together, checking every member's compares first and
then applying the ops of those that held (what etcd and the embedded backend do) gives the
same state and outcomes as committing them one by one, in order or in any other order.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.base import Compare, Delete, Put, StoreError, Txn
from store.batch import MAX_BATCH, Spans, check_batch, split_batch
from store.embedded import EmbeddedStore


@dataclass(frozen=True)
class Rec:
    value: bytes
    create: int
    mod: int
    version: int


State = dict[str, Rec]


def _field(r: Rec | None, target: str) -> int | bytes | None:
    if r is None:
        return None if target == "value" else 0
    return {"create": r.create, "mod": r.mod, "version": r.version, "value": r.value}[target]


def _holds(op: str, a: int | bytes, b: int | bytes) -> bool:
    return {"==": a == b, "!=": a != b, "<": a < b, ">": a > b}[op]  # type: ignore[operator]


def holds(state: State, c: Compare) -> bool:
    under = [r for k, r in state.items() if k.startswith(c.key)] if c.prefix else []
    recs: list[Rec | None] = under if c.prefix else [state.get(c.key)]
    if not recs:
        recs = [None]  # an empty prefix compares like an absent key
    for r in recs:
        got = _field(r, c.target)
        if got is None or not _holds(c.op, got, c.value):
            return False
    return True


def apply(state: State, ops: Sequence[Put | Delete], rev: int) -> bool:
    wrote = False
    for op in ops:
        if isinstance(op, Put):
            old = state.get(op.key)
            state[op.key] = Rec(
                op.value, old.create if old else rev, rev, old.version + 1 if old else 1
            )
            wrote = True
        else:
            gone = [k for k in state if (k.startswith(op.key) if op.prefix else k == op.key)]
            for k in gone:
                del state[k]
            wrote = wrote or bool(gone)
    return wrote


def serial(state: State, rev: int, members: Sequence[Txn]) -> tuple[list[bool], int]:
    """Commit one by one; each member that writes takes the next revision."""
    ok = []
    for t in members:
        good = all(holds(state, c) for c in t.compares)
        ok.append(good)
        if good and apply(state, t.ops, rev + 1):
            rev += 1
    return ok, rev


def batched(state: State, rev: int, members: Sequence[Txn]) -> list[bool]:
    """What the backends do: every compare first, then the ops, all at one revision."""
    ok = [all(holds(state, c) for c in t.compares) for t in members]
    for t, good in zip(members, ok, strict=True):
        if good:
            apply(state, t.ops, rev + 1)
    return ok


def content(state: State) -> dict[str, bytes]:
    """The values (revisions differ between serial and batched commits by design)."""
    return {k: r.value for k, r in state.items()}


KEYS = ["/a", "/a/1", "/a/2", "/b", "/b/1", "/c"]
keys = st.sampled_from(KEYS)
values = st.sampled_from([b"x", b"y"])
compares = st.one_of(
    st.builds(lambda k: Compare(k, "create", "==", 0), keys),
    st.builds(lambda k, v: Compare(k, "mod", "==", v), keys, st.integers(0, 4)),
    st.builds(lambda k, v: Compare(k, "value", "==", v), keys, values),
    st.builds(lambda k: Compare(k, "create", "==", 0, prefix=True), st.sampled_from(["/a", "/b/"])),
    st.builds(
        lambda k, r: Compare(k, "mod", "<", r, prefix=True),
        st.sampled_from(["/a/"]),
        st.integers(1, 5),
    ),
)
ops = st.one_of(
    st.builds(Put, keys, values),
    st.builds(Delete, keys),
    st.builds(lambda k: Delete(k, prefix=True), st.sampled_from(["/a/", "/b"])),
)


@st.composite
def txns(draw: st.DrawFn) -> Txn:
    cs = draw(st.lists(compares, max_size=3))
    os_ = draw(st.lists(ops, max_size=3))
    # One txn may not put a key twice, nor put a key it deletes (check_txn).
    puts: set[str] = set()
    kept: list[Put | Delete] = []
    for op in os_:
        if isinstance(op, Put):
            if op.key in puts:
                continue
            puts.add(op.key)
        kept.append(op)
    kept = [
        op
        for op in kept
        if not (
            isinstance(op, Delete)
            and any(k.startswith(op.key) if op.prefix else k == op.key for k in puts)
        )
    ]
    return Txn(tuple(cs), tuple(kept))


@st.composite
def states(draw: st.DrawFn) -> tuple[State, int]:
    """A state reached by a few puts, and its revision."""
    state: State = {}
    rev = 0
    for k, v in draw(st.lists(st.tuples(keys, values), max_size=6)):
        rev += 1
        apply(state, [Put(k, v)], rev)
    return state, rev


@settings(max_examples=400, deadline=None)
@given(states(), st.lists(txns(), max_size=8), st.randoms())
def test_a_batch_is_any_serial_order(start: tuple[State, int], members: list[Txn], rnd) -> None:
    state, rev = start
    taken, waiting = split_batch(members)
    assert sorted(taken + waiting) == list(range(len(members)))
    batch = [members[i] for i in taken]
    check_batch(batch)  # a split batch is always one the backends accept

    together = dict(state)
    ok = batched(together, rev, batch)

    in_order = dict(state)
    ok_in_order, _ = serial(in_order, rev, batch)
    shuffled = list(range(len(batch)))
    rnd.shuffle(shuffled)
    any_order = dict(state)
    ok_any, _ = serial(any_order, rev, [batch[i] for i in shuffled])

    assert ok == ok_in_order == [ok_any[shuffled.index(i)] for i in range(len(batch))]
    assert content(together) == content(in_order) == content(any_order)
    # A member whose compares fail changes nothing: the batch without it ends the same.
    without = dict(state)
    batched(without, rev, [t for t, good in zip(batch, ok, strict=True) if good])
    assert content(without) == content(together)


@settings(max_examples=300, deadline=None)
@given(st.lists(txns(), max_size=8))
def test_a_member_waits_only_for_a_reason(members: list[Txn]) -> None:
    """Every member left out conflicts with a member taken before it; the first is taken."""
    taken, waiting = split_batch(members)
    if members:
        assert taken[0] == 0
    for i in waiting:
        before = [members[j] for j in taken if j < i]
        assert any(not _independent(members[i], t) for t in before)
    for a in taken:
        for b in taken:
            if a < b:
                assert _independent(members[a], members[b])


def _independent(a: Txn, b: Txn) -> bool:
    def spans(t: Txn, writes: bool) -> list[tuple[str, bool]]:
        if writes:
            return [(op.key, isinstance(op, Delete) and op.prefix) for op in t.ops]
        return [(c.key, c.prefix) for c in t.compares]

    def meet(x: tuple[str, bool], y: tuple[str, bool]) -> bool:
        (kx, px), (ky, py) = x, y
        if px and py:
            return kx.startswith(ky) or ky.startswith(kx)
        if px:
            return ky.startswith(kx)
        if py:
            return kx.startswith(ky)
        return kx == ky

    wa, wb, ra, rb = spans(a, True), spans(b, True), spans(a, False), spans(b, False)
    return not any(meet(x, y) for x in wa for y in wb + rb) and not any(
        meet(x, y) for x in wb for y in ra
    )


def test_the_limit_and_the_first_member() -> None:
    many = [Txn((), (Put(f"/k{i}", b"v"),)) for i in range(MAX_BATCH + 5)]
    taken, waiting = split_batch(many)
    assert taken == list(range(MAX_BATCH)) and waiting == list(range(MAX_BATCH, MAX_BATCH + 5))
    with pytest.raises(StoreError):
        check_batch(many)
    same = [Txn((), (Put("/k", b"1"),)), Txn((), (Put("/k", b"2"),))]
    assert split_batch(same) == ([0], [1])
    with pytest.raises(StoreError):
        check_batch(same)


def test_spans() -> None:
    s = Spans()
    s.add([("/a/1", False), ("/p/", True)])
    assert s.overlaps(("/a/1", False)) and not s.overlaps(("/a/2", False))
    assert s.overlaps(("/a/", True)) and s.overlaps(("/p/x", False)) and s.overlaps(("/", True))
    assert s.overlaps(("/p/q/", True)) and not s.overlaps(("/q", True))


@settings(max_examples=40, deadline=None)
@given(states(), st.lists(txns(), max_size=6))
def test_the_embedded_store_commits_a_batch_like_the_model(
    start: tuple[State, int], members: list[Txn]
) -> None:
    state, _ = start
    taken, _ = split_batch(members)
    batch = [members[i] for i in taken]
    with tempfile.TemporaryDirectory() as d:
        store = EmbeddedStore(f"{d}/state.db")
        try:
            for k in sorted(state):  # the same values; the revisions are the store's own
                store.put(k, state[k].value)
            model = {
                kv.key: Rec(kv.value, kv.create_revision, kv.mod_revision, kv.version)
                for kv in store.range("").kvs
            }
            rev = store.revision()
            res = store.txn_batch(batch)
            ok, after = serial(model, rev, batch)
            assert list(res.succeeded) == ok
            assert {kv.key: kv.value for kv in store.range("").kvs} == content(model)
            # One new revision for the whole batch, none when it wrote nothing.
            assert res.revision == store.revision() == (rev + 1 if after > rev else rev)
        finally:
            store.close()
