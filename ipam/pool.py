"""Address allocation inside one pool (subnet, optionally with a dynamic sub-range)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

from ipam.errors import (
    AddressInUse,
    AddressOutOfPool,
    InvalidAddress,
    InvalidRange,
    PoolExhausted,
)
from ipam.intervals import IntervalSet
from ipam.parse import Address, Network, format_range, int_to_address, parse_address, usable_bounds

AddressLike = IPv4Address | IPv6Address | int | str


@dataclass(frozen=True)
class PoolSpec:
    """A pool: its name for messages, its subnet, and the range dynamic allocation draws from."""

    name: str
    network: Network
    range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.network, IPv4Network | IPv6Network):
            raise TypeError(
                f"pool {self.name}: network must be an IP network, not {self.network!r}"
            )
        if self.range is None:
            return
        lo, hi = (int(v) for v in self.range)
        object.__setattr__(self, "range", (lo, hi))
        lo_u, hi_u = usable_bounds(self.network)
        version = self.network.version
        if lo > hi:
            raise InvalidRange(
                "ip-range",
                _safe_range(lo, hi, self.network.version),
                f"start is after end in pool {self.name}",
            )
        if lo < lo_u or hi > hi_u:
            raise InvalidRange(
                "ip-range",
                _safe_range(lo, hi, version),
                f"outside the usable addresses {format_range(lo_u, hi_u, version)} "
                f"of pool {self.name} ({self.network})",
            )

    @property
    def bounds(self) -> tuple[int, int]:
        """Effective (lo, hi) of dynamic allocation: the range, else the usable bounds."""
        return self.range if self.range is not None else usable_bounds(self.network)

    @property
    def usable(self) -> tuple[int, int]:
        """The network's usable bounds (where static addresses may be reserved)."""
        return usable_bounds(self.network)

    @property
    def version(self) -> int:
        """4 or 6."""
        return self.network.version

    def describe(self) -> str:
        """The subnet, plus the dynamic range when it is narrower than the subnet."""
        if self.range is None or self.range == usable_bounds(self.network):
            return str(self.network)
        return f"{self.network} range {format_range(*self.range, self.version)}"


def _safe_range(lo: int, hi: int, version: int) -> str:
    """format_range that tolerates integers outside the address family."""
    try:
        return format_range(lo, hi, version)
    except ValueError:
        return str(lo) if lo == hi else f"{lo}-{hi}"


