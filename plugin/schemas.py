"""One pydantic model per Docker remote-driver request body, and the body parser."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class RequestError(Exception):
    """A malformed request from Docker: answered with 400 and never changes state."""

    status = 400


class _Body(BaseModel):
    # Docker adds fields across versions; ignore what we do not use.
    model_config = ConfigDict(extra="ignore")


class IPAMData(_Body):
    AddressSpace: str = ""
    Pool: str = ""
    Gateway: str = ""
    AuxAddresses: dict[str, str] | None = None


class EndpointInterface(_Body):
    Address: str = ""
    AddressIPv6: str = ""
    MacAddress: str = ""


class _Endpoint(_Body):
    NetworkID: str
    EndpointID: str


# --- NetworkDriver ---
class CreateNetwork(_Body):
    NetworkID: str
    Options: dict[str, Any] | None = None
    IPv4Data: list[IPAMData] | None = None
    IPv6Data: list[IPAMData] | None = None


class DeleteNetwork(_Body):
    NetworkID: str


class CreateEndpoint(_Endpoint):
    Interface: EndpointInterface | None = None
    Options: dict[str, Any] | None = None


class EndpointOperInfo(_Endpoint):
    pass


class DeleteEndpoint(_Endpoint):
    pass


class Join(_Endpoint):
    SandboxKey: str = ""
    Options: dict[str, Any] | None = None


class Leave(_Endpoint):
    pass


class ProgramExternalConnectivity(_Endpoint):
    Options: dict[str, Any] | None = None


class RevokeExternalConnectivity(_Endpoint):
    pass


class DiscoverNew(_Body):
    DiscoveryType: int
    DiscoveryData: Any = None


class DiscoverDelete(_Body):
    DiscoveryType: int
    DiscoveryData: Any = None


class AllocateNetwork(_Body):
    NetworkID: str
    IPv4Data: list[IPAMData] | None = None
    IPv6Data: list[IPAMData] | None = None
    Options: dict[str, Any] | None = None


class FreeNetwork(_Body):
    NetworkID: str


# --- IpamDriver ---
class RequestPool(_Body):
    AddressSpace: str = ""
    Pool: str = ""
    SubPool: str = ""
    Options: dict[str, str] | None = None
    V6: bool = False


class ReleasePool(_Body):
    PoolID: str


class RequestAddress(_Body):
    PoolID: str
    Address: str = ""
    Options: dict[str, str] | None = None


class ReleaseAddress(_Body):
    PoolID: str
    Address: str


def parse_body(model: type[M], raw: bytes) -> M:
    """Parse a raw body as JSON whatever its Content-Type, then validate it against ``model``."""
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RequestError("request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise RequestError("; ".join(_problem(err) for err in e.errors())) from None


def _problem(err: Any) -> str:
    field = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return f"field {field!r} is required"
    return f"field {field!r}: {err['msg']}"
