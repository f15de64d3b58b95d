"""The consistency check over a full scan of the store: a state the real control plane built
holds together; each hand-made break of it is named, by key."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

import pytest

from common import keys, owners
from common.models import (
    AddressRequest,
    EndpointGroup,
    EndpointRequest,
    Network,
    Policy,
    PoolRequest,
    Rule,
    Tenant,
)
from master.decisions.consistency import Problem, check_state
from master.state import ClusterState

POOL = "default:10.70.0.0/24"
DOCKER_POOL = "default:10.71.0.0/24"


@pytest.fixture
def scan(state: ClusterState) -> dict[str, bytes]:
    """A full scan of a store the control plane wrote: a network with endpoints (IPv4 and
    dual stack), a Docker pool with plain address requests, and an adopted address."""
    state.networks.put(Network(networkName="n1", subnet="10.70.0.0/24"))
    state.networks.put(Network(networkName="n6", subnet="10.72.0.0/24", ipv6Subnet="fd00:72::/64"))
    for i in range(3):
        state.endpoints.create(EndpointRequest(endpointID=f"e{i}", networkName="n1", host="h1"))
    state.endpoints.create(EndpointRequest(endpointID="e6", networkName="n6", host="h1"))
    state.pools.request_pool(PoolRequest(pool="10.71.0.0/24"))
    state.pools.request_address(AddressRequest(poolID=DOCKER_POOL, owner="req:a"))
    state.pools.request_address(AddressRequest(poolID=DOCKER_POOL, owner="req:b"))
    got = state.pools.request_address(AddressRequest(poolID=POOL, owner="req:c")).split("/")[0]
    state.endpoints.create(
        EndpointRequest(endpointID="adopter", networkName="n1", ipAddress=got, adoptAddress=True)
    )
    return {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}


def _endpoint(scan: dict[str, bytes], ep_id: str) -> tuple[str, dict[str, str]]:
    key = scan[keys.endpoint_index(ep_id)].decode()
    return key, json.loads(scan[key])


def _keys(problems: list[Problem]) -> set[str]:
    return {p.key for p in problems}


def test_a_state_the_control_plane_built_holds_together(scan: dict[str, bytes]) -> None:
    assert check_state(scan) == []
    assert any(k.startswith(keys.OWNERS) for k in scan)  # the requests are in it
    assert check_state({}) == []


def test_an_endpoint_without_its_index_entry(scan: dict[str, bytes]) -> None:
    key, _ = _endpoint(scan, "e1")
    del scan[keys.endpoint_index("e1")]
    assert [str(p) for p in check_state(scan)] == [f"{key}: has no index entry"]


def test_an_index_entry_without_its_endpoint(scan: dict[str, bytes]) -> None:
    key, ep = _endpoint(scan, "e1")
    del scan[key]
    alloc = keys.alloc(ep["ipv4Pool"], ep["ipAddress"])
    assert _keys(check_state(scan)) == {keys.endpoint_index("e1"), alloc}
    assert any("orphaned" in p.what for p in check_state(scan) if p.key == alloc)


def test_an_endpoint_whose_address_is_not_allocated(scan: dict[str, bytes]) -> None:
    key, ep = _endpoint(scan, "e6")
    del scan[keys.alloc(ep["ipv6Pool"], ep["ipv6Address"])]
    (problem,) = check_state(scan)
    assert problem.key == key and "is not allocated" in problem.what


def test_an_allocation_of_an_endpoint_that_does_not_exist(scan: dict[str, bytes]) -> None:
    orphan = keys.alloc(POOL, "10.70.0.200")
    scan[orphan] = json.dumps({"owner": owners.endpoint("gone")}).encode()
    (problem,) = check_state(scan)
    assert problem == Problem(orphan, "held by endpoint gone, which does not exist (orphaned)")


def test_an_allocation_the_endpoint_does_not_name(scan: dict[str, bytes]) -> None:
    extra = keys.alloc(POOL, "10.70.0.201")
    scan[extra] = json.dumps({"owner": owners.endpoint("e0")}).encode()
    assert check_state(scan) == [Problem(extra, "held by endpoint e0, which does not have it")]


def test_one_address_given_to_two_endpoints(scan: dict[str, bytes]) -> None:
    _, e0 = _endpoint(scan, "e0")
    key1, e1 = _endpoint(scan, "e1")
    scan[key1] = json.dumps({**e1, "ipAddress": e0["ipAddress"]}).encode()
    found = {str(p) for p in check_state(scan)}
    twice = keys.alloc(POOL, e0["ipAddress"])
    assert f"{twice}: given to several endpoints: e0, e1" in found
    assert f"{key1}: its address {e0['ipAddress']} in pool {POOL} is held by ep:e0" in found


def test_a_second_spelling_of_an_allocated_address(scan: dict[str, bytes]) -> None:
    _, e6 = _endpoint(scan, "e6")
    pid, short = e6["ipv6Pool"], e6["ipv6Address"]
    long = ipaddress.ip_address(short).exploded
    scan[keys.alloc(pid, long)] = scan[keys.alloc(pid, short)]
    found = {str(p) for p in check_state(scan)}
    a, b = sorted([keys.alloc(pid, long), keys.alloc(pid, short)])
    assert f"{b}: the same address as {a}" in found
    assert any(p.startswith(keys.alloc(pid, long)) and "is not written as" in p for p in found)


def test_a_request_without_its_owner_record_and_the_reverse(scan: dict[str, bytes]) -> None:
    held = json.loads(scan[keys.owner("req:a")])
    del scan[keys.owner("req:a")]
    (problem,) = check_state(scan)
    assert problem.key == keys.alloc(DOCKER_POOL, held["address"])
    assert "no owner record" in problem.what

    scan[keys.owner("req:a")] = json.dumps(held).encode()
    del scan[keys.alloc(DOCKER_POOL, held["address"])]
    (problem,) = check_state(scan)
    assert problem.key == keys.owner("req:a") and "not allocated" in problem.what


def test_the_adopted_address_left_no_owner_record_behind(scan: dict[str, bytes]) -> None:
    assert keys.owner("req:c") not in scan
    _, ep = _endpoint(scan, "adopter")
    scan[keys.owner("req:c")] = json.dumps({"pool": POOL, "address": ep["ipAddress"]}).encode()
    (problem,) = check_state(scan)
    assert problem.key == keys.owner("req:c") and "allocated to ep:adopter" in problem.what


def test_allocations_in_a_pool_that_does_not_exist(scan: dict[str, bytes]) -> None:
    del scan[keys.pool(DOCKER_POOL)]
    problems = check_state(scan)
    assert len(problems) == 2 and all("does not exist (orphaned)" in p.what for p in problems)


def test_an_address_outside_its_pool_and_overlapping_pools(scan: dict[str, bytes]) -> None:
    outside = keys.alloc(DOCKER_POOL, "10.99.0.1")
    scan[outside] = scan[keys.alloc(DOCKER_POOL, json.loads(scan[keys.owner("req:b")])["address"])]
    scan[keys.pool("default:10.71.0.0/16")] = scan[keys.pool(DOCKER_POOL)]
    found = {str(p) for p in check_state(scan)}
    assert f"{outside}: 10.99.0.1 is outside pool {DOCKER_POOL}" in found
    assert any("overlaps pool" in p for p in found)


def test_the_gateway_allocation_and_the_network_links(scan: dict[str, bytes]) -> None:
    net_key = keys.network("default", "n1")
    gateway = json.loads(scan[keys.pool(POOL)])["gateway"]
    scan[keys.alloc(POOL, gateway)] = json.dumps({"owner": "req:x"}).encode()
    found = {str(p) for p in check_state(scan)}
    assert f"{keys.alloc(POOL, gateway)}: the gateway of pool {POOL} is held by req:x" in found

    del scan[net_key]
    found = {str(p) for p in check_state(scan)}
    assert any(p.startswith(keys.pool(POOL)) and "does not exist" in p for p in found)
    assert any(p.startswith(keys.TAGS) for p in found)
    assert any("its network default:n1 does not exist" in p for p in found)


def test_a_record_that_does_not_decode_is_named(scan: dict[str, bytes]) -> None:
    key, _ = _endpoint(scan, "e2")
    scan[key] = b"{not json"
    found = check_state(scan)
    assert Problem(key, "does not decode: endpoint record: not JSON") in [
        Problem(p.key, p.what.split(" (")[0]) for p in found
    ]


def _check(state: ClusterState) -> list[str]:
    return [
        str(p) for p in check_state({kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs})
    ]


def test_releasing_a_pool_frees_its_requests_owner_records(state: ClusterState) -> None:
    """Found by this check: ReleasePool left the owner records of its address requests, so
    the same owner, after a new RequestPool, got the old address back unbooked, and the
    next request was given it too."""
    state.pools.request_pool(PoolRequest(pool="10.75.0.0/24"))
    pool = "default:10.75.0.0/24"
    first = state.pools.request_address(AddressRequest(poolID=pool, owner="req:o1"))
    state.pools.release_pool(pool)
    assert _check(state) == []
    state.pools.request_pool(PoolRequest(pool="10.75.0.0/24"))
    again = state.pools.request_address(AddressRequest(poolID=pool, owner="req:o1"))
    other = state.pools.request_address(AddressRequest(poolID=pool, owner="req:o2"))
    assert again == first and other != again
    assert _check(state) == []


def test_deleting_a_network_frees_its_requests_owner_records(state: ClusterState) -> None:
    state.networks.put(Network(networkName="gone", subnet="10.76.0.0/24"))
    aux = AddressRequest(poolID="default:10.76.0.0/24", owner="addr:x", address="10.76.0.9")
    state.pools.request_address(aux)
    state.networks.delete("default", "gone")
    assert _check(state) == []
    assert state.store.get(keys.owner("addr:x")) is None


def test_a_network_adopting_dockers_pool_takes_its_gateway_whole(state: ClusterState) -> None:
    """Docker's flow: RequestPool, RequestAddress for the gateway, then CreateNetwork; the
    network takes the gateway over, and the request's owner record goes with it."""
    pool = "default:10.77.0.0/24"
    state.pools.request_pool(PoolRequest(pool="10.77.0.0/24"))
    gw = owners.docker_gateway(pool, "10.77.0.1")
    state.pools.request_address(
        AddressRequest(poolID=pool, owner=gw, address="10.77.0.1", kind="gateway")
    )
    assert _check(state) == []
    state.networks.put(Network(networkName="dk", subnet="10.77.0.0/24", gateway="10.77.0.1"))
    assert _check(state) == []
    assert state.store.get(keys.owner(gw)) is None
    again = AddressRequest(poolID=pool, owner=gw, address="10.77.0.1", kind="gateway")
    assert state.pools.request_address(again) == "10.77.0.1/24"  # Docker's retry still gets it
    assert _check(state) == []


