"""netctl's client of the netmaster's REST API (/api/v1/): one generic method per operation,
for every kind of common/kinds.py, over the shared transport (common.client)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests

from common.client import API, MasterError, MasterTransport, NoAnswer, normalize_url
from common.kinds import Kind

__all__ = ["API", "DEFAULT_TIMEOUT", "DEFAULT_URL", "MasterClient", "MasterError", "normalize_url"]

DEFAULT_URL = "http://127.0.0.1:9999"
DEFAULT_TIMEOUT = 30.0

JSONObject = dict[str, Any]


def wording(failure: NoAnswer) -> str:
    """How netctl words a request that got no answer."""
    if failure.stage == "connect":
        return f"cannot reach netmaster at {failure.url}: {failure.reason}"
    if failure.stage == "tls":
        return f"no TLS connection to netmaster at {failure.url}: {failure.reason}"
    if failure.stage == "answer":
        return f"netmaster at {failure.url} did not answer within {failure.timeout:g}s"
    return f"request to netmaster at {failure.url} failed: {failure.reason}"


def _url(kind: Kind[Any], parts: tuple[str, ...], root: str = API) -> str:
    return f"{root}/{kind.plural}/{quote(kind.key.text(parts), safe=':')}"


class MasterClient:
    """The master's REST calls, one method per operation of any kind; every failure raises
    ``MasterError``.

    A command is one attempt: a person at a shell sees a failure at once and decides.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
        tls_ca: str = "",
        token: str = "",
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        self.transport = MasterTransport(
            base_url,
            wording,
            timeout=timeout,
            session=session,
            tls_ca=tls_ca,
            token=token,
            client_cert=client_cert,
        )

    def request(
        self,
        method: str,
        path: str,
        body: JSONObject | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON answer."""
        return self.transport.call(method, path, body, params)

    def version(self) -> JSONObject:
        """GET /version."""
        return self.request("GET", "/version")

    # --- every kind of common/kinds.py; ``parts`` are the key's, in order ---

    def list(self, kind: Kind[Any], tenant: str | None = None) -> list[JSONObject]:
        """GET /api/v1/PLURAL (of all tenants when ``tenant`` is None)."""
        params = {"tenant": tenant} if tenant else None
        return self.request("GET", f"{API}/{kind.plural}", params=params)

    def get(self, kind: Kind[Any], *parts: str) -> JSONObject:
        """GET /api/v1/PLURAL/KEY."""
        return self.request("GET", _url(kind, parts))

    def put(self, kind: Kind[Any], *parts: str, **fields: Any) -> JSONObject:
        """POST /api/v1/PLURAL/KEY: create or update, the body the key's fields and ``fields``
        (REST names)."""
        body = {**dict(zip(kind.fields, parts, strict=True)), **fields}
        return self.request("POST", _url(kind, parts), body)

    def patch(self, kind: Kind[Any], *parts: str, **fields: Any) -> JSONObject:
        """PATCH /api/v1/PLURAL/KEY with only ``fields`` (the master merges them over the
        object inside the object's own transaction)."""
        return self.request("PATCH", _url(kind, parts), fields)

    def delete(self, kind: Kind[Any], *parts: str) -> JSONObject:
        """DELETE /api/v1/PLURAL/KEY."""
        return self.request("DELETE", _url(kind, parts))

    def inspect(self, kind: Kind[Any], *parts: str) -> JSONObject:
        """GET /api/v1/inspect/PLURAL/KEY."""
        return self.request("GET", _url(kind, parts, f"{API}/inspect"))
