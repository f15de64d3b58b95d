"""One pydantic model per Docker remote-driver request body, and the body parser."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.jsonbody import BodyError, decode_object

M = TypeVar("M", bound=BaseModel)
# Docker's IDs name an object: never empty.
ID = Annotated[str, Field(min_length=1)]


class RequestError(Exception):
    """A malformed request from Docker: answered with 400 (413: too large), never changes state."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


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
    NetworkID: ID
    EndpointID: ID


# --- NetworkDriver ---
class CreateNetwork(_Body):
    NetworkID: ID
    Options: dict[str, Any] | None = None
    IPv4Data: list[IPAMData] | None = None
    IPv6Data: list[IPAMData] | None = None


class DeleteNetwork(_Body):
    NetworkID: ID


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
    NetworkID: ID
    IPv4Data: list[IPAMData] | None = None
    IPv6Data: list[IPAMData] | None = None
    Options: dict[str, Any] | None = None


class FreeNetwork(_Body):
    NetworkID: ID


# --- IpamDriver ---
class RequestPool(_Body):
    AddressSpace: str = ""
    Pool: str = ""
    SubPool: str = ""
    Options: dict[str, str] | None = None
    V6: bool = False


class ReleasePool(_Body):
    PoolID: ID


class RequestAddress(_Body):
    PoolID: ID
    Address: str = ""
    Options: dict[str, str] | None = None


class ReleaseAddress(_Body):
    PoolID: ID
    Address: str


def parse_body(model: type[M], raw: bytes) -> M:
    """Parse a raw body as JSON whatever its Content-Type (Docker sends none), within the
    limits of common.jsonbody, then validate it against ``model``."""
    try:
        data = decode_object(raw)
    except BodyError as e:
        raise RequestError(e.reason, e.status) from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise RequestError("; ".join(_problem(err) for err in e.errors())) from None


def _problem(err: Any) -> str:
    field = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return f"field {field!r} is required"
    return f"field {field!r}: {err['msg']}"
