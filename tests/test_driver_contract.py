"""The driver <-> master contract: Docker's calls through the plugin's app, against the real
control plane (master.app on ClusterState over a temporary SQLite store), with a datapath fake.

Every refusal is checked to change nothing: the whole cluster state is compared before and
after, and the master's inspect views are read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_plugin import EID, GW_OPTS, NID, FakeDatapath, call
from flask.testing import FlaskClient

from common import keys, owners
from common.models import EndpointGroup, Network, Tenant
from common.records import AllocRecord
from plugin.app import create_app
from plugin.driver import Driver
from plugin.master_client import MasterClient
from plugin.options import MAC_OPTION
from testbed.real_master import RealMaster, real_master

EID2 = "d" * 64
NAME = NID[:12]  # the name CreateNetwork gives before docker tells the real one
MAC = "02:42:0a:05:00:63"


@pytest.fixture(params=[None, "agent"], ids=["open", "agent-token"])
def master(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RealMaster]:
    """A master open to all, and one that requires tokens: the agent role must be enough
    for every call Docker makes through the plugin."""
    with real_master(tmp_path, request.param) as m:
        yield m


@pytest.fixture
def datapath() -> FakeDatapath:
    return FakeDatapath()


@pytest.fixture
def plugin(master: RealMaster, datapath: FakeDatapath) -> FlaskClient:
    client = MasterClient(master.url, backoff=0, session=master.session(), token=master.token)
    return create_app(Driver(client, datapath, host="host1")).test_client()


# --- Docker's calls ---


def ok(r: Any) -> Any:
    assert r.status_code == 200, r.get_json()
    return r.get_json()


def request_pool(
    plugin: FlaskClient, pool: str = "", sub_pool: str = "", v6: bool = False, **opts: str
) -> Any:
    body = {"AddressSpace": "", "Pool": pool, "SubPool": sub_pool, "V6": v6, "Options": opts}
    return call(plugin, "IpamDriver.RequestPool", body)


def request_address(
    plugin: FlaskClient, pool_id: str, address: str = "", options: Any = None
) -> Any:
    body = {"PoolID": pool_id, "Address": address, "Options": options}
    return call(plugin, "IpamDriver.RequestAddress", body)


def create_network(
    plugin: FlaskClient,
    v4: tuple[str, str] | None,
    v6: tuple[str, str] | None = None,
    nid: str = NID,
    **generic: str,
) -> Any:
    """CreateNetwork with (pool, gateway CIDR) per family and the -o options."""
    body = {
        "NetworkID": nid,
        "Options": {
            "com.docker.network.enable_ipv6": v6 is not None,
            "com.docker.network.generic": generic,
        },
        "IPv4Data": [{"AddressSpace": "", "Pool": v4[0], "Gateway": v4[1]}] if v4 else [],
        "IPv6Data": [{"AddressSpace": "", "Pool": v6[0], "Gateway": v6[1]}] if v6 else [],
    }
    return call(plugin, "NetworkDriver.CreateNetwork", body)


def create_endpoint(
    plugin: FlaskClient, address: str = "", address_v6: str = "", eid: str = EID, nid: str = NID
) -> Any:
    iface = {"Address": address, "AddressIPv6": address_v6, "MacAddress": ""}
    body = {"NetworkID": nid, "EndpointID": eid, "Interface": iface, "Options": {}}
    return call(plugin, "NetworkDriver.CreateEndpoint", body)


def join(plugin: FlaskClient, eid: str = EID, nid: str = NID) -> Any:
    body = {"NetworkID": nid, "EndpointID": eid, "SandboxKey": "/x", "Options": None}
    return call(plugin, "NetworkDriver.Join", body)


def network_create(plugin: FlaskClient, subnet: str, **generic: str) -> str:
    """`docker network create --subnet SUBNET` (RequestPool, gateway, CreateNetwork): the pool."""
    pool_id = ok(request_pool(plugin, subnet))["PoolID"]
    gateway = ok(request_address(plugin, pool_id, options=GW_OPTS))["Address"]
    ok(create_network(plugin, (subnet, gateway), **generic))
    return str(pool_id)


def run(plugin: FlaskClient, pool_id: str, eid: str = EID, address: str = "") -> str:
    """`docker run --net` up to Join: RequestAddress, CreateEndpoint, Join; the address."""
    got = ok(request_address(plugin, pool_id, address))["Address"]
    ok(create_endpoint(plugin, got, eid=eid))
    ok(join(plugin, eid))
    return str(got)


# --- the master's views ---


def oper(master: RealMaster, tenant: str = "default", name: str = NAME) -> dict[str, Any]:
    return dict(master.state.networks.inspect(tenant, name)["Oper"])


def endpoint_ids(master: RealMaster) -> list[str]:
    return [e.endpointID for e in master.state.endpoints.list()]


def network_ids(master: RealMaster) -> list[str]:
    return [n.id for n in master.state.networks.list()]


def holder(master: RealMaster, pool_id: str, address: str) -> str:
    kv = master.store.get(keys.alloc(pool_id, address))
    return AllocRecord.decode(kv.value).owner if kv is not None else ""


def leftovers(master: RealMaster) -> list[str]:
    """Keys beyond the defaults a fresh master starts with (global settings, tenants and
    their tags)."""
    defaults = (keys.GLOBAL, keys.TENANTS, keys.TENANT_TAGS)
    return [k for k in master.snapshot() if not k.startswith(defaults)]


# --- the whole life of a network ---


def test_network_create_run_stop_and_rm(
    plugin: FlaskClient, master: RealMaster, datapath: FakeDatapath
) -> None:
    pool = ok(request_pool(plugin, "10.5.0.0/24"))
    assert pool == {"PoolID": "default:10.5.0.0/24", "Pool": "10.5.0.0/24", "Data": {}}
    pool_id = pool["PoolID"]
    assert ok(request_address(plugin, pool_id, options=GW_OPTS)) == {
        "Address": "10.5.0.1/24",
        "Data": {},
    }
    ok(create_network(plugin, ("10.5.0.0/24", "10.5.0.1/24"), encap="vlan", **{"pkt-tag": "100"}))
    net = master.state.networks.get("default", NAME)
    assert (net.subnet, net.gateway, net.encap, net.pktTag) == (
        "10.5.0.0/24",
        "10.5.0.1",
        "vlan",
        100,
    )
    assert net.dockerNetworkID == NID
    # The network adopted the pool Docker reserved, with the gateway it already handed out.
    assert oper(master)["ipv4Pool"] == pool_id
    assert oper(master)["allocatedAddresses"] == ["10.5.0.1"]

    address = ok(request_address(plugin, pool_id))["Address"]
    assert address == "10.5.0.2/24"
    r = ok(create_endpoint(plugin, address))
    mac = r["Interface"]["MacAddress"]
    assert r == {"Interface": {"MacAddress": mac}}
    ep = master.state.endpoints.get(EID)
    assert (ep.ipAddress, ep.macAddress, ep.host, ep.ipv4Pool) == (
        "10.5.0.2",
        mac,
        "host1",
        pool_id,
    )
    # Adopted: the address Docker asked for now belongs to the endpoint, and only once.
    assert holder(master, pool_id, "10.5.0.2") == owners.endpoint(EID)
    assert oper(master)["allocatedAddresses"] == ["10.5.0.1", "10.5.0.2"]
    assert ok(join(plugin)) == {
        "InterfaceName": {"SrcName": datapath.ports[EID]["name"], "DstPrefix": "eth"},
        "Gateway": "10.5.0.1",
        "StaticRoutes": [],
        "DisableGatewayService": False,
    }

    ids = {"NetworkID": NID, "EndpointID": EID}
    ok(call(plugin, "NetworkDriver.Leave", ids))
    ok(call(plugin, "NetworkDriver.DeleteEndpoint", ids))
    assert endpoint_ids(master) == [] and EID not in datapath.ports
    ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": "10.5.0.2"}))
    assert oper(master)["allocatedAddresses"] == ["10.5.0.1"]

    ok(call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID}))
    ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": "10.5.0.1"}))
    ok(call(plugin, "IpamDriver.ReleasePool", {"PoolID": pool_id}))
    assert network_ids(master) == [] and datapath.removed_networks == [f"default:{NAME}"]
    assert master.state.settings.inspect()["Oper"]["vlansInUse"] == ""
    assert [k for k in leftovers(master) if not k.startswith(keys.OWNERS)] == []


def test_network_rm_leaves_no_owner_record(plugin: FlaskClient, master: RealMaster) -> None:
    pool_id = network_create(plugin, "10.5.0.0/24")
    ok(call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID}))
    ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": "10.5.0.1"}))
    ok(call(plugin, "IpamDriver.ReleasePool", {"PoolID": pool_id}))
    assert leftovers(master) == []


def test_network_rm_takes_addresses_docker_never_released_with_their_owners(
    plugin: FlaskClient, master: RealMaster
) -> None:
    """A static request (--aux-address) Docker did not release before the network went."""
    pool_id = network_create(plugin, "10.5.0.0/24")
    ok(request_address(plugin, pool_id, "10.5.0.9"))
    ok(call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID}))
    ok(call(plugin, "IpamDriver.ReleasePool", {"PoolID": pool_id}))
    assert leftovers(master) == []


def test_release_pool_takes_its_unreleased_addresses_with_their_owners(
    plugin: FlaskClient, master: RealMaster
) -> None:
    """A Docker pool no network adopted (CreateNetwork never came), released with addresses
    still booked in it."""
    pool_id = ok(
        call(plugin, "IpamDriver.RequestPool", {"AddressSpace": "", "Pool": "10.9.0.0/24"})
    )["PoolID"]
    ok(request_address(plugin, pool_id, "10.9.0.7"))
    ok(request_address(plugin, pool_id))
    ok(call(plugin, "IpamDriver.ReleasePool", {"PoolID": pool_id}))
    assert leftovers(master) == []


def test_address_requests_static_mac_and_anonymous(plugin: FlaskClient, master: RealMaster) -> None:
    pool_id = network_create(plugin, "10.5.0.0/24")
    static = ok(request_address(plugin, pool_id, "10.5.0.9"))["Address"]
    assert static == "10.5.0.9/24"
    assert ok(request_address(plugin, pool_id, "10.5.0.9"))["Address"] == static  # a retry
    mac_opts = {MAC_OPTION: MAC}
    by_mac = ok(request_address(plugin, pool_id, options=mac_opts))["Address"]
    assert ok(request_address(plugin, pool_id, options=mac_opts))["Address"] == by_mac
    first, second = (ok(request_address(plugin, pool_id))["Address"] for _ in range(2))
    assert len({static, by_mac, first, second}) == 4
    assert holder(master, pool_id, "10.5.0.9") == owners.docker_static(pool_id, "10.5.0.9")
    assert holder(master, pool_id, by_mac.split("/")[0]) == owners.docker_mac(pool_id, MAC)
    assert oper(master)["allocatedAddressesCount"] == 5  # with the gateway

    # `docker run --ip 10.5.0.9`: the endpoint takes the address the static request holds.
    ok(create_endpoint(plugin, static))
    assert master.state.endpoints.get(EID).ipAddress == "10.5.0.9"
    assert holder(master, pool_id, "10.5.0.9") == owners.endpoint(EID)
    assert oper(master)["allocatedAddressesCount"] == 5
    for address in (by_mac, first, second):
        ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": address}))
    assert oper(master)["allocatedAddresses"] == ["10.5.0.1", "10.5.0.9"]


def test_ip_range_hands_out_addresses_from_the_sub_pool(
    plugin: FlaskClient, master: RealMaster
) -> None:
    pool_id = ok(request_pool(plugin, "10.6.0.0/24", "10.6.0.128/25"))["PoolID"]
    assert pool_id == "default:10.6.0.0/24"
    gateway = ok(request_address(plugin, pool_id, options=GW_OPTS))["Address"]
    assert gateway == "10.6.0.128/24"  # Docker takes what its IPAM gives, from the range
    ok(create_network(plugin, ("10.6.0.0/24", gateway)))
    assert run(plugin, pool_id) == "10.6.0.129/24"
    # An endpoint Docker gives no address (Interface without one) books from the range too.
    r = ok(create_endpoint(plugin, eid=EID2))
    assert r["Interface"]["Address"] == "10.6.0.130/24"
    assert oper(master)["allocatedAddresses"] == ["10.6.0.128", "10.6.0.129", "10.6.0.130"]


def test_dual_stack(plugin: FlaskClient, master: RealMaster) -> None:
    v4 = ok(request_pool(plugin, "10.5.0.0/24"))["PoolID"]
    v6 = ok(request_pool(plugin, "fd00:5::/64", v6=True))["PoolID"]
    assert v6 == "default:fd00:5::/64"
    gw4 = ok(request_address(plugin, v4, options=GW_OPTS))["Address"]
    gw6 = ok(request_address(plugin, v6, options=GW_OPTS))["Address"]
    assert gw6 == "fd00:5::1/64"
    ok(create_network(plugin, ("10.5.0.0/24", gw4), ("fd00:5::/64", gw6)))
    assert (oper(master)["ipv4Pool"], oper(master)["ipv6Pool"]) == (v4, v6)
    a4 = ok(request_address(plugin, v4))["Address"]
    a6 = ok(request_address(plugin, v6))["Address"]
    ok(create_endpoint(plugin, a4, a6))
    ep = master.state.endpoints.get(EID)
    assert (ep.ipAddress, ep.ipv6Address) == (a4.split("/")[0], a6.split("/")[0])
    assert holder(master, v6, ep.ipv6Address) == owners.endpoint(EID)
    assert oper(master)["allocatedIPv6Addresses"] == ["fd00:5::1", ep.ipv6Address]
    reply = ok(join(plugin))
    assert (reply["Gateway"], reply["GatewayIPv6"]) == ("10.5.0.1", "fd00:5::1")


def test_a_default_ipv6_pool(plugin: FlaskClient) -> None:
    """`--ipv6` without a v6 subnet: the master picks a pool."""
    pool = ok(request_pool(plugin, v6=True))
    assert pool["PoolID"] == f"default:{pool['Pool']}" and ":" in pool["Pool"]


def test_tenant_from_o_and_ipam_opt(plugin: FlaskClient, master: RealMaster) -> None:
    master.state.tenants.put(Tenant(tenantName="blue"))
    pool_id = ok(request_pool(plugin, "10.9.0.0/24", tenant="blue"))["PoolID"]
    assert pool_id == "blue:10.9.0.0/24"
    gateway = ok(request_address(plugin, pool_id, options=GW_OPTS))["Address"]
    ok(create_network(plugin, ("10.9.0.0/24", gateway), tenant="blue"))
    assert network_ids(master) == [f"blue:{NAME}"]
    assert oper(master, "blue")["ipv4Pool"] == pool_id  # one pool, booked once
    run(plugin, pool_id)
    ep = master.state.endpoints.get(EID)
    assert (ep.tenantName, ep.networkName, ep.ipv4Pool) == ("blue", NAME, pool_id)


def test_a_cluster_network_named_by_ipam_opt(
    plugin: FlaskClient, master: RealMaster, datapath: FakeDatapath
) -> None:
    master.state.tenants.put(Tenant(tenantName="blue"))
    master.state.networks.put(
        Network(tenantName="blue", networkName="web", subnet="10.7.0.0/24", gateway="10.7.0.1")
    )
    before = master.snapshot()
    opts = {"tenant": "blue", "network": "web"}
    pool = ok(request_pool(plugin, "10.7.0.0/24", **opts))
    assert pool == {"PoolID": "blue:10.7.0.0/24", "Pool": "10.7.0.0/24", "Data": {}}
    # The network's own gateway is granted to every host's docker network of it.
    gateway = ok(request_address(plugin, pool["PoolID"], options=GW_OPTS))["Address"]
    assert gateway == "10.7.0.1/24"
    ok(create_network(plugin, ("10.7.0.0/24", gateway), **opts))
    assert master.snapshot() == before  # joined: nothing created
    address = run(plugin, pool["PoolID"])
    ep = master.state.endpoints.get(EID)
    assert (ep.tenantName, ep.networkName, f"{ep.ipAddress}/24") == ("blue", "web", address)
    assert oper(master, "blue", "web")["numEndpoints"] == 1
    assert datapath.ports[EID]["ipv4"] == ep.ipAddress


# --- refusals change nothing ---


def test_an_exhausted_pool(plugin: FlaskClient, master: RealMaster) -> None:
    pool_id = network_create(plugin, "10.8.0.0/30")  # two usable addresses: .1 and .2
    run(plugin, pool_id)
    before = master.snapshot()
    r = request_address(plugin, pool_id)
    assert r.status_code == 409 and "no free address" in r.get_json()["Error"], r.get_json()
    r = create_endpoint(plugin, eid=EID2)
    assert r.status_code == 409 and "no free address" in r.get_json()["Err"], r.get_json()
    assert master.snapshot() == before
    assert endpoint_ids(master) == [EID]
    assert oper(master)["allocatedAddresses"] == ["10.8.0.1", "10.8.0.2"]


def test_an_address_in_use(plugin: FlaskClient, master: RealMaster, datapath: FakeDatapath) -> None:
    pool_id = network_create(plugin, "10.5.0.0/24")
    address = run(plugin, pool_id)
    before = master.snapshot()
    r = create_endpoint(plugin, address, eid=EID2)  # another container, the same --ip
    assert r.status_code == 409, r.get_json()
    assert f"address {address.split('/')[0]} is already in use" in r.get_json()["Err"]
    r = request_address(plugin, pool_id, "10.5.0.1")  # the network's gateway
    assert r.status_code == 409 and "already in use" in r.get_json()["Error"], r.get_json()
    assert master.snapshot() == before
    assert endpoint_ids(master) == [EID] and EID2 not in datapath.ports
    assert oper(master)["allocatedAddresses"] == ["10.5.0.1", address.split("/")[0]]


def test_an_unknown_network(plugin: FlaskClient, master: RealMaster) -> None:
    before = master.snapshot()
    r = create_endpoint(plugin, "10.5.0.7/24")
    assert r.status_code == 404
    assert r.get_json() == {"Err": f"network {NID} is not known to netmaster"}
    r = request_pool(plugin, "10.7.0.0/24", tenant="blue", network="web")
    assert r.status_code == 404 and "network blue:web does not exist" in r.get_json()["Error"]
    r = create_network(plugin, None, tenant="blue", network="web")
    assert r.status_code == 404 and "blue:web" in r.get_json()["Err"]
    r = create_network(plugin, ("10.5.0.0/24", "10.5.0.1/24"), tenant="nosuch")
    assert r.status_code == 404 and "tenant nosuch" in r.get_json()["Err"], r.get_json()
    r = create_network(plugin, ("10.5.0.0/24", "10.5.0.1/24"), encap="gre")
    assert r.status_code == 400 and "encap" in r.get_json()["Err"], r.get_json()
    assert master.snapshot() == before
    assert network_ids(master) == [] and endpoint_ids(master) == []


def test_deleting_a_network_that_has_endpoints(
    plugin: FlaskClient, master: RealMaster, datapath: FakeDatapath
) -> None:
    pool_id = network_create(plugin, "10.5.0.0/24")
    address = run(plugin, pool_id)
    before = master.snapshot()
    r = call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": NID})
    assert r.status_code == 409 and "endpoint" in r.get_json()["Err"], r.get_json()
    assert master.snapshot() == before
    assert network_ids(master) == [f"default:{NAME}"] and endpoint_ids(master) == [EID]
    assert oper(master)["allocatedAddresses"] == ["10.5.0.1", address.split("/")[0]]
    assert datapath.removed_networks == [] and EID in datapath.ports


def test_a_docker_network_naming_a_group_puts_its_containers_in_the_group(
    plugin: FlaskClient, master: RealMaster
) -> None:
    """README: `docker network create -o tenant=T -o network=N -o group=G` for a group."""
    master.state.tenants.put(Tenant(tenantName="blue"))
    master.state.networks.put(
        Network(tenantName="blue", networkName="web", subnet="10.7.0.0/24", gateway="10.7.0.1")
    )
    master.state.groups.put(
        EndpointGroup(
            tenantName="blue", groupName="front", networkName="web", ipPool="10.7.0.100-10.7.0.110"
        )
    )
    opts = {"tenant": "blue", "network": "web", "group": "front"}
    pool_id = ok(request_pool(plugin, "10.7.0.0/24", **opts))["PoolID"]
    ok(request_address(plugin, pool_id, options=GW_OPTS))
    ok(create_network(plugin, ("10.7.0.0/24", "10.7.0.1/24"), **opts))
    ok(create_endpoint(plugin))  # Docker leaves the address to the driver here
    ep = master.state.endpoints.get(EID)
    assert (ep.tenantName, ep.networkName, ep.groupName) == ("blue", "web", "front")
    assert 100 <= int(ep.ipAddress.rsplit(".", 1)[1]) <= 110  # from the group's ipPool
