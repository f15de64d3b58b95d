"""What the datapath agent is told about this host: its configuration, and the networks
and endpoints it holds; these are also what its flows are compiled from (datapath.desired).
Pure data."""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from .hostnat import gateway_port_name
from .ports import PublishedPort

VLAN_SEGMENT_BASE = 1 << 24
# Routing mode (issue 25): a tenant's networks share one segment, its VRF, above every VNI
# and VLAN segment (datapath.routing).
VRF_SEGMENT_BASE = 1 << 25
VXLAN_OVERHEAD = 50  # outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8


@dataclass(frozen=True)
class NetworkState:
    """A network on this host: its configuration, and the ofport of its gateway port once
    that port exists. How it reaches other hosts (a VNI over tunnels, or a VLAN on the
    uplink), its local segment and its gateway's MAC follow from its tag and encap."""

    id: str  # tenant:name
    tag: int  # the network's pkt-tag: its VNI or VLAN id (cluster-unique per encap)
    subnet: str = ""
    gateway: str = ""
    ipv6_subnet: str = ""
    ipv6_gateway: str = ""
    internal: bool = False
    encap: str = "vxlan"  # vxlan | vlan
    gateway_ofport: int | None = None  # None until its gateway port is on the bridge
    vrf: int = 0  # its tenant's tag (routing mode's VRF); 0: none

    @property
    def segment(self) -> int:
        """The local segment id: VNIs as they are, VLANs above every VNI (a VLAN and a VNI
        may share a number)."""
        return self.tag if self.encap == "vxlan" else VLAN_SEGMENT_BASE | self.tag

    @property
    def vni(self) -> int | None:
        return self.tag if self.encap == "vxlan" else None

    @property
    def vlan(self) -> int | None:
        return self.tag if self.encap == "vlan" else None

    @property
    def gateway_port(self) -> str:
        """The name of its gateway port (an OVS internal port holding the gateway address)."""
        return gateway_port_name(self.tag) if self.encap == "vxlan" else f"npgwv{self.tag}"

    @property
    def gateway_mac(self) -> str:
        return gateway_mac(self.segment)


@dataclass(frozen=True)
class EndpointState:
    """A container's interface in a network. This host's is plugged into a bridge port
    (ofport) and may publish ports; another host's names that host."""

    id: str
    network_id: str
    mac: str
    ipv4: str = ""
    ipv6: str = ""
    group: str = ""  # TENANT:GROUP of its endpoint group ("" outside one)
    ofport: int = 0  # this host's: its bridge port (0 until it is plugged)
    host: str = ""  # another host's: that host
    port_mappings: tuple[PublishedPort, ...] = ()  # this host's: its published ports
    port: str = ""  # this host's: its switch port's name, if not its veth's (a pool port)


def vrf_segment(tag: int) -> int:
    """The segment of a tenant's VRF in routing mode: its networks meet in it."""
    return VRF_SEGMENT_BASE | tag


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
class HostConfig:
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


def gateway_addresses(net: NetworkState) -> list[str]:
    """The addresses of a network's gateway port, with the prefix length of its subnet."""
    return [
        f"{gw}/{ipaddress.ip_network(subnet).prefixlen}"
        for subnet, gw in ((net.subnet, net.gateway), (net.ipv6_subnet, net.ipv6_gateway))
        if subnet and gw
    ]
