"""Routing mode's shared state: two networks of tenant A and one of tenant B on this host
(B's subnet is A's first one), an endpoint of A's second network on host h2, and the
packets the routing tests send."""

from __future__ import annotations

from typing import Any

from datapath.desired import DesiredState, EndpointState, NetworkState
from datapath.desired import TunnelState as Tunnel
from datapath.pipeline import ETH_TYPE_ARP, ETH_TYPE_IPV4
from datapath.policy import GroupState, RuleState
from datapath.routing import ROUTER_MAC

VRF_A, VRF_B = 1, 2
VNI_1, VNI_2, VNI_3 = 6001, 6002, 6003
GW1, GW2, GW3, TUN = 21, 22, 23, 50
NET1 = NetworkState("a:net1", VNI_1, "10.1.0.0/24", "10.1.0.1", gateway_ofport=GW1, vrf=VRF_A)
NET2 = NetworkState("a:net2", VNI_2, "10.2.0.0/24", "10.2.0.1", gateway_ofport=GW2, vrf=VRF_A)
# Tenant B's subnet is tenant A's first one: isolation must not rely on addresses.
NET3 = NetworkState("b:net3", VNI_3, "10.1.0.0/24", "10.1.0.1", gateway_ofport=GW3, vrf=VRF_B)
A1 = EndpointState("a1", NET1.id, "02:42:0a:01:00:02", "10.1.0.2", group="a:web", ofport=1)
A2 = EndpointState("a2", NET2.id, "02:42:0a:02:00:02", "10.2.0.2", group="a:db", ofport=2)
B1 = EndpointState("b1", NET3.id, "02:42:0a:01:00:09", "10.1.0.9", ofport=3)
RA2 = EndpointState("ra2", NET2.id, "02:42:0a:02:00:07", "10.2.0.7", host="h2")
WEB, DB = GroupState("a:web", NET1.id, 11), GroupState("a:db", NET2.id, 33)
DENY_WEB_TO_DB = RuleState("in", 10, "deny", peer_tag=11)


def state(*groups: GroupState) -> DesiredState:
    return DesiredState(
        networks=[NET1, NET2, NET3],
        endpoints=[A1, A2, B1],
        remote_endpoints=[RA2],
        tunnels=[Tunnel("h2", TUN)],
        groups=list(groups),
        fwd_mode="routing",
    )


def ip(src: EndpointState, dst_ip: str, dst_mac: str = ROUTER_MAC, **over: Any) -> dict[str, Any]:
    return {
        "in_port": src.ofport,
        "eth_src": src.mac,
        "eth_dst": dst_mac,
        "eth_type": ETH_TYPE_IPV4,
        "ipv4_src": src.ipv4,
        "ipv4_dst": dst_ip,
        "ip_ttl": 64,
        **over,
    }


def arp(src: EndpointState, target: str) -> dict[str, Any]:
    return {
        "in_port": src.ofport,
        "eth_src": src.mac,
        "eth_dst": "ff:ff:ff:ff:ff:ff",
        "eth_type": ETH_TYPE_ARP,
        "arp_op": 1,
        "arp_spa": src.ipv4,
        "arp_sha": src.mac,
        "arp_tpa": target,
    }
