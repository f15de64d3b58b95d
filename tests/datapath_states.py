"""Desired states and packets shared by the datapath tests: a small world of two networks
on one host, and a cluster of three hosts with VXLAN and VLAN networks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from datapath.flows import Entry, Flow
from datapath.local import gateway_mac
from datapath.pipeline import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    DesiredState,
    EndpointState,
    NetworkState,
    TunnelState,
)

BROADCAST = "ff:ff:ff:ff:ff:ff"


def flows_only(entries: Iterable[Entry]) -> set[Flow]:
    """The flows among compiled entries: without the meters and groups they name (every
    segment has a flood group)."""
    return {e for e in entries if isinstance(e, Flow)}


# ---------------------------------------------------------------- a small world

NET_A, NET_B = "net-a", "net-b"
VNI_A, VNI_B, VLAN_C = 5000, 5001, 300
GW_A_PORT, GW_A_MAC, GW_A_IP = 10, gateway_mac(VNI_A), "10.1.0.254"
NETWORK_A = NetworkState(NET_A, VNI_A, gateway=GW_A_IP, gateway_ofport=GW_A_PORT)


def ep(n: int, network: str, ipv6: str = "") -> EndpointState:
    return EndpointState(
        f"ep{n}", network, f"02:00:00:00:00:{n:02x}", f"10.1.0.{n}", ipv6, ofport=n
    )


E1, E2, E4 = ep(1, NET_A, "fd00::1"), ep(2, NET_A), ep(4, NET_A)
E3 = ep(3, NET_B)  # same subnet as net-a on purpose: isolation must not rely on IP routing


def world() -> DesiredState:
    return DesiredState(
        networks=[
            NETWORK_A,
            NetworkState(NET_B, VNI_B),
        ],
        endpoints=[E1, E2, E3, E4],
    )


def ipv4(src: EndpointState, dst_mac: str, dst_ip: str, **over: Any) -> dict[str, Any]:
    pkt = {
        "in_port": src.ofport,
        "eth_src": src.mac,
        "eth_dst": dst_mac,
        "eth_type": ETH_TYPE_IPV4,
        "ipv4_src": src.ipv4,
        "ipv4_dst": dst_ip,
    }
    return {**pkt, **over}


def arp_request(src: EndpointState, target_ip: str, **over: Any) -> dict[str, Any]:
    pkt = {
        "in_port": src.ofport,
        "eth_src": src.mac,
        "eth_dst": BROADCAST,
        "eth_type": ETH_TYPE_ARP,
        "arp_op": 1,
        "arp_spa": src.ipv4,
        "arp_sha": src.mac,
        "arp_tpa": target_ip,
    }
    return {**pkt, **over}


# ---------------------------------------------------------------- several hosts

NET_C = "net-c"  # a VLAN network
TUN_H2, TUN_H3, UPLINK = 50, 51, 60
R1 = EndpointState("r1", NET_A, "02:00:00:00:02:01", "10.1.0.21", host="h2")
R2 = EndpointState("r2", NET_B, "02:00:00:00:03:02", "10.1.0.32", host="h3")
R3 = EndpointState("r3", NET_C, "02:00:00:00:02:03", "10.3.0.23", host="h2")
R4 = EndpointState("r4", "net-elsewhere", "02:00:00:00:03:04", "10.9.0.4", host="h3")
E5 = EndpointState("ep5", NET_C, "02:00:00:00:00:05", "10.3.0.5", ofport=5)


def cluster(arp_mode: str = "proxy") -> DesiredState:
    """Net A (VNI) on this host and h2, net B (VNI) here and on h3, net C (VLAN) here and on
    h2; a network this host has no endpoint of lives on h3."""
    return DesiredState(
        networks=[
            NETWORK_A,
            NetworkState(NET_B, VNI_B),
            NetworkState(NET_C, VLAN_C, encap="vlan"),
        ],
        endpoints=[E1, E2, E3, E5],
        remote_endpoints=[R1, R2, R3, R4],
        tunnels=[TunnelState("h2", TUN_H2), TunnelState("h3", TUN_H3)],
        uplink_port=UPLINK,
        arp_mode=arp_mode,  # type: ignore[arg-type]
    )


def from_tunnel(port: int, vni: int, src_mac: str, dst_mac: str, **over: Any) -> dict[str, Any]:
    pkt = {
        "in_port": port,
        "tunnel_id": vni,
        "eth_src": src_mac,
        "eth_dst": dst_mac,
        "eth_type": ETH_TYPE_IPV4,
    }
    return {**pkt, **over}
