"""Pure validation of the object model: every refusal names the object and the reason."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from common.models import (
    EndpointGroup,
    EndpointRequest,
    GlobalSettings,
    Network,
    Tenant,
    docker_name,
)
from master.decisions.groups import normalize_group
from master.decisions.networks import normalize_network
from master.decisions.settings import parse_tag_range, tag_range, validate_global
from master.errors import BadRequest
from master.validate import parse_body


def net(**kw: object) -> Network:
    return Network.model_validate({"networkName": "n1", **kw})


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"subnet": "10.1.0.0/33"}, ["network default:n1", "10.1.0.0/33"]),
        ({"subnet": "10.1.0.5/24"}, ["10.1.0.5/24", "10.1.0.0/24"]),
        ({"subnet": "nonsense"}, ["subnet", "nonsense"]),
        ({"subnet": "fd00::/64"}, ["IPv4"]),
        (
            {"subnet": "10.1.0.0/24", "gateway": "10.2.0.1"},
            ["network default:n1", "gateway 10.2.0.1"],
        ),
        ({"subnet": "10.1.0.0/24", "gateway": "10.1.0.0"}, ["gateway 10.1.0.0"]),
        ({"subnet": "10.1.0.0/24", "gateway": "10.1.0.255"}, ["gateway 10.1.0.255"]),
        ({"ipv6Subnet": "10.0.0.0/8"}, ["ipv6-subnet", "IPv6"]),
        ({"gateway": "10.0.0.1", "ipv6Subnet": "fd00::/64"}, ["gateway given without a subnet"]),
        ({}, ["a subnet is required"]),
        ({"subnet": "10.1.0.0/24", "encap": "vlan", "pktTag": 4095}, ["VLAN id"]),
        ({"networkName": "no/slash", "subnet": "10.1.0.0/24"}, ["invalid name"]),
        ({"networkName": "a:b", "subnet": "10.1.0.0/24"}, ["invalid name"]),
    ],
)
def test_network_refusals(fields: dict, words: list[str]) -> None:
    with pytest.raises(BadRequest) as e:
        normalize_network(net(**fields))
    for w in words:
        assert w in str(e.value)


def test_network_defaults_and_normalisation() -> None:
    n = normalize_network(net(subnet="10.1.0.0/24", ipv6Subnet="FD00:0:0:1::/64"))
    assert n.gateway == "10.1.0.1"
    assert n.ipv6Subnet == "fd00:0:0:1::/64" and n.ipv6Gateway == "fd00:0:0:1::1"
    assert n.encap == "vxlan" and n.nwType == "data" and n.id == "default:n1"
    assert normalize_network(net(subnet="10.1.0.0/31")).gateway == "10.1.0.0"
    v6only = normalize_network(net(ipv6Subnet="fd00::/64"))
    assert v6only.subnet == "" and v6only.gateway == ""


def test_group_pool_inside_network() -> None:
    n = normalize_network(net(subnet="10.1.0.0/24"))
    g = normalize_group(
        EndpointGroup(groupName="g", networkName="n1", ipPool="10.1.0.10-10.1.0.20"), n
    )
    assert g.ipPool == "10.1.0.10-10.1.0.20"
    cidr = normalize_group(EndpointGroup(groupName="g", networkName="n1", ipPool="10.1.0.16/28"), n)
    assert cidr.ipPool == "10.1.0.16-10.1.0.31"  # a sub-range: its ends are ordinary hosts
    for bad in ("10.2.0.1-10.2.0.5", "10.1.0.20-10.1.0.10", "garbage", "10.1.0.0-10.1.0.5"):
        with pytest.raises(BadRequest, match="endpoint group default:g"):
            normalize_group(EndpointGroup(groupName="g", networkName="n1", ipPool=bad), n)
    v6 = normalize_network(net(ipv6Subnet="fd00::/64"))
    with pytest.raises(BadRequest, match="no IPv4 subnet"):
        normalize_group(
            EndpointGroup(groupName="g", networkName="n1", ipPool="10.1.0.1-10.1.0.2"), v6
        )


def test_global_ranges() -> None:
    assert parse_tag_range("1-4094", "vlans", 4094) == (1, 4094)
    assert parse_tag_range(" 7 ", "vlans", 4094) == (7, 7)
    for bad in ("0-10", "10-1", "1-5000", "a-b", "", "1-2-3"):
        with pytest.raises(BadRequest, match="global vlans"):
            parse_tag_range(bad, "vlans", 4094)
    g = GlobalSettings(vxlans="100-200")
    assert tag_range(g, "vxlan") == (100, 200) and tag_range(g, "vlan") == (1, 4094)
    with pytest.raises(BadRequest, match="pvtSubnet"):
        validate_global(GlobalSettings(pvtSubnet="10.0.0.0/99"))


def test_parse_body_names_fields() -> None:
    with pytest.raises(BadRequest) as e:
        parse_body(Network, {"networkName": "x", "pktTag": "abc", "bogus": 1}, "network default:x")
    msg = str(e.value)
    assert msg.startswith("network default:x: ")
    assert "'pktTag'" in msg and "'bogus': unknown field" in msg
    with pytest.raises(BadRequest, match="JSON object"):
        parse_body(Tenant, [1, 2], "tenant t")
    with pytest.raises(BadRequest, match="endpointID"):
        parse_body(EndpointRequest, {"endpointID": "a/b", "networkName": "n"}, "endpoint a/b")
    with pytest.raises(BadRequest, match="pktTag"):
        parse_body(Network, {"networkName": "x", "pktTag": -1}, "network default:x")


def test_contiv_key_field_is_accepted_and_echoed() -> None:
    t = parse_body(Tenant, {"key": "blue", "tenantName": "blue"}, "tenant blue")
    assert t.dump() == {"key": "blue", "tenantName": "blue", "defaultNetwork": ""}


def test_docker_names() -> None:
    assert docker_name("default", "net1") == "net1"
    assert docker_name("blue", "net1") == "net1/blue"


def test_api_errors_survive_pickling() -> None:
    import pickle

    from master.errors import Conflict, NotFound, Unavailable

    for err in (
        Conflict("network a:b", "busy"),
        NotFound("tenant t"),
        Unavailable("store", "down"),
    ):
        back = pickle.loads(pickle.dumps(err))
        assert (
            type(back) is type(err)
            and back.to_json() == err.to_json()
            and back.status == err.status
        )


@pytest.mark.parametrize("mac", ["", "02:42:0a:05:00:63", "02:42:0A:05:00:6F"])
def test_endpoint_request_macs(mac: str) -> None:
    assert EndpointRequest(endpointID="e1", networkName="n", macAddress=mac).macAddress == mac


@pytest.mark.parametrize(
    ("mac", "words"),
    [
        ("zz", "must be a MAC address"),
        ("02:42:0a:05:00", "must be a MAC address"),
        ("02-42-0a-05-00-63", "must be a MAC address"),
        ("ff:ff:ff:ff:ff:ff", "multicast"),
        ("01:00:5e:00:00:01", "multicast"),
    ],
)
def test_endpoint_request_refuses_bad_macs(mac: str, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        EndpointRequest(endpointID="e1", networkName="n", macAddress=mac)
