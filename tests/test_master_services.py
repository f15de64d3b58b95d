"""Netprofiles and service LBs in the real control plane (ClusterState on an embedded store):
what is stored, every refusal changes nothing, VIPs are booked and freed with their service,
and the store holds together (check_state) after each step."""

from __future__ import annotations

import threading

import pytest
from flask.testing import FlaskClient
from test_master_policies import everything, holds_together, refused

from common import keys, owners
from common.models import (
    EndpointContainer,
    EndpointGroup,
    EndpointRequest,
    NetProfile,
    Network,
    ServiceLB,
    Tenant,
)
from common.records import AllocRecord, NetworkRecord, ServiceRecord
from master.errors import BadRequest, Conflict, NotFound
from master.state import ClusterState


@pytest.fixture
def net(state: ClusterState) -> ClusterState:
    state.tenants.put(Tenant(tenantName="t"))
    state.networks.put(Network(tenantName="t", networkName="n", subnet="10.1.0.0/24"))
    state.networks.put(Network(tenantName="t", networkName="m", subnet="10.2.0.0/24"))
    return state


def profile(name: str = "p", **fields: object) -> NetProfile:
    return NetProfile(tenantName="t", profileName=name, **fields)  # type: ignore[arg-type]


def service(name: str = "web", **fields: object) -> ServiceLB:
    body: dict[str, object] = {
        "networkName": "n",
        "selectors": ["app=web"],
        "ports": ["80:8080:TCP"],
        **fields,
    }
    return ServiceLB(tenantName="t", serviceName=name, **body)  # type: ignore[arg-type]


def pool_of(state: ClusterState, network: str = "n") -> str:
    kv = state.store.get(keys.network("t", network))
    assert kv is not None
    return NetworkRecord.decode(kv.value).ipv4_pool


def booked(state: ClusterState, address: str, network: str = "n") -> str | None:
    kv = state.store.get(keys.alloc(pool_of(state, network), address))
    return AllocRecord.decode(kv.value).owner if kv is not None else None


# --- netprofiles ---


def test_netprofile_lifecycle_and_its_groups(net: ClusterState) -> None:
    s = net
    stored = s.netprofiles.put(profile(bandwidth="10 Mbps", burst=300, DSCP=46))
    assert (stored.bandwidth, stored.burst, stored.DSCP) == ("10mbps", 300, 46)
    assert s.netprofiles.get("t", "p") == stored
    s.groups.put(EndpointGroup(tenantName="t", groupName="g", networkName="n", netProfile="p"))
    holds_together(s)
    refused(
        s,
        lambda: s.netprofiles.delete("t", "p"),
        Conflict,
        "netprofile t:p: it is used by endpoint group(s) g; give them another profile (or "
        "none) first",
    )
    assert s.netprofiles.inspect("t", "p")["Oper"]["endpointGroups"] == ["g"]
    refused(
        s,
        lambda: s.tenants.delete("t"),
        Conflict,
        "tenant t: it still has network t:m, network t:n, endpoint group g, netprofile p; "
        "delete them first",
    )
    s.groups.patch("t", "g", {"netProfile": ""})
    s.netprofiles.delete("t", "p")
    assert s.netprofiles.list("t") == []
    holds_together(s)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"bandwidth": "fast"}, "field 'bandwidth': 'fast' is not a rate; write it as Contiv"),
        ({"bandwidth": "0mbps"}, "field 'bandwidth': '0mbps' is below the smallest limit, 1kbps"),
        ({"bandwidth": "10mbps", "burst": -1}, "field 'burst': -1 is not a size in KB"),
        ({"burst": 10}, "field 'burst': a burst needs a bandwidth to limit"),
        ({"DSCP": 64}, "field 'DSCP': 64 is out of 0-63"),
        ({"DSCP": -1}, "field 'DSCP': -1 is out of 0-63"),
    ],
)
def test_bad_netprofile_fields_are_refused_naming_the_field(
    net: ClusterState, fields: dict[str, object], reason: str
) -> None:
    before = everything(net)
    with pytest.raises(BadRequest) as e:
        net.netprofiles.put(profile(**fields))
    assert e.value.obj == "netprofile t:p"
    assert e.value.reason.startswith(reason)
    assert everything(net) == before


def test_a_group_names_only_an_existing_netprofile(net: ClusterState) -> None:
    refused(
        net,
        lambda: net.groups.put(
            EndpointGroup(tenantName="t", groupName="g", networkName="n", netProfile="nope")
        ),
        NotFound,
        "endpoint group t:g: netprofile t:nope not found; create it first",
    )


