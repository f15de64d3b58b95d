"""HostDatapath decisions, with fakes for its effects: OVSDB, OpenFlow, iptables, links."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.hostnat import DNAT_CHAIN, dnat_rules
from datapath.offloads import keeps_offloads
from datapath.ovs import PortInfo, detect_datapath_type
from datapath.pipeline import ETH_TYPE_ARP, ETH_TYPE_IPV4, TunnelState
from datapath.ports import PublishedPort
from datapath.veth import veth_names
from testbed.fakeoftable import walk
from testbed.fakes_datapath import FakeController, FakeHostPorts, FakeIptables, FakeLinks, FakeOvs


@pytest.fixture
def world() -> dict[str, Any]:
    ovs, ctl, ipt, links = FakeOvs(), FakeController(), FakeIptables(), FakeLinks()
    config = HostConfig(datapath_type="netdev", tunnels=True)
    agent = HostDatapath(config, ovs, ctl, ipt, links, FakeHostPorts())
    agent.ready_timeout = 0.1
    return {
        "agent": agent,
        "ovs": ovs,
        "ctl": ctl,
        "ipt": ipt,
        "links": links.links,
        "isolated": links.isolated,
        "fake_links": links,
    }


NET = NetworkState(id="default:n1", tag=7, subnet="10.1.0.0/24", gateway="10.1.0.1")
EP = EndpointState("ab" * 32, "default:n1", "02:42:0a:01:00:02", "10.1.0.2")


def test_nothing_changes_before_the_first_resync(world: dict[str, Any]) -> None:
    agent = world["agent"]
    with pytest.raises(RuntimeError, match="not read the cluster state"):
        agent.create_endpoint_port(EP)
    assert world["ctl"].pushed == [] and world["ovs"].ports == {}


def from_port(ofport: int, mac: str, ip: str, dst_mac: str, dst_ip: str) -> dict[str, Any]:
    return {
        "in_port": ofport,
        "eth_src": mac,
        "eth_dst": dst_mac,
        "eth_type": ETH_TYPE_IPV4,
        "ipv4_src": ip,
        "ipv4_dst": dst_ip,
    }


def arp_for(ofport: int, mac: str, ip: str, target: str) -> dict[str, Any]:
    return {
        "in_port": ofport,
        "eth_src": mac,
        "eth_dst": "ff:ff:ff:ff:ff:ff",
        "eth_type": ETH_TYPE_ARP,
        "arp_op": 1,
        "arp_sha": mac,
        "arp_spa": ip,
        "arp_tpa": target,
    }


def test_endpoint_lifecycle_pushes_flows_and_nat(world: dict[str, Any]) -> None:
    agent, ovs, ctl, ipt = world["agent"], world["ovs"], world["ctl"], world["ipt"]
    agent.resync([NET], [])
    ifname = agent.create_endpoint_port(EP)
    assert ifname == veth_names(EP.id)[1]
    assert set(ovs.ports) == {"npgw7", veth_names(EP.id)[0]}
    assert len(ctl.pushed[-1]) > len(ctl.pushed[0])  # the endpoint's flows were added
    # ... and they carry its packets: to the gateway, and the gateway's back to it.
    port, gw = ovs.ports[veth_names(EP.id)[0]].ofport, ovs.ports["npgw7"].ofport
    out = from_port(port, EP.mac, EP.ipv4, NET.gateway_mac, "192.0.2.1")
    back = from_port(gw, NET.gateway_mac, "192.0.2.1", EP.mac, EP.ipv4)
    assert walk(ctl.pushed[0], out).outputs == [] and walk(ctl.pushed[0], back).outputs == []
    assert walk(ctl.pushed[-1], out).outputs == [gw]
    assert walk(ctl.pushed[-1], arp_for(port, EP.mac, EP.ipv4, NET.gateway)).outputs == [gw]
    assert walk(ctl.pushed[-1], back).outputs == [port]
    assert walk(ctl.pushed[-1], {**out, "ipv4_src": "10.1.0.99"}).outputs == []  # spoofed
    agent.publish(EP.id, [PublishedPort("tcp", "", 8080, 80, host_port_end=8080)])
    assert ipt.synced[-1][1] == [PublishedPort("tcp", "", 8080, 80, EP.ipv4)]
    agent.delete_endpoint_port(EP.id)
    # Its flows are gone when the call returns; its port and veth once the teardown settles.
    assert ipt.synced[-1][1] == []
    assert walk(ctl.pushed[-1], out).outputs == [] and walk(ctl.pushed[-1], back).outputs == []
    assert agent.settle(5) == 0
    assert set(ovs.ports) == {"npgw7"} and world["links"] == set()
    agent.remove_network(NET.id)
    assert ovs.ports == {}
    assert walk(ctl.pushed[-1], {**back, "eth_dst": "ff:ff:ff:ff:ff:ff"}).outputs == []


def test_failed_port_leaves_nothing(world: dict[str, Any]) -> None:
    agent, ovs = world["agent"], world["ovs"]
    agent.resync([NET], [])
    ovs.add_port_error = "port vp...: could not open network device"
    with pytest.raises(RuntimeError, match="could not open"):
        agent.create_endpoint_port(EP)
    assert world["links"] == set() and veth_names(EP.id)[0] not in ovs.ports
    assert all(e.id != EP.id for e in agent.desired().endpoints)


def test_endpoint_ports_on_netdev_finish_their_checksums(world: dict[str, Any]) -> None:
    agent, links = world["agent"], world["fake_links"]
    agent.resync([NET], [])
    container = agent.create_endpoint_port(EP)
    assert links.offloaded == [container]


VLAN_NET = NetworkState(
    id="default:v1", tag=40, subnet="10.4.0.0/24", gateway="10.4.0.1", encap="vlan"
)
VLAN_EP = EndpointState("cd" * 32, "default:v1", "02:42:0a:04:00:02", "10.4.0.2")


def test_offloads_stay_where_the_switch_can_take_them() -> None:
    assert keeps_offloads("system", False, "vxlan", True)  # the kernel handles both
    assert not keeps_offloads("netdev", False, "vlan", False)  # partial checksums: TCP fails
    assert keeps_offloads("netdev", True, "vlan", True)  # a VLAN uplink segments
    assert keeps_offloads("netdev", True, "vxlan", False)  # no VTEP: the traffic stays here
    assert not keeps_offloads("netdev", True, "vxlan", True)  # userspace VXLAN cannot segment


def test_with_userspace_tso_only_tunnelled_networks_lose_offloads(
    world: dict[str, Any],
) -> None:
    agent, links = world["agent"], world["fake_links"]
    links.tso = True
    agent.start()
    assert agent.switch_tso
    agent.resync([NET, VLAN_NET], [])
    # The VXLAN network spans hosts: its containers finish their checksums. Gateway taps
    # keep theirs (their packets never enter a tunnel).
    vxlan_container = agent.create_endpoint_port(EP)
    vlan_container = agent.create_endpoint_port(VLAN_EP)
    assert links.offloaded == [vxlan_container] and vlan_container != vxlan_container


def test_a_switch_restarted_without_tso_turns_offloads_off_again(
    world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    agent, links = world["agent"], world["fake_links"]
    links.tso = True
    agent.start()
    agent.resync([VLAN_NET], [])
    assert agent.create_endpoint_port(VLAN_EP) not in links.offloaded
    links.tso = False
    agent.switch_connected()
    assert not agent.switch_tso
    assert "restarted" in caplog.text and "userspace-tso-enable" in caplog.text
    agent.delete_endpoint_port(VLAN_EP.id)
    assert agent.create_endpoint_port(VLAN_EP) in links.offloaded


def test_gateways_get_the_networks_mtu_and_addresses(world: dict[str, Any]) -> None:
    agent, links = world["agent"], world["fake_links"]
    dual = NetworkState(
        id="default:n2",
        tag=8,
        subnet="10.2.0.0/16",
        gateway="10.2.0.1",
        ipv6_subnet="fd00:2::/64",
        ipv6_gateway="fd00:2::1",
    )
    vlan = NetworkState(id="default:v", tag=9, subnet="10.3.0.0/24", gateway="", encap="vlan")
    agent.resync([NET, dual, vlan], [])
    assert links.gateways == {
        "npgw7": (1450, ("10.1.0.1/24",)),  # VXLAN between hosts costs its header
        "npgw8": (1450, ("10.2.0.1/16", "fd00:2::1/64")),
        "npgwv9": (1500, ()),  # no gateway address: up, but not addressed
    }


def test_start_makes_the_vlan_uplink_a_switch_port(world: dict[str, Any]) -> None:
    agent, ovs, links = world["agent"], world["ovs"], world["fake_links"]
    agent.config.vlan_uplink = "eth9"
    agent.start()
    assert ovs.bridges["netplugin"]["datapath_type"] == "netdev"
    assert links.isolated == ["eth9"] and ovs.ports["eth9"].external_ids
    agent.resync([NET], [])
    assert agent.desired().uplink_port == ovs.ports["eth9"].ofport


def test_a_port_that_cannot_be_isolated_is_still_adopted(world: dict[str, Any]) -> None:
    agent, ovs, links = world["agent"], world["ovs"], world["fake_links"]
    ovs.ports[veth_names(EP.id)[0]] = PortInfo(31, {"netplugin-endpoint": EP.id})
    links.isolate_error = PermissionError("read-only /proc/sys")
    assert agent.resync([NET], [EP])["endpoints"] == 1


def test_resync_adopts_live_ports_collects_stale_ones_and_keeps_published_ports(
    world: dict[str, Any],
) -> None:
    agent, ovs, ipt, links = world["agent"], world["ovs"], world["ipt"], world["links"]
    live_host = veth_names(EP.id)[0]
    ovs.ports = {
        live_host: PortInfo(31, {"netplugin-endpoint": EP.id}),
        "npgw7": PortInfo(30, {"netplugin-network": NET.id}),
        "vpdeadbeef001": PortInfo(32, {"netplugin-endpoint": "gone"}),
        "npgw9": PortInfo(33, {"netplugin-network": "default:gone"}),
        "uplink": PortInfo(1, {}),  # not ours: never touched
    }
    links.update(
        {live_host, "vc" + live_host[2:], "vpdeadbeef001", "vcdeadbeef001", "vpfeedface002"}
    )
    published = PublishedPort("tcp", "", 8080, 80, EP.ipv4)
    ipt.chains[DNAT_CHAIN] = dnat_rules([published, PublishedPort("tcp", "", 9090, 80, "10.9.9.9")])
    result = agent.resync([NET], [EP])
    assert result == {
        "endpoints": 1,
        "missing": 0,
        "removed": 4,
        "tunnels": 0,
        "remote_endpoints": 0,
    }
    assert set(ovs.ports) == {live_host, "npgw7", "uplink"}
    assert links == {live_host, "vc" + live_host[2:]}
    assert agent.desired().endpoints[0].ofport == 31  # adopted, not recreated
    assert world["isolated"] == [live_host]  # adopted ports get the host-stack isolation too
    assert ipt.synced[-1][1] == [published]  # the stale container's mapping is dropped


def test_endpoint_whose_veth_vanished_is_reported(world: dict[str, Any]) -> None:
    result = world["agent"].resync([NET], [EP])
    assert result["missing"] == 1 and result["endpoints"] == 0


def test_switch_reconnect_readdresses_gateways_only_after_resync(world: dict[str, Any]) -> None:
    agent = world["agent"]
    addressed = world["fake_links"].addressed
    agent.switch_connected()
    assert addressed == []  # before resync the state is partial; resync addresses them
    agent.resync([NET], [])
    addressed.clear()
    agent.switch_connected()  # e.g. ovs-vswitchd restarted and made npgw7 anew
    assert addressed == [NET.gateway_port]


R1 = EndpointState("r1", NET.id, "02:42:0a:01:00:09", "10.1.0.9", host="h2")
R_ELSEWHERE = EndpointState("r2", "default:other", "02:42:0a:02:00:09", "10.2.0.9", host="h3")


def test_tunnels_follow_the_peers(world: dict[str, Any]) -> None:
    agent, ovs = world["agent"], world["ovs"]
    agent.resync([NET], [], peers={"h2": "192.168.50.2", "h3": "192.168.50.3"})
    assert {n: i.external_ids for n, i in ovs.ports.items() if n.startswith("vx")} == {
        "vxc0a83202": {"netplugin-tunnel": "h2"},
        "vxc0a83203": {"netplugin-tunnel": "h3"},
    }
    kept = ovs.ports["vxc0a83202"].ofport
    agent.set_cluster({"h2": "192.168.50.2", "h4": "192.168.50.4"}, [R1, R_ELSEWHERE])
    assert sorted(n for n in ovs.ports if n.startswith("vx")) == ["vxc0a83202", "vxc0a83204"]
    assert ovs.ports["vxc0a83202"].ofport == kept  # an existing tunnel is never recreated
    desired = agent.desired()
    assert {t.host for t in desired.tunnels} == {"h2", "h4"}
    # Only endpoints of networks on this host cost flows here.
    assert [r.id for r in desired.remote_endpoints] == ["r1"]


def test_a_tunnel_made_before_takes_the_inner_dscp_outside_in_place(
    world: dict[str, Any],
) -> None:
    agent, ovs = world["agent"], world["ovs"]
    old = {"remote_ip": "192.168.50.2", "key": "flow"}  # an older netplugin's tunnel
    ovs.ports["vxc0a83202"] = PortInfo(40, {"netplugin-tunnel": "h2"}, old)
    agent.resync([NET], [], peers={"h2": "192.168.50.2"})
    assert ovs.ports["vxc0a83202"] == PortInfo(
        40, {"netplugin-tunnel": "h2"}, {**old, "tos": "inherit"}
    )


def test_restart_before_the_cluster_is_known_keeps_tunnels(world: dict[str, Any]) -> None:
    agent, ovs = world["agent"], world["ovs"]
    ovs.ports["vxc0a83202"] = PortInfo(40, {"netplugin-tunnel": "h2"})
    agent.resync([NET], [], peers=None)
    assert "vxc0a83202" in ovs.ports
    assert agent.desired().tunnels == [TunnelState("h2", 40)]


def test_no_vtep_means_no_tunnels(world: dict[str, Any]) -> None:
    agent, ovs = world["agent"], world["ovs"]
    agent.config.tunnels = False
    agent.resync([NET], [], peers={"h2": "192.168.50.2"})
    assert not [n for n in ovs.ports if n.startswith("vx")]


def test_mtu_from_the_uplink_and_the_encapsulation() -> None:
    cfg = HostConfig(uplink_mtu=1500, vlan_mtu=9000, tunnels=True)
    assert (cfg.mtu_for("vxlan"), cfg.mtu_for("vlan")) == (1450, 9000)
    assert HostConfig(uplink_mtu=1460, tunnels=True).mtu_for("vxlan") == 1410  # a cloud
    assert HostConfig(uplink_mtu=1500).mtu_for("vxlan") == 1500  # one host: no overlay
    assert HostConfig(mtu=1400, tunnels=True).mtu_for("vxlan") == 1400  # configured


def test_a_vlan_and_a_vxlan_network_may_share_a_tag() -> None:
    vx = NetworkState(id="default:a", tag=100, encap="vxlan")
    vl = NetworkState(id="default:b", tag=100, encap="vlan")
    assert vx.segment != vl.segment
    assert vx.gateway_port != vl.gateway_port and vx.gateway_mac != vl.gateway_mac
    assert max(len(vx.gateway_port), len(NetworkState("x", 4094, encap="vlan").gateway_port)) <= 15


def test_datapath_type_is_system_only_with_the_kernel_module(tmp_path: Any) -> None:
    assert detect_datapath_type(tmp_path) == "netdev"
    (tmp_path / "class/net/ovs-system").mkdir(parents=True)
    assert detect_datapath_type(tmp_path) == "system"
    other = tmp_path / "other"
    (other / "module/openvswitch").mkdir(parents=True)
    assert detect_datapath_type(other) == "system"


def test_a_new_endpoint_returns_once_its_flows_are_on_the_switch(
    world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    agent, ctl = world["agent"], world["ctl"]
    agent.resync([NET], [])
    agent.create_endpoint_port(EP)
    assert ctl.waited == [len(ctl.pushed)]  # the generation of its own delta
    agent.delete_endpoint_port(EP.id)
    ctl.switch_down = True  # the switch is away: the endpoint is still made, and said so
    agent.create_endpoint_port(EP)
    assert "not confirmed on the switch" in caplog.text
    assert veth_names(EP.id)[0] in world["ovs"].ports


def test_a_port_plugged_ahead_is_the_one_the_endpoint_gets(world: dict[str, Any]) -> None:
    """CreateEndpoint plugs the port while the master books the endpoint; the endpoint then
    takes that port, a resync meanwhile keeps it, and deleting it (the master refused) leaves
    nothing."""
    agent, ovs, ctl = world["agent"], world["ovs"], world["ctl"]
    agent.resync([NET], [])
    pushes = len(ctl.pushed)
    container = agent.plug(EP.id, NET.id, EP.mac)
    host = veth_names(EP.id)[0]
    ofport = ovs.ports[host].ofport
    assert len(ctl.pushed) == pushes  # no flows without its addresses
    agent.resync([NET], [])  # e.g. the store came back meanwhile
    assert ovs.ports[host].ofport == ofport and host in world["links"]
    assert agent.create_endpoint_port(EP) == container
    assert ovs.ports[host].ofport == ofport
    assert any(e.ofport == ofport for e in agent.desired().endpoints)
    agent.delete_endpoint_port(EP.id)
    agent.plug(EP.id, NET.id, EP.mac)
    agent.delete_endpoint_port(EP.id)  # the master refused the endpoint
    assert agent.settle(5) == 0
    assert host not in ovs.ports and world["links"] == set()
    with pytest.raises(ValueError, match="not on this host"):
        agent.plug(EP.id, "default:nope", EP.mac)


def test_a_network_taking_a_deleted_networks_tag_replaces_it_here(world: dict[str, Any]) -> None:
    """The cluster deleted n1 and gave its tag to n2 before this host dropped n1: n2's
    gateway port, MAC and flows take n1's place."""
    agent, ovs = world["agent"], world["ovs"]
    agent.resync([NET], [])
    successor = replace(NET, id="default:n2", subnet="10.2.0.0/24", gateway="10.2.0.1")
    agent.ensure_network(successor)
    assert agent.has_network("default:n2") and not agent.has_network(NET.id)
    assert ovs.ports[NET.gateway_port].external_ids == {"netplugin-network": "default:n2"}
    assert {n.id for n in agent.desired().networks} == {"default:n2"}
    # One with endpoints here is not gone: refused, and nothing changes.
    agent.create_endpoint_port(replace(EP, network_id="default:n2", ipv4="10.2.0.2"))
    with pytest.raises(ValueError, match="is still on this host, with endpoints here"):
        agent.ensure_network(NET)
    assert agent.has_network("default:n2")


def test_networks_gone_from_the_cluster_go_from_the_host_after_a_grace(
    world: dict[str, Any],
) -> None:
    agent, ovs = world["agent"], world["ovs"]
    agent.resync([NET], [])
    other = NetworkState(id="default:n9", tag=9, subnet="10.9.0.0/24", gateway="10.9.0.1")
    agent.ensure_network(other)
    agent.create_endpoint_port(replace(EP, network_id="default:n9", ipv4="10.9.0.2"))
    import time

    later = time.monotonic() + 60
    assert agent.drop_networks_gone({NET.id}, 10.0, now=time.monotonic()) == []  # too young
    assert agent.drop_networks_gone(set(), 10.0, now=later) == [NET.id]  # n9 has an endpoint
    assert NET.gateway_port not in ovs.ports and agent.has_network("default:n9")
    # Made again with another subnet under the same name: the host takes the new one.
    again = replace(NET, tag=11, subnet="10.11.0.0/24", gateway="10.11.0.1")
    agent.ensure_network(again)
    assert replace(agent.network(NET.id), gateway_ofport=None) == again
    moved = replace(other, tag=12)
    with pytest.raises(ValueError, match="still on this host, with endpoints here"):
        agent.ensure_network(moved)
