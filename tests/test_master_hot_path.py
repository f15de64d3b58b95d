"""The allocation hot path: create_endpoint costs one store round trip when nothing moved."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from common.models import EndpointGroup, EndpointRequest, Network
from master.service import ClusterState


def count_calls(state: ClusterState) -> Counter[str]:
    calls: Counter[str] = Counter()
    for name in ("get", "range", "txn"):
        real = getattr(state.store, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kw)

        setattr(state.store, name, counted)
    return calls


@pytest.mark.parametrize("group", ["", "g"])
def test_one_round_trip_per_endpoint(state: ClusterState, group: str) -> None:
    state.put_network(Network(networkName="n", subnet="10.1.0.0/24", ipv6Subnet="fd00:1::/64"))
    state.put_group(EndpointGroup(groupName="g", networkName="n", ipPool="10.1.0.10-10.1.0.99"))
    state.create_endpoint(EndpointRequest(endpointID="warm", networkName="n", groupName=group))
    calls = count_calls(state)
    for i in range(5):
        ep, created = state.create_endpoint(
            EndpointRequest(endpointID=f"e{i}", networkName="n", groupName=group)
        )
        assert created and ep.ipAddress and ep.ipv6Address
    assert calls == Counter(txn=5)


def test_a_moved_network_is_read_again(state: ClusterState) -> None:
    state.put_network(Network(networkName="n", subnet="10.1.0.0/24"))
    state.create_endpoint(EndpointRequest(endpointID="warm", networkName="n"))
    state.put_network(Network(networkName="n", subnet="10.1.0.0/24", nwType="infra"))
    calls = count_calls(state)
    ep, _ = state.create_endpoint(EndpointRequest(endpointID="e", networkName="n"))
    assert ep.ipAddress.startswith("10.1.0.")
    assert calls["txn"] == 2 and calls["get"] >= 1  # the stale try, then fresh reads
