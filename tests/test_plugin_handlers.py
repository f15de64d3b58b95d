"""The Docker remote-driver HTTP layer against an in-memory master and a fake datapath."""

from __future__ import annotations

import ipaddress
import socket
import threading
import uuid
from typing import Any

import pytest
from docker_plugin import EID, GW_OPTS, NID, FakeDatapath, call
from flask.testing import FlaskClient

from common.models import (
    AddressRelease,
    AddressRequest,
    Endpoint,
    EndpointRequest,
    Network,
    PoolBinding,
    PoolRequest,
)
from common.records import NetworkRecord
from datapath.hostnat import dnat_rules, parse_dnat_rules
from datapath.ports import PublishedPort
from plugin.app import create_app
from plugin.driver import Driver
from plugin.master_client import MasterClient, MasterError, PoolGrant
from plugin.options import port_bindings


class FakeMaster:
    """The master's allocation API in memory, with the same idempotency and refusals.

    It keeps its objects as the master's JSON; tests/test_driver_contract.py runs the same
    flows against the real control plane."""

    def __init__(self) -> None:
        self.networks: dict[str, dict[str, Any]] = {}
        self.endpoints: dict[str, dict[str, Any]] = {}
        self.pools: dict[str, dict[str, Any]] = {}
        self.owners: dict[str, str] = {}
        self.deleted_endpoints: list[str] = []
        self.bindings: list[PoolBinding] = []
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise MasterError("netmaster at http://fake is unreachable: connection refused", 503)

    def request_pool(self, req: PoolRequest) -> PoolGrant:
        self._check()
        pool = req.pool or "10.99.0.0/24"
        pid = f"{req.addressSpace}:{pool}"
        self.pools.setdefault(pid, {"cidr": pool, "used": {}})
        return PoolGrant(pid, pool)

    def release_pool(self, pool_id: str) -> None:
        self._check()
        if self.pools.pop(pool_id, None) is None:
            raise MasterError(f"pool {pool_id}: not found", 404)

    def bind_pool(self, binding: PoolBinding) -> str:
        """The binding is the real master's (tests/test_one_booking.py): only recorded."""
        self._check()
        self.bindings.append(binding)
        return binding.poolID

    def request_address(self, req: AddressRequest) -> str:
        pool_id, address, owner = req.poolID, req.address, req.owner
        self._check()
        if pool_id not in self.pools:
            raise MasterError(f"pool {pool_id}: not found", 404)
        net = ipaddress.ip_network(self.pools[pool_id]["cidr"])
        used = self.pools[pool_id]["used"]
        if owner in self.owners:
            return f"{self.owners[owner]}/{net.prefixlen}"
        if address:
            if address in used:
                raise MasterError(f"address {address} is already in use", 409)
            got = address
        else:
            got = next(str(h) for h in net.hosts() if str(h) not in used)
        used[got] = owner
        self.owners[owner] = got
        return f"{got}/{net.prefixlen}"

    def release_address(self, req: AddressRelease) -> bool:
        self._check()
        owner = self.pools.get(req.poolID, {"used": {}})["used"].pop(req.address, None)
        self.owners.pop(owner or "", None)
        return owner is not None

    def create_network(self, network: Network) -> Network:
        self._check()
        n = network.dump()
        self.networks[network.id] = n
        if n.get("subnet"):
            self.pools.setdefault(
                f"{n['tenantName']}:{n['subnet']}", {"cidr": n["subnet"], "used": {}}
            )
        return network

    def _network(self, tenant: str, name: str) -> dict[str, Any]:
        self._check()
        try:
            return self.networks[f"{tenant}:{name}"]
        except KeyError:
            raise MasterError(f"network {tenant}:{name}: not found", 404) from None

    def get_network(self, tenant: str, name: str) -> Network:
        return Network.model_validate(self._network(tenant, name))

    def list_networks(self) -> list[Network]:
        self._check()
        return [Network.model_validate(n) for n in self.networks.values()]

    def network_record(self, tenant: str, name: str) -> NetworkRecord:
        n = self._network(tenant, name)
        pool = f"{n['tenantName']}:{n['subnet']}" if n.get("subnet") else ""
        return NetworkRecord(
            config=Network.model_validate(n),
            encap=n["encap"],
            pkt_tag=1,
            ipv4_pool=pool,
            ipv6_pool="",
        )

    def rename_network(self, tenant: str, name: str, new_name: str) -> Network:
        self._check()
        net = self.networks.pop(f"{tenant}:{name}")
        net["networkName"] = new_name
        self.networks[f"{tenant}:{new_name}"] = net
        return Network.model_validate(net)

    def delete_network(self, tenant: str, name: str) -> None:
        self._check()
        if self.networks.pop(f"{tenant}:{name}", None) is None:
            raise MasterError(f"network {tenant}:{name}: not found", 404)

    def create_endpoint(self, request: EndpointRequest) -> Endpoint:
        self._check()
        req = request.model_dump()
        eid = req["endpointID"]
        if eid in self.endpoints:
            return Endpoint.model_validate(self.endpoints[eid])
        n = self._network(req["tenantName"], req["networkName"])
        pid = f"{n['tenantName']}:{n['subnet']}"
        used = self.pools[pid]["used"]
        ip = req.pop("ipAddress")
        req.pop("swarmTask")
        adoptable = req.pop("adoptAddress") and not str(used.get(ip, "ep:")).startswith(
            ("ep:", "gateway")
        )
        if ip and ip in used and not adoptable:
            raise MasterError(f"address {ip} is already in use in pool {pid}", 409)
        if not ip:
            net = ipaddress.ip_network(n["subnet"])
            ip = next(str(h) for h in net.hosts() if str(h) not in used and str(h) != n["gateway"])
        used[ip] = f"ep:{eid}"
        ep = {**req, "ipAddress": ip, "ipv4Pool": pid}
        self.endpoints[eid] = ep
        return Endpoint.model_validate(ep)

    def get_endpoint(self, endpoint_id: str) -> Endpoint:
        self._check()
        if endpoint_id not in self.endpoints:
            raise MasterError(f"endpoint {endpoint_id}: not found", 404)
        return Endpoint.model_validate(self.endpoints[endpoint_id])

    def delete_endpoint(self, endpoint_id: str) -> Endpoint:
        self._check()
        ep = self.endpoints.pop(endpoint_id, None)
        if ep is None:
            raise MasterError(f"endpoint {endpoint_id}: not found", 404)
        self.pools[ep["ipv4Pool"]]["used"].pop(ep["ipAddress"], None)
        self.deleted_endpoints.append(endpoint_id)
        return Endpoint.model_validate(ep)


