"""Which subnets a network may own (ipam.subnets): pure, no store. Then the same rule where
users meet it: `netctl net create`/REST and Docker's RequestPool, each refused with the
reason and nothing booked. Last, the hosts' own addresses the master knows (their VTEP and
control addresses, master.decisions.networks.check_clear_of_hosts)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_plugin import FakeDatapath, call
from test_master_guards import before_commit_of

from common import keys
from common.models import Network, PoolRequest
from common.records import HostRecord
from ipam import UnusableSubnet, check_ownable, parse_network
from ipam.subnets import WIDEST, unusable
from master.decisions.networks import check_clear_of_hosts, normalize_network
from master.decisions.pools import plan_pool_request
from master.errors import BadRequest, Conflict
from master.state import ClusterState
from plugin.app import create_app
from plugin.driver import Driver
from plugin.master_client import MasterClient
from testbed.real_master import RealMaster, real_master


@pytest.mark.parametrize(
    "cidr",
    [
        "10.0.0.0/8",  # the widest private block: a network may have all of it
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",  # shared address space (carrier-grade NAT) is usable space
        "1.0.0.0/8",  # public space is the operator's to use, as with Docker's bridge
        "10.1.0.0/24",
        "10.1.0.0/31",
        "198.18.0.0/15",
        "fd00:1::/48",
        "fd00:1::/64",
        "2001:db8::/64",
        "fd6e:6574:706c:1::/64",  # Docker's default IPv6 pools
    ],
)
def test_what_a_network_may_own(cidr: str) -> None:
    assert unusable(parse_network(cidr)) is None
    assert check_ownable(parse_network(cidr)) == parse_network(cidr)


@pytest.mark.parametrize(
    ("cidr", "reason"),
    [
        (
            "0.0.0.0/0",
            "is too wide: it is every IPv4 address: every host would masquerade all the "
            "traffic it sends or forwards, and no other subnet or default pool would be left; "
            "a network's IPv4 subnet must be /8 or longer",
        ),
        (
            "::/0",
            "is too wide: it is every IPv6 address: every host would route all its IPv6 "
            "traffic to this network's gateway port, ahead of its default route (and the "
            "default gateway, ::1, is the loopback address); a network's IPv6 subnet must be "
            "/48 or longer",
        ),
        (
            "128.0.0.0/1",
            "is too wide: every host would route all of it to this network's gateway port "
            "instead of along its own routes; a network's IPv4 subnet must be /8 or longer",
        ),
        ("10.0.0.0/7", "is too wide: every host would route"),
        ("fd00::/47", "is too wide: every host would route all of it"),
        ("0.0.0.0/8", 'lies in 0.0.0.0/8, "this network" (RFC 1122)'),
        ("127.0.0.0/8", "lies in 127.0.0.0/8, the loopback range"),
        ("127.3.0.0/16", "lies in 127.0.0.0/8, the loopback range"),
        ("169.254.0.0/16", "lies in 169.254.0.0/16, link-local (RFC 3927): never routed"),
        ("169.254.169.0/24", "lies in 169.254.0.0/16, link-local"),
        ("169.254.0.0/15", "overlaps 169.254.0.0/16, link-local"),
        ("224.0.0.0/24", "lies in 224.0.0.0/4, multicast"),
        ("239.255.0.0/16", "lies in 224.0.0.0/4, multicast"),
        ("240.0.0.0/8", "lies in 240.0.0.0/4, reserved (class E"),
        ("255.255.255.255/32", "lies in 240.0.0.0/4, reserved (class E, and the broadcast"),
        ("::/64", "lies in ::/8, reserved (RFC 4291)"),
        ("::ffff:0:0/96", "lies in ::/8, reserved"),
        ("fe80::/64", "lies in fe80::/10, link-local: every interface has its own fe80::/64"),
        ("ff02::/64", "lies in ff00::/8, multicast"),
    ],
)
def test_what_no_network_may_own(cidr: str, reason: str) -> None:
    got = unusable(parse_network(cidr))
    assert got is not None and got.startswith(reason)
    with pytest.raises(UnusableSubnet) as e:
        check_ownable(parse_network(cidr), "ipv6-subnet")
    assert str(e.value) == f"ipv6-subnet {cidr} {got}"
    if "too wide" not in reason:
        assert got.endswith("; choose a subnet outside it")


def test_the_line_is_one_sites_private_block() -> None:
    """10.0.0.0/8 and a ULA /48 are the widest a network may own; one bit wider is not."""
    assert WIDEST == {4: 8, 6: 48}
    assert unusable(parse_network("10.0.0.0/8")) is None
    assert unusable(parse_network("fd00:1::/48")) is None
    for wider in ("8.0.0.0/7", "fd00::/47"):
        assert str(unusable(parse_network(wider))).startswith("is too wide")


# --- where users meet it ---


def test_a_network_refuses_a_subnet_it_cannot_own() -> None:
    with pytest.raises(BadRequest) as e:
        normalize_network(Network(networkName="x", subnet="0.0.0.0/0"))
    assert str(e.value).startswith("network default:x: subnet 0.0.0.0/0 is too wide: ")
    with pytest.raises(BadRequest) as e:
        normalize_network(Network(networkName="x", subnet="10.1.0.0/24", ipv6Subnet="::/0"))
    assert str(e.value).startswith("network default:x: ipv6-subnet ::/0 is too wide: ")


def test_a_docker_pool_refuses_a_subnet_no_network_could_own() -> None:
    with pytest.raises(BadRequest) as e:
        plan_pool_request(PoolRequest(pool="0.0.0.0/0"), {})
    assert str(e.value).startswith(
        "pool request in address space default: subnet 0.0.0.0/0 is too wide: "
    )
    with pytest.raises(BadRequest, match=r"subnet 169\.254\.1\.0/24 lies in 169\.254\.0\.0/16"):
        plan_pool_request(PoolRequest(pool="169.254.1.0/24"), {})
    # A default pool (no --subnet) is always one a network may own.
    assert plan_pool_request(PoolRequest(), {}).pool == "10.200.0.0/24"


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RealMaster]:
    with real_master(tmp_path) as m:
        yield m


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"subnet": "0.0.0.0/0"}, "network default:x: subnet 0.0.0.0/0 is too wide: "),
        (
            {"subnet": "10.1.0.0/24", "ipv6Subnet": "::/0"},
            "network default:x: ipv6-subnet ::/0 is too wide: ",
        ),
        ({"subnet": "127.0.0.0/8"}, "network default:x: subnet 127.0.0.0/8 lies in 127."),
        ({"subnet": "224.1.0.0/16"}, "network default:x: subnet 224.1.0.0/16 lies in 224."),
    ],
)
def test_rest_refuses_a_subnet_no_network_may_own_and_books_nothing(
    master: RealMaster, body: dict[str, str], error: str
) -> None:
    before = master.snapshot()
    r = master.session().post(f"{master.url}/api/v1/networks/default:x", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith(error)
    assert r.json()["object"] == "network default:x"
    assert master.snapshot() == before
    # The same network put again with a subnet it may own is made.
    ok = master.session().post(f"{master.url}/api/v1/networks/default:x", json={})
    assert ok.status_code == 400  # (a subnet is required)
    r = master.session().post(
        f"{master.url}/api/v1/networks/default:x", json={"subnet": "10.1.0.0/24"}
    )
    assert r.status_code == 200, r.text


def test_docker_request_pool_refuses_it_and_leaves_nothing(master: RealMaster) -> None:
    client = MasterClient(master.url, backoff=0, session=master.session())
    plugin = create_app(Driver(client, FakeDatapath(), host="host1")).test_client()
    before = master.snapshot()
    body = {"AddressSpace": "default", "Pool": "0.0.0.0/0", "SubPool": "", "Options": {}}
    r = call(plugin, "IpamDriver.RequestPool", body)
    assert r.status_code == 400
    assert r.get_json()["Err"].startswith(
        "pool request in address space default: subnet 0.0.0.0/0 is too wide: it "
        "is every IPv4 address: "
    )
    assert master.snapshot() == before


# --- the hosts' own addresses (the master knows their VTEP and control addresses) ---


def register(state: ClusterState, host: str, vtep: str = "", ctrl: str = "") -> None:
    """What an agent writes at start (plugin.cluster.HostRegistration), lease aside."""
    record = HostRecord(host=host, vtep_ip=vtep, ctrl_ip=ctrl).encode()
    state.store.put(keys.host(host), record)
    if vtep:
        state.store.put(keys.vtep(host), record)


def test_a_subnet_holding_a_hosts_address_is_refused() -> None:
    hosts = [
        HostRecord(host="h1", vtep_ip="192.168.77.1"),
        HostRecord(host="h2", ctrl_ip="fd00:77::2"),
    ]
    check_clear_of_hosts(Network(networkName="x", subnet="192.168.78.0/24"), hosts)
    with pytest.raises(Conflict) as e:
        check_clear_of_hosts(Network(networkName="x", subnet="192.168.0.0/16"), hosts)
    assert str(e.value) == (
        "network default:x: subnet 192.168.0.0/16 holds 192.168.77.1, the VTEP address of "
        "host h1: its containers could be given it, and every host would route it to this "
        "network's gateway port; choose a subnet that holds no host's address"
    )
    six = Network(networkName="x", subnet="10.1.0.0/24", ipv6Subnet="fd00:77::/64")
    with pytest.raises(Conflict, match="fd00:77::2, the control address of host h2"):
        check_clear_of_hosts(six, hosts)
    # An address an agent wrote wrong cannot clash with anything.
    check_clear_of_hosts(six, [HostRecord(host="h3", vtep_ip="not-an-address")])


def test_a_network_is_not_made_over_a_registered_hosts_address(state: ClusterState) -> None:
    register(state, "h1", vtep="192.168.77.1")
    before = {kv.key for kv in state.store.range(keys.ROOT).kvs}
    with pytest.raises(Conflict, match=r"192\.168\.77\.1, the VTEP address of host h1"):
        state.networks.put(Network(networkName="x", subnet="192.168.77.0/24"))
    assert {kv.key for kv in state.store.range(keys.ROOT).kvs} == before
    # Readdressing onto it is refused too; other changes of the network are not checked.
    state.networks.put(Network(networkName="x", subnet="192.168.78.0/24"))
    with pytest.raises(Conflict, match="the VTEP address of host h1"):
        state.networks.put(Network(networkName="x", subnet="192.168.77.0/24"))
    register(state, "h2", ctrl="192.168.78.9")  # registered after the network was made
    state.networks.put(Network(networkName="x", subnet="192.168.78.0/24", nwType="infra"))
    assert state.networks.get("default", "x").nwType == "infra"


def test_a_host_registered_meanwhile_is_seen(state: ClusterState) -> None:
    before_commit_of(
        state, keys.network("default", "x"), lambda: register(state, "h1", vtep="10.9.0.7")
    )
    with pytest.raises(Conflict, match=r"10\.9\.0\.7, the VTEP address of host h1"):
        state.networks.put(Network(networkName="x", subnet="10.9.0.0/24"))
    assert state.networks.list() == []
