"""The synthetic desired state that the compile, churn and reconcile figures start from."""

from __future__ import annotations

from datapath.pipeline import DesiredState, EndpointState, NetworkState


def bench_state(endpoints: int = 500, networks: int = 10) -> DesiredState:
    """``endpoints`` endpoints spread over ``networks`` networks, each with a gateway port."""
    nets = [
        NetworkState(
            id=f"t:n{i}",
            segment=100 + i,
            gateway_port=65_000 + i,  # above every endpoint's
            gateway_mac=f"02:4e:50:00:00:{i:02x}",
            gateway_ip=f"10.{i}.0.1",
        )
        for i in range(networks)
    ]
    eps = []
    for j in range(endpoints):
        net, k = j % networks, j // networks
        eps.append(
            EndpointState(
                id=f"e{j}",
                network_id=f"t:n{net}",
                ofport=10 + j,
                mac=f"02:42:0a:{net:02x}:{k >> 8:02x}:{k & 0xFF:02x}",
                ipv4=f"10.{net}.{k >> 8}.{(k & 0xFF) + 2}",
            )
        )
    return DesiredState(networks=nets, endpoints=eps)
