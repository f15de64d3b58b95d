"""A set of integers stored as sorted, disjoint, non-adjacent inclusive intervals."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator


class IntervalSet:
    """Sorted disjoint inclusive int intervals; adjacent intervals are always merged.

    Two parallel lists hold the interval starts and ends.  Because intervals are disjoint and
    sorted, both lists are strictly increasing, so every lookup is a bisect, and memory is
    proportional to the number of intervals rather than the number of integers.
    """

    __slots__ = ("_count", "_his", "_los")

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()) -> None:
        self._los: list[int] = []
        self._his: list[int] = []
        self._count = 0
        for lo, hi in intervals:
            self.add_range(lo, hi)

    def _find(self, x: int) -> int:
        """Index of the interval containing x, or -1."""
        i = bisect_right(self._los, x) - 1
        if i >= 0 and self._his[i] >= x:
            return i
        return -1

    def __contains__(self, x: object) -> bool:
        if not isinstance(x, int):
            return False
        return self._find(x) >= 0

    def __len__(self) -> int:
        # len() cannot exceed sys.maxsize; use .count for sets wider than that (IPv6).
        return self._count

    @property
    def count(self) -> int:
        """Number of integers contained (may exceed sys.maxsize, unlike len())."""
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[int]:
        for lo, hi in zip(self._los, self._his, strict=True):
            yield from range(lo, hi + 1)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self._los == other._los and self._his == other._his

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IntervalSet({self.intervals()!r})"

    def copy(self) -> IntervalSet:
        """An independent copy."""
        new = IntervalSet()
        new._los = list(self._los)
        new._his = list(self._his)
        new._count = self._count
        return new

    def intervals(self) -> list[tuple[int, int]]:
        """The intervals as (lo, hi) inclusive pairs, ascending."""
        return list(zip(self._los, self._his, strict=True))

    @property
    def interval_count(self) -> int:
        """Number of stored intervals (the memory footprint driver)."""
        return len(self._los)

    def add(self, x: int) -> bool:
        """Add x; False if it was already present."""
        los, his = self._los, self._his
        i = bisect_right(los, x) - 1
        if i >= 0 and his[i] >= x:
            return False
        joins_left = i >= 0 and his[i] == x - 1
        joins_right = i + 1 < len(los) and los[i + 1] == x + 1
        if joins_left and joins_right:
            his[i] = his[i + 1]
            del los[i + 1]
            del his[i + 1]
        elif joins_left:
            his[i] = x
        elif joins_right:
            los[i + 1] = x
        else:
            los.insert(i + 1, x)
            his.insert(i + 1, x)
        self._count += 1
        return True

    def add_range(self, lo: int, hi: int) -> int:
        """Add every integer in [lo, hi]; returns how many were newly added."""
        if lo > hi:
            return 0
        los, his = self._los, self._his
        # Intervals overlapping or touching [lo, hi] are los/his[i:j]; they all merge into one.
        i = bisect_left(his, lo - 1)
        j = bisect_right(los, hi + 1)
        removed = 0
        if i < j:
            removed = sum(b - a + 1 for a, b in zip(los[i:j], his[i:j], strict=True))
            lo = min(lo, los[i])
            hi = max(hi, his[j - 1])
        los[i:j] = [lo]
        his[i:j] = [hi]
        added = (hi - lo + 1) - removed
        self._count += added
        return added

    def remove(self, x: int) -> bool:
        """Remove x; False if it was not present."""
        i = self._find(x)
        if i < 0:
            return False
        los, his = self._los, self._his
        lo, hi = los[i], his[i]
        if lo == hi:
            del los[i]
            del his[i]
        elif x == lo:
            los[i] = x + 1
        elif x == hi:
            his[i] = x - 1
        else:
            his[i] = x - 1
            los.insert(i + 1, x + 1)
            his.insert(i + 1, hi)
        self._count -= 1
        return True

    def remove_range(self, lo: int, hi: int) -> int:
        """Remove every integer in [lo, hi]; returns how many were present."""
        if lo > hi:
            return 0
        los, his = self._los, self._his
        i = bisect_left(his, lo)
        j = bisect_right(los, hi)
        if i >= j:
            return 0
        removed = sum(min(b, hi) - max(a, lo) + 1 for a, b in zip(los[i:j], his[i:j], strict=True))
        new_los: list[int] = []
        new_his: list[int] = []
        if los[i] < lo:
            new_los.append(los[i])
            new_his.append(lo - 1)
        if his[j - 1] > hi:
            new_los.append(hi + 1)
            new_his.append(his[j - 1])
        los[i:j] = new_los
        his[i:j] = new_his
        self._count -= removed
        return removed

    def count_in(self, lo: int, hi: int) -> int:
        """How many contained integers lie in [lo, hi] (O(log n + intervals in the window))."""
        if lo > hi:
            return 0
        los, his = self._los, self._his
        i = bisect_left(his, lo)
        j = bisect_right(los, hi)
        return sum(min(b, hi) - max(a, lo) + 1 for a, b in zip(los[i:j], his[i:j], strict=True))

    def _next_absent(self, x: int) -> int:
        """Smallest integer >= x not in the set."""
        i = bisect_right(self._los, x) - 1
        if i >= 0 and self._his[i] >= x:
            # Adjacent intervals are merged, so the end of x's interval + 1 is absent.
            return self._his[i] + 1
        return x

    def first_free(self, lo: int, hi: int, start: int) -> int | None:
        """Smallest absent x with start <= x <= hi, else the smallest absent x in [lo, start).

        A start outside [lo, hi] is treated as lo.  Returns None when [lo, hi] is full.
        """
        if lo > hi:
            return None
        if start < lo or start > hi:
            start = lo
        x = self._next_absent(start)
        if x <= hi:
            return x
        if start == lo:
            return None
        # [start, hi] is full, so an absent x found from lo is either < start or > hi.
        x = self._next_absent(lo)
        return x if x <= hi else None
