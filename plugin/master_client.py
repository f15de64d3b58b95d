"""The agent's client of the netmaster: typed allocation and network calls over the shared
transport (common.client), following the leader the masters elected."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import requests
from pydantic import BaseModel, ValidationError

from common import keys
from common.client import (
    API,
    BAD_ANSWER,
    LEADER_DEADLINE,
    MasterError,
    MasterTransport,
    NoAnswer,
)
from common.models import (
    AddressRelease,
    AddressRequest,
    Endpoint,
    EndpointContainer,
    EndpointGroup,
    EndpointRequest,
    Network,
    PoolBinding,
    PoolRequest,
)
from common.records import NetworkRecord, parse_leader
from store import Store, StoreError

__all__ = [
    "LEADER_DEADLINE",
    "MasterClient",
    "MasterError",
    "PoolGrant",
    "leader_url_from_store",
]

M = TypeVar("M", bound=BaseModel)


def unreachable(failure: NoAnswer) -> str:
    """How the agent words a request that got no answer (Docker shows it to the user)."""
    return f"netmaster at {failure.url} is unreachable: {failure.reason}"


def leader_url_from_store(store: Store) -> Callable[[], str | None]:
    """A ``leader`` callable for MasterClient: the leader's URL in the cluster state, or None."""

    def current() -> str | None:
        try:
            record = parse_leader(store.get(keys.LEADER))
        except StoreError:
            return None
        return record.url if record is not None and record.url else None

    return current


@dataclass(frozen=True)
class PoolGrant:
    """A pool the master reserved for Docker's RequestPool."""

    pool_id: str
    pool: str  # its CIDR
    data: dict[str, str] = field(default_factory=dict)


