"""What the host's datapath holds of the desired state (HostState), and the DesiredState it
makes of it: pure views, so host.py keeps only the decisions and their effects."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from .change import by_key
from .local import EndpointState, NetworkState
from .pipeline import ArpMode, DesiredState, FwdMode, TunnelState
from .policy import GroupState
from .services import ServiceState
from .veth import veth_names


@dataclass
class HostState:
    networks: dict[str, NetworkState] = field(default_factory=dict)  # with gateway ofports
    endpoints: dict[str, EndpointState] = field(default_factory=dict)
    # Other hosts: tunnel ports by host, and their endpoints.
    tunnels: dict[str, int] = field(default_factory=dict)
    remote_endpoints: tuple[EndpointState, ...] = ()
    groups: tuple[GroupState, ...] = ()  # endpoint groups, their policies' rules, netprofiles
    services: tuple[ServiceState, ...] = ()  # service LBs with their providers
    uplink_ofport: int | None = None
    arp_mode: str = "proxy"
    fwd_mode: FwdMode = "bridge"
    # Routing mode with BGP: the router port's ofport and addresses, and the subnets the
    # fabric routes by tenant tag (VRF).
    fabric_ofport: int | None = None
    fabric_ips: tuple[str, ...] = ()
    fabric_subnets: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def fabric(self) -> dict[int, tuple[str, ...]] | None:
        """What iptables needs of the fabric (datapath.natsync): None without one."""
        if self.fwd_mode != "routing" or self.fabric_ofport is None:
            return None
        return self.fabric_subnets

    def remote_states(self) -> dict[str, EndpointState]:
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

    def displaced_by(self, net: NetworkState) -> list[NetworkState]:
        """The networks of this host that ``net`` replaces: one on its segment (tags are
        unique among the cluster's networks, so that one was deleted and its tag reused) or
        an older version of it (deleted and made again); ValueError if one of them still has
        endpoints here."""
        new = replace(net, gateway_ofport=None)  # its configuration, whatever its port
        stale = [
            n
            for n in self.networks.values()
            if net.segment == n.segment or net.id == n.id
            if replace(n, gateway_ofport=None) != new
        ]
        used = {e.network_id for e in self.endpoints.values()}
        for old in stale:
            if old.id in used:
                raise ValueError(
                    f"network {net.id}: network {old.id} (tag {old.tag}) is still on this "
                    "host, with endpoints here"
                )
        return stale

    def gone(
        self, live: Collection[str], held_since: Mapping[str, float], before: float
    ) -> list[str]:
        """This host's networks the cluster no longer has (not in ``live``), without
        endpoints here, held since ``before`` or earlier."""
        used = {e.network_id for e in self.endpoints.values()}
        return [
            n
            for n in self.networks
            if n not in live and n not in used and held_since.get(n, before) <= before
        ]

    def owned_ports(self, plugged: Collection[str]) -> set[str]:
        """The names of the ports and host veths this host's endpoints and networks own,
        and ``plugged`` (every endpoint's port, those plugged ahead of their flows too)."""
        ports = {e.port or veth_names(e.id)[0] for e in self.endpoints.values()}
        return ports | set(plugged) | {n.gateway_port for n in self.networks.values()}

    def arp(self) -> ArpMode:
        return "flood" if self.arp_mode == "flood" else "proxy"

    def desired(self) -> DesiredState:
        return DesiredState(
            networks=list(self.networks.values()),
            endpoints=list(self.endpoints.values()),
            remote_endpoints=list(self.remote_states().values()),
            groups=list(self.group_states().values()),
            services=list(self.service_states().values()),
            tunnels=[TunnelState(h, p) for h, p in sorted(self.tunnels.items())],
            uplink_port=self.uplink_ofport,
            arp_mode=self.arp(),
            fwd_mode=self.fwd_mode,
            fabric_port=self.fabric_ofport,
        )