def test_a_profile_and_a_group_naming_it_race_one_wins(net: ClusterState) -> None:
    s = net
    s.netprofiles.put(profile(bandwidth="1mbps"))
    s.groups.put(EndpointGroup(tenantName="t", groupName="g", networkName="n"))
    errors: list[Exception] = []

    def attach() -> None:
        try:
            s.groups.patch("t", "g", {"netProfile": "p"})
        except Exception as e:
            errors.append(e)

    def delete() -> None:
        try:
            s.netprofiles.delete("t", "p")
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=attach), threading.Thread(target=delete)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    holds_together(s)  # never a group naming a profile that is gone
    assert len(errors) <= 1


def test_netprofiles_by_rest(client: FlaskClient) -> None:
    r = client.post("/api/v1/netprofiles/gold", json={"bandwidth": "1gbps", "DSCP": 10})
    assert r.status_code == 200, r.json
    assert r.json == {
        "key": "default:gold",
        "tenantName": "default",
        "profileName": "gold",
        "bandwidth": "1gbps",
        "burst": 0,
        "DSCP": 10,
    }
    r = client.post("/api/v1/netprofiles/bad", json={"bandwidth": "10mbps", "DSCP": 99})
    assert (r.status_code, r.json["object"]) == (400, "netprofile default:bad")
    assert client.get("/api/v1/netprofiles/bad").status_code == 404
    assert client.get("/api/v1/inspect/netprofiles/gold").json["Oper"]["endpointGroups"] == []
    assert client.delete("/api/v1/netprofiles/gold").status_code == 200


# --- service LBs ---


def test_a_service_books_its_vip_and_frees_it_with_itself(net: ClusterState) -> None:
    s = net
    s.services.put(service())
    rec = ServiceRecord.decode(s.store.get(keys.service("t", "web")).value)  # type: ignore[union-attr]
    assert rec.vip == "10.1.0.2" and rec.tag == 1  # .1 is the gateway
    assert booked(s, rec.vip) == owners.service("t:web")
    holds_together(s)
    oper = s.services.inspect("t", "web")["Oper"]
    assert (oper["serviceVip"], oper["numProviders"]) == ("10.1.0.2", 0)
    # An endpoint cannot take the VIP, even when Docker asks for it by address.
    refused(
        s,
        lambda: s.endpoints.create(
            EndpointRequest(
                endpointID="e1",
                tenantName="t",
                networkName="n",
                ipAddress="10.1.0.2",
                adoptAddress=True,
            )
        ),
        Conflict,
        "endpoint e1: address 10.1.0.2 is already in use in pool t:10.1.0.0/24 (by svc:t:web)",
    )
    s.services.put(service(selectors=["app=web", "tier=front"]))  # an update keeps the VIP
    assert ServiceRecord.decode(s.store.get(keys.service("t", "web")).value).vip == "10.1.0.2"  # type: ignore[union-attr]
    s.services.delete("t", "web")
    assert booked(s, "10.1.0.2") is None
    assert s.store.get(keys.service_tag(1)) is None
    holds_together(s)


def test_a_preferred_vip_and_moving_a_service(net: ClusterState) -> None:
    s = net
    s.services.put(service(ipAddress="10.1.0.100"))
    assert booked(s, "10.1.0.100") == owners.service("t:web")
    s.services.put(service(ipAddress="10.1.0.101"))  # another preferred VIP: rebooked at once
    assert booked(s, "10.1.0.100") is None
    assert booked(s, "10.1.0.101") == owners.service("t:web")
    s.services.put(service(networkName="m"))  # another network: a VIP of its pool
    assert booked(s, "10.1.0.101") is None
    assert booked(s, "10.2.0.2", "m") == owners.service("t:web")
    holds_together(s)


