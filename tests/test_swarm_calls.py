"""Swarm mode's calls through three plugins (a manager and two workers) against the real
control plane, in the order Docker 20.10 and 26.1 send them (recorded in
docs/research/swarm-spike/): the leader's allocator books every address in the global
address space, each node names them again in the local one, and the task's endpoint uses
the booking. One booking per address; each task's endpoint on its host; every release
leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_plugin import GW_OPTS, FakeDatapath, call

from common import keys, owners
from common.models import AddressRequest, Network, Tenant
from common.records import AllocRecord
from master.decisions.consistency import check_state
from plugin.app import create_app
from plugin.driver import Driver
from plugin.master_client import MasterClient, MasterError
from plugin.options import NetworkRef
from plugin.swarm import SwarmSweep, freed_networks
from testbed.real_master import RealMaster, real_master

SID = "pdz16ctqeyeu1hzy6u7245izw"  # swarm's network ids are 25 characters
X = "10.99.0.0/24"
SERIAL = {"com.docker.network.ipam.serial": "true"}


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RealMaster]:
    with real_master(tmp_path, "agent") as m:
        m.state.tenants.put(Tenant(tenantName="blue"))
        yield m


class Node:
    """One host's plugin in swarm mode, and what its dockerd holds of the swarm network."""

    def __init__(self, master: RealMaster, host: str, names: dict[str, str]) -> None:
        client = MasterClient(master.url, backoff=0, session=master.session(), token=master.token)
        self.host = host
        self.datapath = FakeDatapath()
        driver = Driver(client, self.datapath, host=host, docker_name=names.get, swarm=True)
        self.app = create_app(driver).test_client()
        self.pool_id = ""

    def ok(self, method: str, body: dict[str, Any]) -> Any:
        r = call(self.app, method, body)
        assert r.status_code == 200, (method, r.get_json())
        return r.get_json()

    def refused(self, method: str, body: dict[str, Any]) -> str:
        r = call(self.app, method, body)
        assert r.status_code != 200, (method, r.get_json())
        return str(r.get_json()["Err"])


class Manager(Node):
    """The leader's allocator (its plugin is also the manager host's node)."""

    global_pool = ""  # the allocator's pool id (pool_id: the node's)

    def create_network(self, o: dict[str, str], ipam: dict[str, str] | None = None) -> Any:
        """`docker network create --scope swarm`: pool, gateway, AllocateNetwork; the
        options nodes will get."""
        got = self.ok(
            "IpamDriver.RequestPool",
            {"AddressSpace": "swarm", "Pool": X, "SubPool": "", "Options": ipam, "V6": False},
        )
        self.global_pool = got["PoolID"]
        opts = {**GW_OPTS, **SERIAL, **(ipam or {})}
        self.gateway = self.ok(
            "IpamDriver.RequestAddress",
            {"PoolID": self.global_pool, "Address": "", "Options": opts},
        )["Address"]
        data = [{"AddressSpace": "", "Pool": X, "Gateway": self.gateway}]
        return self.ok(
            "NetworkDriver.AllocateNetwork",
            {"NetworkID": SID, "Options": o, "IPv4Data": data, "IPv6Data": None},
        )["Options"]

    def allocate(self, address: str = "", ipam: dict[str, str] | None = None) -> str:
        """A task's (or a VIP's) address."""
        opts = {**SERIAL, **(ipam or {})}
        body = {"PoolID": self.global_pool, "Address": address, "Options": opts}
        return str(self.ok("IpamDriver.RequestAddress", body)["Address"]).split("/")[0]

    def release(self, address: str) -> None:
        self.ok("IpamDriver.ReleaseAddress", {"PoolID": self.global_pool, "Address": address})

    def remove_network(self) -> None:
        self.ok("NetworkDriver.FreeNetwork", {"NetworkID": SID})
        self.release(self.gateway.split("/")[0])
        self.ok("IpamDriver.ReleasePool", {"PoolID": self.global_pool})


