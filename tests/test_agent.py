"""DatapathAgent decisions with fakes for OVS, the controller, iptables and netlink."""

from __future__ import annotations

from typing import Any

import pytest

import datapath.agent as agent_mod
from datapath.agent import AgentConfig, DatapathAgent, LocalEndpoint, LocalNetwork
from datapath.hostnat import DNAT_CHAIN, PortMapping, dnat_rules
from datapath.ovs import PortInfo, detect_datapath_type
from datapath.pipeline import RemoteEndpointState, TunnelState
from datapath.veth import veth_names


class FakeOvs:
    def __init__(self) -> None:
        self.ports: dict[str, PortInfo] = {}
        self.next_ofport = 10

    def ensure_bridge(self, *a: Any, **kw: Any) -> bool:
        return False

    def add_port(
        self, bridge: str, name: str, type: str = "", external_ids: Any = None, **kw: Any
    ) -> int:
        if name not in self.ports:
            self.next_ofport += 1
            self.ports[name] = PortInfo(self.next_ofport, dict(external_ids or {}))
        return self.ports[name].ofport

    def del_port(self, bridge: str, name: str, if_exists: bool = True) -> bool:
        return self.ports.pop(name, None) is not None

    def list_ports(self, bridge: str) -> dict[str, PortInfo]:
        return dict(self.ports)


class FakeController:
    def __init__(self) -> None:
        self.pushed: list[set[Any]] = []

    def set_desired(self, flows: set[Any]) -> int:
        self.pushed.append(set(flows))
        return len(self.pushed)


class FakeIptables:
    def __init__(self) -> None:
        self.chains: dict[str, list[str]] = {}
        self.synced: list[tuple[list[Any], list[PortMapping]]] = []

    def current(self, table: str, chain: str) -> list[str] | None:
        return self.chains.get(chain)

    def sync(self, nets: list[Any], mappings: list[PortMapping] = ()) -> bool:  # type: ignore[assignment]
        self.synced.append((list(nets), list(mappings)))
        self.chains[DNAT_CHAIN] = dnat_rules(mappings)
        return True


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    links: set[str] = set()

    def create_veth(eid: str, mac: str, mtu: int) -> tuple[str, str]:
        host, container = veth_names(eid)
        links.update({host, container})
        return host, container

    def delete_veth(eid: str) -> bool:
        host, container = veth_names(eid)
        found = host in links
        links.difference_update({host, container})
        return found

    def delete_link(name: str) -> bool:
        found = name in links
        links.discard(name)
        links.discard("vc" + name[2:])
        return found

    monkeypatch.setattr(agent_mod, "create_veth", create_veth)
    monkeypatch.setattr(agent_mod, "delete_veth", delete_veth)
    monkeypatch.setattr(agent_mod, "delete_link", delete_link)
    monkeypatch.setattr(
        agent_mod, "host_veths", lambda: sorted(n for n in links if n.startswith("vp"))
    )
    monkeypatch.setattr(agent_mod, "disable_tx_offload", lambda *a: None)
    isolated: list[str] = []
    monkeypatch.setattr(agent_mod, "isolate_host_end", isolated.append)
    monkeypatch.setattr(DatapathAgent, "_address_gateway", lambda self, net: None)
    ovs, ctl, ipt = FakeOvs(), FakeController(), FakeIptables()
    config = AgentConfig(datapath_type="netdev", tunnels=True)
    agent = DatapathAgent(config, ovs, ctl, ipt)  # type: ignore[arg-type]
    agent.ready_timeout = 0.1
    return {
        "agent": agent,
        "ovs": ovs,
        "ctl": ctl,
        "ipt": ipt,
        "links": links,
        "isolated": isolated,
    }


NET = LocalNetwork(id="default:n1", tag=7, subnet="10.1.0.0/24", gateway="10.1.0.1")
EP = LocalEndpoint(id="ab" * 32, network_id="default:n1", mac="02:42:0a:01:00:02", ipv4="10.1.0.2")


def test_nothing_changes_before_the_first_resync(world: dict[str, Any]) -> None:
    agent = world["agent"]
    with pytest.raises(RuntimeError, match="not read the cluster state"):
        agent.create_endpoint_port(EP)
    assert world["ctl"].pushed == [] and world["ovs"].ports == {}


