"""Stateful property test of Allocator against a plain set model with a rotating cursor."""

from __future__ import annotations

from ipaddress import ip_network

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ipam import (
    AddressInUse,
    AddressOutOfPool,
    Allocator,
    PoolExhausted,
    PoolSpec,
    usable_bounds,
)

NETWORKS = [
    "10.1.0.0/28",
    "10.1.0.8/29",
    "10.1.0.4/30",
    "10.1.0.6/31",
    "10.1.0.9/32",
    "fd00::/125",
    "fd00::4/126",
    "fd00::2/127",
]


class AllocatorMachine(RuleBasedStateMachine):
    """Drives one small pool to exhaustion and back while mirroring it in a model."""

    alloc: Allocator
    model: set[int]
    cursor: int

    @initialize(net=st.sampled_from(NETWORKS), data=st.data())
    def setup(self, net: str, data: st.DataObject) -> None:
        network = ip_network(net)
        self.usable = usable_bounds(network)
        rng = None
        if data.draw(st.booleans(), label="has_range"):
            a = data.draw(st.integers(*self.usable), label="range_a")
            b = data.draw(st.integers(*self.usable), label="range_b")
            rng = (min(a, b), max(a, b))
        self.alloc = Allocator(PoolSpec("test:pool", network, rng))
        self.bounds = rng or self.usable
        self.network = network
        self.first = int(network.network_address)
        self.last = int(network.broadcast_address)
        self.model = set()
        self.cursor = self.bounds[0]

    def addresses(self) -> st.SearchStrategy[int]:
        """Candidate addresses including a few outside the network."""
        return st.integers(self.first - 2, self.last + 2)

    def expected_next(self, lo: int, hi: int) -> int | None:
        start = self.cursor if lo <= self.cursor <= hi else lo
        for x in [*range(start, hi + 1), *range(lo, start)]:
            if x not in self.model:
                return x
        return None

    def do_allocate(self, within: tuple[int, int] | None) -> None:
        lo, hi = within or self.bounds
        expected = self.expected_next(lo, hi)
        if expected is None:
            with pytest.raises(PoolExhausted) as exc:
                self.alloc.allocate(within)
            assert exc.value.pool == "test:pool"
            assert "test:pool" in str(exc.value)
            return
        assert int(self.alloc.peek(within)) == expected
        got = int(self.alloc.allocate(within))
        assert got == expected
        assert lo <= got <= hi
        assert got not in self.model
        self.model.add(got)
        self.cursor = got + 1

    @rule()
    def allocate(self) -> None:
        self.do_allocate(None)

    @rule(data=st.data())
    def allocate_within(self, data: st.DataObject) -> None:
        a = data.draw(st.integers(*self.usable))
        b = data.draw(st.integers(*self.usable))
        self.do_allocate((min(a, b), max(a, b)))

    @rule(data=st.data())
    def reserve(self, data: st.DataObject) -> None:
        x = data.draw(self.addresses())
        if not self.usable[0] <= x <= self.usable[1]:
            with pytest.raises(AddressOutOfPool):
                self.alloc.reserve(x)
        elif x in self.model:
            with pytest.raises(AddressInUse):
                self.alloc.reserve(self.network.network_address + (x - self.first))
        else:
            self.alloc.reserve(str(self.network.network_address + (x - self.first)), "owner")
            self.model.add(x)

    @rule(data=st.data())
    def mark(self, data: st.DataObject) -> None:
        x = data.draw(self.addresses())
        if self.usable[0] <= x <= self.usable[1]:
            self.alloc.mark(x)
            self.model.add(x)
        else:
            with pytest.raises(AddressOutOfPool):
                self.alloc.mark(x)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        pick = sorted(self.model) if self.model and data.draw(st.booleans()) else None
        x = data.draw(st.sampled_from(pick) if pick else self.addresses())
        assert self.alloc.release(x) == (x in self.model)
        self.model.discard(x)

    @rule(data=st.data())
    def restore_cursor(self, data: st.DataObject) -> None:
        self.cursor = data.draw(self.addresses())
        self.alloc.cursor = self.cursor

    @invariant()
    def matches_model(self) -> None:
        assert self.alloc.allocated == len(self.model)
        assert self.alloc.cursor == self.cursor
        for x in range(self.first - 2, self.last + 3):
            assert self.alloc.is_allocated(x) == (x in self.model)
        lo, hi = self.bounds
        assert self.alloc.free_count() == sum(1 for x in range(lo, hi + 1) if x not in self.model)

    @invariant()
    def only_usable_addresses(self) -> None:
        for a, b in self.alloc.allocated_intervals():
            assert self.usable[0] <= a <= b <= self.usable[1]
        if self.network.version == 4 and self.network.prefixlen < 31:
            assert not self.alloc.is_allocated(self.first)
            assert not self.alloc.is_allocated(self.last)
        if self.network.version == 6 and self.network.prefixlen < 127:
            assert not self.alloc.is_allocated(self.first)

    @invariant()
    def exhaustion_iff_full(self) -> None:
        lo, hi = self.bounds
        full = all(x in self.model for x in range(lo, hi + 1))
        if full:
            with pytest.raises(PoolExhausted):
                self.alloc.peek()
        else:
            assert int(self.alloc.peek()) == self.expected_next(lo, hi)


TestAllocatorMachine = AllocatorMachine.TestCase
TestAllocatorMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
