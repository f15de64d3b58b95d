"""The cluster, as this host's datapath wants it: its networks and endpoints (at resync),
and the other hosts, their endpoints and the groups' policies (whenever they change)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from common.loop import Reconciler
from common.models import Endpoint
from common.records import NetworkRecord
from datapath.desired import FwdMode
from datapath.host import EndpointState, HostDatapath, NetworkState
from datapath.policy import GroupState
from datapath.services import ServiceState

from .bgp import routed_by_bgp
from .cluster import ClusterView, datapath_endpoint, peers, remote_endpoints
from .policy_view import Unresolved, group_states
from .service_view import service_states

log = logging.getLogger("netplugin")

# How long a network this host took from the master's answer may be missing from the
# cluster view (which lags behind the master by a moment) before it counts as deleted.
GONE_GRACE = 10.0

ClusterState = tuple[
    dict[str, str], list[EndpointState], str, list[GroupState], list[ServiceState], FwdMode
]


def local_network(record: NetworkRecord, vrf: int = 0) -> NetworkState:
    """A cluster network as this host's datapath wants it; ``vrf``: its tenant's tag."""
    c = record.config
    return NetworkState(
        id=record.id,
        tag=record.pkt_tag,
        subnet=c.subnet,
        gateway=c.gateway,
        ipv6_subnet=c.ipv6Subnet,
        ipv6_gateway=c.ipv6Gateway,
        internal=c.internal,
        encap=record.encap or c.encap,
        vrf=vrf,
    )


def fabric_subnets(
    fwd_mode: str, records: Iterable[NetworkRecord], tenant_tags: Mapping[str, int]
) -> dict[int, list[str]]:
    """The subnets (IPv4 and IPv6) the fabric routes, by tenant tag: every VLAN network of
    the cluster routed by BGP (iptables and ip6tables keep each tenant's from the
    others')."""
    out: dict[int, list[str]] = {}
    for r in records:
        net = local_network(r, tenant_tags.get(r.config.tenantName, 0))
        if routed_by_bgp(fwd_mode, net):
            subnets = [s for s in (net.subnet, net.ipv6_subnet) if s]
            out.setdefault(net.vrf, []).extend(subnets)
    return out


def vrf_networks(
    fwd_mode: str,
    held: Collection[str],
    records: Iterable[NetworkRecord],
    tenant_tags: Mapping[str, int],
) -> list[NetworkState]:
    """The networks this host must hold besides ``held``: in routing mode, every network of
    a tenant with a network here (its VRF routes to all of them, and only a network held
    here has its other hosts' endpoints in the flows); none in bridge mode."""
    if fwd_mode != "routing":
        return []
    records = list(records)
    tenants = {r.config.tenantName for r in records if r.id in held}
    return [
        local_network(r, tenant_tags.get(r.config.tenantName, 0))
        for r in records
        if r.config.tenantName in tenants and r.id not in held
    ]


class ClusterSync(Reconciler):
    """Brings the datapath to the cluster view: first resync (once every mirror has read its
    prefix, and only from a store netmaster uses: a wrong store would look like a cluster
    without endpoints, and unplug every container here), then peers, other hosts' endpoints,
    ARP mode, group policies and netprofiles and service LBs whenever the view changes."""

    def __init__(
        self,
        view: ClusterView,
        agent: HostDatapath,
        host: str,
        on_resync: Callable[[dict[str, int]], object] = lambda _: None,
        store_flags: str = "",
    ) -> None:
        self.view = view
        self.agent = agent
        self.host = host
        self.on_resync = on_resync
        self.store_flags = store_flags  # how the operator named the store, for the log
        self._last: Any = None
        self._unresolved: set[Unresolved | str] = set()  # logged already
        # Also every GONE_GRACE without a change: networks gone meanwhile.
        super().__init__("cluster sync", self._pass, interval=GONE_GRACE, run_at_start=True)

    def _pass(self) -> float | None:
        if not self.agent.ready:
            return self._resync()
        current, unresolved = cluster_state(self.view, self.host, self.view.endpoints.values())
        # Every endpoint change anywhere comes here: what is left out is logged once.
        log_unresolved(set(unresolved) - self._unresolved)
        self._unresolved = set(unresolved)
        if current != self._last:
            self.agent.set_cluster(*current)
            self._last = current
        records = self.view.networks.values().values()
        held = self.agent.networks()
        for net in vrf_networks(current[5], held, records, self.view.tenant_tags()):
            try:
                self.agent.ensure_network(net)
            except (ValueError, RuntimeError, OSError) as e:
                log.warning("network %s: not routed here: %s", net.id, e)
        live = {rec.id for rec in records}
        if self.agent.drop_networks_gone(live, GONE_GRACE):
            self._last = None  # what it told the datapath changed under it
        return None

    def _resync(self) -> float | None:
        """Until the agent has read the cluster state it changes nothing on the switch."""
        if not self.view.wait_synced(10):  # the store may be unreachable: the mirrors retry
            log.warning("still waiting to read the cluster state; the datapath is unchanged")
            return 0.0
        if not self.view.globals.values():
            log.error(
                "the cluster store has no netmaster state: is it the one netmaster uses "
                "(%s)? The datapath is unchanged",
                self.store_flags,
            )
            return 5.0
        result = resync(self.agent, self.view, self.host)
        log.info("resynced with the cluster: %s", result)
        self.on_resync(result)
        return 0.0  # the view as it is now, at once


def log_unresolved(unresolved: Iterable[Unresolved | str]) -> None:
    for u in unresolved:
        if isinstance(u, str):
            log.warning("%s", u)
        else:
            log.warning("endpoint group %s: rule %s is not enforced: %s", u.group, u.rule, u.reason)


def cluster_state(
    view: ClusterView, host: str, endpoints: Mapping[str, Endpoint]
) -> tuple[ClusterState, list[Unresolved | str]]:
    """(peers, their endpoints, ARP mode, groups, services, forwarding mode): what the
    datapath needs of the cluster beyond this host's own endpoints; and what it cannot be
    told of."""
    eps = list(endpoints.values())
    networks = view.networks.values()
    groups, unresolved = group_states(
        view.groups.values().values(),
        view.rules.values().values(),
        networks.values(),
        view.netprofiles.values().values(),
    )
    services, skipped = service_states(
        view.services.values().values(), eps, {n.id: n for n in networks.values()}
    )
    state = (
        peers(host, view.hosts.values(), view.vteps.values(), eps),
        remote_endpoints(host, eps),
        view.arp_mode(),
        groups,
        services,
        view.fwd_mode(),
    )
    return state, [*unresolved, *skipped]


def resync(agent: HostDatapath, view: ClusterView, host: str) -> dict[str, int]:
    """After a (re)start: this host's endpoints and the cluster, reconciled with the switch."""
    records = view.networks.values().values()
    tags = view.tenant_tags()
    endpoints = view.endpoints.values()
    local_eps = [datapath_endpoint(e) for e in endpoints.values() if e.host == host]
    used = {e.network_id for e in local_eps}
    (peer_vteps, remotes, arp_mode, groups, services, fwd_mode), unresolved = cluster_state(
        view, host, endpoints
    )
    log_unresolved(unresolved)
    nets = [local_network(r, tags.get(r.config.tenantName, 0)) for r in records if r.id in used]
    return agent.resync(
        [*nets, *vrf_networks(fwd_mode, used, records, tags)],
        local_eps,
        peers=peer_vteps,
        remote_endpoints=remotes,
        arp_mode=arp_mode,
        groups=groups,
        services=services,
        fwd_mode=fwd_mode,
        # A router port a previous agent left keeps its iptables from the first sync on.
        fabric_subnets=fabric_subnets(fwd_mode, records, tags),
    )