@pytest.fixture
def master() -> FakeMaster:
    return FakeMaster()


@pytest.fixture
def datapath() -> FakeDatapath:
    return FakeDatapath()


@pytest.fixture
def client(master: FakeMaster, datapath: FakeDatapath) -> FlaskClient:
    driver = Driver(master, datapath, host="host1")  # type: ignore[arg-type]
    return create_app(driver).test_client()


def create_network(client: FlaskClient, internal: bool = False, **generic: str) -> None:
    body = {
        "NetworkID": NID,
        "Options": {
            "com.docker.network.enable_ipv6": False,
            "com.docker.network.generic": generic,
            **({"com.docker.network.internal": True} if internal else {}),
        },
        "IPv4Data": [{"AddressSpace": "default", "Gateway": "10.5.0.1/24", "Pool": "10.5.0.0/24"}],
        "IPv6Data": [],
    }
    r = call(client, "NetworkDriver.CreateNetwork", body)
    assert r.status_code == 200, r.get_json()
    assert r.get_json() == {}


def create_endpoint(client: FlaskClient, iface: Any) -> Any:
    body = {"NetworkID": NID, "EndpointID": EID, "Interface": iface, "Options": {}}
    return call(client, "NetworkDriver.CreateEndpoint", body)


# --- activation and capabilities: empty bodies ---
@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("Plugin.Activate", {"Implements": ["NetworkDriver", "IpamDriver"]}),
        ("NetworkDriver.GetCapabilities", {"Scope": "local", "ConnectivityScope": "local"}),
        (
            "IpamDriver.GetCapabilities",
            {"RequiresMACAddress": False, "RequiresRequestReplay": False},
        ),
        (
            "IpamDriver.GetDefaultAddressSpaces",
            {"LocalDefaultAddressSpace": "default", "GlobalDefaultAddressSpace": "default"},
        ),
    ],
)
def test_empty_body_calls(client: FlaskClient, method: str, expected: dict[str, Any]) -> None:
    r = call(client, method)
    assert r.status_code == 200
    assert r.get_json() == expected


