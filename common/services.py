"""Service LBs as every program reads them: the port and selector spellings, and which
endpoints provide a service. Pure: the master's inspect view and every agent's datapath
find the same providers from the same records."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .models import Endpoint, ServiceLB

MAX_PORTS = 16  # a service's ports are select groups tag * MAX_PORTS + index on every host
MAX_SERVICE_TAG = (1 << 27) - 1
PROTOCOLS = ("TCP", "UDP")
_LABEL_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_./-]{0,252}[A-Za-z0-9])?")


@dataclass(frozen=True)
class ServicePort:
    """One "SERVICE:PROVIDER:PROTOCOL" port of a service."""

    service: int
    provider: int
    protocol: str  # "TCP" | "UDP"

    @property
    def spec(self) -> str:
        return f"{self.service}:{self.provider}:{self.protocol}"

    @property
    def ip_proto(self) -> int:
        return 6 if self.protocol == "TCP" else 17


def _port_number(text: str, what: str, spec: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{spec!r}: the {what} port {text!r} is not a port (1-65535)")
    return int(text)


def parse_port(spec: str) -> ServicePort:
    """ "80:8080:TCP" (the protocol's case does not matter; "80:8080" is TCP)."""
    parts = spec.split(":")
    if len(parts) == 2:
        parts.append("TCP")
    if len(parts) != 3:
        raise ValueError(f"{spec!r} is not SERVICE_PORT:PROVIDER_PORT:PROTOCOL, e.g. 80:8080:TCP")
    protocol = parts[2].strip().upper()
    if protocol not in PROTOCOLS:
        raise ValueError(f"{spec!r}: the protocol {parts[2]!r} is not TCP or UDP")
    return ServicePort(
        _port_number(parts[0], "service", spec), _port_number(parts[1], "provider", spec), protocol
    )


def parse_selector(text: str) -> tuple[str, str]:
    """ "key=value": a docker label a provider must carry with exactly that value."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not _LABEL_KEY.fullmatch(key):
        raise ValueError(
            f"{text!r} is not a label selector KEY=VALUE (KEY: letters, digits, '.', '-', "
            "'_' or '/'), e.g. app=web"
        )
    return key, value.strip()


def selectors_of(service: ServiceLB) -> dict[str, str]:
    """A stored service's selectors as label -> value."""
    return dict(parse_selector(s) for s in service.selectors)


def matches(labels: Mapping[str, str], selectors: Mapping[str, str]) -> bool:
    """Whether a container's labels carry every selector's value."""
    return bool(selectors) and all(labels.get(k) == v for k, v in selectors.items())


def ports_of(service: ServiceLB) -> list[ServicePort]:
    """A stored service's ports, in order."""
    return [parse_port(p) for p in service.ports]


def providers(service: ServiceLB, endpoints: Iterable[Endpoint]) -> list[Endpoint]:
    """The endpoints of the service's network whose container labels match every selector,
    with an IPv4 address (the VIP is IPv4), by address."""
    selectors = selectors_of(service)
    found = [
        e
        for e in endpoints
        if e.tenantName == service.tenantName
        and e.networkName == service.networkName
        and e.ipAddress
        and matches(e.labels, selectors)
    ]
    return sorted(found, key=lambda e: tuple(int(b) for b in e.ipAddress.split(".")))


def group_ids(tag: int, count: int) -> Sequence[int]:
    """The select group ids of a service's ports, the same on every host."""
    return [tag * MAX_PORTS + i for i in range(count)]
