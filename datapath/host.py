"""A host's datapath: the bridge, gateway ports, endpoint veths, flows and host NAT.

It keeps the desired local state (networks and endpoints on this host) and makes the
switch, the kernel and iptables match it. Every operation is idempotent, nothing that is
already right is recreated, and a failure part-way removes what it made. Flows: resync
compiles every flow and the controller diffs the switch's; later changes go through the
incremental model (datapath.flowmodel), which sends only the delta. iptables is synced
only when its inputs changed. Endpoints' ports (their own veths, or a pool's made ahead of
demand) are datapath.endpointports'; deleted endpoints' ports are given back or removed in
the background (datapath.teardown), and the audit removes what a failed removal left."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from . import bridgeports as bp
from .effects import HostNat, Links, OpenFlow, Ovsdb
from .endpointports import EndpointPorts, Plugged, port_names
from .flowmodel import Change, FlowModel, changes
from .flows import Flow
from .hoststate import HostState
from .local import EndpointState, HostConfig, NetworkState, gateway_addresses
from .natsync import HostPortProbe, NatSync
from .offloads import keeps_offloads, read_switch_tso
from .ovs import PortInfo
from .pipeline import DesiredState, FwdMode, compile_flows
from .policy import GroupState
from .portpool import PortPool
from .ports import PublishedPort
from .services import ServiceState
from .tunnels import ensure_tunnels, present_tunnels
from .veth import Into, NetlinkLinks

__all__ = ["EndpointState", "HostConfig", "HostDatapath", "NetworkState"]

log = logging.getLogger(__name__)


class HostDatapath:
    """Decides what the bridge, the kernel and iptables should hold; its effects (links,
    OVSDB, iptables, OpenFlow) act. links defaults to the host's netlink; ``pool`` (None:
    none) has switch ports ready for new endpoints."""

    def __init__(
        self,
        config: HostConfig,
        ovs: Ovsdb,
        controller: OpenFlow,
        iptables: HostNat,
        links: Links | None = None,
        ports: HostPortProbe | None = None,
        pool: PortPool | None = None,
    ) -> None:
        self.config, self.ovs, self.controller, self.iptables = config, ovs, controller, iptables
        self.links: Links = links if links is not None else NetlinkLinks()
        self._lock = threading.RLock()
        self._state = HostState()
        self._model = FlowModel()  # the flows the controller was given, by unit
        self._held_since: dict[str, float] = {}  # network -> when this host took it
        self._nat = NatSync(iptables, ports)
        # Endpoints' ports; deleted ones' given back or removed after the answer, in batches.
        self.ports = EndpointPorts(ovs, self.links, config.bridge, pool)
        self.teardown = self.ports.teardown
        # Until the first resync the local state is partial: pushing it would delete the
        # flows of endpoints we have not re-read yet.
        self._ready = threading.Event()
        self.ready_timeout = 30.0
        self.flow_timeout = 2.0  # how long a new endpoint waits for its flows on the switch
        self.datapath_type = config.datapath_type
        self.switch_tso = False  # the running ovs-vswitchd (netdev) has userspace TSO

    # --- lifecycle ---

    def start(self) -> None:
        """Ensure the bridge (kept if it exists: running containers keep their traffic) and
        the VLAN uplink port."""
        from .ovs import detect_datapath_type

        self.datapath_type = self.config.datapath_type or detect_datapath_type()
        self.ovs.ensure_bridge(
            self.config.bridge, datapath_type=self.datapath_type, controller=self.config.controller
        )
        self.switch_tso = read_switch_tso(
            self.datapath_type, self.links, self.config.bridge, self.switch_tso
        )
        if self.config.vlan_uplink:
            uplink = self.config.vlan_uplink
            if self.datapath_type == "netdev":  # a switch port now, not the host's interface
                self.links.isolate_host_end(uplink)
            self._state.uplink_ofport = self.ovs.add_port(
                self.config.bridge, uplink, external_ids={bp.EXT_UPLINK: uplink}
            )

    def resync(
        self,
        networks: Iterable[NetworkState],
        endpoints: Iterable[EndpointState],
        peers: Mapping[str, str] | None = None,
        remote_endpoints: Iterable[EndpointState] = (),
        arp_mode: str = "proxy",
        groups: Iterable[GroupState] = (),
        services: Iterable[ServiceState] = (),
        fwd_mode: FwdMode = "bridge",
        fabric_subnets: Mapping[int, Iterable[str]] | None = None,
    ) -> dict[str, int]:
        """Adopt the desired state after a (re)start; remove what no endpoint owns any more.

        Endpoint ports that still exist are kept as they are (their ofport is read back);
        endpoints whose veth vanished cannot be re-plugged into their container and are
        reported, not recreated. ``peers`` (host -> VTEP) is None when this host does not
        know the cluster: its tunnel ports are then left as they are.
        """
        with self._lock:
            ports = self.ovs.list_ports(self.config.bridge)
            uplink = self._state.uplink_ofport
            self._state = HostState(uplink_ofport=uplink, arp_mode=arp_mode, fwd_mode=fwd_mode)
            # The router port outlives a restart: adopted, with the fabric's subnets by tag.
            self._state.fabric_ofport, self._state.fabric_ips = bp.adopt_fabric(ports)
            self._state.fabric_subnets = bp.by_tag(fabric_subnets)
            for net in networks:
                self._ensure_network(net)
            # Ports plug() made for endpoints not created yet stay; the others are read back.
            wanted, missing, spare = self.ports.adopt(ports, endpoints)
            wanted = self._nat.adopt_published(wanted)  # their ports live only in iptables
            self._state.endpoints = wanted
            self._state.remote_endpoints = tuple(remote_endpoints)
            self._state.groups = tuple(groups)
            self._state.services = tuple(services)
            if peers is not None:
                self._ensure_tunnels(peers, ports)
            else:  # adopt what is there, so the flows keep using it
                self._state.tunnels = present_tunnels(ports)
            self._ready.set()
            bp.remove_ports(self.ovs, self.links, self.config.bridge, spare)
            removed = self._remove_unowned(ports) + len(spare)
            self._push()
            return {
                "endpoints": len(wanted),
                "missing": missing,
                "removed": removed,
                "tunnels": len(self._state.tunnels),
                "remote_endpoints": len(self._state.remote_endpoints),
            }

    def set_cluster(
        self,
        peers: Mapping[str, str],
        remote_endpoints: Iterable[EndpointState],
        arp_mode: str = "proxy",
        groups: Iterable[GroupState] = (),
        services: Iterable[ServiceState] = (),
        fwd_mode: FwdMode = "bridge",
    ) -> None:
        """The cluster changed: one VXLAN port per peer VTEP, other hosts' endpoints' flows,
        the groups' policies and netprofiles, the service LBs and the forwarding mode (which
        changes only while the cluster has no network)."""
        self._wait_ready()
        with self._lock:
            self._ensure_tunnels(peers, self.ovs.list_ports(self.config.bridge))
            self._state.remote_endpoints = tuple(remote_endpoints)
            self._state.arp_mode = arp_mode
            self._state.groups = tuple(groups)
            self._state.services = tuple(services)
            self._state.fwd_mode = fwd_mode
            self._apply(self._cluster_change())

    def _ensure_tunnels(self, peers: Mapping[str, str], ports: Mapping[str, PortInfo]) -> None:
        if peers and not self.config.tunnels:
            log.warning("%d peer host(s) but no --vtep-ip here: VXLAN stays local", len(peers))
            peers = {}
        self._state.tunnels = ensure_tunnels(self.ovs, self.config.bridge, peers, ports)

    def switch_connected(self) -> None:
        """The switch (re)connected. After an ovs-vswitchd restart the gateway internal
        ports are new kernel devices without their addresses: put them back (and read
        again whether the new ovs-vswitchd has userspace TSO)."""
        if not self._ready.is_set():
            return  # resync addresses them
        with self._lock:
            try:
                self.switch_tso = read_switch_tso(
                    self.datapath_type, self.links, self.config.bridge, self.switch_tso
                )
            except OSError:
                log.exception("cannot read the offloads of bridge %s", self.config.bridge)
            for net in list(self._state.networks.values()):
                try:
                    self._address_gateway(net)
                except Exception:
                    log.exception(
                        "network %s: cannot re-address gateway %s", net.id, net.gateway_port
                    )

    def set_fabric(
        self, addresses: Sequence[str], subnets: Mapping[int, Iterable[str]] | None = None
    ) -> None:
        """Routing mode with BGP: the host's router port, holding ``addresses`` (the router
        IP, "a.b.c.d/n", and an IPv6 one; none: no port) on the VLAN uplink's untagged side;
        ``subnets``: the fabric's routed subnets by tenant tag (no tenant reaches another's)."""
        self._wait_ready()
        with self._lock:
            s = self._state
            if addresses and not self.config.vlan_uplink:
                raise ValueError(f"router IP {addresses[0]}: no VLAN uplink here (--vlan-if)")
            have, mtu = (s.fabric_ofport, s.fabric_ips), self.config.mtu_for("vlan")
            ports = self.ovs, self.links, self.config.bridge
            s.fabric_ofport, s.fabric_ips = bp.ensure_fabric(*ports, mtu, have, tuple(addresses))
            s.fabric_subnets = bp.by_tag(subnets)
            self._apply(self._cluster_change())
            self._sync_nat()

    def fabric_addresses(self) -> tuple[str, ...]:
        """The router port's addresses (none without one)."""
        return self._state.fabric_ips if self._state.fabric_ofport is not None else ()

    # --- networks ---

    @property
    def ready(self) -> bool:
        """True once resync has adopted the state: changes are allowed."""
        return self._ready.is_set()

    def has_endpoint(self, endpoint_id: str) -> bool:
        return endpoint_id in self._state.endpoints

    def has_network(self, network_id: str) -> bool:
        return network_id in self._state.networks

    def _wait_ready(self) -> None:
        if not self._ready.wait(self.ready_timeout):
            why = "since netplugin started (is the cluster store reachable?); retry"
            raise RuntimeError(f"the datapath has not read the cluster state yet {why}")

    def ensure_network(self, net: NetworkState) -> None:
        self._wait_ready()
        with self._lock:
            # Tags are unique among the cluster's networks, so a network of this host on
            # the same segment is one the cluster deleted and reused the tag of, before
            # this host's docker sync dropped it: it goes first (its port, MAC and flows
            # are the new network's).
            for old in self._state.displaced_by(net):  # raises if one still has endpoints
                log.info("network %s (tag %d) replaces %s, gone", net.id, net.tag, old.id)
                self._drop_network(old.id)
            self._ensure_network(net)
            self._apply(self._cluster_change(networks={net.id: self._state.networks[net.id]}))
            self._sync_nat()

    def _ensure_network(self, net: NetworkState) -> None:
        ofport = self.ovs.add_port(
            self.config.bridge,
            net.gateway_port,
            type="internal",
            mac=net.gateway_mac,
            external_ids={bp.EXT_NETWORK: net.id},
        )
        self._address_gateway(net)
        self._state.networks[net.id] = replace(net, gateway_ofport=ofport)
        self._held_since.setdefault(net.id, time.monotonic())

    def _address_gateway(self, net: NetworkState) -> None:
        """Address the network's internal port (vswitchd restarts lose these addresses)."""
        self.links.address_gateway(
            net.gateway_port, self.config.mtu_for(net.encap), gateway_addresses(net)
        )

    @property
    def fwd_mode(self) -> FwdMode:
        return self._state.fwd_mode

    def networks(self) -> set[str]:
        """The networks this host holds."""
        return set(self._state.networks)

    def network(self, network_id: str) -> NetworkState | None:
        return self._state.networks.get(network_id)

    def drop_networks_gone(
        self, live: Collection[str], grace: float, now: float | None = None
    ) -> list[str]:
        """Drop the networks of this host the cluster no longer has (not in ``live``) and
        that have no endpoint here; only once held ``grace`` seconds, since the cluster
        view may lag behind a network just plugged from the master's answer. (Docker's
        DeleteNetwork drops them on hosts with dockerd; a CNI-only host has only this.)"""
        now = time.monotonic() if now is None else now
        with self._lock:
            gone = self._state.gone(live, self._held_since, now - grace)
            for n in gone:
                log.info("network %s: gone from the cluster; its gateway port goes", n)
                self._drop_network(n)
            return gone

    def remove_network(self, network_id: str) -> None:
        """Drop the network, and wait for its endpoints' ports and veths to be removed."""
        self._wait_ready()
        with self._lock:
            self._drop_network(network_id)
        self.settle(self.ready_timeout)

    def settle(self, timeout: float | None = None) -> int:
        """Wait for the ports and veths of deleted endpoints to be removed; how many are
        still pending after ``timeout``."""
        return self.teardown.settle(timeout)

    def _drop_network(self, network_id: str) -> None:
        self._held_since.pop(network_id, None)
        net = self._state.networks.pop(network_id, None)
        if net is None:
            return
        stale = [e for e in self._state.endpoints.values() if e.network_id == network_id]
        for ep in stale:
            self._remove_endpoint(ep.id)
        self.ovs.del_port(self.config.bridge, net.gateway_port)
        gone = dict.fromkeys(e.id for e in stale)
        self._apply(self._cluster_change(networks={network_id: None}, endpoints=gone))
        self._sync_nat()

    # --- endpoints ---

    def plug(self, endpoint_id: str, network_id: str, mac: str, into: Into | None = None) -> str:
        """An endpoint's veth and switch port without its flows (those need its addresses,
        which the master confirms meanwhile); the container-side interface name here, or ""
        if it was made in ``into`` (datapath.endpointports)."""
        self._wait_ready()
        with self._lock:
            return self._plug(endpoint_id, network_id, mac, into).container

    def _plug(
        self, endpoint_id: str, network_id: str, mac: str, into: Into | None = None
    ) -> Plugged:
        if (plugged := self.ports.get(endpoint_id)) is not None:
            return plugged
        net = self._state.networks.get(network_id)
        if net is None:
            raise ValueError(f"endpoint {endpoint_id}: network {network_id} is not on this host")
        dp, tso, tunnels = self.datapath_type, self.switch_tso, self.config.tunnels
        off = not keeps_offloads(dp, tso, net.encap, tunnels)
        mtu, wait = self.config.mtu_for(net.encap), self.ready_timeout
        return self.ports.plug(endpoint_id, network_id, mac, mtu, off, wait, into)

    def create_endpoint_port(self, endpoint: EndpointState, into: Into | None = None) -> str:
        """Plug an endpoint into the bridge (or take the port plug() made) and send its
        flows; the container-side interface name here once they are on the switch ("" if
        in ``into``, a CNI pod's namespace: a pool port's end moves as they are confirmed)."""
        self._wait_ready()
        with self._lock:
            p = self._plug(endpoint.id, endpoint.network_id, endpoint.mac)
            try:
                pooled = p.host if p.pool is not None else ""
                ep = replace(endpoint, ofport=p.ofport, port=pooled)
                self._state.endpoints[endpoint.id] = ep
                generation = self._apply(Change(endpoints={ep.id: ep}))
                self._sync_nat_if(bool(ep.port_mappings))
            except BaseException:
                self._drop(endpoint.id)
                raise
        # Outside the lock: the container starts once this returns, and its first packets
        # need its flows on the switch, not just sent.
        container = p.container
        if into is not None and container:  # the CNI service serializes one endpoint's calls
            try:  # ~20 ms, as the switch confirms the flows
                container = self.ports.move_in(endpoint.id, into)
            except BaseException:
                self._drop(endpoint.id)
                raise
        self._await_flows(generation, f"endpoint {endpoint.id[:12]}")
        return container

    def _drop(self, endpoint_id: str) -> None:
        """A failed create's undo: its flows (if any), then its port; nothing is left."""
        with self._lock:
            self._remove_endpoint(endpoint_id)
            self._apply(Change(endpoints={endpoint_id: None}))
        self.teardown.wait(endpoint_id, self.ready_timeout)

    def _await_flows(self, generation: int | None, what: str) -> None:
        if generation is None:
            return
        if self.controller.wait_reconciled(generation, self.flow_timeout) is None:
            log.warning(
                "%s: its flows are not confirmed on the switch within %.0f s (is ovs-vswitchd "
                "connected to the controller?); they are installed when it is",
                what,
                self.flow_timeout,
            )

    def delete_endpoint_port(self, endpoint_id: str) -> None:
        self._wait_ready()
        with self._lock:
            gone = self._remove_endpoint(endpoint_id)
            self._apply(Change(endpoints={endpoint_id: None}))
            self._sync_nat_if(gone is not None and bool(gone.port_mappings))

    def _remove_endpoint(self, endpoint_id: str) -> EndpointState | None:
        """Forget the endpoint; its port goes once the caller removed its flows."""
        gone = self._state.endpoints.pop(endpoint_id, None)
        self.ports.unplug(endpoint_id)
        return gone

    def publish(
        self, endpoint_id: str, requests: Iterable[PublishedPort]
    ) -> tuple[PublishedPort, ...]:
        """Exactly these published ports (-p, -P) lead to the endpoint, with the host ports
        chosen; all or none (PortConflict names the port taken)."""
        self._wait_ready()
        with self._lock:  # two containers asking for one port: one wins
            s = self._state
            return self._nat.publish(endpoint_id, list(requests), s.endpoints, s.networks.values())

    def published_ports(self) -> dict[str, tuple[PublishedPort, ...]]:
        """The published ports of every endpoint on this host that has some."""
        with self._lock:
            return {
                e.id: e.port_mappings for e in self._state.endpoints.values() if e.port_mappings
            }

    def endpoint_oper(self, endpoint_id: str) -> dict[str, object]:
        ep = self._state.endpoints.get(endpoint_id)
        if ep is None:
            return {}
        host = port_names(ep)[0]
        return {"hostInterface": host, "ofport": ep.ofport, "mac": ep.mac, "network": ep.network_id}

    # --- desired state -> switch and kernel ---

    def desired(self) -> DesiredState:
        return self._state.desired()

    def flows(self) -> set[Flow]:
        """Every flow of the desired state, compiled in full."""
        return compile_flows(self.desired())

    def _push(self) -> None:
        """Everything anew (resync): the full compile goes to the controller, which reads
        the switch back and diffs; the incremental model restarts from the same state."""
        state = self.desired()
        flows = compile_flows(state)
        model = FlowModel()
        model.replace(state)
        if model.flows() != flows:  # a bug in the model: the full compile wins
            log.error("incremental flows differ from the full compile; using the full one")
        self._model = model
        self.controller.set_desired(flows)
        self._sync_nat(force=True)

    def audit(self) -> int | None:
        """Repair what was changed behind our back: the switch's flows read back and diffed
        (the controller logs what it had to change) and our iptables chains rewritten; the
        generation of that reconcile. Between audits only deltas are sent, so drift waits
        for this, a reconnect or a resync."""
        if not self._ready.is_set():
            return None
        with self._lock:
            generation = self.controller.resync()
            self._sync_nat(force=True)
            # What a failed teardown left (none while one runs: its ports are not owned).
            if not self.teardown.pending():
                ports = self.ovs.list_ports(self.config.bridge)
                if n := self._remove_unowned(ports) + self.ports.remove_unowned_pool(ports):
                    log.warning("audit: removed %d ports and veths no endpoint owns", n)
            return generation

    def _remove_unowned(self, ports: Mapping[str, PortInfo]) -> int:
        owned = self._state.owned_ports(self.ports.owned())
        return bp.remove_unowned(self.ovs, self.links, self.config.bridge, ports, owned)

    def _cluster_change(self, **change: Any) -> Change:
        """A Change that also brings the tunnels, other hosts' endpoints, the groups, the
        services and the ARP mode in line with the state (O(the cluster's objects of this
        host's networks): no flow is compiled for it)."""
        model, s = self._model, self._state
        return Change(
            remotes=changes(model.remotes, s.remote_states()),
            tunnels=changes(model.tunnels, s.tunnels),
            groups=changes(model.groups, s.group_states()),
            services=changes(model.services, s.service_states()),
            arp_mode=s.arp(),
            fwd_mode=s.fwd_mode,
            fabric=s.fabric_ofport,
            **change,
        )

    def _apply(self, change: Change) -> int | None:
        """Recompile what the change touches; send only the delta (its generation, if any)."""
        delta = self._model.apply(change)
        if delta.to_add or delta.to_delete:
            return self.controller.apply(delta)
        return None

    def _sync_nat_if(self, changed: bool) -> None:
        s = self._state
        self._nat.sync_if(changed, s.networks.values(), s.endpoints.values(), s.fabric())

    def _sync_nat(self, force: bool = False) -> None:
        s = self._state
        self._nat.sync(s.networks.values(), s.endpoints.values(), force, s.fabric())