def test_endpoint_lifecycle_pushes_flows_and_nat(world: dict[str, Any]) -> None:
    agent, ovs, ctl, ipt = world["agent"], world["ovs"], world["ctl"], world["ipt"]
    agent.resync([NET], [])
    ifname = agent.create_endpoint_port(EP)
    assert ifname == veth_names(EP.id)[1]
    assert set(ovs.ports) == {"npgw7", veth_names(EP.id)[0]}
    assert len(ctl.pushed[-1]) > len(ctl.pushed[0])  # the endpoint's flows were added
    agent.set_port_mappings(EP.id, [PortMapping("tcp", "", 8080, EP.ipv4, 80)])
    assert ipt.synced[-1][1] == [PortMapping("tcp", "", 8080, EP.ipv4, 80)]
    agent.delete_endpoint_port(EP.id)
    assert set(ovs.ports) == {"npgw7"} and world["links"] == set()
    assert ipt.synced[-1][1] == []
    agent.remove_network(NET.id)
    assert ovs.ports == {}


def test_failed_port_leaves_nothing(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    agent, ovs = world["agent"], world["ovs"]
    agent.resync([NET], [])

    def broken(*a: Any, **kw: Any) -> int:
        raise RuntimeError("port vp...: could not open network device")

    monkeypatch.setattr(ovs, "add_port", broken)
    with pytest.raises(RuntimeError, match="could not open"):
        agent.create_endpoint_port(EP)
    assert world["links"] == set() and veth_names(EP.id)[0] not in ovs.ports
    assert all(e.id != EP.id for e in agent.desired().endpoints)


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
    published = PortMapping("tcp", "", 8080, EP.ipv4, 80)
    ipt.chains[DNAT_CHAIN] = dnat_rules([published, PortMapping("tcp", "", 9090, "10.9.9.9", 80)])
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


def test_switch_reconnect_readdresses_gateways_only_after_resync(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = world["agent"]
    addressed: list[str] = []
    monkeypatch.setattr(
        DatapathAgent, "_address_gateway", lambda self, net: addressed.append(net.id)
    )
    agent.switch_connected()
    assert addressed == []  # before resync the state is partial; resync addresses them
    agent.resync([NET], [])
    addressed.clear()
    agent.switch_connected()  # e.g. ovs-vswitchd restarted and made npgw7 anew
    assert addressed == [NET.id]


R1 = RemoteEndpointState("r1", NET.id, "h2", "02:42:0a:01:00:09", "10.1.0.9")
R_ELSEWHERE = RemoteEndpointState("r2", "default:other", "h3", "02:42:0a:02:00:09", "10.2.0.9")


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
    cfg = AgentConfig(uplink_mtu=1500, vlan_mtu=9000, tunnels=True)
    assert (cfg.mtu_for("vxlan"), cfg.mtu_for("vlan")) == (1450, 9000)
    assert AgentConfig(uplink_mtu=1460, tunnels=True).mtu_for("vxlan") == 1410  # a cloud
    assert AgentConfig(uplink_mtu=1500).mtu_for("vxlan") == 1500  # one host: no overlay
    assert AgentConfig(mtu=1400, tunnels=True).mtu_for("vxlan") == 1400  # configured


def test_a_vlan_and_a_vxlan_network_may_share_a_tag() -> None:
    vx = LocalNetwork(id="default:a", tag=100, encap="vxlan")
    vl = LocalNetwork(id="default:b", tag=100, encap="vlan")
    assert vx.segment != vl.segment
    assert vx.gateway_port != vl.gateway_port and vx.gateway_mac != vl.gateway_mac
    assert max(len(vx.gateway_port), len(LocalNetwork("x", 4094, encap="vlan").gateway_port)) <= 15


def test_datapath_type_is_system_only_with_the_kernel_module(tmp_path: Any) -> None:
    assert detect_datapath_type(tmp_path) == "netdev"
    (tmp_path / "class/net/ovs-system").mkdir(parents=True)
    assert detect_datapath_type(tmp_path) == "system"
    other = tmp_path / "other"
    (other / "module/openvswitch").mkdir(parents=True)
    assert detect_datapath_type(other) == "system"
