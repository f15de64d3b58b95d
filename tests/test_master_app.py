"""The master's Flask app in-process (test client) over an embedded store in a temp dir."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from flask.testing import FlaskClient

from master.state import ClusterState


def test_docker_style_request_without_content_type(client: FlaskClient) -> None:
    r = client.post("/api/v1/networks/default:n1", data=b'{"subnet": "10.1.0.0/24"}')
    assert r.status_code == 200, r.json
    assert r.json["gateway"] == "10.1.0.1"


def test_url_key_and_body_must_agree(client: FlaskClient) -> None:
    r = client.post(
        "/api/v1/networks/default:n1", json={"networkName": "n2", "subnet": "10.1.0.0/24"}
    )
    assert r.status_code == 400
    assert "networkName" in r.json["error"] and "n2" in r.json["error"]
    r = client.post("/api/v1/networks/a:b:c", json={"subnet": "10.1.0.0/24"})
    assert r.status_code == 400 and "TENANT:NAME" in r.json["error"]


def test_bare_key_means_default_tenant(client: FlaskClient) -> None:
    assert client.post("/api/v1/networks/plain", json={"subnet": "10.1.0.0/24"}).status_code == 200
    assert client.get("/api/v1/networks/default:plain").json["networkName"] == "plain"


def test_errors_are_json(client: FlaskClient) -> None:
    r = client.put("/version")
    assert r.status_code == 405 and "not allowed" in r.json["error"]
    r = client.post("/api/v1/tenants/t", data=b"[1]")
    assert r.status_code == 400 and "JSON object" in r.json["error"]
    r = client.get("/api/v1/globals/other")
    assert r.status_code == 400 and "only global" in r.json["error"]


def test_global_partial_update_merges(client: FlaskClient) -> None:
    r = client.post("/api/v1/globals/global", json={"arpMode": "flood"})
    assert r.status_code == 200
    g = client.get("/api/v1/globals/global").json
    assert g["arpMode"] == "flood" and g["vlans"] == "1-4094"


def test_fwd_mode_refusals_name_the_field_and_store_nothing(
    client: FlaskClient, state: ClusterState
) -> None:
    def scan() -> dict[str, bytes]:
        return {kv.key: kv.value for kv in state.store.range("/netplugin/").kvs}

    before = scan()
    r = client.post("/api/v1/globals/global", json={"fwdMode": "nat"})
    assert (r.status_code, r.json["error"]) == (
        400,
        "global: field 'fwdMode': Input should be 'bridge' or 'routing'",
    )
    assert scan() == before
    assert client.post("/api/v1/networks/n1", json={"subnet": "10.1.0.0/24"}).status_code == 200
    before = scan()
    r = client.post("/api/v1/globals/global", json={"fwdMode": "routing", "arpMode": "flood"})
    assert (r.status_code, r.json["error"]) == (
        409,
        "global: fwd-mode cannot change from bridge to routing while 1 network(s) exist "
        "(default:n1); delete them first",
    )
    assert scan() == before
    assert client.delete("/api/v1/networks/n1").status_code == 200
    r = client.post("/api/v1/globals/global", json={"fwdMode": "routing"})
    assert r.status_code == 200 and r.json["fwdMode"] == "routing"


def test_network_update_without_endpoints_rewrites_pool(
    client: FlaskClient, state: ClusterState
) -> None:
    assert (
        client.post("/api/v1/networks/default:n", json={"subnet": "10.1.0.0/24"}).status_code == 200
    )
    r = client.post(
        "/api/v1/networks/default:n", json={"subnet": "10.1.0.0/24", "gateway": "10.1.0.254"}
    )
    assert r.status_code == 200, r.json
    oper = client.get("/api/v1/inspect/networks/default:n").json["Oper"]
    assert oper["allocatedAddresses"] == ["10.1.0.254"]
    r = client.post("/api/v1/networks/default:n", json={"subnet": "10.2.0.0/24", "nwType": "infra"})
    assert r.status_code == 200, r.json
    oper = client.get("/api/v1/inspect/networks/default:n").json["Oper"]
    assert oper["allocatedAddresses"] == ["10.2.0.1"]
    ep = client.post("/api/v1/alloc/endpoints", json={"endpointID": "e", "networkName": "n"})
    assert ep.json["ipAddress"] == "10.2.0.2"
    # A non-addressing change is allowed with endpoints present and keeps them.
    r = client.post("/api/v1/networks/default:n", json={"subnet": "10.2.0.0/24", "nwType": "data"})
    assert r.status_code == 200, r.json
    assert client.get("/api/v1/endpoints/e").json["ipAddress"] == "10.2.0.2"


def test_threads_never_share_an_address(state: ClusterState) -> None:
    from common.models import EndpointRequest, Network

    state.networks.put(Network(networkName="n", subnet="10.3.0.0/24"))

    def create(i: int) -> str:
        ep, _ = state.endpoints.create(EndpointRequest(endpointID=f"e{i}", networkName="n"))
        return ep.ipAddress

    with ThreadPoolExecutor(32) as pool:
        addrs = list(pool.map(create, range(200)))
    assert len(set(addrs)) == 200


def test_openapi_covers_every_route(client: FlaskClient) -> None:
    doc = client.get("/api/v1/openapi.json").json
    app_rules = {
        (r.rule.replace("<path:", "{").replace("<", "{").replace(">", "}"), m.lower())
        for r in client.application.url_map.iter_rules()
        for m in r.methods - {"HEAD", "OPTIONS"}
        if r.endpoint != "static"
    }
    documented = {(p, m) for p, ops in doc["paths"].items() for m in ops}
    assert app_rules == documented


def test_retry_with_static_address_is_idempotent(state: ClusterState) -> None:
    from common.models import EndpointRequest, Network

    state.networks.put(Network(networkName="n", subnet="10.4.0.0/24", ipv6Subnet="fd00:4::/64"))
    req = EndpointRequest(endpointID="s1", networkName="n", ipAddress="10.4.0.9")
    first, created = state.endpoints.create(req)
    again, created_again = state.endpoints.create(req)
    assert created and not created_again
    assert again.ipAddress == first.ipAddress == "10.4.0.9"
    assert again.ipv6Address == first.ipv6Address
    assert state.networks.inspect("default", "n")["Oper"]["allocatedIPv6AddressesCount"] == 2


def test_stale_cached_network_is_reread(state: ClusterState) -> None:
    from common.models import EndpointRequest, Network

    state.networks.put(Network(networkName="n", subnet="10.5.0.0/24"))
    state.endpoints.create(EndpointRequest(endpointID="a", networkName="n"))
    state.endpoints.delete("a")
    state.networks.put(Network(networkName="n", subnet="10.6.0.0/24"))  # rewrites the pool
    ep, _ = state.endpoints.create(EndpointRequest(endpointID="b", networkName="n"))
    assert ep.ipAddress.startswith("10.6.0.")
    state.endpoints.delete("b")
    state.networks.delete("default", "n")
    with pytest.raises(Exception, match="network default:n"):
        state.endpoints.create(EndpointRequest(endpointID="c", networkName="n"))


def test_endpoint_adopts_the_address_docker_requested(state: ClusterState) -> None:
    from common.models import AddressRelease, AddressRequest, EndpointRequest, Network, PoolRequest
    from master.errors import Conflict

    pool = state.pools.request_pool(PoolRequest(pool="10.8.0.0/24"))
    gw = state.pools.request_address(
        AddressRequest(poolID=pool["poolID"], owner="gw", kind="gateway")
    )
    state.networks.put(Network(networkName="d", subnet="10.8.0.0/24", gateway=gw.split("/")[0]))
    addr = state.pools.request_address(AddressRequest(poolID=pool["poolID"], owner="req-1")).split(
        "/"
    )[0]
    # Without adoptAddress a REST user cannot take an address someone else holds.
    with pytest.raises(Conflict, match="req-1"):
        state.endpoints.create(EndpointRequest(endpointID="x", networkName="d", ipAddress=addr))
    req = EndpointRequest(endpointID="e", networkName="d", ipAddress=addr, adoptAddress=True)
    ep, created = state.endpoints.create(req)
    assert created and ep.ipAddress == addr
    again_ep, again_created = state.endpoints.create(req)  # a retry is idempotent
    assert not again_created and again_ep.dump() == ep.dump()
    # A second endpoint cannot adopt an address another endpoint holds.
    with pytest.raises(Conflict, match="ep:e"):
        state.endpoints.create(
            EndpointRequest(endpointID="f", networkName="d", ipAddress=addr, adoptAddress=True)
        )
    # Docker's order on stop: DeleteEndpoint then ReleaseAddress; the address is freed once.
    state.endpoints.delete("e")
    assert state.pools.release_address(AddressRelease(poolID=pool["poolID"], address=addr)) is False
    assert state.networks.inspect("default", "d")["Oper"]["allocatedAddresses"] == [
        gw.split("/")[0]
    ]
    # The adoption dropped req-1's owner index: asking again is a new, stored allocation.
    again = state.pools.request_address(AddressRequest(poolID=pool["poolID"], owner="req-1")).split(
        "/"
    )[0]
    allocated = state.networks.inspect("default", "d")["Oper"]["allocatedAddresses"]
    assert again in allocated and len(allocated) == 2


def test_rename_network(client: FlaskClient, state: ClusterState) -> None:
    assert (
        client.post(
            "/api/v1/networks/default:abc123",
            json={"subnet": "10.9.0.0/24", "dockerNetworkID": "abc123full"},
        ).status_code
        == 200
    )
    r = client.post("/api/v1/networks/default:abc123/rename", json={"networkName": "web"})
    assert r.status_code == 200 and r.json["networkName"] == "web"
    assert client.get("/api/v1/networks/default:abc123").status_code == 404
    oper = client.get("/api/v1/inspect/networks/default:web").json["Oper"]
    assert oper["allocatedAddresses"] == ["10.9.0.1"]
    ep = client.post("/api/v1/alloc/endpoints", json={"endpointID": "e", "networkName": "web"})
    assert ep.json["ipAddress"] == "10.9.0.2"
    r = client.post("/api/v1/networks/default:web/rename", json={"networkName": "other"})
    assert r.status_code == 409 and "endpoint" in r.json["error"]
    assert (
        client.post("/api/v1/networks/default:x", json={"subnet": "10.10.0.0/24"}).status_code
        == 200
    )
    client.delete("/api/v1/alloc/endpoints/e")
    r = client.post("/api/v1/networks/default:web/rename", json={"networkName": "x"})
    assert r.status_code == 409 and "already exists" in r.json["error"]
    r = client.post("/api/v1/networks/default:web/rename", json={"networkName": "bad name"})
    assert r.status_code == 400
    # The tag and pool follow the rename: deleting under the new name frees everything.
    assert client.delete("/api/v1/networks/default:web").status_code == 200
    assert client.get("/api/v1/inspect/globals/global").json["Oper"]["vxlansInUse"] == "2"


def test_a_refusal_never_rests_on_a_stale_cached_record(state: ClusterState) -> None:
    from common.models import EndpointRequest, Network

    state.networks.put(Network(networkName="n", subnet="10.5.0.0/24"))
    state.endpoints.create(EndpointRequest(endpointID="a", networkName="n"))  # caches n
    state.endpoints.delete("a")
    state.networks.put(Network(networkName="n", subnet="10.6.0.0/24"))
    # The cached record says 10.6.0.9 is outside the subnet; the fresh one says it is fine.
    ep, created = state.endpoints.create(
        EndpointRequest(endpointID="b", networkName="n", ipAddress="10.6.0.9")
    )
    assert created and ep.ipAddress == "10.6.0.9"


def test_commit_stats(client: FlaskClient, state: ClusterState) -> None:
    from common.models import EndpointRequest, Network

    state.networks.put(Network(networkName="n", subnet="10.7.0.0/24"))
    for i in range(3):
        state.endpoints.create(EndpointRequest(endpointID=f"e{i}", networkName="n"))
    got = client.get("/stats/commits").json
    assert got["groupCommit"] is True and got["txns"] == 3 and got["sizes"] == {"1": 3}
    assert got["worker"] > 0


def test_agents_read_a_network_as_its_record(client: FlaskClient) -> None:
    """The agent's network call answers the stored record (config, tag, pools), which the
    plugin's client reads back as one; the operator's inspect view is not an internal API."""
    from common.records import NetworkRecord
    from plugin.master_client import MasterClient

    body = {"subnet": "10.1.0.0/24", "ipv6Subnet": "fd00:1::/64", "encap": "vlan", "pktTag": 7}
    assert client.post("/api/v1/networks/blue:web", json=body).status_code == 404  # no tenant
    assert client.post("/api/v1/tenants/blue", json={}).status_code == 200
    assert client.post("/api/v1/networks/blue:web", json=body).status_code == 200
    got = client.get("/api/v1/alloc/networks/blue:web")
    assert got.status_code == 200, got.json
    oper = client.get("/api/v1/inspect/networks/blue:web").json["Oper"]
    assert (got.json["pktTag"], got.json["ipv4Pool"], got.json["ipv6Pool"]) == (
        7,
        oper["ipv4Pool"],
        oper["ipv6Pool"],
    )

    class Session:  # the plugin's client over this app
        def request(self, method: str, url: str, json: object = None, timeout: object = None):
            r = client.open(url.removeprefix("http://m"), method=method, json=json)
            resp = requests.Response()
            resp.status_code, resp._content = r.status_code, r.data
            return resp

    record = MasterClient("http://m", session=Session()).network_record("blue", "web")  # type: ignore[arg-type]
    assert isinstance(record, NetworkRecord)
    assert (record.encap, record.pkt_tag, record.config.subnet) == ("vlan", 7, "10.1.0.0/24")
    assert record.pools == (oper["ipv4Pool"], oper["ipv6Pool"])

    r = client.get("/api/v1/alloc/networks/blue:nosuch")
    assert r.status_code == 404 and "network blue:nosuch" in r.json["error"]
    r = client.get("/api/v1/alloc/networks/a:b:c")
    assert r.status_code == 400 and "TENANT:NAME" in r.json["error"]