# --- docker network create ---
def test_network_create_flow(client: FlaskClient, master: FakeMaster) -> None:
    r = call(
        client,
        "IpamDriver.RequestPool",
        {
            "AddressSpace": "default",
            "Pool": "10.5.0.0/24",
            "SubPool": "",
            "Options": {},
            "V6": False,
        },
    )
    assert r.status_code == 200
    assert r.get_json() == {"PoolID": "default:10.5.0.0/24", "Pool": "10.5.0.0/24", "Data": {}}
    r = call(
        client,
        "IpamDriver.RequestAddress",
        {"PoolID": "default:10.5.0.0/24", "Address": "", "Options": GW_OPTS},
    )
    assert r.get_json()["Address"] == "10.5.0.1/24"
    create_network(client, tenant="default", encap="vlan", **{"pkt-tag": "100"})
    n = master.networks[f"default:{NID[:12]}"]
    assert n["subnet"] == "10.5.0.0/24"
    assert n["gateway"] == "10.5.0.1"
    assert n["encap"] == "vlan"
    assert n["pktTag"] == 100
    assert n["dockerNetworkID"] == NID
    assert n["internal"] is False


def test_request_pool_tenant_from_ipam_opt(client: FlaskClient) -> None:
    r = call(
        client,
        "IpamDriver.RequestPool",
        {"AddressSpace": "default", "Pool": "10.6.0.0/24", "Options": {"tenant": "blue"}},
    )
    assert r.get_json()["PoolID"] == "blue:10.6.0.0/24"


def test_request_pool_null_options_and_subpool_without_pool(client: FlaskClient) -> None:
    r = call(client, "IpamDriver.RequestPool", {"AddressSpace": "default", "Options": None})
    assert r.status_code == 200
    r = call(client, "IpamDriver.RequestPool", {"SubPool": "10.1.0.0/26"})
    assert r.status_code == 400
    assert r.get_json()["Err"] == r.get_json()["Error"]
    assert "sub-pool" in r.get_json()["Err"]


def test_request_address_is_retry_safe_for_static_requests(client: FlaskClient) -> None:
    call(client, "IpamDriver.RequestPool", {"Pool": "10.5.0.0/24"})
    body = {"PoolID": "default:10.5.0.0/24", "Address": "10.5.0.9", "Options": None}
    first = call(client, "IpamDriver.RequestAddress", body).get_json()
    again = call(client, "IpamDriver.RequestAddress", body).get_json()
    assert first == again == {"Address": "10.5.0.9/24", "Data": {}}
    r = call(
        client,
        "IpamDriver.ReleaseAddress",
        {"PoolID": "default:10.5.0.0/24", "Address": "10.5.0.9"},
    )
    assert r.status_code == 200
    assert r.get_json() == {}
    r = call(client, "IpamDriver.ReleasePool", {"PoolID": "default:10.5.0.0/24"})
    assert (r.status_code, r.get_json()) == (200, {})
    # Released twice (docker network rm after the network took the pool): still fine.
    r = call(client, "IpamDriver.ReleasePool", {"PoolID": "default:10.5.0.0/24"})
    assert r.status_code == 200


def test_ipam_errors_carry_both_keys(client: FlaskClient) -> None:
    r = call(client, "IpamDriver.RequestAddress", {"PoolID": "default:10.9.0.0/24", "Address": ""})
    body = r.get_json()
    assert r.status_code == 404
    assert body["Err"] == body["Error"]
    assert body["Err"].startswith("pool default:10.9.0.0/24")


