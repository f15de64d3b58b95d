"""Service LBs: their fields checked alone (selectors, port specs, the preferred VIP
against the network's subnet), their tags, and which services name a network (the guard of
the network's delete and rename)."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable

from common.models import Network, ServiceLB
from common.services import MAX_PORTS, MAX_SERVICE_TAG, parse_port, parse_selector

from ..errors import BadRequest, Conflict
from ..validate import check_name


def normalize_service(s: ServiceLB) -> ServiceLB:
    """Check a service's names and fields alone, each failure a 400 naming it; the service as
    stored: selectors "key=value" and ports "SVC:PROV:PROTO" in canonical spelling, each once,
    in the order given."""
    check_name("tenant", s.tenantName)
    check_name("service", s.serviceName)
    obj = f"service {s.id}"
    if not s.selectors:
        raise BadRequest(obj, "field 'selectors': give at least one label selector, e.g. app=web")
    if not s.ports:
        raise BadRequest(obj, "field 'ports': give at least one port, e.g. 80:8080:TCP")
    selectors: list[str] = []
    keys_seen: dict[str, str] = {}
    for text in s.selectors:
        try:
            key, value = parse_selector(text)
        except ValueError as e:
            raise BadRequest(obj, f"field 'selectors': {e}") from None
        if key in keys_seen and keys_seen[key] != value:
            raise BadRequest(
                obj,
                f"field 'selectors': label {key} is given twice ({key}={keys_seen[key]} and "
                f"{key}={value}); a provider carries one value of it",
            )
        keys_seen[key] = value
        selectors.append(f"{key}={value}")
    ports = []
    seen: dict[tuple[int, str], str] = {}
    for text in s.ports:
        try:
            port = parse_port(text)
        except ValueError as e:
            raise BadRequest(obj, f"field 'ports': {e}") from None
        if (port.service, port.protocol) in seen and seen[
            (port.service, port.protocol)
        ] != port.spec:
            raise BadRequest(
                obj,
                f"field 'ports': {port.service}/{port.protocol.lower()} is given twice "
                f"({seen[(port.service, port.protocol)]} and {port.spec})",
            )
        seen[(port.service, port.protocol)] = port.spec
        ports.append(port.spec)
    ports = list(dict.fromkeys(ports))
    if len(ports) > MAX_PORTS:
        raise BadRequest(obj, f"field 'ports': at most {MAX_PORTS} ports per service")
    vip = s.ipAddress.strip()
    if vip:
        try:
            vip = str(ipaddress.IPv4Address(vip))
        except ValueError:
            raise BadRequest(
                obj, f"field 'ipAddress': {s.ipAddress!r} is not an IPv4 address"
            ) from None
    return s.model_copy(
        update={"selectors": list(dict.fromkeys(selectors)), "ports": ports, "ipAddress": vip}
    )


def check_network(s: ServiceLB, net: Network) -> None:
    """A service's network has an IPv4 subnet for its VIP, and a preferred VIP lies in it
    (not its network or broadcast address, not its gateway)."""
    obj = f"service {s.id}"
    if not net.subnet:
        raise BadRequest(obj, f"network {net.id} has no IPv4 subnet to take a VIP from")
    if not s.ipAddress:
        return
    subnet = ipaddress.ip_network(net.subnet, strict=False)
    vip = ipaddress.ip_address(s.ipAddress)
    if vip not in subnet:
        raise BadRequest(
            obj, f"field 'ipAddress': {vip} is outside network {net.id}'s subnet {subnet}"
        )
    if subnet.prefixlen < 31 and vip in (subnet.network_address, subnet.broadcast_address):
        raise BadRequest(obj, f"field 'ipAddress': {vip} is not a host address of {subnet}")
    if net.gateway and vip == ipaddress.ip_address(net.gateway):
        raise Conflict(obj, f"field 'ipAddress': {vip} is network {net.id}'s gateway")


def rebooks(old: ServiceLB, new: ServiceLB, vip: str) -> bool:
    """Whether an update moves the service's VIP (``vip``: the one it holds): to another
    network, or to another preferred address."""
    return old.networkName != new.networkName or bool(new.ipAddress and new.ipAddress != vip)


def choose_service_tag(service_id: str, used: Collection[int]) -> int:
    """The first free service tag for service ``service_id`` (``used``: the tags held)."""
    tag = next(t for t in range(1, len(used) + 2) if t not in used)
    if tag > MAX_SERVICE_TAG:
        raise Conflict(f"service {service_id}", f"no free service tag left (1-{MAX_SERVICE_TAG})")
    return tag


def naming_network(network: str, services: Iterable[ServiceLB]) -> list[str]:
    """The ids of the services (of the network's tenant) on network ``network``."""
    return [s.id for s in services if s.networkName == network]


def check_no_services(network_id: str, services: Collection[str], doing: str) -> None:
    """A network with services keeps its name and stays (``doing``: "deleted", "renamed")."""
    if services:
        raise Conflict(
            f"network {network_id}",
            f"it cannot be {doing} while service(s) {', '.join(sorted(services))} use it; "
            "delete them first",
        )
