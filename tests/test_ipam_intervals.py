"""IntervalSet against a plain Python set model."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ipam import IntervalSet


def model_first_free(model: set[int], lo: int, hi: int, start: int) -> int | None:
    if lo > hi:
        return None
    if not lo <= start <= hi:
        start = lo
    for x in [*range(start, hi + 1), *range(lo, start)]:
        if x not in model:
            return x
    return None


def check_canonical(s: IntervalSet) -> None:
    ivs = s.intervals()
    for lo, hi in ivs:
        assert lo <= hi
    for (_, h1), (l2, _) in pairwise(ivs):
        assert h1 + 1 < l2, f"intervals not disjoint/merged: {ivs}"
    assert s.count == sum(hi - lo + 1 for lo, hi in ivs)


def test_add_merges_neighbours() -> None:
    s = IntervalSet()
    assert s.add(5)
    assert not s.add(5)
    assert s.add(7)
    assert s.intervals() == [(5, 5), (7, 7)]
    assert s.add(6)
    assert s.intervals() == [(5, 7)]
    assert s.add(4) and s.add(8)
    assert s.intervals() == [(4, 8)]
    assert len(s) == 5
    assert 4 in s and 8 in s and 3 not in s and 9 not in s
    assert "4" not in s


def test_remove_splits() -> None:
    s = IntervalSet([(1, 10)])
    assert s.remove(5)
    assert not s.remove(5)
    assert s.intervals() == [(1, 4), (6, 10)]
    assert s.remove(1) and s.remove(10)
    assert s.intervals() == [(2, 4), (6, 9)]
    assert len(s) == 7
    assert not s.remove(100)


def test_add_range_and_remove_range() -> None:
    s = IntervalSet([(1, 2), (5, 6), (10, 12)])
    assert s.add_range(3, 9) == 5
    assert s.intervals() == [(1, 12)]
    assert s.add_range(20, 19) == 0
    assert s.remove_range(4, 6) == 3
    assert s.intervals() == [(1, 3), (7, 12)]
    assert s.remove_range(0, 100) == 9
    assert s.intervals() == []
    assert not s


def test_first_free_wraps() -> None:
    s = IntervalSet([(1, 3), (6, 8)])
    assert s.first_free(1, 8, 1) == 4
    assert s.first_free(1, 8, 5) == 5
    assert s.first_free(1, 8, 6) == 4  # 6..8 full, wrap to 1.., first free is 4
    assert s.first_free(1, 3, 2) is None
    assert s.first_free(1, 8, 100) == 4  # start outside the window counts as lo
    assert s.first_free(5, 4, 5) is None
    assert IntervalSet().first_free(0, 0, 0) == 0


def test_huge_values() -> None:
    s = IntervalSet()
    lo = 0xFD00 << 112
    s.add_range(lo, lo + (1 << 64) - 1)
    assert s.count == 1 << 64
    assert s.first_free(lo, lo + (1 << 64), lo) == lo + (1 << 64)
    assert s.count_in(lo + 10, lo + 19) == 10


def test_copy_and_equality() -> None:
    s = IntervalSet([(1, 3)])
    t = s.copy()
    t.add(10)
    assert s != t
    assert s == IntervalSet([(3, 3), (1, 2)])
    assert list(t) == [1, 2, 3, 10]
    assert repr(s) == "IntervalSet([(1, 3)])"
    with pytest.raises(TypeError):
        hash(s)


values = st.integers(min_value=0, max_value=60)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "remove", "add_range", "remove_range"]), values, values)
    ),
    values,
    values,
    values,
)
def test_random_ops_match_set(
    ops: list[tuple[str, int, int]], lo: int, hi: int, start: int
) -> None:
    s = IntervalSet()
    model: set[int] = set()
    for op, a, b in ops:
        if op == "add":
            assert s.add(a) == (a not in model)
            model.add(a)
        elif op == "remove":
            assert s.remove(a) == (a in model)
            model.discard(a)
        elif op == "add_range":
            new = set(range(a, b + 1))
            assert s.add_range(a, b) == len(new - model)
            model |= new
        else:
            gone = set(range(a, b + 1))
            assert s.remove_range(a, b) == len(gone & model)
            model -= gone
        check_canonical(s)
        assert len(s) == len(model)
    assert set(s) == model
    assert all((x in s) == (x in model) for x in range(-1, 62))
    assert s.count_in(lo, hi) == len([x for x in model if lo <= x <= hi])
    assert s.first_free(lo, hi, start) == model_first_free(model, lo, hi, start)


class IntervalSetMachine(RuleBasedStateMachine):
    """Stateful comparison of IntervalSet with a set."""

    def __init__(self) -> None:
        super().__init__()
        self.s = IntervalSet()
        self.model: set[int] = set()

    @rule(x=values)
    def add(self, x: int) -> None:
        assert self.s.add(x) == (x not in self.model)
        self.model.add(x)

    @rule(a=values, b=values)
    def add_range(self, a: int, b: int) -> None:
        self.s.add_range(a, b)
        self.model |= set(range(a, b + 1))

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove_present(self, data: st.DataObject) -> None:
        x = data.draw(st.sampled_from(sorted(self.model)))
        assert self.s.remove(x)
        self.model.discard(x)

    @rule(x=values)
    def remove_any(self, x: int) -> None:
        assert self.s.remove(x) == (x in self.model)
        self.model.discard(x)

    @rule(a=values, b=values)
    def remove_range(self, a: int, b: int) -> None:
        self.s.remove_range(a, b)
        self.model -= set(range(a, b + 1))

    @rule(lo=values, hi=values, start=values)
    def first_free(self, lo: int, hi: int, start: int) -> None:
        assert self.s.first_free(lo, hi, start) == model_first_free(self.model, lo, hi, start)

    @invariant()
    def consistent(self) -> None:
        check_canonical(self.s)
        assert len(self.s) == len(self.model)
        assert set(self.s) == self.model


TestIntervalSetMachine = IntervalSetMachine.TestCase
TestIntervalSetMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
