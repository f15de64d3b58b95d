"""The synthetic desired state that the compile, churn and reconcile figures start from."""

from __future__ import annotations

from datapath.pipeline import DesiredState, EndpointState, NetworkState


def bench_state(endpoints: int = 500, networks: int = 10) -> DesiredState:
    """``endpoints`` endpoints spread over ``networks`` networks, each with a gateway port."""
    nets = [
        NetworkState(
            f"t:n{i}",
            100 + i,
            gateway=f"10.{i}.0.1",
            gateway_ofport=65_000 + i,  # above every endpoint's
        )
        for i in range(networks)
    ]
    eps = []
    for j in range(endpoints):
        net, k = j % networks, j // networks
        eps.append(
            EndpointState(
                f"e{j}",
                f"t:n{net}",
                f"02:42:0a:{net:02x}:{k >> 8:02x}:{k & 0xFF:02x}",
                f"10.{net}.{k >> 8}.{(k & 0xFF) + 2}",
                ofport=10 + j,
            )
        )
    return DesiredState(networks=nets, endpoints=eps)
