"""Ports and veths removed after the answer (datapath.teardown), alone and in HostDatapath."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from datapath.host import EndpointState, HostConfig, HostDatapath, NetworkState
from datapath.teardown import Teardown
from datapath.veth import veth_names
from testbed.fakes_datapath import FakeController, FakeHostPorts, FakeIptables, FakeLinks, FakeOvs

NET = NetworkState(id="default:n1", tag=7, subnet="10.1.0.0/24", gateway="10.1.0.1")
EP = EndpointState("ab" * 32, "default:n1", "02:42:0a:01:00:02", "10.1.0.2")


class Remover:
    """A remove(keys) that records its batches, held while ``gate`` is closed."""

    def __init__(self, fail: str = "") -> None:
        self.gate = threading.Event()
        self.batches: list[list[str]] = []
        self.fail = fail

    def __call__(self, keys: list[str]) -> None:
        assert self.gate.wait(5), "never released"
        self.batches.append(keys)
        if self.fail in keys:
            raise OSError("ovsdb-server is not running")


def test_removals_asked_for_meanwhile_go_in_one_batch_and_settle_waits() -> None:
    remover = Remover()
    t = Teardown(remover, max_batch=3)
    t.submit("a")  # taken at once, held by the gate
    time.sleep(0.05)
    for key in ("b", "c", "b", "d"):
        t.submit(key)
    assert t.pending() == ["a", "b", "c", "d"]
    assert not t.wait("c", 0.05) and t.settle(0.05) == 4  # still held: reported
    remover.gate.set()
    assert t.settle(5) == 0
    assert remover.batches == [["a"], ["b", "c"], ["d"]]  # each batch once per key
    assert t.pending() == [] and (t.done, t.failed, t.batches) == (5, 0, 3)
    assert t.wait("never-asked", 0)


def test_a_failed_batch_is_logged_counted_and_does_not_block_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    remover = Remover(fail="ep1")
    t = Teardown(remover, max_batch=1)
    remover.gate.set()
    with caplog.at_level(logging.ERROR):
        t.submit("ep1")
        t.submit("ep2")
        assert t.settle(5) == 0
    assert remover.batches == [["ep1"], ["ep2"]] and t.failed == 1 and t.done == 2
    assert "['ep1']: removing their ports and veths failed" in caplog.text
    assert "ovsdb-server is not running" in caplog.text


def test_stop_finishes_what_is_pending_and_refuses_more() -> None:
    remover = Remover()
    t = Teardown(remover)
    t.submit("x")
    threading.Timer(0.05, remover.gate.set).start()
    assert t.stop(5) == 0 and remover.batches == [["x"]]
    with pytest.raises(RuntimeError, match="y: the agent is stopping"):
        t.submit("y")


class SlowOvs(FakeOvs):
    """An ovs-vswitchd whose port removal waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def del_port(self, bridge: str, name: str, if_exists: bool = True) -> bool:
        if name.startswith("vp"):  # del_ports (the teardown's) comes here per port
            assert self.release.wait(5), "del_port was never released"
        return super().del_port(bridge, name, if_exists)


@pytest.fixture
def agent_and_ovs() -> tuple[HostDatapath, SlowOvs, FakeLinks, FakeController]:
    ovs, links, ctl = SlowOvs(), FakeLinks(), FakeController()
    config = HostConfig(datapath_type="netdev", tunnels=True)
    agent = HostDatapath(config, ovs, ctl, FakeIptables(), links, FakeHostPorts())
    agent.ready_timeout = 5
    agent.resync([NET], [])
    return agent, ovs, links, ctl


def test_delete_answers_before_the_port_goes_and_flows_go_first(
    agent_and_ovs: tuple[HostDatapath, SlowOvs, FakeLinks, FakeController],
) -> None:
    agent, ovs, links, _ = agent_and_ovs
    agent.create_endpoint_port(EP)
    host = veth_names(EP.id)[0]
    agent.delete_endpoint_port(EP.id)  # returns although del_port is held
    assert host in ovs.ports and host in links.links
    assert not agent.has_endpoint(EP.id)
    assert all(e.id != EP.id for e in agent.desired().endpoints)  # its flows are gone
    assert agent.settle(0.05) == 1 and agent.teardown.pending() == [EP.id]
    ovs.release.set()
    assert agent.settle(5) == 0
    assert host not in ovs.ports and host not in links.links


def test_a_retried_create_for_the_same_endpoint_waits_for_the_old_port(
    agent_and_ovs: tuple[HostDatapath, SlowOvs, FakeLinks, FakeController],
) -> None:
    agent, ovs, links, _ = agent_and_ovs
    agent.create_endpoint_port(EP)
    agent.delete_endpoint_port(EP.id)
    plugged: list[str] = []
    retry = threading.Thread(target=lambda: plugged.append(agent.create_endpoint_port(EP)))
    retry.start()
    retry.join(0.2)
    assert retry.is_alive() and plugged == []  # the same veth names: it waits
    ovs.release.set()
    retry.join(5)
    host, container = veth_names(EP.id)
    assert plugged == [container] and host in ovs.ports and host in links.links
    assert agent.has_endpoint(EP.id) and agent.settle(5) == 0
    assert host in ovs.ports  # the old removal did not take the new port


def test_a_retry_gives_up_naming_the_endpoint_when_the_old_port_stays(
    agent_and_ovs: tuple[HostDatapath, SlowOvs, FakeLinks, FakeController],
) -> None:
    agent, ovs, _, _ = agent_and_ovs
    agent.create_endpoint_port(EP)
    agent.delete_endpoint_port(EP.id)
    agent.ready_timeout = 0.1
    with pytest.raises(RuntimeError, match=f"endpoint {EP.id}: its old port is still being"):
        agent.plug(EP.id, NET.id, EP.mac)
    ovs.release.set()
    assert agent.settle(5) == 0 and veth_names(EP.id)[0] not in ovs.ports


def test_removing_the_network_waits_for_its_endpoints_ports(
    agent_and_ovs: tuple[HostDatapath, SlowOvs, FakeLinks, FakeController],
) -> None:
    agent, ovs, links, _ = agent_and_ovs
    agent.create_endpoint_port(EP)
    agent.delete_endpoint_port(EP.id)
    threading.Timer(0.1, ovs.release.set).start()
    agent.remove_network(NET.id)
    assert ovs.ports == {} and links.links == set()


def test_the_audit_removes_what_a_failed_teardown_left(
    agent_and_ovs: tuple[HostDatapath, SlowOvs, FakeLinks, FakeController],
) -> None:
    agent, ovs, links, _ = agent_and_ovs
    ovs.release.set()
    agent.create_endpoint_port(EP)
    host = veth_names(EP.id)[0]
    links.delete_error = OSError("Device or resource busy")  # the veth deletion fails
    agent.delete_endpoint_port(EP.id)
    assert agent.settle(5) == 0 and agent.teardown.failed == 1
    assert host not in ovs.ports and host in links.links  # the port went, the veth stayed
    links.delete_error = None
    agent.audit()
    assert host not in links.links and ovs.ports.keys() == {NET.gateway_port}