# --- groups, their tags, policies and rules ---


@pytest.fixture
def pscan(state: ClusterState) -> dict[str, bytes]:
    """Groups a (tag 1) and b (tag 2) on network n, b attaching policy p, whose rules name
    group a and network n."""
    state.networks.put(Network(networkName="n", subnet="10.80.0.0/24"))
    state.policies.put(Policy(policyName="p"))
    state.groups.put(EndpointGroup(groupName="a", networkName="n"))
    state.groups.put(EndpointGroup(groupName="b", networkName="n", policies=["p"]))
    state.rules.put(Rule(policyName="p", ruleId="1", fromEndpointGroup="a", fromNetwork="n"))
    state.rules.put(Rule(policyName="p", ruleId="2", direction="out", toEndpointGroup="a"))
    scan = {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}
    assert check_state(scan) == []
    return scan


def _group(scan: dict[str, bytes], name: str, **changes: object) -> None:
    data = json.loads(scan[keys.group("default", name)])
    for k, v in changes.items():
        if k == "tag":
            data["tag"] = v
        else:
            data["config"][k] = v
    scan[keys.group("default", name)] = json.dumps(data).encode()


A, B = keys.group("default", "a"), keys.group("default", "b")
P, R1, R2 = (
    keys.policy("default", "p"),
    keys.rule("default", "p", "1"),
    keys.rule("default", "p", "2"),
)


