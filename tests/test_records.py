"""The cluster schema: records round-trip, read what earlier versions wrote, refuse garbage."""

from __future__ import annotations

import json
from typing import Any

import pytest

from common import owners
from common.models import (
    Endpoint,
    EndpointGroup,
    GlobalSettings,
    Network,
    Policy,
    Rule,
    ServiceLB,
    Tenant,
)
from common.records import (
    AllocRecord,
    ConfigRecord,
    GroupRecord,
    HostRecord,
    LeaderRecord,
    NetworkRecord,
    OwnerRecord,
    PoolRecord,
    RecordError,
    ServiceRecord,
    TenantRecord,
    decode_config,
    decode_endpoint,
    encode,
    encode_config,
    encode_endpoint,
    parse_leader,
)
from store import KV


def test_encoding_is_canonical() -> None:
    assert encode({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'


def test_network_record_round_trip_and_fields() -> None:
    config = Network(tenantName="t", networkName="n", subnet="10.1.0.0/24", gateway="10.1.0.1")
    rec = NetworkRecord(config=config, encap="vxlan", pkt_tag=42, ipv4_pool="t:10.1.0.0/24")
    assert NetworkRecord.decode(rec.encode()) == rec
    assert rec.id == "t:n" and rec.pools == ("t:10.1.0.0/24",) and rec.pool(6) == ""
    assert json.loads(rec.encode())["pktTag"] == 42


def test_network_record_reads_the_stored_layout() -> None:
    stored = {
        "config": {"key": "default:a", "networkName": "a", "subnet": "10.0.0.0/24"},
        "encap": "vlan",
        "pktTag": 7,
        "ipv4Pool": "default:10.0.0.0/24",
        "ipv6Pool": "",
    }
    rec = NetworkRecord.decode(json.dumps(stored).encode())
    assert (rec.encap, rec.pkt_tag, rec.ipv4_pool, rec.config.networkName) == (
        "vlan",
        7,
        "default:10.0.0.0/24",
        "a",
    )


@pytest.mark.parametrize("value", [b"[not json", b"[]", b'{"config": {"bogus": 1}}'])
def test_network_record_refuses_garbage(value: bytes) -> None:
    with pytest.raises(ValueError):
        NetworkRecord.decode(value)


def test_config_records_round_trip() -> None:
    for obj in (
        Tenant(tenantName="blue"),
        EndpointGroup(groupName="g", networkName="n", policies=["p"]),
        GlobalSettings(vlans="1-100"),
        Policy(tenantName="t", policyName="p"),
        Rule(policyName="p", ruleId="1", protocol="tcp", port=80, fromIpAddress="10.0.0.0/8"),
    ):
        value = encode_config(obj)
        assert json.loads(value) == {"config": obj.dump()}
        assert decode_config(type(obj), value) == obj
    assert ConfigRecord.decode(Tenant, b'{"config":{"tenantName":"x"}}').config.id == "x"


def test_group_record_round_trip_and_the_stored_layout() -> None:
    g = EndpointGroup(tenantName="t", groupName="g", networkName="n", policies=["p"])
    rec = GroupRecord(config=g, tag=7)
    assert json.loads(rec.encode()) == {"config": g.dump(), "tag": 7}
    assert GroupRecord.decode(rec.encode()) == rec and rec.id == "t:g"
    # Every reader of a group's config reads it from a GroupRecord as from the old layout.
    assert decode_config(EndpointGroup, rec.encode()) == g


def test_a_group_stored_before_tags_reads_with_tag_0() -> None:
    legacy = b'{"config":{"groupName":"g","networkName":"n","policies":["p"]}}'
    rec = GroupRecord.decode(legacy)
    assert (rec.tag, rec.config.policies, rec.config.tenantName) == (0, ["p"], "default")
    assert GroupRecord.decode(encode_config(rec.config)) == rec


def test_tenant_record_round_trip_and_the_stored_layout() -> None:
    t = Tenant(tenantName="blue", defaultNetwork="n")
    rec = TenantRecord(config=t, tag=5)
    assert json.loads(rec.encode()) == {"config": t.dump(), "tag": 5}
    assert TenantRecord.decode(rec.encode()) == rec and rec.id == "blue"
    # Every reader of a tenant's config reads it from a TenantRecord as from the old layout.
    assert decode_config(Tenant, rec.encode()) == t


def test_a_tenant_stored_before_tags_reads_with_tag_0() -> None:
    legacy = encode_config(Tenant(tenantName="blue", defaultNetwork="n"))
    assert legacy == b'{"config":{"defaultNetwork":"n","key":"blue","tenantName":"blue"}}'
    rec = TenantRecord.decode(legacy)
    assert (rec.tag, rec.id, rec.config.defaultNetwork) == (0, "blue", "n")
    assert TenantRecord.decode(b'{"config":{"tenantName":"x"},"tag":null}').tag == 0


@pytest.mark.parametrize(
    "value",
    [
        b"[]",
        b'{"config":{}}',
        b'{"config":{"tenantName":"t"},"tag":-1}',
        b'{"config":{"tenantName":"t"},"tag":"7"}',
        b'{"config":{"tenantName":"t"},"tag":true}',
    ],
)
def test_tenant_record_refuses_garbage(value: bytes) -> None:
    with pytest.raises(ValueError):
        TenantRecord.decode(value)


@pytest.mark.parametrize(
    "value",
    [
        b"[]",
        b'{"config":{"groupName":"g"}}',
        b'{"config":{"groupName":"g","networkName":"n"},"tag":-1}',
        b'{"config":{"groupName":"g","networkName":"n"},"tag":"7"}',
        b'{"config":{"groupName":"g","networkName":"n"},"tag":true}',
    ],
)
def test_group_record_refuses_garbage(value: bytes) -> None:
    with pytest.raises(ValueError):
        GroupRecord.decode(value)


def test_endpoint_record_round_trip() -> None:
    ep = Endpoint(endpointID="e1", tenantName="default", networkName="n", ipAddress="10.0.0.2")
    assert decode_endpoint(encode_endpoint(ep)) == ep
    assert ep.network_id == "default:n"


def test_address_records() -> None:
    pool = PoolRecord(cidr="10.0.0.0/24", range="10.0.0.128/25", network="default:n", name="x")
    assert PoolRecord.decode(pool.encode()) == pool
    with pytest.raises(RecordError, match="no cidr"):
        PoolRecord.decode(b"{}")
    # Empty fields are left out, as the control plane always wrote them.
    assert AllocRecord(owner=owners.NETWORK_GATEWAY).encode() == b'{"owner":"gateway"}'
    ep = AllocRecord(owner=owners.endpoint("e1"), network="default:n")
    assert ep.encode() == b'{"network":"default:n","owner":"ep:e1"}'
    assert AllocRecord.decode(ep.encode()) == ep
    assert OwnerRecord.decode(OwnerRecord(pool="p", address="10.0.0.9").encode()) == OwnerRecord(
        pool="p", address="10.0.0.9"
    )


def test_host_record_uses_contiv_style_names() -> None:
    host = HostRecord(host="h1", vtep_ip="192.168.1.1", datapath="netdev", uplink_mtu=1500)
    assert json.loads(host.encode())["vtepIP"] == "192.168.1.1"
    assert HostRecord.decode(host.encode()) == host
    assert HostRecord.decode(b'{"host":"h2"}') == HostRecord(host="h2")


def test_leader_record_keeps_lease_and_revision() -> None:
    kv = KV("/netplugin/master/leader", b'{"id":"a","url":"u","since":"s"}', 3, 4, 1, lease=9)
    rec = parse_leader(kv)
    assert rec is not None and (rec.id, rec.url, rec.lease, rec.mod_revision) == ("a", "u", 9, 4)
    assert json.loads(rec.encode()) == rec.model_dump() == {"id": "a", "url": "u", "since": "s"}


def test_owner_names() -> None:
    assert owners.endpoint_of(owners.endpoint("abc")) == "abc"
    assert owners.endpoint_of(owners.NETWORK_GATEWAY) is None
    assert not owners.is_request(owners.endpoint("abc"))
    assert not owners.is_request(owners.NETWORK_GATEWAY)
    assert not owners.is_request("")
    for name in (
        owners.docker_gateway("p", "10.0.0.1"),
        owners.docker_static("p", "10.0.0.5"),
        owners.docker_mac("p", "02:42:00:00:00:01"),
        owners.docker_anonymous(),
    ):
        assert owners.is_request(name)
    assert owners.docker_anonymous() != owners.docker_anonymous()
    # Retries of one request name the same owner: that is what makes them idempotent.
    assert owners.docker_static("p", "10.0.0.5") == owners.docker_static("p", "10.0.0.5")


G = b'{"config":{"cfgdTag":"","extContractsGrps":[],"groupName":"g","ipPool":"","key":"t:g",'
NET = (
    b'{"config":{"dockerNetworkID":"","encap":"vlan","gateway":"","internal":false,'
    b'"ipv6Gateway":"","ipv6Subnet":"","key":"t:n","networkName":"n","nwType":"data",'
    b'"pktTag":0,"subnet":"10.1.0.0/24","tenantName":"t"},"encap":"vlan",'
    b'"ipv4Pool":"t:10.1.0.0/24","ipv6Pool":"","pktTag":42}'
)
SERVICE = (
    b'{"config":{"ipAddress":"","key":"t:s","networkName":"n","ports":["80:8080:TCP"],'
    b'"selectors":["app=web"],"serviceName":"s","tenantName":"t"},"tag":3,"vip":"10.1.0.9"}'
)


@pytest.mark.parametrize(
    ("record", "stored"),
    [
        (
            ConfigRecord(config=Tenant(tenantName="blue", defaultNetwork="n")),
            b'{"config":{"defaultNetwork":"n","key":"blue","tenantName":"blue"}}',
        ),
        (
            TenantRecord(config=Tenant(tenantName="blue"), tag=0),
            b'{"config":{"defaultNetwork":"","key":"blue","tenantName":"blue"},"tag":0}',
        ),
        (
            TenantRecord(config=Tenant(tenantName="blue", defaultNetwork="n"), tag=16383),
            b'{"config":{"defaultNetwork":"n","key":"blue","tenantName":"blue"},"tag":16383}',
        ),
        (
            GroupRecord(
                config=EndpointGroup(tenantName="t", groupName="g", networkName="n"), tag=0
            ),
            G + b'"netProfile":"","networkName":"n","policies":[],"tenantName":"t"},"tag":0}',
        ),
        (
            GroupRecord(
                config=EndpointGroup(
                    tenantName="t", groupName="g", networkName="n", policies=["p"]
                ),
                tag=7,
            ),
            G + b'"netProfile":"","networkName":"n","policies":["p"],"tenantName":"t"},"tag":7}',
        ),
        (
            ServiceRecord(
                config=ServiceLB(
                    tenantName="t",
                    serviceName="s",
                    networkName="n",
                    selectors=["app=web"],
                    ports=["80:8080:TCP"],
                ),
                vip="10.1.0.9",
                tag=3,
            ),
            SERVICE,
        ),
        (
            NetworkRecord(
                config=Network(tenantName="t", networkName="n", encap="vlan", subnet="10.1.0.0/24"),
                encap="vlan",
                pkt_tag=42,
                ipv4_pool="t:10.1.0.0/24",
            ),
            NET,
        ),
        (
            PoolRecord(
                cidr="10.1.0.0/24",
                range="10.1.0.128/25",
                network="t:n",
                gateway="10.1.0.1",
                name="t:n",
            ),
            b'{"cidr":"10.1.0.0/24","gateway":"10.1.0.1","name":"t:n","network":"t:n",'
            b'"range":"10.1.0.128/25"}',
        ),
        (
            PoolRecord(cidr="10.1.0.0/24", alias="blue:x@g", aliases=("default:b", "default:a")),
            b'{"alias":"blue:x@g","aliases":["default:a","default:b"],"cidr":"10.1.0.0/24",'
            b'"gateway":"","name":"","network":"","range":""}',
        ),
        (AllocRecord(owner="gateway"), b'{"owner":"gateway"}'),
        (
            AllocRecord(owner="ep:e1", kind="aux", network="t:n"),
            b'{"kind":"aux","network":"t:n","owner":"ep:e1"}',
        ),
        (OwnerRecord(pool="p", address="10.0.0.9"), b'{"address":"10.0.0.9","pool":"p"}'),
        (
            HostRecord(
                host="h1",
                vtep_ip="192.168.1.1",
                ctrl_ip="10.0.0.1",
                datapath="netdev",
                uplink_mtu=1500,
                vlan_if="eth1",
            ),
            b'{"ctrlIP":"10.0.0.1","datapath":"netdev","host":"h1","uplinkMTU":1500,'
            b'"vlanIf":"eth1","vtepIP":"192.168.1.1"}',
        ),
        (
            LeaderRecord(id="a", url="http://a:9999", since="t", lease=11, mod_revision=5),
            b'{"id": "a", "since": "t", "url": "http://a:9999"}',
        ),
    ],
)
def test_records_keep_the_bytes_they_were_stored_with(record: Any, stored: bytes) -> None:
    """A record encodes to the very bytes earlier versions wrote, and reads back to them:
    writers skip rewriting an unchanged record by comparing bytes."""
    assert record.encode() == stored
    if not isinstance(record, LeaderRecord | ConfigRecord):
        assert type(record).decode(stored).encode() == stored


def test_endpoint_keeps_its_bytes() -> None:
    ep = Endpoint(
        endpointID="e1", tenantName="t", networkName="n", ipAddress="10.1.0.2", labels={"a": "b"}
    )
    assert encode_endpoint(ep) == (
        b'{"containerID":"","containerName":"","endpointID":"e1","groupName":"","host":"",'
        b'"ipAddress":"10.1.0.2","ipv4Pool":"","ipv6Address":"","ipv6Pool":"","key":"e1",'
        b'"labels":{"a":"b"},"macAddress":"","networkName":"n","tenantName":"t"}'
    )


def test_records_read_what_earlier_versions_wrote() -> None:
    """Null and missing fields read as their defaults; a network without an encap has its
    config's; numbers in strings read as numbers."""
    net = NetworkRecord.decode(
        b'{"config":{"networkName":"n","encap":"vlan"},"encap":null,"pktTag":"7","ipv4Pool":null}'
    )
    assert (net.encap, net.pkt_tag, net.pools) == ("vlan", 7, ())
    assert NetworkRecord.decode(b'{"config":{"networkName":"n"},"encap":""}').encap == "vxlan"
    assert HostRecord.decode(b'{"host":"h","vtepIP":null,"uplinkMTU":null}') == HostRecord(host="h")
    assert AllocRecord.decode(b'{"owner":"o","kind":null}') == AllocRecord(owner="o")
    assert OwnerRecord.decode(b"{}") == OwnerRecord(pool="", address="")
    assert PoolRecord.decode(b'{"cidr":"c","aliases":null}') == PoolRecord(cidr="c")
    assert GroupRecord.decode(b'{"config":{"groupName":"g","networkName":"n"},"tag":null}').tag == 0


SC = b'"config":{"serviceName":"s","networkName":"n"}'


@pytest.mark.parametrize(
    ("record", "value", "problem"),
    [
        (ServiceRecord, b"{" + SC + b',"tag":3}', "service record: no vip"),
        (ServiceRecord, b"{" + SC + b',"vip":"","tag":3}', "service record: vip"),
        (ServiceRecord, b"{" + SC + b',"vip":5,"tag":3}', "service record: vip"),
        (ServiceRecord, b"{" + SC + b',"vip":"v"}', "service record: no tag"),
        (ServiceRecord, b"{" + SC + b',"vip":"v","tag":0}', "service record: tag"),
        (ServiceRecord, b"{" + SC + b',"vip":"v","tag":"3"}', "service record: tag"),
        (PoolRecord, b'{"cidr":null}', "pool record: no cidr"),
        (PoolRecord, b'{"cidr":5}', "pool record: cidr"),
        (PoolRecord, b'{"cidr":"c","aliases":"ab"}', "pool record: aliases"),
        (PoolRecord, b'{"cidr":"c","aliases":[1]}', "pool record: aliases.0"),
        (NetworkRecord, b'{"config":{"networkName":"n"},"pktTag":"x"}', "network record: pktTag"),
        (NetworkRecord, b"{}", "network record: no config"),
        (TenantRecord, b'{"config":{"tenantName":"t"},"tag":"1"}', "tenant record: tag"),
        (TenantRecord, b'{"tag":1}', "tenant record: no config"),
        (HostRecord, b"[]", "host record: not a JSON object"),
    ],
)
def test_records_name_what_is_wrong(record: Any, value: bytes, problem: str) -> None:
    with pytest.raises(RecordError) as e:
        record.decode(value)
    assert str(e.value).startswith(problem)


def test_a_config_record_names_its_model() -> None:
    with pytest.raises(RecordError, match="Tenant: no config"):
        decode_config(Tenant, b'{"config":null}')
