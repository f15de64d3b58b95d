"""The agent's router port (routing mode with BGP, datapath.bridgeports and HostDatapath.
set_fabric) against fake OVS, links and iptables: made with its address, in the flows and
iptables, replaced when the address changes, removed, and adopted after a restart."""

from __future__ import annotations

from typing import Any

from datapath.bridgeports import EXT_FABRIC
from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.hostnat import FABRIC_PORT, GatewayNet, forward_rules, nat_rules
from datapath.natsync import gateway_nets
from testbed.fakes_datapath import FakeController, FakeIptables, FakeLinks, FakeOvs

VL = NetworkState(
    "blue:vl", 300, "10.80.0.0/24", "10.80.0.1", encap="vlan", vrf=1,
    ipv6_subnet="fd80::/64", ipv6_gateway="fd80::1",
)  # fmt: skip
VX = NetworkState("blue:vx", 5001, "10.81.0.0/24", "10.81.0.1", vrf=1)
E1 = EndpointState("e1", VL.id, "02:42:0a:50:00:02", "10.80.0.2")
FABRIC = {1: ("10.80.0.0/24", "fd80::/64"), 2: ("10.90.0.0/24", "10.91.0.0/24", "fd90::/64")}


def agent(
    ovs: FakeOvs, iptables: FakeIptables, links: FakeLinks, fabric: Any = None
) -> HostDatapath:
    a = HostDatapath(
        HostConfig(datapath_type="netdev", vlan_uplink="eth2", tunnels=True),
        ovs,
        FakeController(),
        iptables,
        links,
    )
    a.start()
    a.resync([VL, VX], [], fwd_mode="routing", fabric_subnets=fabric)
    return a


def test_the_router_port_holds_the_address_and_routes_the_vlan_networks() -> None:
    ovs, iptables, links = FakeOvs(), FakeIptables(), FakeLinks()
    a = agent(ovs, iptables, links)
    assert a.desired().fabric_port is None and a.fabric_addresses() == ()
    a.set_fabric(("10.200.0.1/24",), FABRIC)
    port = ovs.ports[FABRIC_PORT]
    assert port.external_ids == {EXT_FABRIC: "10.200.0.1/24"}
    assert links.gateways[FABRIC_PORT] == (1500, ("10.200.0.1/24",))
    assert a.desired().fabric_port == port.ofport and a.fabric_addresses() == ("10.200.0.1/24",)
    # iptables: the VLAN network is routed (not NATed toward the fabric, reached from it
    # except from the other tenant's subnets); the VXLAN one is not.
    nets = {n.subnet: n for n in iptables.synced[-1][0]}
    assert nets["10.80.0.0/24"].fabric_foreign == ("10.90.0.0/24", "10.91.0.0/24")
    assert nets["fd80::/64"].fabric_foreign == ("fd90::/64",)  # ip6tables': IPv6 only
    assert nets["10.81.0.0/24"].fabric_foreign is None
    assert not links.ipv6_forwarding  # an IPv4 router IP alone: the host need not route IPv6
    # A new address: a new port (the old address goes with the old one).
    a.set_fabric(("10.200.0.9/24",), FABRIC)
    assert ovs.ports[FABRIC_PORT].ofport != port.ofport
    assert a.desired().fabric_port == ovs.ports[FABRIC_PORT].ofport
    a.set_fabric(())
    assert FABRIC_PORT not in ovs.ports and a.desired().fabric_port is None
    assert all(n.fabric_foreign is None for n in iptables.synced[-1][0])


def test_an_ipv6_router_ip_is_on_the_port_and_the_host_forwards_ipv6() -> None:
    ovs, iptables, links = FakeOvs(), FakeIptables(), FakeLinks()
    addresses = ("10.200.0.1/24", "fd00:200::1/64")
    agent(ovs, iptables, links).set_fabric(addresses, FABRIC)
    assert ovs.ports[FABRIC_PORT].external_ids == {EXT_FABRIC: "10.200.0.1/24,fd00:200::1/64"}
    assert links.gateways[FABRIC_PORT] == (1500, addresses) and links.ipv6_forwarding
    # A restart adopts both, and addresses the port again (a vswitchd restart drops them).
    again_links = FakeLinks()
    again = agent(ovs, iptables, again_links, FABRIC)
    assert again.fabric_addresses() == addresses
    again.set_fabric(addresses, FABRIC)
    assert again_links.gateways[FABRIC_PORT] == (1500, addresses) and again_links.ipv6_forwarding


