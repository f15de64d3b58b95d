"""The agent's changes after resync go to the controller as deltas of the incremental model
(resync alone sends every flow), and the flows it holds are always the full compile of its
desired state; iptables runs only when its inputs change."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from datapath.flows import Group
from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.pipeline import compile_flows
from datapath.policy import GroupState, RuleState
from datapath.ports import PublishedPort
from testbed.fakes_datapath import FakeController, FakeHostPorts, FakeIptables, FakeLinks, FakeOvs

NET = NetworkState(id="default:n1", tag=7, subnet="10.1.0.0/24", gateway="10.1.0.1")
VLAN = NetworkState(id="default:v", tag=9, subnet="10.3.0.0/24", gateway="10.3.0.1", encap="vlan")


def ep(n: int, network: str = NET.id) -> EndpointState:
    return EndpointState(f"{n:02x}" * 32, network, f"02:42:0a:01:00:{n:02x}", f"10.1.0.{n}")


PEERS = {"h2": "192.168.50.2", "h3": "192.168.50.3"}
R1 = EndpointState("r1", NET.id, "02:42:0a:01:01:01", "10.1.1.1", host="h2")
R2 = EndpointState("r2", NET.id, "02:42:0a:01:01:02", "10.1.1.2", host="h3")
R3 = EndpointState("r3", VLAN.id, "02:42:0a:03:01:03", "10.3.1.3", host="h2")
ELSEWHERE = EndpointState("r4", "default:other", "02:42:0a:09:01:04", "10.9.1.4", host="h3")


@pytest.fixture
def agent() -> HostDatapath:
    config = HostConfig(datapath_type="system", tunnels=True, vlan_uplink="eth9")
    a = HostDatapath(
        config, FakeOvs(), FakeController(), FakeIptables(), FakeLinks(), FakeHostPorts()
    )
    a.ready_timeout = 0.1
    a.start()  # the VLAN uplink port
    return a


def ctl(agent: HostDatapath) -> FakeController:
    assert isinstance(agent.controller, FakeController)
    return agent.controller


def nat_syncs(agent: HostDatapath) -> int:
    assert isinstance(agent.iptables, FakeIptables)
    return len(agent.iptables.synced)


def play(agent: HostDatapath, kind: str, arg: Any) -> None:
    """One step of a test's script of agent calls."""
    if kind == "create":
        agent.create_endpoint_port(arg)
    elif kind == "delete":
        agent.delete_endpoint_port(arg.id)
    elif kind == "cluster":
        agent.set_cluster(*arg)
    elif kind == "network":
        agent.ensure_network(arg)
    elif kind == "remove":
        agent.remove_network(arg.id)
    elif kind == "publish":
        agent.publish(arg.id, [PublishedPort("tcp", "", 8080, 80, host_port_end=8080)])


def test_every_change_after_resync_is_a_delta_to_the_full_compile(agent: HostDatapath) -> None:
    steps: list[tuple[str, Any]] = [
        ("create", ep(2)),
        ("create", ep(3)),
        ("cluster", (PEERS, [R1, R2, ELSEWHERE], "proxy")),
        ("network", VLAN),
        ("create", ep(5, VLAN.id)),
        ("cluster", (PEERS, [R1, R2, R3, ELSEWHERE], "proxy")),
        ("cluster", ({"h2": PEERS["h2"]}, [R1, R3], "flood")),
        ("publish", ep(2)),
        ("delete", ep(3)),
        ("remove", VLAN),
        ("cluster", (PEERS, [R1, R2, R3], "proxy")),
        ("network", VLAN),
        ("delete", ep(2)),
    ]
    agent.resync([NET], [])
    assert len(ctl(agent).full) == 1
    for kind, arg in steps:
        play(agent, kind, arg)
        assert ctl(agent).pushed[-1] == compile_flows(agent.desired()), (kind, arg)
    assert len(ctl(agent).full) == 1 and len(ctl(agent).deltas) == len(steps) - 1  # publish
    # A resync after all this finds nothing to change.
    before = ctl(agent).pushed[-1]
    agent.resync([NET, VLAN], [], peers=PEERS, remote_endpoints=[R1, R2, R3])
    assert ctl(agent).full[-1] == before


def test_an_endpoint_is_a_small_delta_and_no_iptables_run(agent: HostDatapath) -> None:
    agent.resync([NET], [])
    for n in range(2, 40):
        agent.create_endpoint_port(ep(n))
    syncs = nat_syncs(agent)
    agent.create_endpoint_port(ep(40))
    added = ctl(agent).deltas[-1]
    agent.delete_endpoint_port(ep(40).id)
    removed = ctl(agent).deltas[-1]
    # Its own 6 flows and its segment's flood group, modified in place; the flood flows
    # name the group and stay as they are.
    assert (len(added.to_add), len(added.to_delete)) == (6 + 1, 0)
    assert (len(removed.to_add), len(removed.to_delete)) == (1, 6)
    assert [e.kind for e in removed.to_add if isinstance(e, Group)] == ["all"]
    assert nat_syncs(agent) == syncs  # no port mappings: nothing for iptables