def plug_network(
    node: Node, options: dict[str, Any], gateway: str, ipam: dict[str, str] | None = None
) -> None:
    """A node's first task of the network: its pool (local space), gateway, CreateNetwork.
    (Its pool request has the serial option only with the network's --ipam-opt options.)"""
    body = {"AddressSpace": "default", "Pool": X, "SubPool": "", "Options": None, "V6": False}
    if ipam:
        body["Options"] = {**SERIAL, **ipam}
    node.pool_id = node.ok("IpamDriver.RequestPool", body)["PoolID"]
    gw = gateway.split("/")[0]
    got = node.ok("IpamDriver.RequestAddress", {"PoolID": node.pool_id, "Address": gw, **_gw()})
    assert got["Address"] == gateway
    generic = {"com.docker.network.enable_ipv6": False, "com.docker.network.generic": options}
    data = [{"AddressSpace": "default", "Pool": X, "Gateway": gateway}]
    node.ok(
        "NetworkDriver.CreateNetwork",
        {"NetworkID": SID, "Options": generic, "IPv4Data": data, "IPv6Data": []},
    )


def _gw() -> dict[str, Any]:
    return {"Options": GW_OPTS}


def start_task(node: Node, eid: str, address: str) -> dict[str, Any]:
    """The node's RequestAddress naming the manager's address, CreateEndpoint, Join."""
    got = node.ok("IpamDriver.RequestAddress", {"PoolID": node.pool_id, "Address": address})
    assert got["Address"] == f"{address}/24"
    iface = {"Address": f"{address}/24", "AddressIPv6": "", "MacAddress": ""}
    ids = {"NetworkID": SID, "EndpointID": eid}
    reply = node.ok("NetworkDriver.CreateEndpoint", {**ids, "Interface": iface, "Options": {}})
    node.ok("NetworkDriver.Join", {**ids, "SandboxKey": "/x", "Options": None})
    return dict(reply)


def stop_task(node: Node, eid: str, address: str) -> None:
    ids = {"NetworkID": SID, "EndpointID": eid}
    node.ok("NetworkDriver.Leave", ids)
    node.ok("NetworkDriver.DeleteEndpoint", ids)
    node.ok("IpamDriver.ReleaseAddress", {"PoolID": node.pool_id, "Address": address})


def unplug_network(node: Node, gateway: str) -> None:
    """The node's last task of the network left."""
    gw = gateway.split("/")[0]
    node.ok("IpamDriver.ReleaseAddress", {"PoolID": node.pool_id, "Address": gw})
    node.ok("IpamDriver.ReleasePool", {"PoolID": node.pool_id})
    node.ok("NetworkDriver.DeleteNetwork", {"NetworkID": SID})


def alloc(master: RealMaster, pool_id: str, address: str) -> AllocRecord | None:
    kv = master.store.get(keys.alloc(pool_id, address))
    return AllocRecord.decode(kv.value) if kv is not None else None


def bookings(master: RealMaster, address: str) -> list[str]:
    return [k for k in master.snapshot() if k.startswith(keys.ALLOC) and k.endswith(f"/{address}")]


def network(master: RealMaster) -> Network:
    (net,) = [n for n in master.state.networks.list() if n.dockerNetworkID == SID]
    return net


def consistent(master: RealMaster) -> None:
    assert check_state(master.snapshot()) == []


@pytest.fixture
def hosts(master: RealMaster) -> tuple[Manager, Node, Node]:
    names = {SID: "snet"}
    return Manager(master, "h1", names), Node(master, "h2", names), Node(master, "h3", names)


