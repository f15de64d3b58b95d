"""One booking per address, whatever -o / --ipam-opt options a `docker network create` has.

Docker's calls through the plugin's app against the real control plane (as
tests/test_driver_contract.py). RequestPool sees only --ipam-opt, CreateNetwork only -o: the
pool id Docker got is bound at CreateNetwork to the pool of the network the -o options make
or name (master.decisions.bindings), so every address is booked once, in that pool; a
combination that cannot be bound is refused with what to type, and Docker's rollback
(ReleaseAddress, ReleasePool) leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_plugin import GW_OPTS, FakeDatapath, call
from flask.testing import FlaskClient

from common import keys, owners
from common.models import EndpointGroup, Network, PoolRequest, Tenant
from common.records import AllocRecord, PoolRecord
from master.decisions.bindings import Binding, Target, plan_binding
from master.decisions.consistency import check_state
from master.decisions.networks import plan_pools
from master.decisions.pools import PoolGrant, free_pool_id, plan_pool_request
from master.errors import BadRequest, Conflict, NotFound
from plugin.app import create_app
from plugin.driver import Driver
from plugin.master_client import MasterClient
from testbed.real_master import RealMaster, real_master

NID1, NID2 = "1" * 64, "2" * 64
EID1, EID2 = "e" * 64, "d" * 64
X = "10.60.0.0/24"


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RealMaster]:
    with real_master(tmp_path, "agent") as m:
        m.state.tenants.put(Tenant(tenantName="blue"))
        m.state.tenants.put(Tenant(tenantName="red"))
        yield m


def new_plugin(master: RealMaster) -> FlaskClient:
    client = MasterClient(master.url, backoff=0, session=master.session(), token=master.token)
    return create_app(Driver(client, FakeDatapath(), host="host1")).test_client()


@pytest.fixture
def plugin(master: RealMaster) -> FlaskClient:
    return new_plugin(master)


def ok(r: Any) -> Any:
    assert r.status_code == 200, r.get_json()
    return r.get_json()


@pytest.fixture
def baseline(master: RealMaster) -> dict[str, bytes]:
    return master.snapshot()


class DockerNetwork:
    """What dockerd holds of one docker network: its id, pool id and gateway."""

    def __init__(self, nid: str, pool_id: str, gateway: str) -> None:
        self.nid, self.pool_id, self.gateway = nid, pool_id, gateway


def create(
    plugin: FlaskClient,
    subnet: str = X,
    nid: str = NID1,
    ipam: dict[str, str] | None = None,
    gateway: str = "",
    **o: str,
) -> DockerNetwork:
    """`docker network create -d netplugin --ipam-driver netplugin [--subnet] [--gateway]
    [--ipam-opt K=V] [-o K=V]`; a refused CreateNetwork is rolled back as dockerd does and
    its refusal raised as AssertionError(message)."""
    body = {"AddressSpace": "default", "Pool": subnet, "SubPool": "", "Options": ipam or {}}
    got = ok(call(plugin, "IpamDriver.RequestPool", body))
    pool_id, pool = got["PoolID"], got["Pool"]
    gw = ok(
        call(
            plugin,
            "IpamDriver.RequestAddress",
            {"PoolID": pool_id, "Address": gateway, "Options": GW_OPTS},
        )
    )["Address"]
    r = call(
        plugin,
        "NetworkDriver.CreateNetwork",
        {
            "NetworkID": nid,
            "Options": {"com.docker.network.generic": o},
            "IPv4Data": [{"AddressSpace": "default", "Pool": pool, "Gateway": gw}],
            "IPv6Data": [],
        },
    )
    if r.status_code != 200:
        address = gw.split("/")[0]
        ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": pool_id, "Address": address}))
        ok(call(plugin, "IpamDriver.ReleasePool", {"PoolID": pool_id}))
        raise AssertionError(r.get_json()["Err"])
    return DockerNetwork(nid, pool_id, gw.split("/")[0])


def refusal(plugin: FlaskClient, **kw: Any) -> str:
    with pytest.raises(AssertionError) as e:
        create(plugin, **kw)
    return str(e.value)


def run(plugin: FlaskClient, net: DockerNetwork, eid: str = EID1) -> str:
    """`docker run --net`: RequestAddress, CreateEndpoint, Join; the address."""
    got = ok(call(plugin, "IpamDriver.RequestAddress", {"PoolID": net.pool_id, "Address": ""}))
    iface = {"Address": got["Address"], "AddressIPv6": "", "MacAddress": ""}
    ids = {"NetworkID": net.nid, "EndpointID": eid}
    ok(call(plugin, "NetworkDriver.CreateEndpoint", {**ids, "Interface": iface, "Options": {}}))
    ok(call(plugin, "NetworkDriver.Join", {**ids, "SandboxKey": "/x", "Options": None}))
    return str(got["Address"]).split("/")[0]


def stop(plugin: FlaskClient, net: DockerNetwork, address: str, eid: str = EID1) -> None:
    ids = {"NetworkID": net.nid, "EndpointID": eid}
    ok(call(plugin, "NetworkDriver.Leave", ids))
    ok(call(plugin, "NetworkDriver.DeleteEndpoint", ids))
    ok(call(plugin, "IpamDriver.ReleaseAddress", {"PoolID": net.pool_id, "Address": address}))


def rm(plugin: FlaskClient, net: DockerNetwork, refused: bool = False) -> None:
    """`docker network rm`: DeleteNetwork, then the gateway and the pool (dockerd releases
    them even when the driver refused DeleteNetwork)."""
    r = call(plugin, "NetworkDriver.DeleteNetwork", {"NetworkID": net.nid})
    assert (r.status_code != 200) == refused, r.get_json()
    release = {"PoolID": net.pool_id, "Address": net.gateway}
    ok(call(plugin, "IpamDriver.ReleaseAddress", release))
    ok(call(plugin, "IpamDriver.ReleasePool", {"PoolID": net.pool_id}))


def bookings(master: RealMaster, address: str) -> list[str]:
    """Every allocation key of ``address``, in any pool."""
    return [k for k in master.snapshot() if k.startswith(keys.ALLOC) and k.endswith(f"/{address}")]


def pool(master: RealMaster, pool_id: str) -> PoolRecord | None:
    kv = master.store.get(keys.pool(pool_id))
    return PoolRecord.decode(kv.value) if kv is not None else None


def consistent(master: RealMaster) -> None:
    assert check_state(master.snapshot()) == []


def network_of(master: RealMaster, nid: str) -> Network:
    (net,) = [n for n in master.state.networks.list() if n.dockerNetworkID == nid]
    return net


# --- -o tenant= alone ---


def test_o_tenant_alone_books_every_address_once_in_the_tenants_pool(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes]
) -> None:
    net = create(plugin, tenant="blue")
    assert net.pool_id == f"default:{X}"
    n = network_of(master, NID1)
    assert n.tenantName == "blue"
    # Docker's pool id now stands for the tenant's pool; its gateway booking moved there.
    assert pool(master, net.pool_id) == PoolRecord(cidr=X, alias=f"blue:{X}", name=net.pool_id)
    blue = pool(master, f"blue:{X}")
    assert blue is not None and blue.aliases == (net.pool_id,)
    assert bookings(master, "10.60.0.1") == [keys.alloc(f"blue:{X}", "10.60.0.1")]
    address = run(plugin, net)
    assert bookings(master, address) == [keys.alloc(f"blue:{X}", address)]
    ep = master.state.endpoints.get(EID1)
    assert (ep.tenantName, ep.ipAddress, ep.ipv4Pool) == ("blue", address, f"blue:{X}")
    oper = master.state.networks.inspect("blue", n.networkName)["Oper"]
    assert oper["allocatedAddresses"] == ["10.60.0.1", address]
    consistent(master)
    stop(plugin, net, address)
    rm(plugin, net)
    assert master.snapshot() == baseline


def test_the_binding_survives_a_plugin_restart(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes]
) -> None:
    net = create(plugin, tenant="blue")
    again = new_plugin(master)  # a new process: nothing in memory
    address = run(again, net)
    assert bookings(master, address) == [keys.alloc(f"blue:{X}", address)]
    stop(again, net, address)
    rm(again, net)
    assert master.snapshot() == baseline


@pytest.mark.parametrize(
    "o",
    [
        {"encap": "vlan", "pkt-tag": "300"},
        {"encap": "vxlan", "pkt-tag": "7000"},
        {"tenant": "blue", "encap": "vlan", "pkt-tag": "301"},
    ],
    ids=["vlan", "vxlan", "tenant-vlan"],
)
def test_encap_and_pkt_tag_book_once_alone_and_with_a_tenant(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes], o: dict[str, str]
) -> None:
    net = create(plugin, **o)
    n = network_of(master, NID1)
    assert (n.encap, n.pktTag) == (o["encap"], int(o["pkt-tag"]))
    address = run(plugin, net)
    space = o.get("tenant", "default")
    assert bookings(master, "10.60.0.1") == [keys.alloc(f"{space}:{X}", "10.60.0.1")]
    assert bookings(master, address) == [keys.alloc(f"{space}:{X}", address)]
    consistent(master)
    stop(plugin, net, address)
    rm(plugin, net)
    assert master.snapshot() == baseline


def test_ipam_opt_tenant_with_o_tenant_is_as_before(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes]
) -> None:
    net = create(plugin, ipam={"tenant": "blue"}, tenant="blue")
    assert net.pool_id == f"blue:{X}"
    blue = pool(master, net.pool_id)
    assert blue is not None and blue.network.startswith("blue:") and not blue.aliases
    address = run(plugin, net)
    assert bookings(master, address) == [keys.alloc(f"blue:{X}", address)]
    stop(plugin, net, address)
    rm(plugin, net)
    assert master.snapshot() == baseline


# --- tenants with one subnet ---


def test_a_tenants_network_then_a_default_one_with_the_same_subnet(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes]
) -> None:
    blue = create(plugin, tenant="blue")
    plain = create(plugin, nid=NID2)  # default:X is blue's alias: a twin pool id
    assert plain.pool_id == f"default:{X}~2"
    assert master.state.networks.inspect("default", NID2[:12])["Oper"]["ipv4Pool"] == plain.pool_id
    a = run(plugin, blue, EID1)
    b = run(plugin, plain, EID2)
    assert a == b == "10.60.0.2"  # one address in two tenants, each booked once
    assert sorted(bookings(master, a)) == sorted(
        [keys.alloc(f"blue:{X}", a), keys.alloc(plain.pool_id, a)]
    )
    consistent(master)
    stop(plugin, blue, a, EID1)
    stop(plugin, plain, b, EID2)
    rm(plugin, blue)
    rm(plugin, plain)
    assert master.snapshot() == baseline


def test_a_default_network_then_a_tenants_with_the_same_subnet(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes]
) -> None:
    plain = create(plugin)
    blue = create(plugin, nid=NID2, tenant="blue")  # not the default network's pool
    assert blue.pool_id == f"default:{X}~2"
    a = run(plugin, plain, EID1)
    b = run(plugin, blue, EID2)
    assert sorted(bookings(master, a)) == sorted(
        [keys.alloc(f"default:{X}", a), keys.alloc(f"blue:{X}", b)]
    )
    consistent(master)
    stop(plugin, plain, a, EID1)
    stop(plugin, blue, b, EID2)
    rm(plugin, blue)
    rm(plugin, plain)
    assert master.snapshot() == baseline


# --- -o network= (and group=) alone ---


@pytest.fixture
def web(master: RealMaster) -> RealMaster:
    """Network blue:web (10.7.0.0/24) with group front (ip-pool .100-.110)."""
    master.state.networks.put(Network(tenantName="blue", networkName="web", subnet="10.7.0.0/24"))
    master.state.groups.put(
        EndpointGroup(
            tenantName="blue", groupName="front", networkName="web", ipPool="10.7.0.100-10.7.0.110"
        )
    )
    return master


def test_o_network_alone_books_in_the_networks_pool(plugin: FlaskClient, web: RealMaster) -> None:
    before = web.snapshot()
    net = create(plugin, "10.7.0.0/24", tenant="blue", network="web")
    address = run(plugin, net)
    assert bookings(web, address) == [keys.alloc("blue:10.7.0.0/24", address)]
    assert web.state.endpoints.get(EID1).networkName == "web"
    consistent(web)
    stop(plugin, net, address)
    # Group front uses web: DeleteNetwork is refused, dockerd drops its copy all the same
    # and releases its pool id: the alias goes, the network stays as it was.
    rm(plugin, net, refused=True)
    assert web.snapshot() == before


def test_o_group_alone_books_in_the_groups_ip_pool(plugin: FlaskClient, web: RealMaster) -> None:
    net = create(plugin, "10.7.0.0/24", tenant="blue", network="web", group="front")
    alias = pool(web, net.pool_id)
    assert alias is not None and alias.alias == "blue:10.7.0.0/24@front"
    address = run(plugin, net)
    assert address == "10.7.0.100"
    assert bookings(web, address) == [keys.alloc("blue:10.7.0.0/24", address)]
    ep = web.state.endpoints.get(EID1)
    assert (ep.groupName, ep.ipAddress) == ("front", address)
    consistent(web)
    stop(plugin, net, address)
    rm(plugin, net)  # deletes the group; the alias goes with Docker's ReleasePool
    assert pool(web, net.pool_id) is None
    web_pool = pool(web, "blue:10.7.0.0/24")
    assert web_pool is not None and web_pool.aliases == ()
    assert bookings(web, "10.7.0.1") == [keys.alloc("blue:10.7.0.0/24", "10.7.0.1")]
    consistent(web)


def test_an_unknown_pool_id_is_not_bound(web: RealMaster) -> None:
    """Only a pool id RequestPool gave is ever bound (the plugin binds only those it handed
    out): any other is a 404 naming it, and nothing changes."""
    before = web.snapshot()
    session = web.session()
    for pool_id in ("default:10.7.0.0/24", "blue:10.9.0.0/24@front", "nonsense"):
        binding = {
            "poolID": pool_id,
            "tenantName": "blue",
            "networkName": "web",
            "dockerNetworkID": NID2,
        }
        r = session.post(
            f"{web.url}/api/v1/alloc/pool-bindings",
            json=binding,
            headers={"Authorization": f"Bearer {web.token}"},
        )
        assert r.status_code == 404, r.text
        assert r.json()["object"] == f"docker pool {pool_id} of network blue:web"
        assert r.json()["reason"].startswith("not found (no RequestPool gave it")
    assert web.snapshot() == before


def test_ipam_opt_network_and_group_are_as_before(plugin: FlaskClient, web: RealMaster) -> None:
    opts = {"tenant": "blue", "network": "web", "group": "front"}
    before = web.snapshot()
    net = create(plugin, "10.7.0.0/24", ipam=opts, **opts)
    assert net.pool_id == "blue:10.7.0.0/24@front"
    assert web.snapshot() == before


# --- refusals: what to type, and nothing left behind ---


def test_ipam_opt_tenant_against_o_tenant(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes]
) -> None:
    err = refusal(plugin, ipam={"tenant": "red"}, tenant="blue")
    assert "--ipam-opt tenant=red is not -o's tenant (blue)" in err
    assert "pass -o tenant=blue alone, or with the same --ipam-opt (--ipam-opt tenant=blue)" in err
    assert master.snapshot() == baseline


def test_ipam_opt_network_against_o_network(plugin: FlaskClient, web: RealMaster) -> None:
    web.state.networks.put(Network(tenantName="blue", networkName="db", subnet="10.8.0.0/24"))
    before = web.snapshot()
    err = refusal(
        plugin,
        subnet="10.8.0.0/24",
        ipam={"tenant": "blue", "network": "db"},
        tenant="blue",
        network="web",
    )
    assert "network blue:db's pool" in err and "-o tenant=blue -o network=web alone" in err
    assert web.snapshot() == before


def test_ipam_opt_network_without_o_network(plugin: FlaskClient, web: RealMaster) -> None:
    before = web.snapshot()
    err = refusal(plugin, subnet="10.7.0.0/24", ipam={"tenant": "blue", "network": "web"})
    assert "pass -o network=web -o tenant=blue too" in err
    assert web.snapshot() == before


def test_o_network_with_another_subnet_or_gateway(plugin: FlaskClient, web: RealMaster) -> None:
    before = web.snapshot()
    err = refusal(plugin, subnet="10.9.0.0/24", tenant="blue", network="web")
    assert (
        "network blue:web has subnet 10.7.0.0/24, not 10.9.0.0/24: pass --subnet 10.7.0.0/24" in err
    )
    assert web.snapshot() == before
    err = refusal(plugin, subnet="10.7.0.0/24", gateway="10.7.0.9", tenant="blue", network="web")
    assert "pass --gateway 10.7.0.1" in err
    assert web.snapshot() == before


def test_ipam_opt_group_against_o_group(plugin: FlaskClient, web: RealMaster) -> None:
    web.state.groups.put(EndpointGroup(tenantName="blue", groupName="back", networkName="web"))
    before = web.snapshot()
    ipam = {"tenant": "blue", "network": "web", "group": "back"}
    err = refusal(
        plugin, subnet="10.7.0.0/24", ipam=ipam, tenant="blue", network="web", group="front"
    )
    assert "--ipam-opt tenant=blue --ipam-opt network=web --ipam-opt group=front" in err
    assert web.snapshot() == before
    ipam = {"tenant": "blue", "network": "web", "group": "front"}
    err = refusal(plugin, subnet="10.7.0.0/24", ipam=ipam, tenant="blue", network="web")
    assert "add -o group=front" in err
    assert web.snapshot() == before


def test_a_gateway_request_left_behind_is_not_an_owner_left_behind(
    plugin: FlaskClient, master: RealMaster, baseline: dict[str, bytes]
) -> None:
    """The docker gateway request's owner record goes when the network's gateway replaces it."""
    net = create(plugin, tenant="blue")
    gw_owner = owners.docker_gateway(net.pool_id, net.gateway)
    assert master.store.get(keys.owner(gw_owner)) is None
    rm(plugin, net)
    assert master.snapshot() == baseline


# --- the decisions, pure ---


def test_twin_pool_ids() -> None:
    assert free_pool_id("default:10.1.0.0/24", ()) == "default:10.1.0.0/24"
    taken = {"default:10.1.0.0/24", "default:10.1.0.0/24~2"}
    assert free_pool_id("default:10.1.0.0/24", taken) == "default:10.1.0.0/24~3"


def test_a_request_without_options_never_shares_a_networks_pool() -> None:
    owned = {f"default:{X}": PoolRecord(cidr=X, network="default:web")}
    grant = plan_pool_request(PoolRequest(pool=X), owned)
    assert grant.pool_id == f"default:{X}~2" and grant.record is not None
    shared = plan_pool_request(PoolRequest(pool=X, options={"tenant": "default"}), owned)
    assert shared == PoolGrant(f"default:{X}", X, None)  # --ipam-opt tenant=: as before


def test_an_alias_is_neither_shared_nor_overlapped() -> None:
    alias = {f"default:{X}": PoolRecord(cidr=X, alias=f"blue:{X}")}
    grant = plan_pool_request(PoolRequest(pool=X, options={"tenant": "default"}), alias)
    assert grant.pool_id == f"default:{X}~2" and grant.record is not None
    planned, adopted = plan_pools(Network(networkName="n", subnet="10.60.0.0/25"), alias)
    assert planned[4][0] == "default:10.60.0.0/25" and adopted == []
    twin = {**alias, f"default:{X}~2": PoolRecord(cidr=X, name=f"default:{X}~2")}
    planned, adopted = plan_pools(Network(networkName="n", subnet=X), twin)
    assert planned[4][0] == f"default:{X}~2" and adopted == [f"default:{X}~2"]


BLUE = Target("blue:n", f"blue:{X}", PoolRecord(cidr=X, network="blue:n", gateway="10.60.0.1"))


def test_a_docker_pool_of_its_own_becomes_an_alias_with_its_addresses() -> None:
    gw = AllocRecord(owner=owners.docker_gateway(f"default:{X}", "10.60.0.1"), kind="gateway")
    aux = AllocRecord(owner=owners.docker_static(f"default:{X}", "10.60.0.9"), kind="aux")
    allocs = {"10.60.0.1": gw, "10.60.0.9": aux}
    got = plan_binding(f"default:{X}", PoolRecord(cidr=X), BLUE, allocs)
    assert got == Binding(f"blue:{X}", (("10.60.0.9", aux),), (gw.owner,))
    with pytest.raises(Conflict, match=r"address 10\.60\.0\.9 Docker booked is already in use"):
        plan_binding(f"default:{X}", PoolRecord(cidr=X), BLUE, allocs, ["10.60.0.9"])


def test_what_needs_no_binding_and_what_cannot_be_bound() -> None:
    assert plan_binding(f"blue:{X}", PoolRecord(cidr=X, network="blue:n"), BLUE) == Binding()
    with pytest.raises(NotFound) as e:
        plan_binding(f"default:{X}", None, BLUE)
    assert str(e.value) == (
        f"docker pool default:{X} of a new network in tenant blue: not found (no RequestPool "
        "gave it, or ReleasePool took it back): nothing to bind"
    )
    bound = PoolRecord(cidr=X, alias=f"blue:{X}")
    assert plan_binding(f"default:{X}", bound, BLUE) == Binding()
    with pytest.raises(Conflict, match="already stands for pool red:"):
        plan_binding(f"default:{X}", PoolRecord(cidr=X, alias=f"red:{X}"), BLUE)
    with pytest.raises(BadRequest, match="--ipam-opt tenant=red is not -o's tenant"):
        plan_binding(f"red:{X}", PoolRecord(cidr=X), BLUE)
    with pytest.raises(BadRequest, match="hands out its whole subnet: no --ip-range"):
        plan_binding(f"default:{X}", PoolRecord(cidr=X, range="10.60.0.128/25"), BLUE)


def test_a_pool_record_without_aliases_keeps_its_bytes() -> None:
    plain = PoolRecord(cidr=X, network="blue:n", gateway="10.60.0.1", name="blue:n")
    assert b"alias" not in plain.encode()
    both = PoolRecord(cidr=X, alias="blue:x@g", aliases=("default:b", "default:a"))
    assert PoolRecord.decode(both.encode()) == PoolRecord(
        cidr=X, alias="blue:x@g", aliases=("default:a", "default:b")
    )