def test_iptables_runs_when_networks_or_published_ports_change(agent: HostDatapath) -> None:
    agent.resync([NET], [])
    assert nat_syncs(agent) == 1  # resync always syncs: it may follow a restart
    agent.ensure_network(NET)  # already there
    agent.create_endpoint_port(ep(2))
    assert nat_syncs(agent) == 1
    agent.publish(ep(2).id, [])  # Revoke of a container that published nothing
    assert nat_syncs(agent) == 1
    agent.publish(ep(2).id, [PublishedPort("tcp", "", 8080, 80, host_port_end=8080)])
    agent.publish(ep(2).id, [PublishedPort("tcp", "", 8080, 80, host_port_end=8080)])
    assert nat_syncs(agent) == 2
    agent.ensure_network(VLAN)
    assert nat_syncs(agent) == 3
    agent.delete_endpoint_port(ep(2).id)  # its published port goes with it
    assert nat_syncs(agent) == 4
    agent.remove_network(VLAN.id)
    assert nat_syncs(agent) == 5
    agent.set_cluster(PEERS, [R1], "flood")
    assert nat_syncs(agent) == 5


def test_a_refused_endpoint_leaves_no_port_and_no_flow(agent: HostDatapath) -> None:
    agent.resync([NET], [])
    agent.create_endpoint_port(ep(2))
    flows, deltas = ctl(agent).pushed[-1], len(ctl(agent).deltas)
    twin = EndpointState("ee" * 32, NET.id, ep(2).mac, "10.1.0.99")  # the MAC of ep 2
    with pytest.raises(ValueError, match="both use MAC"):
        agent.create_endpoint_port(twin)
    assert not agent.has_endpoint(twin.id) and len(ctl(agent).deltas) == deltas
    assert isinstance(agent.ovs, FakeOvs)
    assert len(agent.ovs.ports) == 3  # the uplink, the gateway, ep 2
    agent.create_endpoint_port(ep(3))  # and the model took nothing of it
    assert ctl(agent).pushed[-1] == compile_flows(agent.desired()) != flows


def test_a_failed_iptables_sync_is_retried_on_the_next_change(agent: HostDatapath) -> None:
    agent.resync([NET], [])
    agent.create_endpoint_port(ep(2))
    ipt = agent.iptables
    assert isinstance(ipt, FakeIptables)
    original = ipt.sync

    def broken(*args: Any, **kw: Any) -> bool:
        raise RuntimeError("iptables-restore: resource busy")

    ipt.sync = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="busy"):
        agent.publish(ep(2).id, [PublishedPort("tcp", "", 8080, 80, host_port_end=8080)])
    ipt.sync = original  # type: ignore[method-assign]
    assert agent.published_ports() == {}  # refused as a whole: Docker does not start it
    synced = len(ipt.synced)
    agent.create_endpoint_port(ep(3))  # the inputs did not change since, but never applied
    assert len(ipt.synced) == synced + 1 and ipt.synced[-1][1] == []


def test_audit_reads_the_switch_back_and_rewrites_our_chains(agent: HostDatapath) -> None:
    """Between audits only deltas go out; an audit repairs drift made behind our back."""
    agent.audit()  # before the first resync the state is partial: nothing is touched
    assert ctl(agent).resyncs == 0 and nat_syncs(agent) == 0
    agent.resync([NET], [ep(1)])
    syncs, fulls = nat_syncs(agent), len(ctl(agent).full)
    agent.audit()
    assert ctl(agent).resyncs == 1 and nat_syncs(agent) == syncs + 1
    assert len(ctl(agent).full) == fulls  # no recompile: the switch is diffed as it is


WEB = GroupState("default:web", NET.id, 5, (RuleState("in", 1, "deny", protocol=6),))
APP = GroupState("default:app", NET.id, 6, ())
ELSEWHERE_GROUP = GroupState("default:far", "default:other", 7, ())


def test_groups_and_their_rules_are_deltas_too(agent: HostDatapath) -> None:
    """Groups arrive with the cluster; only those of networks on this host cost flows, and
    a network leaving takes its groups' flows in the same delta."""
    web_ep = replace(ep(2), group=WEB.id)
    remote_app = replace(R1, group=APP.id)
    agent.resync([NET], [])
    steps: list[tuple[str, Any]] = [
        ("create", web_ep),
        ("cluster", (PEERS, [remote_app], "proxy", [WEB, APP, ELSEWHERE_GROUP])),
        ("cluster", (PEERS, [remote_app], "proxy", [replace(WEB, rules=()), APP])),
        ("network", VLAN),
        ("cluster", (PEERS, [remote_app], "proxy", [WEB, APP, replace(APP, id="x", tag=9,
                                                                   network_id=VLAN.id)])),
        ("remove", VLAN),
        ("delete", web_ep),
    ]  # fmt: skip
    for kind, arg in steps:
        play(agent, kind, arg)
        assert ctl(agent).pushed[-1] == compile_flows(agent.desired()), (kind, arg)
    assert [g.id for g in agent.desired().groups] == [WEB.id, APP.id]
    # A rule more for web is a small delta, whatever the endpoints.
    agent.create_endpoint_port(web_ep)
    agent.set_cluster(PEERS, [remote_app], "proxy", [replace(WEB, rules=()), APP])
    agent.set_cluster(PEERS, [remote_app], "proxy", [WEB, APP])
    delta = ctl(agent).deltas[-1]
    assert 0 < len(delta.to_add) <= 2 and not delta.to_delete
    # A resync with the same state changes nothing.
    before = ctl(agent).pushed[-1]
    agent.resync([NET], [web_ep], peers=PEERS, remote_endpoints=[remote_app], groups=[WEB, APP])
    assert ctl(agent).full[-1] == before
