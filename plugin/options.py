"""What Docker's requests mean, decided without I/O: the options users pass with -p, -o,
--ipam-opt and --mac-address, the MAC an endpoint gets, and the refusal Docker is shown."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

GATEWAY_REQUEST = "com.docker.network.gateway"
MAC_OPTION = "com.docker.network.endpoint.macaddress"
GENERIC = "com.docker.network.generic"
INTERNAL = "com.docker.network.internal"


class DriverError(Exception):
    """A request the driver refuses; ``status`` is the HTTP status Docker sees."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class PortBinding:
    proto: str
    host_ip: str
    host_port: int
    container_ip: str
    container_port: int


PROTOCOLS = {6: "tcp", 17: "udp"}


def port_bindings(portmap: Any, container_ip: str) -> list[PortBinding]:
    """Docker's com.docker.network.portmap (from -p) as bindings to ``container_ip``."""
    out: list[PortBinding] = []
    for entry in portmap or []:
        proto = PROTOCOLS.get(entry.get("Proto"))
        if proto is None:
            raise DriverError(
                f"publishing protocol {entry.get('Proto')} is not supported (tcp, udp)"
            )
        host_port, end = int(entry.get("HostPort") or 0), int(entry.get("HostPortEnd") or 0)
        if not host_port:
            raise DriverError(
                f"-p {entry.get('Port')}: netplugin needs an explicit host port "
                f"(-p HOSTPORT:{entry.get('Port')})"
            )
        if end and end != host_port:
            raise DriverError(f"-p {host_port}-{end}: host port ranges are not supported")
        out.append(
            PortBinding(
                proto, entry.get("HostIP") or "", host_port, container_ip, int(entry["Port"])
            )
        )
    return out


@dataclass(frozen=True)
class NetworkRef:
    tenant: str
    name: str
    group: str = ""


def option_ref(opts: Mapping[str, Any]) -> NetworkRef | None:
    """`network=NAME` (with `tenant=`, `group=`) in -o or --ipam-opt options: the cluster
    network a docker network stands for."""
    if not opts.get("network"):
        return None
    return NetworkRef(
        str(opts.get("tenant") or "default"), str(opts["network"]), str(opts.get("group") or "")
    )


def strip_len(cidr: str) -> str:
    """ "10.5.0.1/24" -> "10.5.0.1"; a bare address passes through."""
    return cidr.split("/", 1)[0] if cidr else ""


def mac_for(ipv4: str, ipv6: str, endpoint_id: str) -> str:
    """A locally administered unicast MAC derived from the IP, so retries get the same MAC."""
    if ipv4:
        tail = ipaddress.IPv4Address(ipv4).packed
    elif ipv6:
        tail = ipaddress.IPv6Address(ipv6).packed[-4:]
    else:
        tail = hashlib.sha256(endpoint_id.encode()).digest()[:4]
    return ":".join(f"{b:02x}" for b in (0x02, 0x42, *tail))


M = TypeVar("M", bound=BaseModel)


def request_model(model: type[M], fields: dict[str, Any], obj: str) -> M:
    """A request to the master, or a refusal naming ``obj`` and each bad field."""
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        problems = [
            f"field {'.'.join(str(p) for p in err['loc']) or 'body'!r}: {err['msg']}"
            for err in e.errors()
        ]
        raise DriverError(f"{obj}: {'; '.join(problems)}") from None


def truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in ("1", "true", "yes")
    return bool(value)


def prefixlen(cidr: str) -> int:
    return ipaddress.ip_network(cidr, strict=False).prefixlen