@pytest.mark.parametrize(
    ("brk", "expected"),
    [
        (lambda s: s.pop(keys.group_tag(1)), [f"{A}: its group tag 1 is not held by it"]),
        (
            lambda s: s.__setitem__(keys.group_tag(1), b"default:b"),
            [
                f"{A}: its group tag 1 is not held by it",
                f"{keys.group_tag(1)}: held by endpoint group default:b, whose tag is 2",
            ],
        ),
        (
            lambda s: _group(s, "b", tag=1),  # two groups, one tag
            [
                f"{B}: its group tag 1 is not held by it",
                f"{keys.group_tag(2)}: held by endpoint group default:b, whose tag is 1",
            ],
        ),
        (
            lambda s: s.__setitem__(keys.group_tag(9), b"default:gone"),
            [f"{keys.group_tag(9)}: held by endpoint group default:gone, which does not exist"],
        ),
        (
            lambda s: s.__setitem__(keys.GROUP_TAGS + "0", b"default:a"),
            [f"{keys.GROUP_TAGS}0: '0' is not a group tag"],
        ),
        (
            lambda s: s.__setitem__(keys.GROUP_TAGS + str(2**31), b"default:a"),
            [f"{keys.GROUP_TAGS}{2**31}: '{2**31}' is not a group tag"],
        ),
        (
            lambda s: _group(s, "a", tag=0),
            [
                f"{A}: has no group tag (the master gives it one when it starts)",
                f"{keys.group_tag(1)}: held by endpoint group default:a, whose tag is 0",
            ],
        ),
        (
            lambda s: _group(s, "a", networkName="gone"),
            [f"{A}: its network default:gone does not exist"],
        ),
        (
            lambda s: _group(s, "a", groupName="z"),
            [
                f"{A}: holds endpoint group default:z, whose key is another",
                f"{A}: its group tag 1 is not held by it",
                f"{keys.group_tag(1)}: held by endpoint group default:a, which does not exist",
                f"{R1}: its fromEndpointGroup names endpoint group default:a, which does not exist",
                f"{R2}: its toEndpointGroup names endpoint group default:a, which does not exist",
            ],
        ),
        (
            lambda s: s.pop(P),
            [
                f"{B}: its policy p does not exist",
                f"{R1}: its policy default:p does not exist",
                f"{R2}: its policy default:p does not exist",
            ],
        ),
        (
            lambda s: (s.pop(A), s.pop(keys.group_tag(1))),
            [
                f"{R1}: its fromEndpointGroup names endpoint group default:a, which does not exist",
                f"{R2}: its toEndpointGroup names endpoint group default:a, which does not exist",
            ],
        ),
        (
            lambda s: s.__setitem__(R1, s[R1].replace(b'"fromNetwork":"n"', b'"fromNetwork":"m"')),
            [f"{R1}: its fromNetwork names network default:m, which does not exist"],
        ),
        (
            lambda s: s.__setitem__(keys.rule("default", "p", "9"), s[R1]),
            [f"{keys.rule('default', 'p', '9')}: holds rule default:p:1, whose key is another"],
        ),
        (
            lambda s: s.__setitem__(keys.policy("default", "q"), s[P]),
            [f"{keys.policy('default', 'q')}: holds policy default:p, whose key is another"],
        ),
        (lambda s: s.__setitem__(R1, b"[]"), [f"{R1}: does not decode: Rule: not a JSON object"]),
    ],
)
def test_each_broken_policy_link_is_named(
    pscan: dict[str, bytes], brk: Any, expected: list[str]
) -> None:
    brk(pscan)
    assert [str(p) for p in check_state(pscan)] == sorted(expected)


