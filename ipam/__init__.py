"""netplugin ipam: pure, deterministic address allocation (no I/O; the master adds storage)."""

from ipam.defaults import (
    DEFAULT_V4_POOLS,
    DEFAULT_V6_POOLS,
    first_overlap,
    next_free_pool,
    overlaps,
)
from ipam.errors import (
    AddressInUse,
    AddressOutOfPool,
    InvalidAddress,
    InvalidCidr,
    InvalidRange,
    IpamError,
    OverlapError,
    PoolExhausted,
    UnusableSubnet,
)
from ipam.intervals import IntervalSet
from ipam.parse import (
    Address,
    Network,
    format_range,
    int_to_address,
    parse_address,
    parse_network,
    parse_range,
    usable_bounds,
)
from ipam.pool import Allocator, PoolSpec
from ipam.subnets import check_ownable

__all__ = [
    "DEFAULT_V4_POOLS",
    "DEFAULT_V6_POOLS",
    "Address",
    "AddressInUse",
    "AddressOutOfPool",
    "Allocator",
    "IntervalSet",
    "InvalidAddress",
    "InvalidCidr",
    "InvalidRange",
    "IpamError",
    "Network",
    "OverlapError",
    "PoolExhausted",
    "PoolSpec",
    "UnusableSubnet",
    "check_ownable",
    "first_overlap",
    "format_range",
    "int_to_address",
    "next_free_pool",
    "overlaps",
    "parse_address",
    "parse_network",
    "parse_range",
    "usable_bounds",
]