def test_a_service_on_three_hosts_books_each_address_once_and_frees_all(
    master: RealMaster, hosts: tuple[Manager, Node, Node]
) -> None:
    baseline = master.snapshot()
    m, h2, h3 = hosts
    options = m.create_network({"foo": "bar"})
    # The cluster network has the docker network's name; nodes are told which it is.
    net = network(master)
    assert (net.tenantName, net.networkName, net.subnet) == ("default", "snet", X)
    assert options == {"foo": "bar", "tenant": "default", "network": "snet"}
    vip = m.allocate()
    tasks = [m.allocate() for _ in range(3)]
    assert len({vip, *tasks}) == 4
    pool = net.tenantName + ":" + X
    for a in (vip, *tasks):
        assert alloc(master, pool, a) == AllocRecord(owner=owners.SWARM)
    for node, eid, address in ((h2, "e2", tasks[0]), (h3, "e3", tasks[1]), (m, "e1", tasks[2])):
        plug_network(node, options, m.gateway)
        reply = start_task(node, eid, address)
        assert "Address" not in reply.get("Interface", {})  # docker set it: never answered
        ep = master.state.endpoints.get(eid)
        assert (ep.host, ep.ipAddress, ep.networkName) == (node.host, address, "snet")
        assert bookings(master, address) == [keys.alloc(pool, address)]
        held = alloc(master, pool, address)
        assert held is not None and (held.owner, held.user) == (owners.SWARM, eid)
        consistent(master)
    # A task stops: its node lets go first, then the manager frees the address.
    stop_task(h2, "e2", tasks[0])
    assert alloc(master, pool, tasks[0]) == AllocRecord(owner=owners.SWARM, network=net.id)
    consistent(master)
    m.release(tasks[0])
    assert alloc(master, pool, tasks[0]) is None
    # The manager may free first (its node is slow to report): the endpoint keeps the
    # address until it is deleted, so nothing else gets it meanwhile.
    m.release(tasks[1])
    held = alloc(master, pool, tasks[1])
    assert held is not None and held.owner == owners.endpoint("e3")
    consistent(master)
    stop_task(h3, "e3", tasks[1])
    assert alloc(master, pool, tasks[1]) is None
    stop_task(m, "e1", tasks[2])
    m.release(tasks[2])
    m.release(vip)  # the service goes (or turns dnsrr)
    for node in (h2, h3, m):
        unplug_network(node, m.gateway)
    assert network(master).networkName == "snet"  # a node's DeleteNetwork keeps it
    m.remove_network()
    assert master.snapshot() == baseline


def test_a_new_leader_replays_the_network_and_every_address(
    master: RealMaster, hosts: tuple[Manager, Node, Node]
) -> None:
    m, h2, _ = hosts
    options = m.create_network({})
    task = m.allocate()
    plug_network(h2, options, m.gateway)
    start_task(h2, "e2", task)
    before = master.snapshot()
    leader = Manager(master, "h3", {})  # a new process, whose dockerd has no name to give
    leader.global_pool = leader.ok(
        "IpamDriver.RequestPool",
        {"AddressSpace": "swarm", "Pool": X, "SubPool": "", "Options": None, "V6": False},
    )["PoolID"]
    data = [{"AddressSpace": "", "Pool": X, "Gateway": m.gateway}]
    again = leader.ok(
        "NetworkDriver.AllocateNetwork",
        {"NetworkID": SID, "Options": options, "IPv4Data": data, "IPv6Data": None},
    )["Options"]
    assert again == options
    assert leader.allocate(task) == task  # static now: the same booking answers
    assert [k for k in master.snapshot() if k.startswith(keys.ALLOC)] == [
        k for k in before if k.startswith(keys.ALLOC)
    ]
    consistent(master)
    # The endpoint still uses it; a new task gets another address.
    assert leader.allocate() not in (task, m.gateway.split("/")[0])


