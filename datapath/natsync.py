"""The host's iptables for the gateways and the published ports, kept in step with the
agent's local state: synced only when its inputs changed (or the last sync failed), and
read back at resync, because published ports live nowhere but in our DNAT chain."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from .effects import HostNat
from .hostnat import DNAT_CHAIN, GatewayNet, PortMapping, parse_dnat_rules
from .local import LocalEndpoint, LocalNetwork

_Inputs = tuple[tuple[GatewayNet, ...], tuple[PortMapping, ...]]


class NatSync:
    def __init__(self, iptables: HostNat) -> None:
        self.iptables = iptables
        self._applied: _Inputs | None = None  # None: unknown (never synced, or it failed)

    def adopt_published(self, endpoints: Mapping[str, LocalEndpoint]) -> dict[str, LocalEndpoint]:
        """The endpoints with the published ports our DNAT chain holds for them."""
        by_ip = {e.ipv4: e.id for e in endpoints.values() if e.ipv4}
        published: dict[str, list[PortMapping]] = {}
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
        networks: Iterable[LocalNetwork],
        endpoints: Iterable[LocalEndpoint],
    ) -> None:
        """Sync if an endpoint change ``changed`` published ports or the last sync failed."""
        if changed or self._applied is None:
            self.sync(networks, endpoints)

    def sync(
        self,
        networks: Iterable[LocalNetwork],
        endpoints: Iterable[LocalEndpoint],
        force: bool = False,
    ) -> None:
        """iptables, if its inputs changed since they were last applied (or ``force``)."""
        nets = tuple(GatewayNet(n.subnet, n.gateway_port, n.internal) for n in networks if n.subnet)
        mappings = tuple(m for e in endpoints for m in e.port_mappings)
        if not force and (nets, mappings) == self._applied:
            return
        self._applied = None  # unknown until the sync succeeds
        self.iptables.sync(list(nets), list(mappings))
        self._applied = (nets, mappings)