# --- tenants and their tags ---


@pytest.fixture
def tscan(state: ClusterState) -> dict[str, bytes]:
    """The default tenant (tag 1) and tenant blue (tag 2)."""
    state.tenants.put(Tenant(tenantName="blue"))
    scan = {kv.key: kv.value for kv in state.store.range(keys.ROOT).kvs}
    assert check_state(scan) == []
    assert (scan[keys.tenant_tag(1)], scan[keys.tenant_tag(2)]) == (b"default", b"blue")
    return scan


def _tenant(scan: dict[str, bytes], name: str, **changes: object) -> None:
    data = json.loads(scan[keys.tenant(name)])
    for k, v in changes.items():
        if k == "tag":
            data["tag"] = v
        else:
            data["config"][k] = v
    scan[keys.tenant(name)] = json.dumps(data).encode()


D, BLUE = keys.tenant("default"), keys.tenant("blue")


@pytest.mark.parametrize(
    ("brk", "expected"),
    [
        (lambda s: s.pop(keys.tenant_tag(1)), [f"{D}: its tenant tag 1 is not held by it"]),
        (
            lambda s: _tenant(s, "blue", tag=1),  # two tenants, one tag
            [
                f"{BLUE}: its tenant tag 1 is not held by it",
                f"{keys.tenant_tag(2)}: held by tenant blue, whose tag is 1",
            ],
        ),
        (
            lambda s: s.__setitem__(keys.tenant_tag(9), b"gone"),
            [f"{keys.tenant_tag(9)}: held by tenant gone, which does not exist"],
        ),
        (
            lambda s: s.__setitem__(keys.TENANT_TAGS + "0", b"blue"),
            [f"{keys.TENANT_TAGS}0: '0' is not a tenant tag"],
        ),
        (
            lambda s: s.__setitem__(keys.TENANT_TAGS + str(2**14), b"blue"),
            [f"{keys.TENANT_TAGS}{2**14}: '{2**14}' is not a tenant tag"],
        ),
        (
            # as an earlier master wrote it: no tag
            lambda s: s.__setitem__(BLUE, b'{"config":{"tenantName":"blue"}}'),
            [
                f"{BLUE}: has no tenant tag (the master gives it one when it starts)",
                f"{keys.tenant_tag(2)}: held by tenant blue, whose tag is 0",
            ],
        ),
        (
            lambda s: _tenant(s, "blue", tenantName="red"),
            [
                f"{BLUE}: holds tenant red, whose key is another",
                f"{BLUE}: its tenant tag 2 is not held by it",
                f"{keys.tenant_tag(2)}: held by tenant blue, which does not exist",
            ],
        ),
        (
            lambda s: s.__setitem__(BLUE, b"[]"),
            [
                f"{BLUE}: does not decode: tenant record: not a JSON object",
                f"{keys.tenant_tag(2)}: held by tenant blue, which does not exist",
            ],
        ),
    ],
)
def test_each_broken_tenant_tag_link_is_named(
    tscan: dict[str, bytes], brk: Any, expected: list[str]
) -> None:
    brk(tscan)
    assert [str(p) for p in check_state(tscan)] == sorted(expected)