@pytest.mark.parametrize(
    ("fields", "error", "reason"),
    [
        ({"ipAddress": "10.9.0.5"}, BadRequest, "field 'ipAddress': 10.9.0.5 is outside"),
        ({"ipAddress": "10.1.0.255"}, BadRequest, "field 'ipAddress': 10.1.0.255 is not a host"),
        (
            {"ipAddress": "10.1.0.1"},
            Conflict,
            "field 'ipAddress': 10.1.0.1 is network t:n's gateway",
        ),
        ({"ipAddress": "fe80::1"}, BadRequest, "field 'ipAddress': 'fe80::1' is not an IPv4"),
        ({"ports": ["80:8080"], "selectors": []}, BadRequest, "field 'selectors': give at least"),
        ({"ports": []}, BadRequest, "field 'ports': give at least one port"),
        ({"ports": ["80:8080:SCTP"]}, BadRequest, "field 'ports': '80:8080:SCTP': the protocol"),
        ({"ports": ["80:0:TCP"]}, BadRequest, "field 'ports': '80:0:TCP': the provider port '0'"),
        ({"ports": ["eighty"]}, BadRequest, "field 'ports': 'eighty' is not SERVICE_PORT"),
        ({"ports": ["80:81:TCP", "80:82:tcp"]}, BadRequest, "field 'ports': 80/tcp is given twice"),
        ({"selectors": ["app"]}, BadRequest, "field 'selectors': 'app' is not a label selector"),
        ({"selectors": ["app=a", "app=b"]}, BadRequest, "label app is given twice"),
        ({"networkName": "nope"}, NotFound, "not found"),
    ],
)
def test_bad_services_are_refused_with_nothing_booked(
    net: ClusterState, fields: dict[str, object], error: type[Exception], reason: str
) -> None:
    before = everything(net)
    with pytest.raises(error) as e:  # type: ignore[call-overload]
        net.services.put(service(**fields))
    assert reason in str(e.value)
    assert everything(net) == before


def test_a_vip_in_use_is_refused(net: ClusterState) -> None:
    net.endpoints.create(EndpointRequest(endpointID="e1", tenantName="t", networkName="n"))
    refused(
        net,
        lambda: net.services.put(service(ipAddress="10.1.0.2")),
        Conflict,
        "service t:web: address 10.1.0.2 is already in use in pool t:10.1.0.0/24 (by ep:e1)",
    )


def test_a_network_with_services_neither_goes_nor_changes_its_name(net: ClusterState) -> None:
    net.services.put(service())
    refused(
        net,
        lambda: net.networks.delete("t", "n"),
        Conflict,
        "network t:n: it cannot be deleted while service(s) t:web use it; delete them first",
    )
    refused(
        net,
        lambda: net.networks.rename("t", "n", "n2"),
        Conflict,
        "network t:n: it cannot be renamed while service(s) t:web use it; delete them first",
    )
    net.services.delete("t", "web")
    net.networks.delete("t", "n")
    holds_together(net)


def test_providers_are_the_labelled_endpoints_of_the_network(net: ClusterState) -> None:
    s = net
    s.services.put(service())
    for eid, labels in (("e1", {"app": "web"}), ("e2", {"app": "db"}), ("e3", {"app": "web"})):
        s.endpoints.create(
            EndpointRequest(endpointID=eid, tenantName="t", networkName="n", host="h1")
        )
        s.endpoints.set_container(
            eid, EndpointContainer(containerID=f"c-{eid}", containerName=eid, labels=labels)
        )
    oper = s.services.inspect("t", "web")["Oper"]
    assert oper["numProviders"] == 2
    assert [(p["containerName"], p["host"]) for p in oper["providers"]] == [
        ("e1", "h1"),
        ("e3", "h1"),
    ]
    assert s.endpoints.get("e2").labels == {"app": "db"}
    holds_together(s)
    with pytest.raises(NotFound):
        s.endpoints.set_container("nope", EndpointContainer(containerID="x"))


def test_services_and_container_reports_by_rest(client: FlaskClient) -> None:
    client.post("/api/v1/networks/n", json={"subnet": "10.3.0.0/24"})
    r = client.post(
        "/api/v1/serviceLBs/web",
        json={"networkName": "n", "selectors": ["app=web"], "ports": ["80:8080:tcp"]},
    )
    assert r.status_code == 200, r.json
    assert (r.json["key"], r.json["ports"]) == ("default:web", ["80:8080:TCP"])
    assert client.get("/api/v1/inspect/serviceLBs/web").json["Oper"]["serviceVip"] == "10.3.0.2"
    r = client.post("/api/v1/alloc/endpoints", json={"endpointID": "e1", "networkName": "n"})
    assert r.status_code == 201
    r = client.put(
        "/api/v1/alloc/endpoints/e1/container",
        json={"containerID": "abc", "containerName": "web1", "labels": {"app": "web"}},
    )
    assert (r.status_code, r.json["labels"]) == (200, {"app": "web"})
    r = client.put("/api/v1/alloc/endpoints/e1/container", json={"labels": "no"})
    assert r.status_code == 400
    assert client.get("/api/v1/inspect/serviceLBs/web").json["Oper"]["numProviders"] == 1
    assert client.delete("/api/v1/networks/n").status_code == 409
