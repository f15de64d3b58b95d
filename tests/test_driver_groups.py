"""Docker networks of endpoint groups, driver <-> master: Docker's calls through the plugin's
app against the real control plane (as tests/test_driver_contract.py), with the options the
docker sync gives a group's docker network (-o and --ipam-opt tenant, network, group).

A group's docker network books in its network's pool, within the group's ip-pool, through
the pool id "<network's pool id>@<group>"; `docker network rm` of it deletes the group,
never the network.
"""

from __future__ import annotations

from typing import Any

import pytest
from docker_plugin import EID, GW_OPTS, NID, FakeDatapath, call
from flask.testing import FlaskClient
from test_driver_contract import (  # noqa: F401 (fixtures)
    create_endpoint,
    create_network,
    datapath,
    holder,
    master,
    ok,
    oper,
    plugin,
    request_address,
    request_pool,
    run,
)

from common import keys, owners
from common.models import EndpointGroup, Network, Tenant
from plugin.app import create_app
from plugin.driver import Driver
from plugin.master_client import MasterClient
from testbed.real_master import RealMaster

POOL = "blue:10.7.0.0/24"
FRONT_POOL = f"{POOL}@front"
OPTS = {"tenant": "blue", "network": "web", "group": "front"}
NID2 = "a" * 64


@pytest.fixture
def cluster(master: RealMaster) -> RealMaster:  # noqa: F811
    """Network blue:web with group front (an ip-pool) and network blue:db."""
    master.state.tenants.put(Tenant(tenantName="blue"))
    for name, subnet in (("web", "10.7.0.0/24"), ("db", "10.8.0.0/24")):
        master.state.networks.put(Network(tenantName="blue", networkName=name, subnet=subnet))
    master.state.groups.put(
        EndpointGroup(
            tenantName="blue", groupName="front", networkName="web", ipPool="10.7.0.100-10.7.0.110"
        )
    )
    return master


def group_network(plugin: FlaskClient, nid: str = NID, **opts: str) -> str:  # noqa: F811
    """What the docker sync's `docker network create` of group front makes Docker call."""
    opts = opts or OPTS
    pool_id = ok(request_pool(plugin, "10.7.0.0/24", **opts))["PoolID"]
    gateway = ok(request_address(plugin, pool_id, options=GW_OPTS))["Address"]
    ok(create_network(plugin, ("10.7.0.0/24", gateway), nid=nid, **opts))
    return str(pool_id)


def group_ids(master: RealMaster) -> list[str]:  # noqa: F811
    return [g.id for g in master.state.groups.list()]


def refusal(r: Any, status: int) -> str:
    body = r.get_json()
    assert r.status_code == status, body
    return str(body.get("Err") or body.get("Error"))


def test_a_groups_docker_network_from_run_to_rm(
    plugin: FlaskClient,  # noqa: F811
    cluster: RealMaster,
    datapath: FakeDatapath,  # noqa: F811
) -> None:
    pool_id = group_network(plugin)
    assert pool_id == FRONT_POOL
    # Every host's docker network of the group shares the network's gateway.
    assert oper(cluster, "blue", "web")["allocatedAddresses"] == ["10.7.0.1"]

    address = run(plugin, pool_id)
    assert address == "10.7.0.100/24"  # the group's ip-pool, not the pool's first address
    ep = cluster.state.endpoints.get(EID)
    assert (ep.networkName, ep.groupName, ep.ipAddress, ep.ipv4Pool) == (
        "web",
        "front",
        "10.7.0.100",
        POOL,
    )
    assert holder(cluster, POOL, "10.7.0.100") == owners.endpoint(EID)  # adopted, once
    assert datapath.ports[EID]["group"] == "blue:front"  # its packets carry the group's tag
    assert oper(cluster, "blue", "web")["allocatedAddresses"] == ["10.7.0.1", "10.7.0.100"]

    ids = {"NetworkID": NID, "EndpointID": EID}
    ok(call(plugin, "NetworkDriver.Leave", ids))
    ok(call(plugin, "NetworkDriver.DeleteEndpoint", ids))
    ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": "10.7.0.100"}))
    assert oper(cluster, "blue", "web")["allocatedAddresses"] == ["10.7.0.1"]

    # `docker network rm front`: the group goes, the network and its switch state stay.
    ok(call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID}))
    assert "blue:front" not in group_ids(cluster)  # an agent token may delete groups
    assert cluster.state.networks.get("blue", "web").subnet == "10.7.0.0/24"
    assert datapath.removed_networks == []
    # Docker then lets go of the gateway and the pool: both stay the network's.
    ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": "10.7.0.1"}))
    ok(call(plugin, "IpamDriver.ReleasePool", {"PoolID": pool_id}))
    assert oper(cluster, "blue", "web")["allocatedAddresses"] == ["10.7.0.1"]
    assert cluster.store.get(keys.pool(POOL)) is not None


def test_rm_of_a_groups_docker_network_with_endpoints_changes_nothing(
    plugin: FlaskClient,  # noqa: F811
    cluster: RealMaster,
    datapath: FakeDatapath,  # noqa: F811
) -> None:
    pool_id = group_network(plugin)
    run(plugin, pool_id)
    before = cluster.snapshot()
    r = call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID})
    message = refusal(r, 409)
    assert "endpoint group blue:front: it still has 1 endpoint(s)" in message
    assert cluster.snapshot() == before
    assert datapath.removed_networks == [] and EID in datapath.ports