class MasterClient:
    """One typed method per master call the agent makes.

    Without ``leader``, a call makes at most ``retries`` attempts on ``base_url``. With
    ``leader`` (the current leader's URL from the cluster state, or None), calls follow the
    leader until ``deadline`` seconds have passed (see common.client.MasterTransport).
    ``tls_ca`` verifies the masters' certificates; ``token`` is the agent's bearer token;
    ``client_cert`` (certificate file, key file) is for masters that require one.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 10,
        retries: int = 3,
        backoff: float = 0.2,
        session: requests.Session | None = None,
        leader: Callable[[], str | None] | None = None,
        deadline: float | None = None,
        tls_ca: str = "",
        token: str = "",
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        self.transport = MasterTransport(
            base_url,
            unreachable,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            session=session,
            leader=leader,
            deadline=deadline,
            tls_ca=tls_ca,
            token=token,
            client_cert=client_cert,
        )

    def current_url(self) -> str:
        """The master URL calls go to: the leader when known, else ``base_url``."""
        return self.transport.current_url()

    def _call(self, method: str, path: str, body: BaseModel | dict[str, Any] | None = None) -> Any:
        data = body.model_dump(by_alias=True, mode="json") if isinstance(body, BaseModel) else body
        return self.transport.call(method, API + path, data)

    # --- pools and addresses (Docker IPAM) ---
    def request_pool(self, request: PoolRequest) -> PoolGrant:
        """Reserve a pool (an existing identical one is shared)."""
        got = _fields(self._call("POST", "/alloc/pools", request), "pool", "poolID", "pool")
        data = got.get("data")
        return PoolGrant(
            pool_id=str(got["poolID"]),
            pool=str(got["pool"]),
            data={str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {},
        )

    def release_pool(self, pool_id: str) -> None:
        self._call("DELETE", f"/alloc/pools/{_part(pool_id)}")

    def bind_pool(self, binding: PoolBinding) -> str:
        """Bind a docker network's pool id to its network's pool; what it books in."""
        got = self._call("POST", "/alloc/pool-bindings", binding)
        return str(_fields(got, f"pool binding {binding.poolID}", "bookedIn")["bookedIn"])

    def request_address(self, request: AddressRequest) -> str:
        """Allocate an address (idempotent by owner); returns "a.b.c.d/len"."""
        got = self._call("POST", "/alloc/addresses", request)
        return str(_fields(got, f"address in pool {request.poolID}", "address")["address"])

    def release_address(self, request: AddressRelease) -> bool:
        got = self._call("POST", "/alloc/addresses/release", request)
        return bool(_fields(got, f"address {request.address}", "released")["released"])

    # --- endpoints ---
    def create_endpoint(self, request: EndpointRequest) -> Endpoint:
        """Create an endpoint with its addresses (idempotent by endpointID)."""
        got = self._call("POST", "/alloc/endpoints", request)
        return _answer(Endpoint, got, f"endpoint {request.endpointID}")

    def get_endpoint(self, endpoint_id: str) -> Endpoint:
        got = self._call("GET", f"/endpoints/{_part(endpoint_id)}")
        return _answer(Endpoint, got, f"endpoint {endpoint_id}")

    def delete_endpoint(self, endpoint_id: str) -> Endpoint:
        got = self._call("DELETE", f"/alloc/endpoints/{_part(endpoint_id)}")
        return _answer(Endpoint, got, f"endpoint {endpoint_id}")

    def set_endpoint_container(self, endpoint_id: str, info: EndpointContainer) -> Endpoint:
        """Record the container (ID, name, labels) an endpoint belongs to."""
        got = self._call("PUT", f"/alloc/endpoints/{_part(endpoint_id)}/container", info)
        return _answer(Endpoint, got, f"endpoint {endpoint_id}")

    def list_endpoints(self) -> list[Endpoint]:
        return [_answer(Endpoint, e, "endpoint") for e in _list(self._call("GET", "/endpoints"))]

    # --- networks ---
    def create_network(self, network: Network) -> Network:
        got = self._call(
            "POST", f"/networks/{_key(network.tenantName, network.networkName)}", network
        )
        return _answer(Network, got, f"network {network.id}")

    def get_network(self, tenant: str, name: str) -> Network:
        got = self._call("GET", f"/networks/{_key(tenant, name)}")
        return _answer(Network, got, f"network {tenant}:{name}")

    def list_networks(self) -> list[Network]:
        return [_answer(Network, n, "network") for n in _list(self._call("GET", "/networks"))]

    def network_record(self, tenant: str, name: str) -> NetworkRecord:
        """A network's config with what the master chose for it (its tag and pools)."""
        what = f"network {tenant}:{name}"
        try:
            got = self._call("GET", f"/alloc/networks/{_key(tenant, name)}")
        except MasterError as e:
            if e.status == 404 and e.obj.startswith("/"):  # no such route: not this network
                raise _bad_answer(what, "it is older than this agent; upgrade it first") from None
            raise
        got = _fields(got, what, "config")
        try:
            return NetworkRecord.model_validate(got)
        except (ValueError, TypeError) as e:
            raise _bad_answer(what, e) from None

    def rename_network(self, tenant: str, name: str, new_name: str) -> Network:
        got = self._call(
            "POST", f"/networks/{_key(tenant, name)}/rename", {"networkName": new_name}
        )
        return _answer(Network, got, f"network {tenant}:{name}")

    def delete_network(self, tenant: str, name: str) -> None:
        self._call("DELETE", f"/networks/{_key(tenant, name)}")

    # --- endpoint groups (a docker network of a group stands for it) ---
    def get_group(self, tenant: str, name: str) -> EndpointGroup:
        got = self._call("GET", f"/endpointGroups/{_key(tenant, name)}")
        return _answer(EndpointGroup, got, f"endpoint group {tenant}:{name}")

    def delete_group(self, tenant: str, name: str) -> None:
        self._call("DELETE", f"/endpointGroups/{_key(tenant, name)}")


def _part(value: str) -> str:
    """One path segment of a URL, every character that means something in a URL escaped:
    Docker's IDs reach the master as the names they are, never as "?", "#", "/" or "..".
    (An ID of "x#y" would otherwise name the endpoint "x", and "../../networks/n" a network.)"""
    return urllib.parse.quote(value, safe="")


def _key(tenant: str, name: str) -> str:
    """A TENANT:NAME key as one path segment."""
    return f"{_part(tenant)}:{_part(name)}"


def _bad_answer(what: str, problem: object) -> MasterError:
    return MasterError(
        f"{what}: netmaster's answer is not what its API promises: {problem}", BAD_ANSWER
    )


def _answer(model: type[M], data: Any, what: str) -> M:
    """The master's answer as ``model``; a MasterError if it is something else."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise _bad_answer(what, e) from None


def _fields(data: Any, what: str, *names: str) -> dict[str, Any]:
    """The master's answer as a JSON object with at least ``names``."""
    if not isinstance(data, dict):
        raise _bad_answer(what, "not a JSON object")
    missing = [n for n in names if n not in data]
    if missing:
        raise _bad_answer(what, f"no {', '.join(missing)}")
    return data


def _list(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise _bad_answer("list", "not a JSON array")
    return data