# --- docker run / stop ---
def test_run_and_stop(client: FlaskClient, master: FakeMaster, datapath: FakeDatapath) -> None:
    create_network(client)
    call(client, "IpamDriver.RequestPool", {"Pool": "10.5.0.0/24"})
    addr = call(
        client, "IpamDriver.RequestAddress", {"PoolID": "default:10.5.0.0/24", "Options": None}
    ).get_json()["Address"]
    r = create_endpoint(client, {"Address": addr, "AddressIPv6": "", "MacAddress": ""})
    assert r.status_code == 200, r.get_json()
    mac = r.get_json()["Interface"]["MacAddress"]
    assert r.get_json() == {"Interface": {"MacAddress": mac}}
    assert int(mac.split(":")[0], 16) & 0x02  # locally administered
    ep = master.endpoints[EID]
    assert (ep["ipAddress"], ep["macAddress"], ep["host"]) == (addr.split("/")[0], mac, "host1")

    r = call(client, "NetworkDriver.EndpointOperInfo", {"NetworkID": NID, "EndpointID": EID})
    assert r.get_json() == {"Value": {"port": datapath.ports[EID]["name"]}}

    body = {
        "NetworkID": NID,
        "EndpointID": EID,
        "SandboxKey": "/var/run/docker/netns/x",
        "Options": None,
    }
    r = call(client, "NetworkDriver.Join", body)
    assert r.get_json() == {
        "InterfaceName": {"SrcName": datapath.ports[EID]["name"], "DstPrefix": "eth"},
        "Gateway": "10.5.0.1",
        "StaticRoutes": [],
        "DisableGatewayService": False,
    }
    ids = {"NetworkID": NID, "EndpointID": EID}
    for method in ("ProgramExternalConnectivity", "RevokeExternalConnectivity", "Leave"):
        r = call(client, f"NetworkDriver.{method}", {**ids, "Options": None})
        assert (r.status_code, r.get_json()) == (200, {}), method
    r = call(client, "NetworkDriver.DeleteEndpoint", ids)
    assert (r.status_code, r.get_json()) == (200, {})
    assert EID not in master.endpoints
    assert EID not in datapath.ports
    # Docker retries: the endpoint is already gone, which is success.
    assert call(client, "NetworkDriver.DeleteEndpoint", ids).status_code == 200
    r = call(client, "NetworkDriver.DeleteNetwork", {"NetworkID": NID})
    assert (r.status_code, r.get_json()) == (200, {})
    assert not master.networks
    assert datapath.removed_networks == ["default:" + NID[:12]]


def test_create_endpoint_returns_only_empty_fields(client: FlaskClient) -> None:
    create_network(client)
    r = create_endpoint(
        client, {"Address": "10.5.0.7/24", "AddressIPv6": "", "MacAddress": "02:42:0a:05:00:07"}
    )
    assert r.status_code == 200
    assert r.get_json() == {}


def test_create_endpoint_null_interface_gets_address_and_mac(
    client: FlaskClient, master: FakeMaster
) -> None:
    create_network(client)
    r = create_endpoint(client, None)
    assert r.status_code == 200, r.get_json()
    iface = r.get_json()["Interface"]
    assert iface["Address"] == f"{master.endpoints[EID]['ipAddress']}/24"
    assert iface["MacAddress"] == master.endpoints[EID]["macAddress"]


def test_failed_datapath_port_frees_the_master_endpoint(
    client: FlaskClient, master: FakeMaster, datapath: FakeDatapath
) -> None:
    create_network(client)
    datapath.fail = True
    r = create_endpoint(client, {"Address": "10.5.0.7/24", "AddressIPv6": "", "MacAddress": ""})
    assert r.status_code == 500
    assert "ovs-vsctl add-port failed" in r.get_json()["Err"]
    assert master.deleted_endpoints == [EID]
    assert EID not in master.endpoints


def test_join_internal_network_has_no_gateway(client: FlaskClient, datapath: FakeDatapath) -> None:
    create_network(client, internal=True)
    create_endpoint(client, {"Address": "10.5.0.7/24", "AddressIPv6": "", "MacAddress": ""})
    r = call(client, "NetworkDriver.Join", {"NetworkID": NID, "EndpointID": EID, "Options": {}})
    body = r.get_json()
    assert "Gateway" not in body
    assert "GatewayIPv6" not in body
    assert body["DisableGatewayService"] is True


def test_restarted_plugin_recovers_network_and_endpoint(
    master: FakeMaster, datapath: FakeDatapath, client: FlaskClient
) -> None:
    create_network(client)
    create_endpoint(client, {"Address": "10.5.0.7/24", "AddressIPv6": "", "MacAddress": ""})
    fresh = create_app(Driver(master, datapath)).test_client()  # type: ignore[arg-type]
    r = call(fresh, "NetworkDriver.Join", {"NetworkID": NID, "EndpointID": EID})
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["Gateway"] == "10.5.0.1"


def test_unknown_network(client: FlaskClient) -> None:
    r = create_endpoint(client, None)
    assert r.status_code == 404
    assert r.get_json() == {"Err": f"network {NID} is not known to netmaster"}