def test_an_address_the_manager_did_not_allocate_is_refused_and_leaves_nothing(
    master: RealMaster, hosts: tuple[Manager, Node, Node]
) -> None:
    m, h2, h3 = hosts
    options = m.create_network({})
    task = m.allocate()
    plug_network(h2, options, m.gateway)
    before = master.snapshot()
    ids = {"NetworkID": SID, "Interface": {"Address": "10.99.0.200/24"}, "Options": {}}
    err = h2.refused("NetworkDriver.CreateEndpoint", {**ids, "EndpointID": "stray"})
    assert "10.99.0.200" in err and "not allocated by the swarm manager" in err
    assert master.snapshot() == before
    assert "stray" not in h2.datapath.ports
    # Two endpoints on one booking: the second is refused while the first exists.
    start_task(h2, "e2", task)
    plug_network(h3, options, m.gateway)
    before = master.snapshot()
    ids = {"NetworkID": SID, "Interface": {"Address": f"{task}/24"}, "Options": {}}
    err = h3.refused("NetworkDriver.CreateEndpoint", {**ids, "EndpointID": "twin"})
    assert f"address {task} is in use by endpoint e2" in err
    assert master.snapshot() == before
    # A node never picks an address itself.
    err = h3.refused("IpamDriver.RequestAddress", {"PoolID": h3.pool_id, "Address": ""})
    assert "every address comes from the swarm manager" in err


def test_a_swarm_network_standing_for_a_netctl_network_books_in_its_pool(
    master: RealMaster, hosts: tuple[Manager, Node, Node]
) -> None:
    m, h2, _ = hosts
    master.state.networks.put(
        Network(tenantName="blue", networkName="web", subnet=X, gateway="10.99.0.1")
    )
    options = m.create_network({"tenant": "blue", "network": "web"}, {"tenant": "blue"})
    assert options == {"tenant": "blue", "network": "web"}
    task = m.allocate(ipam={"tenant": "blue"})
    assert bookings(master, task) == [keys.alloc(f"blue:{X}", task)]
    plug_network(h2, options, m.gateway, {"tenant": "blue"})
    start_task(h2, "e2", task)
    ep = master.state.endpoints.get("e2")
    assert (ep.tenantName, ep.networkName, ep.host) == ("blue", "web", "h2")
    consistent(master)
    stop_task(h2, "e2", task)
    m.release(task)
    unplug_network(h2, m.gateway)
    m.remove_network()
    # A network it did not make stays, with only its gateway booked.
    assert master.state.networks.get("blue", "web").subnet == X
    assert [k for k in master.snapshot() if k.startswith(keys.ALLOC)] == [
        keys.alloc(f"blue:{X}", "10.99.0.1")
    ]


def test_swarm_mode_reports_global_scope_and_its_own_address_space(
    hosts: tuple[Manager, Node, Node],
) -> None:
    m, _, _ = hosts
    assert call(m.app, "NetworkDriver.GetCapabilities").get_json() == {
        "Scope": "global",
        "ConnectivityScope": "global",
    }
    spaces = call(m.app, "IpamDriver.GetDefaultAddressSpaces").get_json()
    assert spaces == {"LocalDefaultAddressSpace": "default", "GlobalDefaultAddressSpace": "swarm"}


def test_only_the_swarm_allocator_books_as_the_swarm(master: RealMaster) -> None:
    client = MasterClient(master.url, backoff=0, session=master.session(), token=master.token)
    for kind, owner in (("swarm", "req:x"), ("", owners.SWARM)):
        with pytest.raises(MasterError) as e:
            client.request_address(
                AddressRequest(poolID=f"default:{X}", owner=owner, kind=kind)  # type: ignore[arg-type]
            )
        assert e.value.status == 400 and "do not go together" in str(e.value)


