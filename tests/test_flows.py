"""Flows, the pipeline compiler and the reconcile diff, tested without a switch.

A tiny OpenFlow 1.3 table walker (faucet's fakeoftable idea) answers "which ports would
this packet leave on?" for a set of Flows.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from os_ken.ofproto import ofproto_parser, ofproto_protocol
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as ofp_parser

from datapath.flows import COOKIE, Flow, diff, flow, replaced
from datapath.ofapp import (
    FlowController,
    flow_mod,
    from_ofp_flow,
    to_ofp_instructions,
    to_ofp_match,
)
from datapath.ovs import detect_datapath_type
from datapath.pipeline import (
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_IPV6,
    OFPP_IN_PORT,
    OFPVID_PRESENT,
    PIPELINE,
    DesiredState,
    EndpointState,
    NetworkState,
    RemoteEndpointState,
    TunnelState,
    compile_flows,
    install_order,
    removal_order,
)

BROADCAST = "ff:ff:ff:ff:ff:ff"

# ---------------------------------------------------------------- the table walker


def _as_int(field_name: str, value: Any) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if ":" in text and len(text) == 17 and field_name not in ("ipv6_src", "ipv6_dst"):
        return int(text.replace(":", ""), 16)
    return int(ipaddress.ip_address(text))


def _field_matches(name: str, want: Any, have: Any) -> bool:
    if have is None:
        return False
    if isinstance(want, tuple):
        value, mask = (_as_int(name, v) for v in want)
        return _as_int(name, have) & mask == value
    return _as_int(name, have) == _as_int(name, want)


@dataclass
class Walk:
    """Where a packet went: the ports it was output to (with the packet as it left) and the
    flows it hit."""

    outputs: list[int] = field(default_factory=list)
    packets: list[dict[str, Any]] = field(default_factory=list)
    path: list[Flow] = field(default_factory=list)

    @property
    def ports(self) -> set[int]:
        return set(self.outputs)

    def sent(self, port: int) -> dict[str, Any]:
        """The packet as it left on ``port`` (exactly once)."""
        (pkt,) = [p for o, p in zip(self.outputs, self.packets, strict=True) if o == port]
        return pkt


def walk(flows: set[Flow], packet: dict[str, Any]) -> Walk:
    """Send a packet (its in_port and header fields) through the tables from table 0.

    Models what the pipeline relies on: an output to the packet's own in_port is dropped
    (OpenFlow), OFPP_IN_PORT sends it back there; set_field, move and VLAN push/pop edit the
    headers that later outputs carry.
    """
    result = Walk()
    headers = dict(packet)
    headers.setdefault("tunnel_id", 0)
    in_port = headers["in_port"]
    metadata = 0
    table: int | None = 0
    while table is not None:
        headers["metadata"] = metadata
        hits = [
            f
            for f in flows
            if f.table == table and all(_field_matches(k, v, headers.get(k)) for k, v in f.match)
        ]
        if not hits:
            return result  # table miss without a miss flow: drop
        top = max(f.priority for f in hits)
        best = [f for f in hits if f.priority == top]
        assert len(best) == 1, f"overlapping flows at one priority: {best}"
        hit = best[0]
        result.path.append(hit)
        table = None
        for action in hit.actions:
            kind = action[0]
            if kind == "output":
                port = in_port if action[1] == OFPP_IN_PORT else action[1]
                if action[1] != in_port:
                    result.outputs.append(port)
                    result.packets.append({k: v for k, v in headers.items() if k != "metadata"})
            elif kind == "set_field":
                headers[action[1]] = action[2]
            elif kind == "move":
                headers[action[2]] = headers.get(action[1])
            elif kind == "push_vlan":
                headers["vlan_vid"] = OFPVID_PRESENT
            elif kind == "pop_vlan":
                headers.pop("vlan_vid", None)
            elif kind == "write_metadata":
                metadata = (metadata & ~action[2]) | (action[1] & action[2])
            elif kind == "goto":
                table = action[1]
            else:
                raise AssertionError(f"walker does not model {action}")
    return result


# ---------------------------------------------------------------- a small world

NET_A, NET_B = "net-a", "net-b"
GW_A_PORT, GW_A_MAC, GW_A_IP = 10, "02:00:00:00:0a:01", "10.1.0.254"


def ep(n: int, network: str, ipv6: str | None = None) -> EndpointState:
    return EndpointState(f"ep{n}", network, n, f"02:00:00:00:00:{n:02x}", f"10.1.0.{n}", ipv6)


E1, E2, E4 = ep(1, NET_A, "fd00::1"), ep(2, NET_A), ep(4, NET_A)
E3 = ep(3, NET_B)  # same subnet as net-a on purpose: isolation must not rely on IP routing


def world() -> DesiredState:
    return DesiredState(
        networks=[
            NetworkState(NET_A, 100, GW_A_PORT, GW_A_MAC, GW_A_IP),
            NetworkState(NET_B, 200),
        ],
        endpoints=[E1, E2, E3, E4],
    )


@pytest.fixture(scope="module")
def flows() -> set[Flow]:
    return compile_flows(world())


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


# ---------------------------------------------------------------- forwarding semantics


def test_same_network_unicast_reaches_only_the_destination(flows: set[Flow]) -> None:
    assert walk(flows, ipv4(E1, E2.mac, E2.ipv4)).outputs == [E2.ofport]
    assert walk(flows, ipv4(E2, E1.mac, E1.ipv4)).outputs == [E1.ofport]


def test_broadcast_reaches_every_other_port_of_the_network(flows: set[Flow]) -> None:
    pkt = ipv4(E1, BROADCAST, "10.1.0.255")
    assert sorted(walk(flows, pkt).outputs) == [E2.ofport, E4.ofport, GW_A_PORT]


def test_multicast_and_unknown_unicast_flood_within_the_network(flows: set[Flow]) -> None:
    for dst in ("01:00:5e:00:00:01", "02:99:99:99:99:99"):
        assert walk(flows, ipv4(E2, dst, "10.1.0.77")).ports == {E1.ofport, E4.ofport, GW_A_PORT}


def test_broadcast_from_each_port_reaches_all_the_others_of_its_network(
    flows: set[Flow],
) -> None:
    a_ports = {E1.ofport, E2.ofport, E4.ofport, GW_A_PORT}
    for src in (E1, E2, E4):
        assert walk(flows, ipv4(src, BROADCAST, "10.1.0.255")).ports == a_ports - {src.ofport}


def test_arp_request_for_a_known_address_is_answered_by_the_switch(flows: set[Flow]) -> None:
    result = walk(flows, arp_request(E1, E2.ipv4))
    assert result.outputs == [E1.ofport]  # back to the asker; E2 never sees it
    reply = result.sent(E1.ofport)
    assert (reply["arp_op"], reply["arp_sha"], reply["arp_spa"]) == (2, E2.mac, E2.ipv4)
    assert (reply["eth_src"], reply["eth_dst"]) == (E2.mac, E1.mac)
    assert (reply["arp_tha"], reply["arp_tpa"]) == (E1.mac, E1.ipv4)
    # The gateway answers for itself: the host's kernel learns the endpoint's MAC.
    assert walk(flows, arp_request(E1, GW_A_IP)).outputs == [GW_A_PORT]


def test_arp_flood_mode_sends_a_request_for_a_known_address_to_its_owner_only() -> None:
    state = world()
    state.arp_mode = "flood"
    flows = compile_flows(state)
    assert walk(flows, arp_request(E1, E2.ipv4)).outputs == [E2.ofport]
    assert walk(flows, arp_request(E1, GW_A_IP)).outputs == [GW_A_PORT]


def test_arp_request_for_an_unknown_address_floods(flows: set[Flow]) -> None:
    assert walk(flows, arp_request(E1, "10.1.0.99")).ports == {E2.ofport, E4.ofport, GW_A_PORT}


def test_gratuitous_arp_floods_to_the_others(flows: set[Flow]) -> None:
    assert walk(flows, arp_request(E1, E1.ipv4)).ports == {E2.ofport, E4.ofport, GW_A_PORT}


def test_networks_never_exchange_packets(flows: set[Flow]) -> None:
    a_ports = {E1.ofport, E2.ofport, E4.ofport, GW_A_PORT}
    # Unicast to a MAC of the other network is unknown here: it floods in net-a only.
    assert E3.ofport not in walk(flows, ipv4(E1, E3.mac, E3.ipv4)).ports
    assert walk(flows, ipv4(E3, E1.mac, E1.ipv4)).ports == set()
    assert walk(flows, ipv4(E3, BROADCAST, "10.1.0.255")).ports == set()
    assert walk(flows, arp_request(E3, E1.ipv4)).ports == set()
    assert E3.ofport not in walk(flows, arp_request(E1, E3.ipv4)).ports
    assert walk(flows, ipv4(E3, GW_A_MAC, GW_A_IP)).ports.isdisjoint(a_ports)


def test_spoofed_sources_are_dropped(flows: set[Flow]) -> None:
    spoofs = [
        ipv4(E1, E2.mac, E2.ipv4, eth_src=E4.mac),
        ipv4(E1, E2.mac, E2.ipv4, ipv4_src=E4.ipv4),
        ipv4(E1, E2.mac, E2.ipv4, ipv4_src="10.9.9.9"),
        arp_request(E1, E2.ipv4, arp_spa=E4.ipv4),
        arp_request(E1, E2.ipv4, arp_sha=E4.mac),
        arp_request(E1, E2.ipv4, eth_src=E4.mac, arp_sha=E4.mac),
        ipv4(E1, E2.mac, E2.ipv4, eth_type=0x88CC),  # other ethertypes
        ipv4(E1, E2.mac, E2.ipv4, in_port=99),  # a port we do not know
    ]
    for pkt in spoofs:
        result = walk(flows, pkt)
        assert result.outputs == [], (pkt, result.path)


def test_ipv6_only_from_endpoints_with_an_ipv6_address(flows: set[Flow]) -> None:
    def v6(src: EndpointState, src_ip: str) -> dict[str, Any]:
        return {
            "in_port": src.ofport,
            "eth_src": src.mac,
            "eth_dst": E2.mac,
            "eth_type": ETH_TYPE_IPV6,
            "ipv6_src": src_ip,
        }

    assert walk(flows, v6(E1, "fd00::1")).outputs == [E2.ofport]
    assert walk(flows, v6(E1, "fe80::1")).outputs == [E2.ofport]
    assert walk(flows, v6(E1, "::")).outputs == [E2.ofport]
    assert walk(flows, v6(E1, "fd00::99")).outputs == []
    assert walk(flows, v6(E2, "fe80::2")).outputs == []


def test_gateway_port_is_part_of_its_network(flows: set[Flow]) -> None:
    gw = EndpointState("gw", NET_A, GW_A_PORT, GW_A_MAC, GW_A_IP)
    assert walk(flows, ipv4(E1, GW_A_MAC, "8.8.8.8")).outputs == [GW_A_PORT]
    # The host routes for others: any source IP, but only its own MAC.
    assert walk(flows, ipv4(gw, E1.mac, E1.ipv4, ipv4_src="192.0.2.7")).outputs == [E1.ofport]
    assert walk(flows, ipv4(gw, E1.mac, E1.ipv4, eth_src=E2.mac)).outputs == []
    assert walk(flows, arp_request(gw, E2.ipv4)).sent(GW_A_PORT)["arp_sha"] == E2.mac


def test_everything_is_dropped_without_state() -> None:
    empty = compile_flows(DesiredState())
    assert {f.table for f in empty} == {t.id for t in PIPELINE}
    assert walk(empty, ipv4(E1, E2.mac, E2.ipv4)).outputs == []


def test_removed_endpoint_is_unreachable() -> None:
    state = world()
    state.endpoints.remove(E2)
    flows = compile_flows(state)
    assert walk(flows, ipv4(E1, E2.mac, E2.ipv4)).ports == {E4.ofport, GW_A_PORT}
    assert walk(flows, ipv4(E2, E1.mac, E1.ipv4)).outputs == []


# ---------------------------------------------------------------- several hosts

VNI_A, VNI_B, VLAN_C = 5000, 5001, 300
NET_C = "net-c"  # a VLAN network
TUN_H2, TUN_H3, UPLINK = 50, 51, 60
R1 = RemoteEndpointState("r1", NET_A, "h2", "02:00:00:00:02:01", "10.1.0.21")
R2 = RemoteEndpointState("r2", NET_B, "h3", "02:00:00:00:03:02", "10.1.0.32")
R3 = RemoteEndpointState("r3", NET_C, "h2", "02:00:00:00:02:03", "10.3.0.23")
R4 = RemoteEndpointState("r4", "net-elsewhere", "h3", "02:00:00:00:03:04", "10.9.0.4")
E5 = EndpointState("ep5", NET_C, 5, "02:00:00:00:00:05", "10.3.0.5")


def cluster(arp_mode: str = "proxy") -> DesiredState:
    """Net A (VNI) on this host and h2, net B (VNI) here and on h3, net C (VLAN) here and on
    h2; a network this host has no endpoint of lives on h3."""
    return DesiredState(
        networks=[
            NetworkState(NET_A, 100, GW_A_PORT, GW_A_MAC, GW_A_IP, vni=VNI_A),
            NetworkState(NET_B, 200, vni=VNI_B),
            NetworkState(NET_C, 1 << 24 | VLAN_C, vlan=VLAN_C),
        ],
        endpoints=[E1, E2, E3, E5],
        remote_endpoints=[R1, R2, R3, R4],
        tunnels=[TunnelState("h2", TUN_H2), TunnelState("h3", TUN_H3)],
        uplink_port=UPLINK,
        arp_mode=arp_mode,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def multi() -> set[Flow]:
    return compile_flows(cluster())


def from_tunnel(port: int, vni: int, src_mac: str, dst_mac: str, **over: Any) -> dict[str, Any]:
    pkt = {
        "in_port": port,
        "tunnel_id": vni,
        "eth_src": src_mac,
        "eth_dst": dst_mac,
        "eth_type": ETH_TYPE_IPV4,
    }
    return {**pkt, **over}


def test_unicast_to_another_hosts_endpoint_goes_through_its_tunnel(multi: set[Flow]) -> None:
    result = walk(multi, ipv4(E1, R1.mac, R1.ipv4))
    assert result.outputs == [TUN_H2]
    assert result.sent(TUN_H2)["tunnel_id"] == VNI_A


def test_broadcast_reaches_only_hosts_with_endpoints_in_the_network(multi: set[Flow]) -> None:
    result = walk(multi, ipv4(E1, BROADCAST, "10.1.0.255"))
    assert result.ports == {E2.ofport, GW_A_PORT, TUN_H2}  # h3 has no endpoint of net A
    assert result.sent(TUN_H2)["tunnel_id"] == VNI_A
    result = walk(multi, ipv4(E3, BROADCAST, "10.1.0.255"))
    assert result.ports == {TUN_H3} and result.sent(TUN_H3)["tunnel_id"] == VNI_B


def test_what_arrives_from_a_host_stays_on_this_host(multi: set[Flow]) -> None:
    bcast = from_tunnel(TUN_H2, VNI_A, R1.mac, BROADCAST)
    assert walk(multi, bcast).ports == {E1.ofport, E2.ofport}  # no gateway, no tunnel back
    assert walk(multi, from_tunnel(TUN_H2, VNI_A, R1.mac, E2.mac)).outputs == [E2.ofport]
    # ... and never crosses into another network, whatever MAC it is sent to.
    assert walk(multi, from_tunnel(TUN_H2, VNI_A, R1.mac, E3.mac)).ports <= {E1.ofport, E2.ofport}
    assert walk(multi, from_tunnel(TUN_H3, VNI_B, R2.mac, BROADCAST)).ports == {E3.ofport}
    assert walk(multi, from_tunnel(TUN_H2, 7777, R1.mac, E2.mac)).outputs == []  # unknown VNI
    assert GW_A_PORT not in walk(multi, from_tunnel(TUN_H2, VNI_A, R1.mac, GW_A_MAC)).ports


def test_the_gateway_talks_only_to_this_hosts_endpoints(multi: set[Flow]) -> None:
    gw = EndpointState("gw", NET_A, GW_A_PORT, GW_A_MAC, GW_A_IP)
    assert walk(multi, ipv4(gw, R1.mac, R1.ipv4)).ports == {E1.ofport, E2.ofport}
    assert TUN_H2 not in walk(multi, ipv4(gw, BROADCAST, "10.1.0.255")).ports
    assert walk(multi, arp_request(gw, R1.ipv4)).ports == {E1.ofport, E2.ofport}


def test_arp_for_another_hosts_endpoint(multi: set[Flow]) -> None:
    reply = walk(multi, arp_request(E1, R1.ipv4)).sent(E1.ofport)
    assert (reply["arp_op"], reply["arp_sha"], reply["arp_spa"]) == (2, R1.mac, R1.ipv4)
    flood_mode = compile_flows(cluster("flood"))
    result = walk(flood_mode, arp_request(E1, R1.ipv4))
    assert result.outputs == [TUN_H2] and result.sent(TUN_H2)["tunnel_id"] == VNI_A


def test_vlan_network_tags_frames_on_the_uplink(multi: set[Flow]) -> None:
    result = walk(multi, ipv4(E5, R3.mac, R3.ipv4))
    assert result.outputs == [UPLINK]
    assert result.sent(UPLINK)["vlan_vid"] == OFPVID_PRESENT | VLAN_C
    # The VLAN may hold hosts netplugin does not know: its floods always reach the uplink.
    assert walk(multi, ipv4(E5, BROADCAST, "10.3.0.255")).ports == {UPLINK}
    tagged = {
        "in_port": UPLINK,
        "vlan_vid": OFPVID_PRESENT | VLAN_C,
        "eth_src": R3.mac,
        "eth_dst": E5.mac,
        "eth_type": ETH_TYPE_IPV4,
    }
    result = walk(multi, tagged)
    assert result.outputs == [E5.ofport] and "vlan_vid" not in result.sent(E5.ofport)
    assert walk(multi, {**tagged, "vlan_vid": OFPVID_PRESENT | 301}).outputs == []
    assert walk(multi, {**tagged, "eth_dst": BROADCAST}).ports == {E5.ofport}


def test_remote_endpoints_of_networks_not_on_this_host_cost_no_flows(multi: set[Flow]) -> None:
    state = cluster()
    state.remote_endpoints.remove(R4)
    assert compile_flows(state) == multi


def test_one_more_endpoint_changes_a_bounded_number_of_flows() -> None:
    def state(n: int) -> DesiredState:
        eps = [
            EndpointState(f"e{i}", NET_A, 100 + i, f"02:00:00:01:{i >> 8:02x}:{i & 0xFF:02x}")
            for i in range(n)
        ]
        remotes = [
            RemoteEndpointState(f"r{i}", NET_A, "h2", f"02:00:00:02:{i >> 8:02x}:{i & 0xFF:02x}")
            for i in range(n)
        ]
        nets = [NetworkState(NET_A, 100, GW_A_PORT, GW_A_MAC, GW_A_IP, vni=VNI_A)]
        return DesiredState(nets, eps, remotes, [TunnelState("h2", TUN_H2)])

    for n in (10, 200):
        d = diff(compile_flows(state(n + 1)), compile_flows(state(n)))
        # Its own flows plus the segment's floods: the same count however big the network.
        assert len(d.to_add) <= 8 and not d.to_delete, (n, len(d.to_add))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.tunnels.append(TunnelState("h2", 70)), "host h2 has two tunnels"),
        (lambda s: s.tunnels.append(TunnelState("h9", E1.ofport)), "both use ofport 1"),
        (
            lambda s: s.remote_endpoints.append(
                RemoteEndpointState("rx", NET_A, "h3", E2.mac, "10.1.0.99")
            ),
            "endpoint ep2 and endpoint rx on host h3 both use MAC",
        ),
        (
            lambda s: s.networks.append(NetworkState("x", 9, vni=1, vlan=2)),
            "network x: a VNI and a VLAN",
        ),
    ],
)
def test_bad_cluster_state_is_refused_with_the_object_named(mutate: Any, message: str) -> None:
    state = cluster()
    mutate(state)
    with pytest.raises(ValueError, match=message):
        compile_flows(state)


def test_cluster_state_round_trips_through_json_form() -> None:
    assert DesiredState.from_dict(cluster().to_dict()) == cluster()


# ---------------------------------------------------------------- compiler properties


def test_pipeline_is_ordered_and_every_table_has_a_miss_flow(flows: set[Flow]) -> None:
    ids = [t.id for t in PIPELINE]
    assert ids == sorted(set(ids))
    assert PIPELINE[-1].miss == "drop"
    for spec in PIPELINE:
        (miss,) = [f for f in flows if f.table == spec.id and f.priority == 0]
        assert miss.match == ()


def test_compile_is_deterministic() -> None:
    first = compile_flows(world())
    state = world()
    rng = random.Random(7)
    for _ in range(5):
        rng.shuffle(state.networks)
        rng.shuffle(state.endpoints)
        assert compile_flows(state) == first
    assert install_order(first) == install_order(compile_flows(world()))
    assert [f.table for f in install_order(first)] == sorted((f.table for f in first), reverse=True)
    assert [f.table for f in removal_order(first)] == sorted(f.table for f in first)


def test_flow_count_is_linear_in_endpoints_and_networks() -> None:
    def count(n_networks: int, per_network: int) -> int:
        networks = [NetworkState(f"n{i}", i + 1, 1000 + i, None, None) for i in range(n_networks)]
        eps = [
            EndpointState(
                f"e{i}-{j}",
                f"n{i}",
                i * 100 + j + 1,
                f"02:00:00:{i:02x}:{j // 256:02x}:{j % 256:02x}",
            )
            for i in range(n_networks)
            for j in range(per_network)
        ]
        return len(compile_flows(DesiredState(networks, eps)))

    per_endpoint = (count(1, 200) - count(1, 100)) // 100
    assert per_endpoint <= 10
    assert count(1, 300) - count(1, 200) == count(1, 200) - count(1, 100) == 100 * per_endpoint
    per_network = count(2, 10) - count(1, 10) - 10 * per_endpoint
    assert count(10, 30) == count(0, 0) + 10 * per_network + 300 * per_endpoint


def test_state_round_trips_through_json_form() -> None:
    assert DesiredState.from_dict(world().to_dict()) == world()


def _add_ep(**kw: Any) -> Any:
    endpoint = EndpointState(
        **{"id": "x", "network_id": NET_A, "ofport": 7, "mac": "02:0:0:0:0:77", **kw}
    )
    return lambda s: s.endpoints.append(endpoint)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_add_ep(network_id="nope"), "network nope is unknown"),
        (_add_ep(id=E2.id), "endpoint ep2 is listed twice"),
        (_add_ep(ofport=2), "endpoint ep2 and endpoint x both use ofport 2"),
        (lambda s: s.networks.append(NetworkState("c", 100)), "share segment 100"),
        (_add_ep(mac="01:00:5e:00:00:01"), "endpoint x: MAC 01:00:5e:00:00:01 is a multicast"),
        (_add_ep(mac=E1.mac), "both use MAC"),
        (_add_ep(ipv4=GW_A_IP), "gateway and endpoint x both use IP 10.1.0.254"),
        (_add_ep(ipv4="fd00::7"), "endpoint x: 'fd00::7' is not an IPv4"),
    ],
)
def test_bad_state_is_refused_with_the_object_named(mutate: Any, message: str) -> None:
    state = world()
    mutate(state)
    with pytest.raises(ValueError, match=message):
        compile_flows(state)


# ---------------------------------------------------------------- Flow values and diff


def test_flow_is_canonical() -> None:
    a = flow(1, 5, [("goto", 2), ("output", 3)], eth_dst="AA:BB:CC:00:00:01", in_port=3)
    b = flow(1, 5, [("output", 3), ("goto", 2)], in_port=3, eth_dst="aa:bb:cc:00:00:01")
    assert a == b and hash(a) == hash(b)
    assert a.cookie == COOKIE
    assert flow(0, 1, metadata=(5, (1 << 64) - 1)).match == (("metadata", 5),)
    assert flow(0, 1, metadata=(0x1FF, 0xFF)).match == (("metadata", (0xFF, 0xFF)),)
    assert flow(0, 1, ipv6_src="fe80::/10").match == (("ipv6_src", ("fe80::", "ffc0::")),)
    assert flow(0, 1, ipv4_dst="10.1.2.3/32").match == (("ipv4_dst", "10.1.2.3"),)
    assert flow(0, 1, [("drop",)]).actions == ()
    with pytest.raises(ValueError, match="must go forward"):
        flow(2, 1, [("goto", 1)])
    with pytest.raises(ValueError, match="not a MAC"):
        flow(0, 1, eth_dst="zz")


F1 = flow(0, 10, [("goto", 1)], in_port=1)
F2 = flow(0, 10, [("goto", 1)], in_port=2)
F3 = flow(1, 10, [("output", 1)], eth_dst="02:00:00:00:00:01")


def test_diff_is_empty_when_equal() -> None:
    assert diff({F1, F2}, {F1, F2}) == (frozenset(), frozenset())


def test_diff_adds_missing_and_deletes_stale() -> None:
    to_add, to_delete = diff({F1, F3}, {F1, F2})
    assert to_add == {F3}
    assert to_delete == {F2}


def test_diff_replaces_a_changed_flow_by_add_only() -> None:
    changed = flow(1, 10, [("output", 2)], eth_dst="02:00:00:00:00:01")
    result = diff({F1, changed}, {F1, F3})
    assert result.to_add == {changed}
    assert result.to_delete == frozenset()  # a strict delete would remove the new one too
    assert replaced(result, {F1, F3}) == {changed}
    recookied = Flow(F1.table, F1.priority, F1.match, F1.actions, COOKIE | 1)
    assert diff({recookied}, {F1}).to_add == {recookied}


def test_diff_refuses_two_desired_flows_with_one_identity() -> None:
    other = flow(0, 10, [("goto", 2)], in_port=1)
    with pytest.raises(ValueError, match="one identity"):
        diff({F1, other}, set())


# ---------------------------------------------------------------- os-ken conversion


def test_every_compiled_flow_survives_the_wire() -> None:
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    extra = {
        flow(0, 7, [("push_vlan", 0x8100), ("set_field", "vlan_vid", 0x1005), ("output", 4)]),
        flow(0, 6, [("pop_vlan",), ("set_field", "tunnel_id", 50), ("output", 4)], vlan_vid=0x1005),
        flow(0, 5, eth_dst=("01:00:00:00:00:00", "01:00:00:00:00:00")),
    }
    for f in (
        compile_flows(world()) | compile_flows(cluster()) | compile_flows(cluster("flood")) | extra
    ):
        mod = flow_mod(dp, f)
        mod.set_xid(1)
        mod.serialize()
        wire = ofproto_parser.msg(dp, ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, len(mod.buf), 1, mod.buf)
        back = from_ofp_flow(
            wire.table_id, wire.priority, wire.cookie, wire.match, wire.instructions
        )
        assert back == f


def test_a_move_read_back_by_its_nxm_names_is_the_same_flow() -> None:
    wanted = flow(2, 100, [("move", "eth_src", "eth_dst", 48), ("output", 0xFFFFFFF8)])
    inst = ofp_parser.OFPInstructionActions(
        ofp.OFPIT_APPLY_ACTIONS,
        [
            ofp_parser.NXActionRegMove(src_field="eth_src_nxm", dst_field="eth_dst_nxm", n_bits=48),
            ofp_parser.OFPActionOutput(0xFFFFFFF8),
        ],
    )
    assert from_ofp_flow(2, 100, COOKIE, ofp_parser.OFPMatch(), [inst]) == wanted


def test_strict_delete_matches_any_output_and_the_exact_cookie() -> None:
    dp = ofproto_protocol.ProtocolDesc(ofp.OFP_VERSION)
    mod = flow_mod(dp, F3, ofp.OFPFC_DELETE_STRICT)
    assert (mod.out_port, mod.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
    assert (mod.cookie, mod.cookie_mask) == (F3.cookie, (1 << 64) - 1)
    assert mod.instructions == []


# ---------------------------------------------------------------- datapath type


def test_datapath_type_is_system_only_with_the_kernel_module(tmp_path: Any) -> None:
    assert detect_datapath_type(tmp_path) == "netdev"
    (tmp_path / "class/net/ovs-system").mkdir(parents=True)
    assert detect_datapath_type(tmp_path) == "system"
    other = tmp_path / "other"
    (other / "module/openvswitch").mkdir(parents=True)
    assert detect_datapath_type(other) == "system"


# ---------------------------------------------------------------- reconcile, fake switch
# FlowController is exercised here without os-ken's server: starting that in the pytest
# process would leave non-daemon threads behind (see datapath.ofapp).


class FakeSwitch:
    """A datapath that answers flow stats, flow-mods and barriers at once, in-thread."""

    def __init__(self, controller: FlowController, flows: set[Flow] = frozenset()) -> None:
        self.controller = controller
        self.flows = set(flows)
        self.flow_mods: list[Any] = []
        self.refuse: set[Flow] = set()
        self.id = 0xAB
        self.address = ("127.0.0.1", 1)
        self._xid = 0

    def set_xid(self, msg: Any) -> None:
        self._xid += 1
        msg.xid = self._xid

    def send_msg(self, msg: Any) -> bool:
        if msg.xid is None:
            self.set_xid(msg)
        if isinstance(msg, ofp_parser.OFPFlowStatsRequest):
            self._stats(msg)
        elif isinstance(msg, ofp_parser.OFPFlowMod):
            self._flow_mod(msg)
        elif isinstance(msg, ofp_parser.OFPBarrierRequest):
            self.controller._on_reply(self._reply(msg.xid))
        return True

    def _reply(self, xid: int, **fields: Any) -> Any:
        return type("Reply", (), {"xid": xid, "datapath": self, "flags": 0, **fields})()

    def _stats(self, msg: Any) -> None:
        mine = sorted(
            (f for f in self.flows if f.cookie & msg.cookie_mask == msg.cookie & msg.cookie_mask),
            key=str,
        )
        body = [
            ofp_parser.OFPFlowStats(
                table_id=f.table,
                priority=f.priority,
                cookie=f.cookie,
                match=to_ofp_match(f),
                instructions=to_ofp_instructions(f),
            )
            for f in mine
        ]
        chunks = [body[i : i + 3] for i in range(0, len(body), 3)] or [[]]
        for i, chunk in enumerate(chunks):
            more = ofp.OFPMPF_REPLY_MORE if i < len(chunks) - 1 else 0
            self.controller._on_reply(self._reply(msg.xid, flags=more, body=chunk))

    def _flow_mod(self, msg: Any) -> None:
        self.flow_mods.append(msg)
        f = from_ofp_flow(msg.table_id, msg.priority, msg.cookie, msg.match, msg.instructions)
        if msg.command == ofp.OFPFC_ADD:
            if f in self.refuse:
                error = self._reply(msg.xid, type=ofp.OFPET_BAD_ACTION, code=0)
                self.controller._on_error(error)
                return
            self.flows = {g for g in self.flows if g.identity != f.identity} | {f}
        elif msg.command == ofp.OFPFC_DELETE_STRICT:
            assert (msg.out_port, msg.out_group) == (ofp.OFPP_ANY, ofp.OFPG_ANY)
            self.flows = {
                g
                for g in self.flows
                if not (g.identity == f.identity and g.cookie & msg.cookie_mask == msg.cookie)
            }


def _reconcile(switch: FakeSwitch, desired: set[Flow]) -> Any:
    ctl = switch.controller
    ctl._on_connect(switch)
    switch.flow_mods.clear()
    return ctl._reconcile(switch, 1, frozenset(desired), 1)


def test_reconcile_converges_then_sends_nothing() -> None:
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController())
    first = _reconcile(switch, desired)
    assert switch.flows == desired
    assert (first.found, first.added, first.deleted) == (0, len(desired), 0)
    # Flows added from the last table back, so classify flows come last.
    assert [m.table_id for m in switch.flow_mods] == sorted(
        (f.table for f in desired), reverse=True
    )
    again = _reconcile(switch, desired)
    assert (again.found, again.added, again.deleted, again.replaced) == (len(desired), 0, 0, 0)
    assert switch.flow_mods == []


def test_reconcile_deletes_stale_replaces_changed_and_leaves_foreign_flows() -> None:
    desired = compile_flows(world())
    foreign = flow(0, 500, [("output", 9)], cookie=0, in_port=9)
    stale = flow(0, 100, [("goto", 1)], in_port=77)
    victim = next(f for f in desired if f.table == 4 and f.priority == 10)
    changed = Flow(victim.table, victim.priority, victim.match, (("output", 42),), victim.cookie)
    switch = FakeSwitch(FlowController(), (desired - {victim}) | {foreign, stale, changed})
    stats = _reconcile(switch, desired)
    assert switch.flows == desired | {foreign}
    assert (stats.added, stats.replaced, stats.deleted) == (1, 1, 1)
    assert [m.command for m in switch.flow_mods] == [ofp.OFPFC_DELETE_STRICT, ofp.OFPFC_ADD]


def test_reconcile_reports_flows_the_switch_refuses() -> None:
    desired = compile_flows(world())
    switch = FakeSwitch(FlowController())
    switch.refuse = {next(iter(desired))}
    stats = _reconcile(switch, desired)
    assert len(stats.errors) == 1 and "OFPET_BAD_ACTION" in stats.errors[0]
    assert switch.flows == desired - switch.refuse


def test_dead_event_of_an_old_connection_is_ignored() -> None:
    ctl = FlowController()
    old, new = FakeSwitch(ctl), FakeSwitch(ctl)
    ctl._on_connect(old)
    ctl._on_connect(new)  # the switch reconnected before the old DEAD arrived
    ctl._on_disconnect(old)
    assert ctl.connected and ctl.wait_connected(0)
    ctl._on_disconnect(new)
    assert not ctl.connected


def test_set_desired_refuses_two_flows_with_one_identity() -> None:
    with pytest.raises(ValueError, match="one identity"):
        FlowController().set_desired({F1, flow(0, 10, [("goto", 2)], in_port=1)})


def test_no_reconcile_before_desired_state_is_known() -> None:
    """A restarted agent connects before it has re-read its state: the switch keeps its flows."""
    import threading
    import time

    running = compile_flows(world())
    ctl = FlowController()
    switch = FakeSwitch(ctl, running)
    worker = threading.Thread(target=ctl._work, daemon=True)
    worker.start()
    try:
        ctl._on_connect(switch)
        time.sleep(0.3)  # give a wrongly eager worker the chance to act
        assert switch.flow_mods == [] and switch.flows == running
        generation = ctl.set_desired(running)
        stats = ctl.wait_reconciled(generation, timeout=5)
        assert stats is not None
        assert (stats.found, stats.added, stats.deleted) == (len(running), 0, 0)
        assert switch.flows == running
    finally:
        ctl._stopping.set()
        ctl._wake.set()
        worker.join(5)
