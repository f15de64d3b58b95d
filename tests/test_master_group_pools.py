"""The pool of an endpoint group's docker network ("<network's pool id>@<group>") in the
control plane: addresses from the network's pool within the group's ip-pool, booked under
the network's pool id, which the group's docker network never releases."""

from __future__ import annotations

import ipaddress
import re
from collections import Counter

import pytest
from test_master_hot_path import count_calls

from common import keys, owners
from common.models import (
    AddressRelease,
    AddressRequest,
    EndpointGroup,
    EndpointRequest,
    Network,
    PoolRequest,
)
from common.records import AllocRecord, OwnerRecord
from master.errors import BadRequest, Conflict, NotFound
from master.state import ClusterState

POOL = "default:10.7.0.0/24"
FRONT = f"{POOL}@front"


@pytest.fixture
def state(state: ClusterState) -> ClusterState:
    """A network with two groups: ``front`` with an ip-pool, ``back`` without."""
    state.networks.put(Network(networkName="web", subnet="10.7.0.0/24", gateway="10.7.0.1"))
    state.groups.put(
        EndpointGroup(groupName="front", networkName="web", ipPool="10.7.0.100-10.7.0.102")
    )
    state.groups.put(EndpointGroup(groupName="back", networkName="web"))
    return state


def request(state: ClusterState, pool_id: str, owner: str, **kw: str) -> str:
    return state.pools.request_address(AddressRequest(poolID=pool_id, owner=owner, **kw))


def last_octet(cidr: str) -> int:
    return int(ipaddress.ip_interface(cidr).ip) & 0xFF


def test_addresses_come_from_the_groups_ip_pool_booked_in_the_networks_pool(
    state: ClusterState,
) -> None:
    got = [request(state, FRONT, f"o{i}") for i in range(3)]
    assert sorted(map(last_octet, got)) == [100, 101, 102]
    kv = state.store.get(keys.alloc(POOL, "10.7.0.100"))
    assert kv is not None and AllocRecord.decode(kv.value).owner in {"o0", "o1", "o2"}
    owner = state.store.get(keys.owner("o0"))
    assert owner is not None and OwnerRecord.decode(owner.value).pool == POOL
    with pytest.raises(Conflict, match="no free address"):
        request(state, FRONT, "o3")
    # A retry by the same owner gets its address again.
    assert request(state, FRONT, "o0") == got[0]
    # A group without an ip-pool draws from the whole pool (round-robin: past the last one).
    assert last_octet(request(state, f"{POOL}@back", "b")) == 103


def test_the_gateway_of_a_group_pool_is_the_networks(state: ClusterState) -> None:
    assert request(state, FRONT, "gw", kind="gateway") == "10.7.0.1/24"


def test_a_static_address_may_be_any_of_the_subnet(state: ClusterState) -> None:
    """As for endpoints (README: static requests may use any usable address)."""
    assert request(state, FRONT, "s", address="10.7.0.50") == "10.7.0.50/24"


def test_an_endpoint_of_the_group_adopts_the_address(state: ClusterState) -> None:
    got = request(state, FRONT, owners.docker_mac(FRONT, "02:42:0a:07:00:64"))
    address = got.split("/")[0]
    ep, _ = state.endpoints.create(
        EndpointRequest(
            endpointID="e1",
            networkName="web",
            groupName="front",
            ipAddress=address,
            adoptAddress=True,
        )
    )
    assert (ep.ipAddress, ep.ipv4Pool, ep.groupName) == (address, POOL, "front")
    kv = state.store.get(keys.alloc(POOL, address))
    assert kv is not None and AllocRecord.decode(kv.value).owner == owners.endpoint("e1")
    # Docker releases it after the endpoint is gone: nothing left to free.
    state.endpoints.delete("e1")
    assert state.pools.release_address(AddressRelease(poolID=FRONT, address=address)) is False


def test_release_address_frees_it_in_the_networks_pool(state: ClusterState) -> None:
    got = request(state, FRONT, "o").split("/")[0]
    assert state.pools.release_address(AddressRelease(poolID=FRONT, address=got)) is True
    assert state.store.get(keys.alloc(POOL, got)) is None
    assert state.store.get(keys.owner("o")) is None


def test_releasing_a_group_pool_leaves_the_networks_pool(state: ClusterState) -> None:
    request(state, FRONT, "o")
    before = [(kv.key, kv.value) for kv in state.store.range(keys.ROOT).kvs]
    state.pools.release_pool(FRONT)
    state.pools.release_pool("default:10.99.0.0/24@front")  # no such pool either: a no-op
    assert [(kv.key, kv.value) for kv in state.store.range(keys.ROOT).kvs] == before


def test_a_group_pool_refusals_name_the_group(state: ClusterState) -> None:
    state.networks.put(Network(networkName="db", subnet="10.8.0.0/24"))
    with pytest.raises(NotFound, match="endpoint group default:nosuch"):
        request(state, f"{POOL}@nosuch", "o")
    with pytest.raises(BadRequest, match="default:front belongs to network web, not db"):
        request(state, "default:10.8.0.0/24@front", "o")
    docker_pool = state.pools.request_pool(PoolRequest(pool="10.9.0.0/24"))["poolID"]
    with pytest.raises(BadRequest, match="is no network's"):
        request(state, f"{docker_pool}@front", "o")
    with pytest.raises(NotFound, match=re.escape("pool default:10.99.0.0/24")):
        request(state, "default:10.99.0.0/24@front", "o")


def test_a_group_pool_request_is_one_round_trip(state: ClusterState) -> None:
    request(state, FRONT, "warm")
    calls = count_calls(state)
    request(state, FRONT, "o1")
    assert calls == Counter(txn=1)


def test_a_changed_ip_pool_is_read_again(state: ClusterState) -> None:
    request(state, FRONT, "warm")  # the group is in the hot cache now
    state.groups.put(
        EndpointGroup(groupName="front", networkName="web", ipPool="10.7.0.200-10.7.0.201")
    )
    assert last_octet(request(state, FRONT, "o")) in (200, 201)
