"""netctl's client of the netmaster's REST API (/api/v1/): one method per call, over the
shared transport (common.client)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import requests

from common.client import API, MasterError, MasterTransport, NoAnswer, normalize_url

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


def key(tenant: str, name: str) -> str:
    """Contiv's object key for tenant-scoped objects: "TENANT:NAME"."""
    return f"{tenant}:{name}"


def rule_key(tenant: str, policy: str, rule_id: str) -> str:
    """A rule's key: "TENANT:POLICY:RULEID"."""
    return f"{tenant}:{policy}:{rule_id}"


def _quote(part: str) -> str:
    return quote(part, safe=":")


class MasterClient:
    """One method per REST call of the master; every failure raises ``MasterError``.

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

    # --- meta ---

    def version(self) -> JSONObject:
        """GET /version."""
        return self.request("GET", "/version")

    # --- global settings ---

    def get_global(self) -> JSONObject:
        """GET /api/v1/globals/global."""
        return self.request("GET", f"{API}/globals/global")

    def inspect_global(self) -> JSONObject:
        """GET /api/v1/inspect/globals/global."""
        return self.request("GET", f"{API}/inspect/globals/global")

    def update_global(
        self,
        *,
        fwd_mode: str | None = None,
        arp_mode: str | None = None,
        vlans: str | None = None,
        vxlans: str | None = None,
        pvt_subnet: str | None = None,
    ) -> JSONObject:
        """POST /api/v1/globals/global with only the given fields (the master merges)."""
        fields = {
            "fwdMode": fwd_mode,
            "arpMode": arp_mode,
            "vlans": vlans,
            "vxlans": vxlans,
            "pvtSubnet": pvt_subnet,
        }
        body = {k: v for k, v in fields.items() if v is not None}
        return self.request("POST", f"{API}/globals/global", body)

    # --- tenants ---

    def list_tenants(self) -> list[JSONObject]:
        """GET /api/v1/tenants."""
        return self.request("GET", f"{API}/tenants")

    def get_tenant(self, name: str) -> JSONObject:
        """GET /api/v1/tenants/NAME."""
        return self.request("GET", f"{API}/tenants/{_quote(name)}")

    def create_tenant(self, name: str) -> JSONObject:
        """POST /api/v1/tenants/NAME."""
        return self.request("POST", f"{API}/tenants/{_quote(name)}", {"tenantName": name})

    def delete_tenant(self, name: str) -> JSONObject:
        """DELETE /api/v1/tenants/NAME."""
        return self.request("DELETE", f"{API}/tenants/{_quote(name)}")

    def inspect_tenant(self, name: str) -> JSONObject:
        """GET /api/v1/inspect/tenants/NAME."""
        return self.request("GET", f"{API}/inspect/tenants/{_quote(name)}")

    # --- networks ---

    def list_networks(self, tenant: str | None = None) -> list[JSONObject]:
        """GET /api/v1/networks (all tenants when ``tenant`` is None)."""
        params = {"tenant": tenant} if tenant else None
        return self.request("GET", f"{API}/networks", params=params)

    def get_network(self, tenant: str, name: str) -> JSONObject:
        """GET /api/v1/networks/TENANT:NAME."""
        return self.request("GET", f"{API}/networks/{_quote(key(tenant, name))}")

    def create_network(
        self,
        tenant: str,
        name: str,
        *,
        encap: str = "vxlan",
        pkt_tag: int = 0,
        subnet: str = "",
        gateway: str = "",
        ipv6_subnet: str = "",
        ipv6_gateway: str = "",
        nw_type: str = "data",
    ) -> JSONObject:
        """POST /api/v1/networks/TENANT:NAME."""
        body = {
            "tenantName": tenant,
            "networkName": name,
            "encap": encap,
            "pktTag": pkt_tag,
            "subnet": subnet,
            "gateway": gateway,
            "ipv6Subnet": ipv6_subnet,
            "ipv6Gateway": ipv6_gateway,
            "nwType": nw_type,
        }
        return self.request("POST", f"{API}/networks/{_quote(key(tenant, name))}", body)

    def delete_network(self, tenant: str, name: str) -> JSONObject:
        """DELETE /api/v1/networks/TENANT:NAME."""
        return self.request("DELETE", f"{API}/networks/{_quote(key(tenant, name))}")

    def inspect_network(self, tenant: str, name: str) -> JSONObject:
        """GET /api/v1/inspect/networks/TENANT:NAME."""
        return self.request("GET", f"{API}/inspect/networks/{_quote(key(tenant, name))}")

    # --- endpoint groups ---

    def list_groups(self, tenant: str | None = None) -> list[JSONObject]:
        """GET /api/v1/endpointGroups (all tenants when ``tenant`` is None)."""
        params = {"tenant": tenant} if tenant else None
        return self.request("GET", f"{API}/endpointGroups", params=params)

    def get_group(self, tenant: str, name: str) -> JSONObject:
        """GET /api/v1/endpointGroups/TENANT:NAME."""
        return self.request("GET", f"{API}/endpointGroups/{_quote(key(tenant, name))}")

    def create_group(
        self,
        tenant: str,
        name: str,
        network: str,
        *,
        ip_pool: str = "",
        policies: Iterable[str] = (),
        net_profile: str = "",
    ) -> JSONObject:
        """POST /api/v1/endpointGroups/TENANT:NAME."""
        body = {
            "tenantName": tenant,
            "groupName": name,
            "networkName": network,
            "ipPool": ip_pool,
            "policies": list(policies),
            "netProfile": net_profile,
        }
        return self.request("POST", f"{API}/endpointGroups/{_quote(key(tenant, name))}", body)

    def update_group(
        self,
        tenant: str,
        name: str,
        *,
        policies: Iterable[str] | None = None,
        net_profile: str | None = None,
    ) -> JSONObject:
        """PATCH /api/v1/endpointGroups/TENANT:NAME with only the given fields (the master
        merges them over the group inside the group's own transaction)."""
        body: JSONObject = {}
        if policies is not None:
            body["policies"] = list(policies)
        if net_profile is not None:
            body["netProfile"] = net_profile
        return self.request("PATCH", f"{API}/endpointGroups/{_quote(key(tenant, name))}", body)

    def delete_group(self, tenant: str, name: str) -> JSONObject:
        """DELETE /api/v1/endpointGroups/TENANT:NAME."""
        return self.request("DELETE", f"{API}/endpointGroups/{_quote(key(tenant, name))}")

    def inspect_group(self, tenant: str, name: str) -> JSONObject:
        """GET /api/v1/inspect/endpointGroups/TENANT:NAME."""
        return self.request("GET", f"{API}/inspect/endpointGroups/{_quote(key(tenant, name))}")

    # --- netprofiles and service LBs: one kind each, TENANT:NAME keys ---

    def list_of(self, plural: str, tenant: str | None = None) -> list[JSONObject]:
        """GET /api/v1/PLURAL (all tenants when ``tenant`` is None)."""
        params = {"tenant": tenant} if tenant else None
        return self.request("GET", f"{API}/{plural}", params=params)

    def put_object(self, plural: str, tenant: str, name: str, body: JSONObject) -> JSONObject:
        """POST /api/v1/PLURAL/TENANT:NAME (create or update)."""
        return self.request("POST", f"{API}/{plural}/{_quote(key(tenant, name))}", body)

    def delete_object(self, plural: str, tenant: str, name: str) -> JSONObject:
        """DELETE /api/v1/PLURAL/TENANT:NAME."""
        return self.request("DELETE", f"{API}/{plural}/{_quote(key(tenant, name))}")

    def inspect_object(self, plural: str, tenant: str, name: str) -> JSONObject:
        """GET /api/v1/inspect/PLURAL/TENANT:NAME."""
        return self.request("GET", f"{API}/inspect/{plural}/{_quote(key(tenant, name))}")

    # --- policies and their rules ---

    def list_policies(self, tenant: str | None = None) -> list[JSONObject]:
        """GET /api/v1/policys (all tenants when ``tenant`` is None)."""
        params = {"tenant": tenant} if tenant else None
        return self.request("GET", f"{API}/policys", params=params)

    def get_policy(self, tenant: str, name: str) -> JSONObject:
        """GET /api/v1/policys/TENANT:NAME."""
        return self.request("GET", f"{API}/policys/{_quote(key(tenant, name))}")

    def create_policy(self, tenant: str, name: str) -> JSONObject:
        """POST /api/v1/policys/TENANT:NAME."""
        body = {"tenantName": tenant, "policyName": name}
        return self.request("POST", f"{API}/policys/{_quote(key(tenant, name))}", body)

    def delete_policy(self, tenant: str, name: str) -> JSONObject:
        """DELETE /api/v1/policys/TENANT:NAME (its rules go with it)."""
        return self.request("DELETE", f"{API}/policys/{_quote(key(tenant, name))}")

    def inspect_policy(self, tenant: str, name: str) -> JSONObject:
        """GET /api/v1/inspect/policys/TENANT:NAME."""
        return self.request("GET", f"{API}/inspect/policys/{_quote(key(tenant, name))}")

    def list_rules(self, tenant: str | None = None) -> list[JSONObject]:
        """GET /api/v1/rules (all tenants when ``tenant`` is None)."""
        params = {"tenant": tenant} if tenant else None
        return self.request("GET", f"{API}/rules", params=params)

    def create_rule(self, tenant: str, policy: str, rule_id: str, **fields: Any) -> JSONObject:
        """POST /api/v1/rules/TENANT:POLICY:RULEID; ``fields`` are the rule's REST fields
        (direction, priority, fromEndpointGroup, ..., action)."""
        body = {"tenantName": tenant, "policyName": policy, "ruleId": rule_id, **fields}
        return self.request(
            "POST", f"{API}/rules/{_quote(rule_key(tenant, policy, rule_id))}", body
        )

    def delete_rule(self, tenant: str, policy: str, rule_id: str) -> JSONObject:
        """DELETE /api/v1/rules/TENANT:POLICY:RULEID."""
        return self.request("DELETE", f"{API}/rules/{_quote(rule_key(tenant, policy, rule_id))}")

    # --- endpoints (read-only) ---

    def list_endpoints(self) -> list[JSONObject]:
        """GET /api/v1/endpoints."""
        return self.request("GET", f"{API}/endpoints")

    def get_endpoint(self, endpoint_id: str) -> JSONObject:
        """GET /api/v1/endpoints/ID."""
        return self.request("GET", f"{API}/endpoints/{_quote(endpoint_id)}")

    def inspect_endpoint(self, endpoint_id: str) -> JSONObject:
        """GET /api/v1/inspect/endpoints/ID."""
        return self.request("GET", f"{API}/inspect/endpoints/{_quote(endpoint_id)}")
