"""A host's datapath: the bridge, gateway ports, endpoint veths, flows and host NAT.

It keeps the desired local state (networks and endpoints on this host) and makes the
switch, the kernel and iptables match it. Every operation is idempotent, nothing that is
already right is recreated, and a failure part-way removes what it made.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from .effects import HostNat, Links, OpenFlow, Ovsdb
from .flows import Flow
from .hostnat import (
    DNAT_CHAIN,
    GatewayNet,
    PortMapping,
    gateway_port_name,
    parse_dnat_rules,
)
from .ovs import PortInfo
from .pipeline import (
    DesiredState,
    EndpointState,
    NetworkState,
    RemoteEndpointState,
    TunnelState,
    compile_flows,
)
from .veth import NetlinkLinks, veth_names

log = logging.getLogger(__name__)

EXT_ENDPOINT = "netplugin-endpoint"
EXT_NETWORK = "netplugin-network"
EXT_TUNNEL = "netplugin-tunnel"  # value: the peer host
EXT_UPLINK = "netplugin-uplink"
VLAN_SEGMENT_BASE = 1 << 24
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8


@dataclass(frozen=True)
class LocalNetwork:
    id: str  # tenant:name
    tag: int  # the network's pkt-tag: its VNI or VLAN id (cluster-unique per encap)
    subnet: str = ""
    gateway: str = ""
    ipv6_subnet: str = ""
    ipv6_gateway: str = ""
    internal: bool = False
    encap: str = "vxlan"  # vxlan | vlan

    @property
    def segment(self) -> int:
        """The local segment id: VNIs as they are, VLANs above every VNI (a VLAN and a VNI
        may share a number)."""
        return self.tag if self.encap == "vxlan" else VLAN_SEGMENT_BASE | self.tag

    @property
    def gateway_port(self) -> str:
        return gateway_port_name(self.tag) if self.encap == "vxlan" else f"npgwv{self.tag}"

    @property
    def gateway_mac(self) -> str:
        return gateway_mac(self.segment)


@dataclass(frozen=True)
class LocalEndpoint:
    id: str
    network_id: str
    mac: str
    ipv4: str = ""
    ipv6: str = ""
    ofport: int = 0
    port_mappings: tuple[PortMapping, ...] = ()


def gateway_mac(segment: int) -> str:
    """Locally administered, distinct from endpoint MACs (02:42:...), unique per network and
    the same on every host (the gateway is distributed)."""
    prefix = "02:4e:50:" if segment < VLAN_SEGMENT_BASE else "02:4e:56:"
    return prefix + ":".join(f"{(segment >> s) & 0xFF:02x}" for s in (16, 8, 0))


def tunnel_port_name(remote_ip: str) -> str:
    """The VXLAN port toward a peer VTEP: vx + the IPv4 address in hex (a digest for IPv6)."""
    addr = ipaddress.ip_address(remote_ip)
    if addr.version == 4:
        return "vx" + addr.packed.hex()
    return "vx" + hashlib.sha256(addr.packed).hexdigest()[:11]


@dataclass
class AgentConfig:
    bridge: str = "netplugin"
    controller: str = "tcp:127.0.0.1:6653"
    datapath_type: str | None = None  # None: system if the kernel module exists, else netdev
    mtu: int = 0  # container interfaces; 0: from the uplink and the encapsulation
    uplink_mtu: int = 1500  # of the interface that carries VXLAN traffic
    vlan_mtu: int = 1500  # of the VLAN uplink
    vlan_uplink: str = ""  # interface that carries VLAN networks to other hosts
    tunnels: bool = False  # this host has a VTEP: VXLAN networks span hosts

    def mtu_for(self, encap: str) -> int:
        """VXLAN costs its header where the network spans hosts; VLAN costs nothing."""
        if self.mtu:
            return self.mtu
        if encap == "vlan":
            return self.vlan_mtu
        return self.uplink_mtu - VXLAN_OVERHEAD if self.tunnels else self.uplink_mtu


@dataclass
class _State:
    networks: dict[str, LocalNetwork] = field(default_factory=dict)
    endpoints: dict[str, LocalEndpoint] = field(default_factory=dict)
    gateway_ofports: dict[str, int] = field(default_factory=dict)
    # Other hosts: tunnel ports by host, and their endpoints.
    tunnels: dict[str, int] = field(default_factory=dict)
    remote_endpoints: tuple[RemoteEndpointState, ...] = ()
    uplink_ofport: int | None = None
    arp_mode: str = "proxy"


def gateway_addresses(net: LocalNetwork) -> list[str]:
    """The addresses of a network's gateway port, with the prefix length of its subnet."""
    return [
        f"{gw}/{ipaddress.ip_network(subnet).prefixlen}"
        for subnet, gw in ((net.subnet, net.gateway), (net.ipv6_subnet, net.ipv6_gateway))
        if subnet and gw
    ]