@pytest.mark.parametrize(
    "method",
    [
        "NetworkDriver.DiscoverNew",
        "NetworkDriver.DiscoverDelete",
    ],
)
def test_discovery(client: FlaskClient, method: str) -> None:
    r = call(client, method, {"DiscoveryType": 1, "DiscoveryData": {"Address": "10.0.0.2"}})
    assert (r.status_code, r.get_json()) == (200, {})


def test_allocate_network_outside_swarm_mode_is_refused(client: FlaskClient) -> None:
    body = {
        "NetworkID": NID,
        "IPv4Data": [{"Pool": "10.5.0.0/24"}],
        "IPv6Data": None,
        "Options": None,
    }
    # Only swarm calls them, and only a driver of global scope (swarm mode).
    r = call(client, "NetworkDriver.AllocateNetwork", body)
    assert r.status_code == 400 and "not in swarm mode" in r.get_json()["Err"]
    assert call(client, "NetworkDriver.FreeNetwork", {"NetworkID": NID}).get_json() == {}


# --- malformed requests ---
def test_malformed_json(client: FlaskClient) -> None:
    r = call(client, "NetworkDriver.CreateNetwork", raw=b"{not json")
    assert r.status_code == 400
    assert r.get_json()["Err"].startswith("request body is not valid JSON")
    assert "Error" not in r.get_json()


def test_missing_field_is_named(client: FlaskClient) -> None:
    r = call(client, "NetworkDriver.CreateEndpoint", {"NetworkID": NID, "Interface": None})
    assert r.status_code == 400
    assert r.get_json() == {"Err": "field 'EndpointID' is required"}


def test_empty_body_where_fields_are_required(client: FlaskClient) -> None:
    r = call(client, "IpamDriver.ReleasePool")
    assert r.status_code == 400
    assert r.get_json()["Error"] == "field 'PoolID' is required"


def test_body_must_be_an_object(client: FlaskClient) -> None:
    r = call(client, "NetworkDriver.Leave", [1, 2])
    assert r.status_code == 400
    assert "JSON object" in r.get_json()["Err"]


def test_unknown_method_is_404(client: FlaskClient) -> None:
    r = call(client, "NetworkDriver.Frobnicate", {})
    assert r.status_code == 404
    assert "Frobnicate" in r.get_json()["Err"]
    r = call(client, "IpamDriver.Frobnicate", {})
    assert r.status_code == 404
    assert r.get_json()["Err"] == r.get_json()["Error"]


