"""Talking to the plugin as Docker does, and a datapath that only remembers what it was told."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from flask.testing import FlaskClient

from common.models import Network

NID = "f" * 64
EID = "e" * 64
GW_OPTS = {"RequestAddressType": "com.docker.network.gateway"}


def call(client: FlaskClient, method: str, body: Any = None, raw: bytes | None = None) -> Any:
    """POST like Docker does: no Content-Type, the plugin Accept header."""
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    return client.post(
        f"/{method}", data=data, headers={"Accept": "application/vnd.docker.plugins.v1.2+json"}
    )


class FakeDatapath:
    def __init__(self) -> None:
        self.ports: dict[str, dict[str, Any]] = {}
        self.settled: list[str] = []  # endpoints whose teardown CNI DEL waited for
        self.fail = False
        self.removed_networks: list[str] = []
        self.published: dict[str, list[Any]] = {}
        self.host_ends: dict[str, str] = {}  # endpoint -> its switch port, when a test says

    def create_endpoint_port(
        self,
        endpoint_id: str,
        network: Network,
        mac: str,
        ipv4: str,
        ipv6: str,
        mtu: int,
        group: str = "",
        into: Any = None,
    ) -> str:
        if self.fail:
            raise RuntimeError("ovs-vsctl add-port failed")
        name = f"vport{endpoint_id[:8]}"
        into = self.ports.get(endpoint_id, {}).get("into") or into  # made there, or moved
        self.ports[endpoint_id] = {
            "name": name, "mac": mac, "ipv4": ipv4, "mtu": mtu, "group": group, "into": into,
        }  # fmt: skip
        return name if into is None else ""

    def plug(self, endpoint_id: str, network: Network, mac: str, mtu: int, into: Any = None) -> str:
        """The container end here (its name), or made in ``into`` (""), as AgentDatapath."""
        if self.fail:
            raise RuntimeError("ovs-vsctl add-port failed")
        name = f"vport{endpoint_id[:8]}"
        port = {"name": name, "mac": mac, "ipv4": "", "mtu": mtu, "into": into}
        return name if self.ports.setdefault(endpoint_id, port).get("into") is None else ""

    def delete_endpoint_port(self, endpoint_id: str) -> None:
        self.ports.pop(endpoint_id, None)

    def settle(self, endpoint_id: str) -> None:
        self.settled.append(endpoint_id)

    def has_endpoint(self, endpoint_id: str) -> bool:
        return endpoint_id in self.ports

    def remove_network(self, network_id: str) -> None:
        self.removed_networks.append(network_id)

    def endpoint_oper(self, endpoint_id: str) -> dict[str, Any]:
        oper = {"port": self.ports.get(endpoint_id, {}).get("name", "")}
        if endpoint_id in self.host_ends:
            oper["hostInterface"] = self.host_ends[endpoint_id]
        return oper

    def publish(self, endpoint_id: str, mappings: list[Any]) -> list[Any]:
        """Records the bindings; one with the host port open gets the first it allows (or
        49152), as if free."""
        made = [replace(m, host_port=m.host_port or 49152, host_port_end=0) for m in mappings]
        self.published[endpoint_id] = made
        return made

    def published_ports(self, endpoint_id: str) -> list[Any]:
        return self.published.get(endpoint_id, [])