def test_a_network_netplugin_refuses_fails_its_tasks_with_the_reason_and_leaks_nothing(
    master: RealMaster, hosts: tuple[Manager, Node, Node]
) -> None:
    baseline = master.snapshot()
    m, h2, _ = hosts
    # Swarm would show a failed allocation only in the manager's log: the network is
    # allocated with the refusal, and each node's CreateNetwork repeats it.
    options = m.create_network({"network": "nosuch"})
    assert "network default:nosuch does not exist in netmaster" in options["netplugin.refused"]
    body = {"AddressSpace": "default", "Pool": X, "SubPool": "", "Options": None, "V6": False}
    h2.pool_id = h2.ok("IpamDriver.RequestPool", body)["PoolID"]
    generic = {"com.docker.network.generic": options}
    data = [{"AddressSpace": "default", "Pool": X, "Gateway": m.gateway}]
    err = h2.refused(
        "NetworkDriver.CreateNetwork",
        {"NetworkID": SID, "Options": generic, "IPv4Data": data, "IPv6Data": []},
    )
    assert "netplugin refused this swarm network when it was created" in err
    assert "does not exist in netmaster; create it first" in err
    h2.ok("IpamDriver.ReleasePool", {"PoolID": h2.pool_id})
    m.remove_network()
    assert master.snapshot() == baseline


def test_an_internal_swarm_network_is_refused_on_the_node(
    hosts: tuple[Manager, Node, Node],
) -> None:
    m, h2, _ = hosts
    options = m.create_network({})
    generic = {"com.docker.network.generic": options, "com.docker.network.internal": True}
    data = [{"AddressSpace": "default", "Pool": X, "Gateway": m.gateway}]
    err = h2.refused(
        "NetworkDriver.CreateNetwork",
        {"NetworkID": SID, "Options": generic, "IPv4Data": data, "IPv6Data": []},
    )
    assert "--internal is not supported on netplugin's swarm networks" in err


def test_a_network_freed_while_its_tasks_stop_goes_with_its_last_endpoint(
    master: RealMaster, hosts: tuple[Manager, Node, Node]
) -> None:
    baseline = master.snapshot()
    m, h2, _ = hosts
    options = m.create_network({})
    task = m.allocate()
    plug_network(h2, options, m.gateway)
    start_task(h2, "e2", task)
    # `docker network rm` once no service uses it: the task's container is still stopping.
    m.release(task)
    m.remove_network()
    assert network(master).networkName == "snet"  # its endpoint is still there
    client = MasterClient(master.url, backoff=0, session=master.session(), token=master.token)
    swarm_ids: set[str] = set()
    sweep = SwarmSweep(client, lambda: swarm_ids)
    sweep.sweep()  # endpoints left: not yet
    assert network(master).networkName == "snet"
    stop_task(h2, "e2", task)
    unplug_network(h2, m.gateway)
    SwarmSweep(client, lambda: None).sweep()  # not a manager: it cannot tell
    assert network(master).networkName == "snet"
    sweep.sweep()
    assert master.snapshot() == baseline


def test_the_sweep_judges_only_networks_made_for_swarm_networks_it_lists() -> None:
    made = Network(networkName="a", subnet=X, dockerNetworkID=SID)
    alive = Network(networkName="b", subnet=X, dockerNetworkID="b" * 25)
    docker = Network(networkName="c", subnet=X, dockerNetworkID="c" * 64)
    netctl = Network(networkName="d", subnet=X)
    gone = freed_networks([made, alive, docker, netctl], {"b" * 25})
    assert gone == [NetworkRef("default", "a")]


def test_a_bad_request_in_a_node_pool_is_refused_naming_the_pool(
    hosts: tuple[Manager, Node, Node],
) -> None:
    _, h2, _ = hosts
    for pool, address, words in (
        ("!swarm:garbage", "10.99.0.5", "is not a swarm node's pool"),
        (f"!swarm:{X}", "10.98.0.5", "address '10.98.0.5' is not in 10.99.0.0/24"),
        (f"!swarm:{X}", "nonsense", "address 'nonsense' is not in"),
    ):
        err = h2.refused("IpamDriver.RequestAddress", {"PoolID": pool, "Address": address})
        assert words in err and pool in err