def test_a_restarted_agent_adopts_the_router_port_as_it_is() -> None:
    ovs, iptables, links = FakeOvs(), FakeIptables(), FakeLinks()
    agent(ovs, iptables, links).set_fabric(("10.200.0.1/24",), FABRIC)
    before = ovs.ports[FABRIC_PORT].ofport
    links.addressed.clear()
    again = agent(ovs, iptables, FakeLinks(), FABRIC)
    assert again.desired().fabric_port == before and again.fabric_addresses() == ("10.200.0.1/24",)
    # Its iptables hold the other tenants' drops from the restart's first sync on.
    nets = {n.subnet: n for n in iptables.synced[-1][0]}
    assert nets["10.80.0.0/24"].fabric_foreign == ("10.90.0.0/24", "10.91.0.0/24")
    again.set_fabric(("10.200.0.1/24",), FABRIC)  # the same address: the port is kept
    assert ovs.ports[FABRIC_PORT].ofport == before


def test_a_host_without_a_vlan_uplink_refuses_a_router_ip() -> None:
    a = HostDatapath(
        HostConfig(datapath_type="netdev"), FakeOvs(), FakeController(), FakeIptables(), FakeLinks()
    )
    a.start()
    a.resync([], [], fwd_mode="routing")
    try:
        a.set_fabric(("10.200.0.1/24",))
    except ValueError as e:
        assert "no VLAN uplink here (--vlan-if)" in str(e)
    else:
        raise AssertionError("a router IP without an uplink was taken")


def test_routed_networks_rules() -> None:
    routed = GatewayNet("10.80.0.0/24", "npgw300", fabric_foreign=("10.90.0.0/24",))
    plain = GatewayNet("10.81.0.0/24", "npgw5001")
    nat = nat_rules([routed, plain])
    assert nat[0] == f"-A NETPLUGIN-POSTROUTING -s 10.80.0.0/24 -o {FABRIC_PORT} -j RETURN"
    assert "-A NETPLUGIN-POSTROUTING -s 10.80.0.0/24 ! -o npgw+ -j MASQUERADE" in nat
    assert not any("10.81.0.0/24 -o npfabric" in r for r in nat)
    fwd = forward_rules([routed, plain])
    inbound = f"-i {FABRIC_PORT} -o npgw300"
    drop, accept = (  # as `iptables -S` prints them (-s first): a sync finds them unchanged
        fwd.index(f"-A NETPLUGIN-FWD -s 10.90.0.0/24 {inbound} -j DROP"),
        fwd.index(f"-A NETPLUGIN-FWD {inbound} -j ACCEPT"),
    )
    assert drop < accept
    assert not any(f"-i {FABRIC_PORT} -o npgw5001" in r for r in fwd)


def test_each_family_is_judged_against_its_own_routed_subnets() -> None:
    fabric = {1: ("10.80.0.0/24", "fd80::/64"), 2: ("10.90.0.0/24", "fd90::/64")}
    nets = gateway_nets(VL, fabric)
    assert [(n.subnet, n.fabric_foreign) for n in nets] == [
        ("10.80.0.0/24", ("10.90.0.0/24",)),
        ("fd80::/64", ("fd90::/64",)),
    ]
    assert [n.fabric_foreign for n in gateway_nets(VL, None)] == [None, None]  # not routed
    assert [n.subnet for n in gateway_nets(VX, fabric)] == ["10.81.0.0/24"]
    assert gateway_nets(VX, fabric)[0].fabric_foreign is None  # VXLAN: not the fabric's
