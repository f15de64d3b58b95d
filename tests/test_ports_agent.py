"""Publishing through the datapath agent, with fakes for its effects: all or none, one
winner for one port, and the ports kept across a restart."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.hostnat import DNAT_CHAIN, dnat_rules
from datapath.hostports import HOST_PROCESS
from datapath.ports import PortConflict, PublishedPort
from testbed.fakes_datapath import FakeController, FakeHostPorts, FakeIptables, FakeLinks, FakeOvs

NET = NetworkState(id="default:n1", tag=7, subnet="10.1.0.0/24", gateway="10.1.0.1")
OTHER = NetworkState(id="blue:n2", tag=8, subnet="10.2.0.0/24", gateway="10.2.0.1")
A = EndpointState("aa" * 32, NET.id, "02:42:0a:01:00:02", "10.1.0.2")
B = EndpointState("bb" * 32, OTHER.id, "02:42:0a:02:00:03", "10.2.0.3")


def fixed(port: int, cport: int = 80, proto: str = "tcp", ip: str = "") -> PublishedPort:
    return PublishedPort(proto, ip, port, cport, host_port_end=port)


ANY = PublishedPort("tcp", "", 0, 80, host_port_end=0)


def make_agent(ipt: FakeIptables, ports: FakeHostPorts, ovs: FakeOvs | None = None) -> HostDatapath:
    config = HostConfig(datapath_type="netdev")
    agent = HostDatapath(config, ovs or FakeOvs(), FakeController(), ipt, FakeLinks(), ports)
    agent.ready_timeout = 0.1
    return agent


@pytest.fixture
def world() -> tuple[HostDatapath, FakeIptables, FakeHostPorts]:
    ipt, ports = FakeIptables(), FakeHostPorts()
    agent = make_agent(ipt, ports)
    agent.resync([NET, OTHER], [])
    agent.create_endpoint_port(A)
    agent.create_endpoint_port(B)
    return agent, ipt, ports


def test_a_port_another_endpoint_publishes_is_refused_and_nothing_changes(
    world: tuple[HostDatapath, FakeIptables, FakeHostPorts],
) -> None:
    agent, ipt, _ = world
    agent.publish(A.id, [fixed(8080)])
    rules, syncs = ipt.chains[DNAT_CHAIN], len(ipt.synced)
    with pytest.raises(PortConflict, match=f"8080/tcp on every host address .* {A.id[:12]}"):
        agent.publish(B.id, [fixed(9090), fixed(8080, 81)])  # another network: one host
    assert ipt.chains[DNAT_CHAIN] == rules and len(ipt.synced) == syncs
    assert agent.published_ports() == {A.id: (PublishedPort("tcp", "", 8080, 80, A.ipv4),)}
    agent.publish(B.id, [fixed(8080, 81, proto="udp")])  # udp is another port
    assert len(agent.published_ports()) == 2


def test_a_port_a_host_process_holds_or_a_foreign_address_is_refused(
    world: tuple[HostDatapath, FakeIptables, FakeHostPorts],
) -> None:
    agent, ipt, ports = world
    ports.in_use[("tcp", "", 8080)] = HOST_PROCESS
    with pytest.raises(PortConflict, match="8080/tcp on every host address is already used by a"):
        agent.publish(A.id, [fixed(8080)])
    with pytest.raises(PortConflict, match="not an address of this host"):
        agent.publish(A.id, [fixed(9090, ip="198.51.100.7")])
    assert agent.published_ports() == {} and ipt.chains.get(DNAT_CHAIN, []) == []
    [m] = agent.publish(A.id, [fixed(9090, ip="192.0.2.2")])  # one of the host's addresses
    assert m.host_ip == "192.0.2.2"


def test_random_ports_are_unique_on_the_host(
    world: tuple[HostDatapath, FakeIptables, FakeHostPorts],
) -> None:
    agent, _, ports = world
    ports.in_use[("tcp", "", 40003)] = HOST_PROCESS
    got = [m.host_port for m in agent.publish(A.id, [ANY, replace_cport(ANY, 81)])]
    got += [m.host_port for m in agent.publish(B.id, [ANY, replace_cport(ANY, 82)])]
    assert len(set(got)) == 4 and all(40000 <= p <= 40009 and p != 40003 for p in got)


def replace_cport(r: PublishedPort, cport: int) -> PublishedPort:
    return PublishedPort(r.proto, r.host_ip, r.host_port, cport, host_port_end=r.host_port_end)


def test_two_endpoints_asking_for_one_port_at_once_one_wins(
    world: tuple[HostDatapath, FakeIptables, FakeHostPorts],
) -> None:
    agent, _, _ = world
    results: dict[str, Any] = {}
    go = threading.Barrier(2)

    def ask(ep: EndpointState) -> None:
        go.wait()
        try:
            results[ep.id] = agent.publish(ep.id, [fixed(8080)])
        except PortConflict as e:
            results[ep.id] = e

    threads = [threading.Thread(target=ask, args=(ep,)) for ep in (A, B)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results.values() if not isinstance(r, PortConflict)]
    assert len(won) == 1 and len(agent.published_ports()) == 1


def test_a_failed_sync_puts_the_rules_back(
    world: tuple[HostDatapath, FakeIptables, FakeHostPorts],
) -> None:
    agent, ipt, _ = world
    agent.publish(A.id, [fixed(8080)])
    rules = list(ipt.chains[DNAT_CHAIN])
    original, calls = ipt.sync, []

    def once_broken(*args: Any, **kw: Any) -> bool:
        calls.append(args)
        if len(calls) == 1:
            raise RuntimeError("iptables-restore: resource busy")
        return original(*args, **kw)

    ipt.sync = once_broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="busy"):
        agent.publish(A.id, [fixed(9090)])
    assert ipt.chains[DNAT_CHAIN] == rules and len(calls) == 2  # the second put them back
    assert agent.published_ports() == {A.id: (PublishedPort("tcp", "", 8080, 80, A.ipv4),)}


def test_a_restarted_agent_keeps_every_published_port_and_its_number(
    world: tuple[HostDatapath, FakeIptables, FakeHostPorts],
) -> None:
    agent, ipt, ports = world
    [random_port] = agent.publish(A.id, [ANY])
    agent.publish(B.id, [fixed(8080, 81)])
    published = agent.published_ports()
    # A new agent process: the switch keeps its ports, our DNAT chain its rules.
    ovs = agent.ovs
    assert isinstance(ovs, FakeOvs)
    again = make_agent(ipt, ports, ovs)
    again.resync([NET, OTHER], [A, B])
    assert again.published_ports() == published
    again.create_endpoint_port(EndpointState("cc" * 32, NET.id, "02:42:0a:01:00:04", "10.1.0.4"))
    with pytest.raises(PortConflict, match=f"{random_port.host_port}/tcp"):
        again.publish("cc" * 32, [fixed(random_port.host_port)])
    # Docker programs it again (its gateway endpoint moved): the random port stays.
    assert again.publish(A.id, [ANY]) == (random_port,)
    assert ipt.chains[DNAT_CHAIN] == dnat_rules([random_port, *published[B.id]])


def test_revoking_unpublishes_and_frees_the_port(
    world: tuple[HostDatapath, FakeIptables, FakeHostPorts],
) -> None:
    agent, ipt, _ = world
    agent.publish(A.id, [fixed(8080)])
    assert agent.publish(A.id, []) == ()
    assert ipt.chains[DNAT_CHAIN] == [] and agent.published_ports() == {}
    agent.publish(B.id, [fixed(8080)])
    agent.delete_endpoint_port(B.id)  # its ports go with it
    assert agent.published_ports() == {} and ipt.chains[DNAT_CHAIN] == []
