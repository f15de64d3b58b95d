"""The cluster, as this host's datapath wants it: its networks and endpoints (at resync),
and the other hosts, their endpoints and the groups' policies (whenever they change)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from common.models import Endpoint
from common.records import NetworkRecord
from datapath.host import HostDatapath, LocalEndpoint, LocalNetwork
from datapath.pipeline import RemoteEndpointState
from datapath.policy import GroupState
from datapath.services import ServiceState

from .cluster import ClusterView, peers, remote_endpoints
from .policy_view import Unresolved, group_states
from .service_view import service_states

log = logging.getLogger("netplugin")

# How long a network this host took from the master's answer may be missing from the
# cluster view (which lags behind the master by a moment) before it counts as deleted.
GONE_GRACE = 10.0

ClusterState = tuple[
    dict[str, str], list[RemoteEndpointState], str, list[GroupState], list[ServiceState]
]


def local_network(record: NetworkRecord) -> LocalNetwork:
    """A cluster network as this host's datapath wants it."""
    c = record.config
    return LocalNetwork(
        id=record.id,
        tag=record.pkt_tag,
        subnet=c.subnet,
        gateway=c.gateway,
        ipv6_subnet=c.ipv6Subnet,
        ipv6_gateway=c.ipv6Gateway,
        internal=c.internal,
        encap=record.encap or c.encap,
    )


def local_endpoint(ep: Endpoint) -> LocalEndpoint:
    """One of this host's endpoints as the datapath wants it."""
    return LocalEndpoint(
        id=ep.endpointID,
        network_id=ep.network_id,
        mac=ep.macAddress,
        ipv4=ep.ipAddress,
        ipv6=ep.ipv6Address,
        group=ep.group_id,
    )


class ClusterSync:
    """Applies the cluster view to the datapath (peers, other hosts' endpoints, ARP mode,
    group policies and netprofiles, service LBs) whenever it changes, once the agent has
    resynced."""

    def __init__(self, view: ClusterView, agent: HostDatapath, host: str) -> None:
        self.view = view
        self.agent = agent
        self.host = host
        self._poke = threading.Event()
        self._last: Any = None
        self._unresolved: set[Unresolved | str] = set()  # logged already
        self._thread = threading.Thread(target=self._run, name="cluster-sync", daemon=True)

    def start(self) -> ClusterSync:
        self._thread.start()
        return self

    def poke(self) -> None:
        self._poke.set()

    def _run(self) -> None:
        while True:
            self._poke.wait(GONE_GRACE)  # also now and then: networks gone meanwhile
            self._poke.clear()
            time.sleep(0.05)  # coalesce a burst of events into one pass
            if not self.agent.ready:
                continue  # resync applies the first view itself
            try:
                current, unresolved = cluster_state(
                    self.view, self.host, self.view.endpoints.values()
                )
                # Every endpoint change anywhere comes here: what is left out is logged once.
                log_unresolved(set(unresolved) - self._unresolved)
                self._unresolved = set(unresolved)
                if current != self._last:
                    self.agent.set_cluster(*current)
                    self._last = current
                live = {rec.id for rec in self.view.networks.values().values()}
                if self.agent.drop_networks_gone(live, GONE_GRACE):
                    self._last = None  # what it told the datapath changed under it
            except Exception:
                log.exception("applying the cluster state to the datapath failed; retrying")
                time.sleep(1.0)
                self._poke.set()


def log_unresolved(unresolved: Iterable[Unresolved | str]) -> None:
    for u in unresolved:
        if isinstance(u, str):
            log.warning("%s", u)
        else:
            log.warning("endpoint group %s: rule %s is not enforced: %s", u.group, u.rule, u.reason)


def cluster_state(
    view: ClusterView, host: str, endpoints: Mapping[str, Endpoint]
) -> tuple[ClusterState, list[Unresolved | str]]:
    """(peers, their endpoints, ARP mode, groups, services): what the datapath needs of the
    cluster beyond this host's own endpoints; and what it cannot be told of."""
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
    )
    return state, [*unresolved, *skipped]


def resync(agent: HostDatapath, view: ClusterView, host: str) -> dict[str, int]:
    """After a (re)start: this host's endpoints and the cluster, reconciled with the switch."""
    nets = {rec.id: local_network(rec) for rec in view.networks.values().values()}
    endpoints = view.endpoints.values()
    local_eps = [local_endpoint(e) for e in endpoints.values() if e.host == host]
    used = {e.network_id for e in local_eps}
    (peer_vteps, remotes, arp_mode, groups, services), unresolved = cluster_state(
        view, host, endpoints
    )
    log_unresolved(unresolved)
    return agent.resync(
        [n for nid, n in nets.items() if nid in used],
        local_eps,
        peers=peer_vteps,
        remote_endpoints=remotes,
        arp_mode=arp_mode,
        groups=groups,
        services=services,
    )
