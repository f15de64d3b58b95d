"""Every IPAM error message names the object and the reason."""

from __future__ import annotations

import pickle

import pytest

from ipam import (
    AddressInUse,
    AddressOutOfPool,
    InvalidAddress,
    InvalidCidr,
    InvalidRange,
    IpamError,
    OverlapError,
    PoolExhausted,
)


@pytest.mark.parametrize(
    ("err", "message"),
    [
        (
            InvalidCidr("subnet", "10.1.0.0/33", "prefix length 33 is out of range"),
            "subnet 10.1.0.0/33 is not a valid CIDR: prefix length 33 is out of range",
        ),
        (
            InvalidAddress("gateway", "10.1.0.300", "not an address"),
            "gateway 10.1.0.300 is not a valid address: not an address",
        ),
        (
            InvalidRange("ip-pool", "10.1.1.20-10.1.1.10", "start is after end"),
            "ip-pool 10.1.1.20-10.1.1.10 is not a valid range: start is after end",
        ),
        (PoolExhausted("default:net1"), "pool default:net1 has no free address"),
        (
            PoolExhausted("default:net1", "10.1.0.0/30"),
            "pool default:net1 (10.1.0.0/30) has no free address",
        ),
        (
            PoolExhausted("default:net1", "10.1.0.0/24", "10.1.0.10-10.1.0.20"),
            "pool default:net1 (10.1.0.0/24) has no free address in 10.1.0.10-10.1.0.20",
        ),
        (
            AddressInUse("default:net1", "10.1.0.5"),
            "address 10.1.0.5 in pool default:net1 is already allocated",
        ),
        (
            AddressInUse("default:net1", "10.1.0.5", "ep-123"),
            "address 10.1.0.5 in pool default:net1 is already allocated to ep-123",
        ),
        (
            AddressOutOfPool("default:net1", "10.2.0.1", "usable range 10.1.0.1-10.1.0.254"),
            "address 10.2.0.1 is outside pool default:net1 (usable range 10.1.0.1-10.1.0.254)",
        ),
        (
            OverlapError("default:net1 (10.1.0.0/16)", "default:net2 (10.1.2.0/24)"),
            "pool default:net1 (10.1.0.0/16) overlaps pool default:net2 (10.1.2.0/24)",
        ),
    ],
)
def test_messages(err: IpamError, message: str) -> None:
    assert str(err) == message
    assert isinstance(err, IpamError)
    assert isinstance(err, ValueError)


def test_empty_or_spaced_values_are_quoted() -> None:
    assert str(InvalidCidr("subnet", "", "empty value")) == (
        "subnet '' is not a valid CIDR: empty value"
    )
    assert "' 10.1.0.0/24 '" in str(InvalidCidr("subnet", " 10.1.0.0/24 ", "x"))


def test_attributes_kept() -> None:
    assert PoolExhausted("default:net1", "10.1.0.0/30").pool == "default:net1"
    e = AddressInUse("p", "10.0.0.1", "ep1")
    assert (e.pool, e.address, e.owner) == ("p", "10.0.0.1", "ep1")
    r = InvalidCidr("subnet", "x", "why")
    assert (r.what, r.value, r.reason) == ("subnet", "x", "why")
    o = OverlapError("a", "b")
    assert (o.a, o.b) == ("a", "b")


@pytest.mark.parametrize(
    "err",
    [
        InvalidCidr("subnet", "x", "why"),
        InvalidAddress("gateway", "x", "why"),
        InvalidRange("ip-pool", "x", "why"),
        PoolExhausted("p", "10.0.0.0/30", "10.0.0.1-10.0.0.2"),
        AddressInUse("p", "10.0.0.1", "ep1"),
        AddressOutOfPool("p", "10.9.0.1", "usable range 10.0.0.1-10.0.0.2"),
        OverlapError("a", "b"),
        IpamError("plain"),
    ],
)
def test_pickle_roundtrip(err: IpamError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.__dict__ == err.__dict__