class DatapathAgent:
    """Decides what the bridge, the kernel and iptables should hold; its effects (links,
    OVSDB, iptables, OpenFlow) act. links defaults to the host's netlink."""

    def __init__(
        self,
        config: AgentConfig,
        ovs: Ovsdb,
        controller: OpenFlow,
        iptables: HostNat,
        links: Links | None = None,
    ) -> None:
        self.config = config
        self.ovs = ovs
        self.controller = controller
        self.iptables = iptables
        self.links: Links = links if links is not None else NetlinkLinks()
        self._lock = threading.RLock()
        self._state = _State()
        # Until the first resync the local state is partial: pushing it would delete the
        # flows of endpoints we have not re-read yet.
        self._ready = threading.Event()
        self.ready_timeout = 30.0
        self.datapath_type = config.datapath_type

    # --- lifecycle ---

    def start(self) -> None:
        """Ensure the bridge (kept if it exists: running containers keep their traffic) and
        the VLAN uplink port."""
        from .ovs import detect_datapath_type

        self.datapath_type = self.config.datapath_type or detect_datapath_type()
        self.ovs.ensure_bridge(
            self.config.bridge, datapath_type=self.datapath_type, controller=self.config.controller
        )
        if self.config.vlan_uplink:
            uplink = self.config.vlan_uplink
            if self.datapath_type == "netdev":
                # A switch port now, not an interface of the host.
                self.links.isolate_host_end(uplink)
            self._state.uplink_ofport = self.ovs.add_port(
                self.config.bridge, uplink, external_ids={EXT_UPLINK: uplink}
            )

    def resync(
        self,
        networks: Iterable[LocalNetwork],
        endpoints: Iterable[LocalEndpoint],
        peers: Mapping[str, str] | None = None,
        remote_endpoints: Iterable[RemoteEndpointState] = (),
        arp_mode: str = "proxy",
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
            self._state = _State(uplink_ofport=uplink, arp_mode=arp_mode)
            for net in networks:
                self._ensure_network(net)
            wanted: dict[str, LocalEndpoint] = {}
            missing = 0
            for ep in endpoints:
                host, _ = veth_names(ep.id)
                info = ports.get(host)
                if info is None or not info.ofport or info.ofport < 0:
                    missing += 1
                    continue
                try:
                    self.links.isolate_host_end(host)  # ports made by an older netplugin lack it
                except OSError as e:
                    log.warning("endpoint %s: cannot isolate %s from the host: %s", ep.id, host, e)
                wanted[ep.id] = replace(ep, ofport=info.ofport)
            # Published ports live only in our DNAT chain: keep those of surviving endpoints.
            by_ip = {e.ipv4: e.id for e in wanted.values() if e.ipv4}
            published: dict[str, list[PortMapping]] = {}
            for m in parse_dnat_rules(self.iptables.current("nat", DNAT_CHAIN) or []):
                if m.container_ip in by_ip:
                    published.setdefault(by_ip[m.container_ip], []).append(m)
            for eid, maps in published.items():
                wanted[eid] = replace(wanted[eid], port_mappings=tuple(maps))
            self._state.endpoints = wanted
            self._state.remote_endpoints = tuple(remote_endpoints)
            if peers is not None:
                self._ensure_tunnels(peers, ports)
            else:  # adopt what is there, so the flows keep using it
                self._state.tunnels = {
                    info.external_ids[EXT_TUNNEL]: info.ofport
                    for info in ports.values()
                    if EXT_TUNNEL in info.external_ids and info.ofport and info.ofport > 0
                }
            self._ready.set()
            removed = 0
            keep = {veth_names(e)[0] for e in wanted} | {
                n.gateway_port for n in self._state.networks.values()
            }
            for name, info in ports.items():
                ours = EXT_ENDPOINT in info.external_ids or EXT_NETWORK in info.external_ids
                if ours and name not in keep:
                    self.ovs.del_port(self.config.bridge, name)
                    removed += 1
            for name in self.links.host_veths():
                if name not in keep:
                    self.links.delete_link(name)
                    removed += 1
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
        remote_endpoints: Iterable[RemoteEndpointState],
        arp_mode: str = "proxy",
    ) -> None:
        """Other hosts changed: one VXLAN port per peer VTEP, and their endpoints' flows."""
        self._wait_ready()
        with self._lock:
            self._ensure_tunnels(peers, self.ovs.list_ports(self.config.bridge))
            self._state.remote_endpoints = tuple(remote_endpoints)
            self._state.arp_mode = arp_mode
            self._push()

    def _ensure_tunnels(self, peers: Mapping[str, str], ports: Mapping[str, PortInfo]) -> None:
        """Add a tunnel per peer (kept when it exists), delete the tunnels of peers gone."""
        if peers and not self.config.tunnels:
            log.warning("%d peer host(s) but no --vtep-ip here: VXLAN stays local", len(peers))
            peers = {}
        wanted = {tunnel_port_name(ip): (host, ip) for host, ip in peers.items()}
        tunnels: dict[str, int] = {}
        for name, (host, ip) in sorted(wanted.items()):
            info = ports.get(name)
            if info is not None and info.external_ids.get(EXT_TUNNEL) == host and info.ofport:
                tunnels[host] = info.ofport
                continue
            try:
                tunnels[host] = self.ovs.add_port(
                    self.config.bridge,
                    name,
                    type="vxlan",
                    options={"remote_ip": ip, "key": "flow"},
                    external_ids={EXT_TUNNEL: host},
                )
                log.info("tunnel %s to host %s (%s)", name, host, ip)
            except RuntimeError as e:
                log.error("host %s: cannot add tunnel %s to %s: %s", host, name, ip, e)
        for name, info in ports.items():
            if EXT_TUNNEL in info.external_ids and name not in wanted:
                self.ovs.del_port(self.config.bridge, name)
                log.info("tunnel %s to host %s removed", name, info.external_ids[EXT_TUNNEL])
        self._state.tunnels = tunnels

    def switch_connected(self) -> None:
        """The switch (re)connected. After an ovs-vswitchd restart the gateway internal
        ports are new kernel devices without their addresses: put them back."""
        if not self._ready.is_set():
            return  # resync addresses them
        with self._lock:
            for net in list(self._state.networks.values()):
                try:
                    self._address_gateway(net)
                except Exception:
                    log.exception(
                        "network %s: cannot re-address gateway %s", net.id, net.gateway_port
                    )

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
            raise RuntimeError(
                "the datapath has not read the cluster state yet since netplugin started "
                "(is the cluster store reachable?); retry"
            )

    def ensure_network(self, net: LocalNetwork) -> None:
        self._wait_ready()
        with self._lock:
            self._ensure_network(net)
            self._push()

    def _ensure_network(self, net: LocalNetwork) -> None:
        ofport = self.ovs.add_port(
            self.config.bridge,
            net.gateway_port,
            type="internal",
            mac=net.gateway_mac,
            external_ids={EXT_NETWORK: net.id},
        )
        self._address_gateway(net)
        self._state.networks[net.id] = net
        self._state.gateway_ofports[net.id] = ofport

    def _address_gateway(self, net: LocalNetwork) -> None:
        """Address the network's internal port (vswitchd restarts lose these addresses)."""
        self.links.address_gateway(
            net.gateway_port, self.config.mtu_for(net.encap), gateway_addresses(net)
        )

    def remove_network(self, network_id: str) -> None:
        self._wait_ready()
        with self._lock:
            net = self._state.networks.pop(network_id, None)
            self._state.gateway_ofports.pop(network_id, None)
            if net is None:
                return
            stale = [e for e in self._state.endpoints.values() if e.network_id == network_id]
            for ep in stale:
                self._remove_endpoint(ep.id)
            self.ovs.del_port(self.config.bridge, net.gateway_port)
            self._push()

    # --- endpoints ---

    def create_endpoint_port(self, endpoint: LocalEndpoint) -> str:
        """Plug an endpoint into the bridge; returns the container-side interface name."""
        self._wait_ready()
        with self._lock:
            net = self._state.networks.get(endpoint.network_id)
            if net is None:
                raise ValueError(
                    f"endpoint {endpoint.id}: network {endpoint.network_id} is not on this host"
                )
            host, container = self.links.create_veth(
                endpoint.id, endpoint.mac, self.config.mtu_for(net.encap)
            )
            try:
                ofport = self.ovs.add_port(
                    self.config.bridge,
                    host,
                    external_ids={EXT_ENDPOINT: endpoint.id, EXT_NETWORK: endpoint.network_id},
                )
                if self.datapath_type == "netdev":
                    self.links.disable_tx_offload(container)
                self._state.endpoints[endpoint.id] = replace(endpoint, ofport=ofport)
                self._push()
            except BaseException:
                self._state.endpoints.pop(endpoint.id, None)
                self.ovs.del_port(self.config.bridge, host)
                self.links.delete_veth(endpoint.id)
                raise
            return container

    def delete_endpoint_port(self, endpoint_id: str) -> None:
        self._wait_ready()
        with self._lock:
            self._remove_endpoint(endpoint_id)
            self._push()

    def _remove_endpoint(self, endpoint_id: str) -> None:
        self._state.endpoints.pop(endpoint_id, None)
        host, _ = veth_names(endpoint_id)
        self.ovs.del_port(self.config.bridge, host)
        self.links.delete_veth(endpoint_id)

    def set_port_mappings(self, endpoint_id: str, mappings: Iterable[PortMapping]) -> None:
        self._wait_ready()
        with self._lock:
            ep = self._state.endpoints.get(endpoint_id)
            if ep is None:
                raise ValueError(f"endpoint {endpoint_id} is not on this host")
            self._state.endpoints[endpoint_id] = replace(ep, port_mappings=tuple(mappings))
            self._sync_nat()

    def endpoint_oper(self, endpoint_id: str) -> dict[str, object]:
        ep = self._state.endpoints.get(endpoint_id)
        if ep is None:
            return {}
        host, _ = veth_names(endpoint_id)
        return {"hostInterface": host, "ofport": ep.ofport, "mac": ep.mac, "network": ep.network_id}

    # --- desired state -> switch and kernel ---

    def desired(self) -> DesiredState:
        s = self._state
        return DesiredState(
            networks=[
                NetworkState(
                    id=n.id,
                    segment=n.segment,
                    gateway_port=s.gateway_ofports.get(n.id),
                    gateway_mac=n.gateway_mac,
                    gateway_ip=n.gateway or None,
                    vni=n.tag if n.encap == "vxlan" else None,
                    vlan=n.tag if n.encap == "vlan" else None,
                )
                for n in s.networks.values()
            ],
            endpoints=[
                EndpointState(
                    id=e.id,
                    network_id=e.network_id,
                    ofport=e.ofport,
                    mac=e.mac,
                    ipv4=e.ipv4 or None,
                    ipv6=e.ipv6 or None,
                )
                for e in s.endpoints.values()
            ],
            remote_endpoints=[r for r in s.remote_endpoints if r.network_id in s.networks],
            tunnels=[TunnelState(h, p) for h, p in sorted(s.tunnels.items())],
            uplink_port=s.uplink_ofport,
            arp_mode="flood" if s.arp_mode == "flood" else "proxy",
        )

    def flows(self) -> set[Flow]:
        return compile_flows(self.desired())

    def _push(self) -> None:
        self.controller.set_desired(self.flows())
        self._sync_nat()

    def _sync_nat(self) -> None:
        nets = [
            GatewayNet(n.subnet, n.gateway_port, n.internal)
            for n in self._state.networks.values()
            if n.subnet
        ]
        mappings = [m for e in self._state.endpoints.values() for m in e.port_mappings]
        self.iptables.sync(nets, mappings)
