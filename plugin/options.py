"""What Docker's requests mean, decided without I/O: the options users pass with -p, -o,
--ipam-opt and --mac-address, the MAC an endpoint gets, and the refusal Docker is shown."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from datapath.ports import PublishedPort

GATEWAY_REQUEST = "com.docker.network.gateway"
MAC_OPTION = "com.docker.network.endpoint.macaddress"
GENERIC = "com.docker.network.generic"
INTERNAL = "com.docker.network.internal"
PORTMAP = "com.docker.network.portmap"
# In the --ipam-opt options of the docker networks the agent makes for cluster networks
# (docker_sync): their pool requests name a pool that books in the network already.
MIRROR_OPTION = "netplugin.mirror"
# Swarm mode: the manager's allocator asks for pools in the global address space; a node
# asks in the local one, and names each address the manager chose. (Only the allocator's
# address requests carry com.docker.network.ipam.serial; a node's pool request carries
# it only if the network has --ipam-opt options.)
SWARM_SPACE = "swarm"
SWARM_NODE_POOL = "!swarm:"  # + CIDR: a node's pool id (no tenant name starts with "!")


class DriverError(Exception):
    """A request the driver refuses; ``status`` is the HTTP status Docker sees."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


PROTOCOLS = {6: "tcp", 17: "udp"}


def _port(value: Any, what: str) -> int:
    """A TCP/UDP port number of a portmap entry; 0 when absent."""
    if value in (None, ""):
        return 0
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise DriverError(f"publishing: {what} {value!r} is not a port number (0-65535)")
    return value


def _host_ip(value: Any) -> str:
    """The host address a port is published on: "" (any), or an IPv4 address (it becomes an
    iptables match); IPv6's "any" is any."""
    if value in (None, ""):
        return ""
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        address = ipaddress.ip_address(value)
    except ValueError:
        raise DriverError(f"publishing: HostIP {value!r} is not an IP address") from None
    if address.is_unspecified:
        return ""  # as the DNAT rules read back from the kernel say it
    if address.version == 6:
        raise DriverError(f"publishing: HostIP {value}: IPv6 host addresses are not supported")
    return str(address)


def port_bindings(portmap: Any, container_ip: str) -> list[PublishedPort]:
    """Docker's com.docker.network.portmap (from -p, -P) as ports published to ``container_ip``;
    one that is not a list of Docker's port objects is refused."""
    if not isinstance(portmap, list):
        raise DriverError(f"publishing: {PORTMAP} must be a list, not {type(portmap).__name__}")
    out: list[PublishedPort] = []
    for entry in portmap:
        if not isinstance(entry, dict):
            raise DriverError(f"publishing: each {PORTMAP} entry must be an object")
        proto_number = entry.get("Proto")
        proto = PROTOCOLS.get(proto_number) if isinstance(proto_number, int) else None
        if proto is None:
            raise DriverError(f"publishing protocol {proto_number!r} is not supported (tcp, udp)")
        port = _port(entry.get("Port"), "Port")
        host_port, end = (
            _port(entry.get("HostPort"), "HostPort"),
            _port(entry.get("HostPortEnd"), "HostPortEnd"),
        )
        if end and not host_port:
            raise DriverError(f"publishing: HostPortEnd {end} without a HostPort")
        if end and end < host_port:
            raise DriverError(f"-p {host_port}-{end}:{port}: the range ends before it starts")
        if not port:
            raise DriverError("publishing: an entry without its container port (Port)")
        host_ip = _host_ip(entry.get("HostIP"))
        out.append(
            PublishedPort(proto, host_ip, host_port, port, container_ip, max(end, host_port))
        )
    return out


def portmap_value(bindings: list[PublishedPort]) -> dict[str, Any]:
    """Published ports as EndpointOperInfo's value: Docker's types.PortBinding in JSON under
    its portmap key. (Docker 20.10 reads them back only from its own drivers, so `docker
    port` shows nothing of a remote driver's; API clients and newer dockers see them.)"""
    if not bindings:
        return {}
    protos = {name: number for number, name in PROTOCOLS.items()}
    return {
        PORTMAP: [
            {
                "Proto": protos[b.proto],
                "IP": b.container_ip,
                "Port": b.container_port,
                "HostIP": b.host_ip or "0.0.0.0",
                "HostPort": b.host_port,
                "HostPortEnd": b.host_port,
            }
            for b in bindings
        ]
    }


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
    try:
        if ipv4:
            tail = ipaddress.IPv4Address(ipv4).packed
        elif ipv6:
            tail = ipaddress.IPv6Address(ipv6).packed[-4:]
        else:
            tail = hashlib.sha256(endpoint_id.encode()).digest()[:4]
    except ValueError:
        family, given = ("IPv4", ipv4) if ipv4 else ("IPv6", ipv6)
        raise DriverError(f"endpoint {endpoint_id}: {given!r} is not an {family} address") from None
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
