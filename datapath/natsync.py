"""The host's iptables for the gateways and the published ports, kept in step with the
agent's local state: synced only when its inputs changed (or the last sync failed), and
read back at resync, because published ports live nowhere but in our DNAT chain."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import Protocol

from .effects import HostNat
from .hostnat import DNAT_CHAIN, GatewayNet, parse_dnat_rules
from .hostports import HostPorts
from .local import EndpointState, NetworkState
from .ports import DEFAULT_EPHEMERAL, PublishedPort, resolve, where

log = logging.getLogger(__name__)

_Inputs = tuple[tuple[GatewayNet, ...], tuple[PublishedPort, ...]]


class HostPortProbe(Protocol):
    """What choosing a host port asks the host (datapath.hostports.HostPorts)."""

    def ephemeral_range(self) -> tuple[int, int]: ...

    def probe(self, proto: str, host_ip: str, port: int) -> str | None: ...


class NatSync:
    def __init__(self, iptables: HostNat, ports: HostPortProbe | None = None) -> None:
        self.iptables = iptables
        self.ports: HostPortProbe = ports if ports is not None else HostPorts()
        self._applied: _Inputs | None = None  # None: unknown (never synced, or it failed)

    def publish(
        self,
        endpoint_id: str,
        requests: Sequence[PublishedPort],
        endpoints: MutableMapping[str, EndpointState],
        networks: Iterable[NetworkState],
    ) -> tuple[PublishedPort, ...]:
        """Choose the endpoint's host ports (ports.resolve) and DNAT them to it, all or
        none: on a conflict (PortConflict) or a failed sync, ``endpoints`` and iptables keep
        what they had. The caller holds the agent's lock across choice and install."""
        ep = endpoints.get(endpoint_id)
        if ep is None:
            raise ValueError(f"endpoint {endpoint_id} is not on this host")
        others = [
            (e.id, m) for e in endpoints.values() if e.id != endpoint_id for m in e.port_mappings
        ]
        random_ports = any(r.span is None for r in requests)
        new = resolve(
            endpoint_id,
            ep.ipv4,
            requests,
            ep.port_mappings,
            others,
            self.ports.probe,
            self.ports.ephemeral_range() if random_ports else DEFAULT_EPHEMERAL,
            start=random.randrange(1 << 16),
        )
        if new == ep.port_mappings:
            return new
        endpoints[endpoint_id] = replace(ep, port_mappings=new)
        networks = list(networks)
        try:
            self.sync(networks, endpoints.values())
        except BaseException:
            endpoints[endpoint_id] = ep
            with contextlib.suppress(Exception):  # put back the rules it had
                self.sync(networks, endpoints.values())
            raise
        for m in set(new) - set(ep.port_mappings):
            log.info(
                "endpoint %s: host port %d/%s %s leads to %s:%d",
                endpoint_id[:12],
                m.host_port,
                m.proto,
                where(m.host_ip),
                m.container_ip,
                m.container_port,
            )
        return new

    def adopt_published(self, endpoints: Mapping[str, EndpointState]) -> dict[str, EndpointState]:
        """The endpoints with the published ports our DNAT chain holds for them."""
        by_ip = {e.ipv4: e.id for e in endpoints.values() if e.ipv4}
        published: dict[str, list[PublishedPort]] = {}
        for m in parse_dnat_rules(self.iptables.current("nat", DNAT_CHAIN) or []):
            if m.container_ip in by_ip:
                published.setdefault(by_ip[m.container_ip], []).append(m)
        adopted = dict(endpoints)
        for eid, maps in published.items():
            adopted[eid] = replace(adopted[eid], port_mappings=tuple(maps))
        return adopted

    def sync_if(
        self,
        changed: bool,
        networks: Iterable[NetworkState],
        endpoints: Iterable[EndpointState],
        fabric: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        """Sync if an endpoint change ``changed`` published ports or the last sync failed."""
        if changed or self._applied is None:
            self.sync(networks, endpoints, fabric=fabric)

    def sync(
        self,
        networks: Iterable[NetworkState],
        endpoints: Iterable[EndpointState],
        force: bool = False,
        fabric: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        """iptables (and ip6tables' isolation), if its inputs changed since they were last
        applied (or ``force``). ``fabric``: routing mode with BGP, the subnets the fabric
        routes by tenant tag (its VRF); this host's VLAN networks then are routed through
        it."""
        nets = tuple(g for n in networks for g in gateway_nets(n, fabric))
        mappings = tuple(m for e in endpoints for m in e.port_mappings)
        if not force and (nets, mappings) == self._applied:
            return
        self._applied = None  # unknown until the sync succeeds
        self.iptables.sync(list(nets), list(mappings))
        self._applied = (nets, mappings)


def gateway_nets(net: NetworkState, fabric: Mapping[int, Sequence[str]] | None) -> list[GatewayNet]:
    """A network as iptables (its IPv4 subnet) and ip6tables (its IPv6 one) see it; routed
    through the fabric if ``fabric`` is given and it is a VLAN network outside the host
    (what the fabric's router learns by BGP): then the other tenants' routed subnets of the
    family may not reach it."""
    out = []
    for subnet in (net.subnet, net.ipv6_subnet):
        if not subnet:
            continue
        foreign = None
        if fabric is not None and net.vlan is not None and not net.internal:
            v6 = ":" in subnet
            foreign = tuple(
                sorted(
                    s
                    for vrf, subs in fabric.items()
                    if vrf != net.vrf
                    for s in subs
                    if (":" in s) == v6
                )
            )
        out.append(GatewayNet(subnet, net.gateway_port, net.internal, foreign))
    return out
