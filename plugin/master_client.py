"""A thin HTTP client for the netmaster's allocation and network API."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import requests

from common import keys
from common.records import parse_leader
from store import Store, StoreError

API = "/api/v1"
# With a leader callable, calls are retried this long: beyond a leader failover (the
# default lease TTL of 10 s, plus 2 s).
LEADER_DEADLINE = 20.0
MAX_BACKOFF = 0.5
# Answers that mean "try again, maybe elsewhere": the master could not reach the leader or
# the store, or a proxy in between failed.
_TRANSIENT = (502, 503, 504)


class MasterError(Exception):
    """The master refused a request (its "error" text and HTTP status) or could not be reached."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def leader_url_from_store(store: Store) -> Callable[[], str | None]:
    """A ``leader`` callable for MasterClient: the leader's URL in the cluster state, or None."""

    def current() -> str | None:
        try:
            record = parse_leader(store.get(keys.LEADER))
        except StoreError:
            return None
        return record.url if record is not None and record.url else None

    return current


class MasterClient:
    """One typed method per master call; retries connection errors and 5xx.

    Retrying is safe because every call is idempotent on the master: addresses by owner,
    endpoints by endpoint ID, networks and pools by key.

    Without ``leader``, a call makes at most ``retries`` attempts on ``base_url`` (a quick,
    clear failure when the master is down). With ``leader`` (the current leader's URL from
    the cluster state, or None), calls go to the leader, found again after a connection
    error or a 502/503/504, and are retried with capped backoff until ``deadline`` seconds
    have passed (default LEADER_DEADLINE), which outlasts a leader failover.
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
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retries = max(1, retries)
        self.backoff = backoff
        self.session = session or requests.Session()
        self.leader = leader
        self.deadline = deadline if deadline is not None else (LEADER_DEADLINE if leader else None)
        self._target: str | None = None  # the resolved master URL; None: resolve again

    def current_url(self) -> str:
        """The master URL calls go to: the leader when known, else ``base_url``."""
        url = self._target
        if url is None:
            found = None
            if self.leader is not None:
                try:
                    found = self.leader()
                except Exception:
                    found = None
            url = self._target = (found or self.base_url).rstrip("/")
        return url

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self.deadline is not None:
            return self._call_until(time.monotonic() + self.deadline, method, path, body)
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
            return _json(resp, self.base_url, method, path)
        assert last is not None
        raise last

    def _call_until(
        self, deadline: float, method: str, path: str, body: dict[str, Any] | None
    ) -> Any:
        delay = self.backoff or 0.05
        failures = 0  # other 5xx answers: a bug, not a failover; keep the old attempt limit
        while True:
            base = self.current_url()
            remaining = deadline - time.monotonic()
            try:
                resp = self.session.request(
                    method,
                    f"{base}{API}{path}",
                    json=body,
                    timeout=min(self.timeout, max(remaining, 0.5)),
                )
            except requests.RequestException as e:
                last = MasterError(f"netmaster at {base} is unreachable: {e}", 503)
                self._target = None
            else:
                if resp.status_code in _TRANSIENT:
                    last = _refusal(resp)
                    self._target = None
                elif resp.status_code >= 500:
                    last = _refusal(resp)
                    failures += 1
                    if failures >= self.retries:
                        raise last
                elif resp.status_code >= 400:
                    raise _refusal(resp)
                else:
                    return _json(resp, base, method, path)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise last
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, MAX_BACKOFF)

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


def _json(resp: requests.Response, base: str, method: str, path: str) -> Any:
    try:
        return resp.json()
    except ValueError:
        raise MasterError(
            f"netmaster at {base} sent a non-JSON reply to {method} {path}", 502
        ) from None
