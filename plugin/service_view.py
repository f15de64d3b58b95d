"""From the cluster's service LBs and endpoints (names, labels) to what the datapath
compiles (VIPs, ports, the providers' addresses): pure, so every agent finds the same
providers, and the master's inspect view agrees (common.services)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from common.models import Endpoint
from common.records import NetworkRecord, ServiceRecord
from common.services import ports_of, providers
from datapath.services import ProviderState, ServicePortState, ServiceState, check_service


def service_states(
    services: Iterable[ServiceRecord],
    endpoints: Iterable[Endpoint],
    networks: Mapping[str, NetworkRecord],
) -> tuple[list[ServiceState], list[str]]:
    """Every service whose network exists, with its providers; and why any other was left
    out (for the log: the master refuses such services, so only while a delete spreads)."""
    eps = list(endpoints)
    out: list[ServiceState] = []
    skipped: list[str] = []
    for rec in sorted(services, key=lambda r: r.id):
        s = rec.config
        net = networks.get(f"{s.tenantName}:{s.networkName}")
        if net is None:
            skipped.append(f"service {rec.id}: network {s.tenantName}:{s.networkName} is unknown")
            continue
        try:
            state = ServiceState(
                id=rec.id,
                network_id=net.id,
                vip=rec.vip,
                tag=rec.tag,
                ports=tuple(
                    ServicePortState(p.ip_proto, p.service, p.provider) for p in ports_of(s)
                ),
                providers=tuple(
                    ProviderState(e.ipAddress, e.macAddress)
                    for e in providers(s, eps)
                    if e.macAddress
                ),
            )
            check_service(state)
        except ValueError as e:
            skipped.append(f"service {rec.id}: the datapath cannot serve it: {e}")
            continue
        out.append(state)
    return out, skipped
