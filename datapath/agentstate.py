"""What the datapath agent holds of the desired state (AgentState), and the DesiredState it
makes of it: pure views, so agent.py keeps only the decisions and their effects."""

from __future__ import annotations

from dataclasses import dataclass, field

from .change import by_key
from .local import LocalEndpoint, LocalNetwork, endpoint_state, network_state
from .pipeline import ArpMode, DesiredState, NetworkState, RemoteEndpointState, TunnelState
from .policy import GroupState
from .services import ServiceState


@dataclass
class AgentState:
    networks: dict[str, LocalNetwork] = field(default_factory=dict)
    endpoints: dict[str, LocalEndpoint] = field(default_factory=dict)
    gateway_ofports: dict[str, int] = field(default_factory=dict)
    # Other hosts: tunnel ports by host, and their endpoints.
    tunnels: dict[str, int] = field(default_factory=dict)
    remote_endpoints: tuple[RemoteEndpointState, ...] = ()
    groups: tuple[GroupState, ...] = ()  # endpoint groups, their policies' rules, netprofiles
    services: tuple[ServiceState, ...] = ()  # service LBs with their providers
    uplink_ofport: int | None = None
    arp_mode: str = "proxy"

    def network_state(self, n: LocalNetwork) -> NetworkState:
        return network_state(n, self.gateway_ofports.get(n.id))

    def remote_states(self) -> dict[str, RemoteEndpointState]:
        """Other hosts' endpoints of the networks on this host (only those cost flows)."""
        local = [r for r in self.remote_endpoints if r.network_id in self.networks]
        return by_key(local, lambda r: r.id, "endpoint {} is listed twice")

    def group_states(self) -> dict[str, GroupState]:
        """The groups of the networks on this host (only those cost flows)."""
        local = [g for g in self.groups if g.network_id in self.networks]
        return by_key(local, lambda g: g.id, "endpoint group {} is listed twice")

    def service_states(self) -> dict[str, ServiceState]:
        """The services of the networks on this host: their clients are here."""
        local = [s for s in self.services if s.network_id in self.networks]
        return by_key(local, lambda s: s.id, "service {} is listed twice")

    def arp(self) -> ArpMode:
        return "flood" if self.arp_mode == "flood" else "proxy"

    def desired(self) -> DesiredState:
        return DesiredState(
            networks=[self.network_state(n) for n in self.networks.values()],
            endpoints=[endpoint_state(e) for e in self.endpoints.values()],
            remote_endpoints=list(self.remote_states().values()),
            groups=list(self.group_states().values()),
            services=list(self.service_states().values()),
            tunnels=[TunnelState(h, p) for h, p in sorted(self.tunnels.items())],
            uplink_port=self.uplink_ofport,
            arp_mode=self.arp(),
        )