def test_master_refusal_keeps_status_and_text(client: FlaskClient, master: FakeMaster) -> None:
    create_network(client)
    master.down = True
    r = call(client, "NetworkDriver.Join", {"NetworkID": NID, "EndpointID": EID})
    assert r.status_code == 503
    assert "unreachable" in r.get_json()["Err"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_master_down_says_unreachable(datapath: FakeDatapath) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    driver = Driver(MasterClient(url, timeout=1, retries=2, backoff=0), datapath)
    r = call(create_app(driver).test_client(), "IpamDriver.RequestPool", {"Pool": "10.5.0.0/24"})
    body = r.get_json()
    assert r.status_code == 503
    assert body["Err"] == body["Error"]
    assert body["Err"].startswith(f"netmaster at {url} is unreachable: ")


def test_network_takes_its_docker_name() -> None:
    master, datapath = FakeMaster(), FakeDatapath()
    known: dict[str, str] = {}
    driver = Driver(master, datapath, host="h1", docker_name=known.get)
    client = create_app(driver).test_client()
    create_network(client)
    assert master.get_network("default", NID[:12])  # docker has not told us the name yet
    known[NID] = "frontend"
    r = create_endpoint(client, {"Address": "10.5.0.7/24"})
    assert r.status_code == 200, r.get_json()
    assert master.get_network("default", "frontend").dockerNetworkID == NID
    assert master.endpoints[EID]["networkName"] == "frontend"


def test_dockerds_create_event_names_the_network_before_docker_could_be_asked() -> None:
    """Issue 22: `docker network create X` then `netctl net inspect X` said "not found".
    dockerd knows X only once CreateNetwork has returned, so the lookup started from inside
    it usually came too early and asked again 0.2 s later, after the client had moved on.
    dockerd's create event, sent as it answers the client, names the network at once, here
    while a lookup would still find nothing."""
    master, datapath = FakeMaster(), FakeDatapath()
    driver = Driver(master, datapath, host="h1", docker_name=lambda _: None)
    client = create_app(driver).test_client()
    create_network(client)
    driver.docker_network_created(NID, "frontend")
    assert master.get_network("default", "frontend").dockerNetworkID == NID
    assert list(master.networks) == ["default:frontend"]
    r = create_endpoint(client, {"Address": "10.5.0.7/24"})  # docker run --net frontend
    assert r.status_code == 200, r.get_json()
    assert master.endpoints[EID]["networkName"] == "frontend"


def test_create_events_of_networks_it_did_not_leave_unnamed_change_nothing() -> None:
    master, datapath = FakeMaster(), FakeDatapath()
    driver = Driver(master, datapath, host="h1", docker_name=lambda _: None)
    client = create_app(driver).test_client()
    driver.docker_network_created(NID, "early")  # not made by this driver (yet)
    assert master.networks == {}
    create_network(client)
    driver.docker_network_created("a" * 64, "other")  # another driver's, or another agent's
    driver.docker_network_created(NID, "bad name!")  # not a netplugin name: keeps its own
    assert list(master.networks) == [f"default:{NID[:12]}"]
    driver.docker_network_created(NID, "frontend")
    driver.docker_network_created(NID, "again")  # named already
    assert list(master.networks) == ["default:frontend"]


def test_a_network_removed_before_docker_names_it_ends_its_naming_quietly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lookup thread CreateNetwork starts stops when the network goes (an exception in
    it was a traceback in the agent's log for every quick `docker network rm`)."""
    failures: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: failures.append(args.exc_value))
    master, datapath = FakeMaster(), FakeDatapath()
    driver = Driver(master, datapath, host="h1", docker_name=lambda _: None)
    client = create_app(driver).test_client()
    nid = uuid.uuid4().hex * 2  # its own: other tests' lookups of NID may still be running
    body = {"NetworkID": nid, "Options": {}, "IPv4Data": [{"Pool": "10.5.0.0/24"}]}
    running = set(threading.enumerate())
    assert call(client, "NetworkDriver.CreateNetwork", body).status_code == 200
    (naming,) = set(threading.enumerate()) - running  # the lookup of its name
    assert call(client, "NetworkDriver.DeleteNetwork", {"NetworkID": nid}).status_code == 200
    naming.join(5)
    assert not naming.is_alive() and failures == [] and master.networks == {}


def test_port_publishing(client: FlaskClient, datapath: FakeDatapath) -> None:
    create_network(client)
    assert create_endpoint(client, {"Address": "10.5.0.7/24"}).status_code == 200
    ids = {"NetworkID": NID, "EndpointID": EID}
    portmap = [
        {"Proto": 6, "IP": "", "Port": 80, "HostIP": "", "HostPort": 8080, "HostPortEnd": 8080}
    ]
    r = call(
        client,
        "NetworkDriver.ProgramExternalConnectivity",
        {**ids, "Options": {"com.docker.network.portmap": portmap}},
    )
    assert r.status_code == 200, r.get_json()
    (binding,) = datapath.published[EID]
    assert (binding.proto, binding.host_port, binding.container_ip, binding.container_port) == (
        "tcp",
        8080,
        "10.5.0.7",
        80,
    )
    r = call(client, "NetworkDriver.EndpointOperInfo", ids)
    assert r.get_json()["Value"]["com.docker.network.portmap"] == [
        {"Proto": 6, "IP": "10.5.0.7", "Port": 80, "HostIP": "0.0.0.0", "HostPort": 8080,
         "HostPortEnd": 8080}
    ]  # fmt: skip
    assert call(client, "NetworkDriver.RevokeExternalConnectivity", ids).status_code == 200
    assert datapath.published[EID] == []
    assert (
        "com.docker.network.portmap"
        not in call(client, "NetworkDriver.EndpointOperInfo", ids).get_json()["Value"]
    )
    bad = [{"Proto": 6, "Port": 80, "HostPort": 8010, "HostPortEnd": 8000}]
    r = call(
        client,
        "NetworkDriver.ProgramExternalConnectivity",
        {**ids, "Options": {"com.docker.network.portmap": bad}},
    )
    assert r.status_code == 400 and "-p 8010-8000:80" in r.get_json()["Err"]


MIRROR_OPTS = {"tenant": "blue", "network": "web"}


def request_mirror_pool(client: FlaskClient) -> Any:
    """RequestPool as the agent's docker network of cluster network blue:web makes it."""
    body = {"AddressSpace": "", "Pool": "10.7.0.0/24", "SubPool": "", "V6": False}
    return call(client, "IpamDriver.RequestPool", {**body, "Options": MIRROR_OPTS})


def test_a_cluster_network_joins_docker_on_another_host(
    client: FlaskClient, master: FakeMaster
) -> None:
    master.create_network(
        Network(tenantName="blue", networkName="web", subnet="10.7.0.0/24", gateway="10.7.0.1")
    )
    pool = request_mirror_pool(client).get_json()
    assert pool == {"PoolID": "blue:10.7.0.0/24", "Pool": "10.7.0.0/24", "Data": {}}
    before = dict(master.networks)
    r = call(
        client,
        "NetworkDriver.CreateNetwork",
        {
            "NetworkID": NID,
            "Options": {"com.docker.network.generic": MIRROR_OPTS},
            "IPv4Data": [{"AddressSpace": "", "Pool": "10.7.0.0/24", "Gateway": "10.7.0.1/24"}],
            "IPv6Data": [],
        },
    )
    assert r.status_code == 200, r.get_json()
    assert master.networks == before  # joined, nothing created
    r = create_endpoint(client, {"Address": "10.7.0.9/24"})
    assert r.status_code == 200, r.get_json()
    assert (master.endpoints[EID]["tenantName"], master.endpoints[EID]["networkName"]) == (
        "blue",
        "web",
    )


def test_joining_a_network_the_cluster_does_not_have_is_refused(client: FlaskClient) -> None:
    r = request_mirror_pool(client)
    assert r.status_code == 404 and "network blue:web does not exist" in r.get_json()["Error"]
    r = call(
        client,
        "NetworkDriver.CreateNetwork",
        {
            "NetworkID": NID,
            "Options": {"com.docker.network.generic": MIRROR_OPTS},
            "IPv4Data": [],
            "IPv6Data": [],
        },
    )
    assert r.status_code == 404 and "blue:web" in r.get_json()["Err"]


def test_restarted_plugin_finds_a_joined_network_through_dockers_options(
    master: FakeMaster, datapath: FakeDatapath
) -> None:
    master.create_network(Network(tenantName="blue", networkName="web", subnet="10.7.0.0/24"))
    driver = Driver(master, datapath, host="h1", docker_options={NID: dict(MIRROR_OPTS)}.get)  # type: ignore[arg-type]
    client = create_app(driver).test_client()  # a fresh driver: nothing in memory
    r = create_endpoint(client, {"Address": "10.7.0.9/24"})
    assert r.status_code == 200, r.get_json()
    assert master.endpoints[EID]["networkName"] == "web"


def test_any_host_address_is_spelled_as_the_rules_read_back_from_the_kernel() -> None:
    """0.0.0.0 and :: publish on every address: "" like parse_dnat_rules' read-back, so a
    restarted agent's NAT inputs equal the ones it had (no iptables run for nothing)."""
    for any_ip in ("", None, "0.0.0.0", "::"):
        [b] = port_bindings([{"Proto": 6, "Port": 80, "HostPort": 8080, "HostIP": any_ip}], "ip")
        assert b.host_ip == ""
    [b] = port_bindings([{"Proto": 6, "Port": 80, "HostPort": 8080, "HostIP": "10.0.0.1"}], "ip")
    assert b.host_ip == "10.0.0.1"
    rules = dnat_rules([PublishedPort("tcp", "", 8080, 80, "10.5.0.9")])
    assert [m.host_ip for m in parse_dnat_rules(rules)] == [""]


def test_endpoint_calls_read_the_network_from_the_agents_mirror(
    master: FakeMaster, datapath: FakeDatapath
) -> None:
    """CreateEndpoint reads the network from the mirror of the store when it holds this very
    docker network, else from the master; Join answers from what CreateEndpoint read."""
    mirror: dict[tuple[str, str], Network] = {}
    driver = Driver(
        master,  # type: ignore[arg-type]
        datapath,  # type: ignore[arg-type]
        host="host1",
        local_network=lambda tenant, name: mirror.get((tenant, name)),
    )
    client = create_app(driver).test_client()
    create_network(client)
    asked: list[str] = []
    real = master.get_network
    master.get_network = lambda t, n: asked.append(n) or real(t, n)  # type: ignore[method-assign]
    ids = {"NetworkID": NID, "EndpointID": EID}
    join = {**ids, "SandboxKey": "/var/run/docker/netns/x", "Options": None}

    def run_and_stop() -> dict[str, Any]:
        assert create_endpoint(client, {"Address": "10.5.0.9/24"}).status_code == 200
        joined = call(client, "NetworkDriver.Join", join).get_json()
        assert call(client, "NetworkDriver.DeleteEndpoint", ids).status_code == 200
        return joined

    assert run_and_stop()["Gateway"] == "10.5.0.1" and len(asked) == 1  # not mirrored yet
    net = real("default", NID[:12])
    assert net.dockerNetworkID == NID
    mirror[("default", NID[:12])] = net
    assert run_and_stop()["Gateway"] == "10.5.0.1" and len(asked) == 1  # the mirror answered
    # The mirror still holds a deleted network of the same name: another docker network.
    mirror[("default", NID[:12])] = net.model_copy(update={"dockerNetworkID": "e" * 64})
    run_and_stop()
    assert len(asked) == 2


def test_a_refused_endpoint_leaves_no_port_made_meanwhile(
    client: FlaskClient, master: FakeMaster, datapath: FakeDatapath
) -> None:
    """The port is made while the master books the endpoint: if the master refuses, it goes."""
    create_network(client)
    master.down = True
    r = create_endpoint(client, {"Address": "10.5.0.7/24", "AddressIPv6": "", "MacAddress": ""})
    assert r.status_code == 503 and "unreachable" in r.get_json()["Err"]
    assert datapath.ports == {}
    master.down = False
    r = create_endpoint(client, {"Address": "10.5.0.7/24", "AddressIPv6": "", "MacAddress": ""})
    assert r.status_code == 200 and datapath.ports[EID]["ipv4"] == "10.5.0.7"


def test_delete_endpoint_with_the_master_away_removes_the_port_and_a_retry_finishes(
    client: FlaskClient, master: FakeMaster, datapath: FakeDatapath
) -> None:
    """DeleteEndpoint removes the port and the master's record at once; Docker retries it."""
    create_network(client)
    r = create_endpoint(client, {"Address": "10.5.0.7/24", "AddressIPv6": "", "MacAddress": ""})
    assert r.status_code == 200 and EID in datapath.ports
    ids = {"NetworkID": NID, "EndpointID": EID}
    master.down = True
    r = call(client, "NetworkDriver.DeleteEndpoint", ids)
    assert r.status_code == 503 and "unreachable" in r.get_json()["Err"]
    assert EID not in datapath.ports and EID in master.endpoints
    master.down = False
    assert call(client, "NetworkDriver.DeleteEndpoint", ids).status_code == 200
    assert EID not in master.endpoints


def create_args_ipam_options(tenant: str, network: str) -> dict[str, str]:
    """The --ipam-opt options of the agent's docker copy of a cluster network."""
    from plugin.docker_sync import ClusterNetwork, create_args

    net = ClusterNetwork(tenant=tenant, name=network, subnet="10.5.0.0/24")
    return dict(create_args(net)["ipam"]["Options"])


def test_a_mirrored_networks_pool_request_does_not_take_a_concurrent_creates_pool(
    client: FlaskClient, master: FakeMaster
) -> None:
    # `netctl net create` then at once `docker network create -o network=...`: the agent's
    # docker copy of the new network asks its pool (--ipam-opt network=) between the user's
    # RequestPool and CreateNetwork, for the same subnet. The user's docker pool must still
    # be the one bound to the cluster network (seen in CI: the container got an address of
    # an unbound pool, outside its group's range).
    master.create_network(
        Network.model_validate(
            {"tenantName": "t1", "networkName": "pn", "subnet": "10.5.0.0/24", "encap": "vxlan"}
        )
    )
    mine = call(client, "IpamDriver.RequestPool", {"Pool": "10.5.0.0/24", "Options": {}})
    mirror = {"Pool": "10.5.0.0/24", "Options": create_args_ipam_options("t1", "pn")}
    assert call(client, "IpamDriver.RequestPool", mirror).get_json()["PoolID"] == "t1:10.5.0.0/24"
    create_network(client, tenant="t1", network="pn")
    assert [b.poolID for b in master.bindings] == [mine.get_json()["PoolID"]]