def test_a_groups_docker_network_left_behind_by_a_moved_group_goes_alone(
    plugin: FlaskClient,  # noqa: F811
    cluster: RealMaster,
    datapath: FakeDatapath,  # noqa: F811
) -> None:
    """The group moved to network db (it had no endpoints): the docker sync removes its old
    docker network, and that must not delete the group."""
    group_network(plugin)
    cluster.state.groups.put(EndpointGroup(tenantName="blue", groupName="front", networkName="db"))
    before = cluster.snapshot()
    ok(call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID}))
    assert cluster.snapshot() == before and datapath.removed_networks == []


def test_a_group_without_an_ip_pool_books_in_the_whole_pool(
    plugin: FlaskClient,  # noqa: F811
    cluster: RealMaster,
) -> None:
    cluster.state.groups.put(EndpointGroup(tenantName="blue", groupName="back", networkName="web"))
    pool_id = group_network(plugin, tenant="blue", network="web", group="back")
    assert pool_id == f"{POOL}@back"
    assert run(plugin, pool_id) == "10.7.0.2/24"
    assert cluster.state.endpoints.get(EID).groupName == "back"


def test_docker_networks_of_groups_that_are_not_there_are_refused(
    plugin: FlaskClient,  # noqa: F811
    cluster: RealMaster,
) -> None:
    before = cluster.snapshot()
    missing = {"tenant": "blue", "network": "web", "group": "nosuch"}
    for r in (
        request_pool(plugin, "10.7.0.0/24", **missing),
        create_network(plugin, None, **missing),
    ):
        assert refusal(r, 404) == (
            "endpoint group blue:nosuch does not exist in netmaster; create it first: "
            "netctl group create -t blue web nosuch"
        )
    elsewhere = {"tenant": "blue", "network": "db", "group": "front"}
    r = request_pool(plugin, "10.8.0.0/24", **elsewhere)
    assert refusal(r, 400).endswith(
        "endpoint group blue:front is on network web, not db: use --ipam-opt network=web"
    )
    r = create_network(plugin, None, **elsewhere)
    assert refusal(r, 400).endswith("use -o network=web")
    # A group without its network: the refusal names the network to add.
    r = create_network(plugin, ("10.7.0.0/24", "10.7.0.1/24"), tenant="blue", group="front")
    assert refusal(r, 400).endswith("needs its network too: -o network=web -o group=front")
    r = request_pool(plugin, "10.7.0.0/24", tenant="blue", group="front")
    assert "--ipam-opt network=web --ipam-opt group=front" in refusal(r, 400)
    r = create_network(plugin, None, group="nosuch")
    assert "netctl group create NETWORK nosuch" in refusal(r, 404)
    assert cluster.snapshot() == before


def test_a_pool_id_of_a_group_names_the_group_to_the_master(
    plugin: FlaskClient,  # noqa: F811
    cluster: RealMaster,
) -> None:
    """RequestAddress of a group pool whose group is gone (Docker's request raced its
    deletion): the master's refusal names the group."""
    r = request_address(plugin, f"{POOL}@gone")
    assert "endpoint group blue:gone: not found" in refusal(r, 404)
    # Another docker network of the same group (two hosts, or a user's own): the same pool.
    assert group_network(plugin, nid=NID2) == FRONT_POOL


def test_a_restarted_plugin_knows_a_groups_docker_network_from_its_options(
    cluster: RealMaster,
    datapath: FakeDatapath,  # noqa: F811
) -> None:
    """After a restart the driver has no memory of CreateNetwork: dockerd's -o options of
    the network say it stands for the group, and rm deletes the group, not the network."""
    client = MasterClient(cluster.url, backoff=0, session=cluster.session(), token=cluster.token)
    driver = Driver(client, datapath, host="host1", docker_options=lambda nid: dict(OPTS))
    plugin = create_app(driver).test_client()  # noqa: F811
    ok(call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID}))
    assert group_ids(cluster) == []
    assert cluster.state.networks.get("blue", "web").networkName == "web"
    assert datapath.removed_networks == []


def test_a_dual_stack_groups_docker_network(
    plugin: FlaskClient,  # noqa: F811
    cluster: RealMaster,
) -> None:
    """The group's ip-pool is IPv4: its IPv6 addresses come from the whole IPv6 pool."""
    cluster.state.networks.put(
        Network(
            tenantName="blue", networkName="dual", subnet="10.9.0.0/24", ipv6Subnet="fd00:9::/64"
        )
    )
    cluster.state.groups.put(
        EndpointGroup(
            tenantName="blue", groupName="duo", networkName="dual", ipPool="10.9.0.50-10.9.0.60"
        )
    )
    opts = {"tenant": "blue", "network": "dual", "group": "duo"}
    v4 = ok(request_pool(plugin, "10.9.0.0/24", **opts))["PoolID"]
    v6 = ok(request_pool(plugin, "fd00:9::/64", v6=True, **opts))["PoolID"]
    assert (v4, v6) == ("blue:10.9.0.0/24@duo", "blue:fd00:9::/64@duo")
    assert ok(request_address(plugin, v6, options=GW_OPTS))["Address"] == "fd00:9::1/64"
    a4 = ok(request_address(plugin, v4))["Address"]
    a6 = ok(request_address(plugin, v6))["Address"]
    assert a4 == "10.9.0.50/24" and a6 == "fd00:9::2/64"
