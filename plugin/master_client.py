"""A thin HTTP client for the netmaster's allocation and network API."""

from __future__ import annotations

import time
from typing import Any

import requests

API = "/api/v1"


class MasterError(Exception):
    """The master refused a request (its "error" text and HTTP status) or could not be reached."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class MasterClient:
    """One typed method per master call; retries connection errors and 5xx.

    Retrying is safe because every call is idempotent on the master: addresses by owner,
    endpoints by endpoint ID, networks and pools by key.
    """

    def __init__(
        self,
        base_url: str,
        timeout: float = 10,
        retries: int = 3,
        backoff: float = 0.2,
        session: requests.Session | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = max(1, retries)
        self.backoff = backoff
        self.session = session or requests.Session()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url = f"{self.base_url}{API}{path}"
        last: MasterError | None = None
        for attempt in range(self.retries):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                resp = self.session.request(method, url, json=body, timeout=self.timeout)
            except requests.RequestException as e:
                last = MasterError(f"netmaster at {self.base_url} is unreachable: {e}", 503)
                continue
            if resp.status_code >= 500:
                last = _refusal(resp)
                continue
            if resp.status_code >= 400:
                raise _refusal(resp)
            try:
                return resp.json()
            except ValueError:
                raise MasterError(
                    f"netmaster at {self.base_url} sent a non-JSON reply to {method} {path}", 502
                ) from None
        assert last is not None
        raise last

    # --- pools and addresses (Docker IPAM) ---
    def request_pool(
        self,
        address_space: str,
        pool: str = "",
        sub_pool: str = "",
        v6: bool = False,
        options: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Reserve a pool; returns {"poolID", "pool", "data"}."""
        body = {
            "addressSpace": address_space,
            "pool": pool,
            "subPool": sub_pool,
            "v6": v6,
            "options": options or {},
        }
        return self._call("POST", "/alloc/pools", body)

    def release_pool(self, pool_id: str) -> None:
        self._call("DELETE", f"/alloc/pools/{pool_id}")

    def request_address(self, pool_id: str, address: str, owner: str, kind: str = "") -> str:
        """Allocate an address (idempotent by owner); returns "a.b.c.d/len"."""
        body = {"poolID": pool_id, "address": address, "owner": owner, "kind": kind}
        return str(self._call("POST", "/alloc/addresses", body)["address"])

    def release_address(self, pool_id: str, address: str) -> bool:
        body = {"poolID": pool_id, "address": address}
        return bool(self._call("POST", "/alloc/addresses/release", body).get("released"))

    # --- endpoints ---
    def create_endpoint(self, request: dict[str, Any]) -> dict[str, Any]:
        """Create an endpoint with its addresses (idempotent by endpointID)."""
        return self._call("POST", "/alloc/endpoints", request)

    def get_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        return self._call("GET", f"/endpoints/{endpoint_id}")

    def delete_endpoint(self, endpoint_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/alloc/endpoints/{endpoint_id}")

    def list_endpoints(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/endpoints"))

    # --- networks ---
    def create_network(self, network: dict[str, Any]) -> dict[str, Any]:
        key = f"{network.get('tenantName') or 'default'}:{network['networkName']}"
        return self._call("POST", f"/networks/{key}", network)

    def get_network(self, tenant: str, name: str) -> dict[str, Any]:
        return self._call("GET", f"/networks/{tenant}:{name}")

    def list_networks(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/networks"))

    def inspect_network(self, tenant: str, name: str) -> dict[str, Any]:
        """Config and oper state (the allocated pkt-tag is in Oper)."""
        return self._call("GET", f"/inspect/networks/{tenant}:{name}")

    def rename_network(self, tenant: str, name: str, new_name: str) -> dict[str, Any]:
        return self._call("POST", f"/networks/{tenant}:{name}/rename", {"networkName": new_name})

    def delete_network(self, tenant: str, name: str) -> None:
        self._call("DELETE", f"/networks/{tenant}:{name}")


def _refusal(resp: requests.Response) -> MasterError:
    try:
        message = str(resp.json().get("error") or resp.text)
    except (ValueError, AttributeError):
        message = resp.text.strip() or resp.reason or f"HTTP {resp.status_code}"
    return MasterError(message, resp.status_code)
