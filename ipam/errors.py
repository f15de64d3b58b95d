"""IPAM errors: every message names the object (field, pool, address) and the reason."""

from __future__ import annotations

from typing import Any


def _show(value: object) -> str:
    """Render a user-supplied value for a message, quoting it when it would read ambiguously."""
    text = str(value)
    if not text or text != text.strip() or not text.isprintable() or " " in text:
        return repr(text)
    return text


def _rebuild(cls: type[IpamError], args: tuple[Any, ...], state: dict[str, Any]) -> IpamError:
    """Unpickle helper that bypasses the subclasses' differing __init__ signatures."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class IpamError(ValueError):
    """Base of all IPAM errors; str(e) is a complete human-readable message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class InvalidCidr(IpamError):
    """A field that must be a network in CIDR notation is not one."""

    def __init__(self, what: str, value: str, reason: str) -> None:
        super().__init__(f"{what} {_show(value)} is not a valid CIDR: {reason}")
        self.what = what
        self.value = value
        self.reason = reason


class UnusableSubnet(IpamError):
    """A valid CIDR that no network may own (ipam.subnets): too wide, or special-purpose."""

    def __init__(self, what: str, value: str, reason: str) -> None:
        super().__init__(f"{what} {_show(value)} {reason}")
        self.what = what
        self.value = value
        self.reason = reason


class InvalidAddress(IpamError):
    """A field that must be a single IP address is not one."""

    def __init__(self, what: str, value: str, reason: str) -> None:
        super().__init__(f"{what} {_show(value)} is not a valid address: {reason}")
        self.what = what
        self.value = value
        self.reason = reason


class InvalidRange(IpamError):
    """An address range (ip-pool, ip-range, allocation window) is malformed or misplaced."""

    def __init__(self, what: str, value: str, reason: str) -> None:
        super().__init__(f"{what} {_show(value)} is not a valid range: {reason}")
        self.what = what
        self.value = value
        self.reason = reason


class PoolExhausted(IpamError):
    """No free address is left in the pool (or in the requested part of it)."""

    def __init__(self, pool: str, detail: str | None = None, within: str | None = None) -> None:
        message = f"pool {pool}"
        if detail:
            message += f" ({detail})"
        message += " has no free address"
        if within:
            message += f" in {within}"
        super().__init__(message)
        self.pool = pool
        self.detail = detail
        self.within = within


class AddressInUse(IpamError):
    """A specific address was requested but is already allocated."""

    def __init__(self, pool: str, address: str, owner: str | None = None) -> None:
        by = f" to {owner}" if owner else ""
        super().__init__(f"address {address} in pool {pool} is already allocated{by}")
        self.pool = pool
        self.address = address
        self.owner = owner


class AddressOutOfPool(IpamError):
    """A specific address was requested that the pool cannot hand out."""

    def __init__(self, pool: str, address: str, range_desc: str) -> None:
        super().__init__(f"address {_show(address)} is outside pool {pool} ({range_desc})")
        self.pool = pool
        self.address = address
        self.range_desc = range_desc


class OverlapError(IpamError):
    """Two pools (subnets) that must be disjoint overlap."""

    def __init__(self, a: str, b: str) -> None:
        super().__init__(f"pool {a} overlaps pool {b}")
        self.a = a
        self.b = b