class Allocator:
    """Allocation state of one pool: allocated addresses as intervals plus a rotating cursor.

    Memory is proportional to the number of allocated runs, and every operation is a
    bisect over them, so /8 IPv4 and /48 IPv6 pools cost no more than small ones.
    """

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self._used = IntervalSet()
        self._owners: dict[int, str] = {}
        self._usable = usable_bounds(spec.network)
        self._bounds = spec.bounds
        self._cursor = self._bounds[0]

    @classmethod
    def load(
        cls, spec: PoolSpec, allocated: Iterable[AddressLike] = (), cursor: int | None = None
    ) -> Allocator:
        """An allocator restored from stored state (addresses are mark()ed, cursor set)."""
        alloc = cls(spec)
        for addr in allocated:
            alloc.mark(addr)
        if cursor is not None:
            alloc.cursor = cursor
        return alloc

    def __repr__(self) -> str:
        return f"Allocator({self.spec.name!r}, {self.spec.describe()}, allocated={self.allocated})"

    @cached_property
    def _usable_desc(self) -> str:
        """Human description of where reservations may land."""
        return (
            f"usable range {format_range(*self._usable, self.spec.version)} of {self.spec.network}"
        )

    def _to_int(self, addr: AddressLike) -> int | None:
        """Integer value of addr in this pool's family; None if it is of the other family."""
        if isinstance(addr, bool):
            raise InvalidAddress("address", repr(addr), "expected an IP address")
        if isinstance(addr, int):
            return addr
        if isinstance(addr, str):
            addr = parse_address(addr, "address")
        if not isinstance(addr, IPv4Address | IPv6Address):
            raise InvalidAddress("address", repr(addr), "expected an IP address")
        if addr.version != self.spec.version:
            return None
        return int(addr)

    def _in_network(self, addr: AddressLike) -> int:
        """Integer value of addr, raising AddressOutOfPool unless it is usable in the network."""
        x = self._to_int(addr)
        if x is None or not self._usable[0] <= x <= self._usable[1]:
            shown = addr
            if isinstance(addr, int):
                shown = _safe_range(addr, addr, self.spec.version)
            raise AddressOutOfPool(self.spec.name, str(shown), self._usable_desc)
        return x

    def _window(self, within: tuple[int, int] | None) -> tuple[int, int]:
        """The (lo, hi) to allocate from, validating a caller-supplied sub-range."""
        if within is None:
            return self._bounds
        lo, hi = within
        if lo > hi or lo < self._usable[0] or hi > self._usable[1]:
            raise InvalidRange(
                "allocation range",
                _safe_range(lo, hi, self.spec.version),
                f"must be a non-empty part of the {self._usable_desc} in pool {self.spec.name}",
            )
        return lo, hi

    def _find(self, within: tuple[int, int] | None) -> int:
        """The integer allocate() would hand out, or PoolExhausted."""
        lo, hi = self._window(within)
        x = self._used.first_free(lo, hi, self._cursor)
        if x is None:
            where = None if within is None else format_range(lo, hi, self.spec.version)
            raise PoolExhausted(self.spec.name, self.spec.describe(), where)
        return x

    def peek(self, within: tuple[int, int] | None = None) -> Address:
        """The address allocate(within) would return next, without allocating it."""
        return int_to_address(self._find(within), self.spec.version)

    def allocate(self, within: tuple[int, int] | None = None) -> Address:
        """Allocate the next free address at or after the cursor (wrapping), and advance it.

        within restricts the search to a sub-range of the network's usable bounds (it may lie
        outside spec.range, e.g. an endpoint-group ip-pool); the cursor is shared.
        """
        x = self._find(within)
        self._used.add(x)
        self._cursor = x + 1
        return int_to_address(x, self.spec.version)

    def reserve(self, addr: AddressLike, owner: str | None = None) -> None:
        """Claim a specific address (static IP, gateway, aux-address) anywhere usable in the net."""
        x = self._in_network(addr)
        if x in self._used:
            raise AddressInUse(
                self.spec.name, str(int_to_address(x, self.spec.version)), self._owners.get(x)
            )
        self._used.add(x)
        if owner:
            self._owners[x] = owner

    def mark(self, addr: AddressLike, owner: str | None = None) -> None:
        """Idempotently record an allocated address (loading state); it must be in the network."""
        x = self._in_network(addr)
        self._used.add(x)
        if owner:
            self._owners[x] = owner

    def release(self, addr: AddressLike) -> bool:
        """Free an address; False if it was not allocated (or is not in this pool)."""
        x = self._to_int(addr)
        if x is None:
            return False
        self._owners.pop(x, None)
        return self._used.remove(x)

    def is_allocated(self, addr: AddressLike) -> bool:
        """Whether the address is currently allocated."""
        x = self._to_int(addr)
        return x is not None and x in self._used

    def owner(self, addr: AddressLike) -> str | None:
        """The owner recorded by reserve()/mark() for an allocated address, if any."""
        x = self._to_int(addr)
        return None if x is None else self._owners.get(x)

    @property
    def allocated(self) -> int:
        """Number of allocated addresses (including reservations outside the dynamic range)."""
        return self._used.count

    def free_count(self) -> int:
        """Number of free addresses in the dynamic range (spec.bounds)."""
        lo, hi = self._bounds
        return (hi - lo + 1) - self._used.count_in(lo, hi)

    def allocated_intervals(self) -> list[tuple[int, int]]:
        """Allocated addresses as inclusive integer runs (compact form for dumps and tests)."""
        return self._used.intervals()

    @property
    def cursor(self) -> int:
        """Integer where the next dynamic search starts (persist it to keep rotation)."""
        return self._cursor

    @cursor.setter
    def cursor(self, value: int) -> None:
        # Out-of-range values are legal: searches treat them as the start of the window.
        self._cursor = int(value)
