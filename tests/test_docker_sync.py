"""Cluster networks mirrored into the local dockerd: the pure plan and the SDK arguments."""

from __future__ import annotations

from common.records import NetworkRecord
from plugin.docker_sync import (
    ClusterNetwork,
    DockerNetwork,
    cluster_network,
    create_args,
    plan,
)

WEB = ClusterNetwork("default", "web", "10.1.0.0/24", "10.1.0.1")
DB = ClusterNetwork("blue", "db", "10.2.0.0/24", "10.2.0.1", "fd00:2::/64", "fd00:2::1")
MADE_BY_DOCKER = ClusterNetwork("default", "net1", "10.3.0.0/24", docker_id="f" * 64)
PENDING = ClusterNetwork("default", "e" * 12, "10.4.0.0/24", docker_id="e" * 64)


def mirror(net: ClusterNetwork, nid: str) -> DockerNetwork:
    return DockerNetwork(
        nid, net.docker_name, "netplugin", {"tenant": net.tenant, "network": net.name}
    )


def test_missing_networks_are_created_under_their_docker_names() -> None:
    create, remove = plan([WEB, DB], [])
    assert [n.docker_name for n in create] == ["db/blue", "web"] and remove == []


def test_present_networks_are_left_alone() -> None:
    docker = [mirror(WEB, "a"), DockerNetwork("f" * 64, "net1", "netplugin", {})]
    assert plan([WEB, MADE_BY_DOCKER], docker) == ([], [])


def test_networks_whose_cluster_network_is_gone_are_removed() -> None:
    stale = mirror(ClusterNetwork("default", "old"), "b")
    by_hand = DockerNetwork("c", "mine", "netplugin", {"tenant": "blue"})  # maps to nothing
    create, remove = plan([WEB], [mirror(WEB, "a"), stale, by_hand])
    assert create == [] and remove == [stale, by_hand]


def test_other_drivers_are_never_touched() -> None:
    theirs = [
        DockerNetwork("x", "bridge", "bridge", {}),
        DockerNetwork("y", "web", "overlay", {"network": "web"}),
    ]
    # A name taken by another driver: nothing is created over it, nothing removed.
    assert plan([WEB], theirs) == ([], [])


def test_a_network_still_named_by_its_docker_id_is_not_mirrored_yet() -> None:
    assert not PENDING.settled and MADE_BY_DOCKER.settled
    assert plan([PENDING], []) == ([], [])


def test_create_args_name_the_cluster_network_to_the_driver_and_the_ipam() -> None:
    args = create_args(DB)
    assert args["name"] == "db/blue" and args["driver"] == "netplugin"
    assert args["options"] == {"tenant": "blue", "network": "db"}
    ipam = args["ipam"]
    assert ipam["Driver"] == "netplugin" and ipam["Options"] == {"tenant": "blue", "network": "db"}
    assert [(c["Subnet"], c["Gateway"]) for c in ipam["Config"]] == [
        ("10.2.0.0/24", "10.2.0.1"),
        ("fd00:2::/64", "fd00:2::1"),
    ]
    assert args["enable_ipv6"] is True


def test_cluster_network_from_a_store_record() -> None:
    record = {
        "config": {
            "tenantName": "default",
            "networkName": "net1",
            "subnet": "10.3.0.0/24",
            "dockerNetworkID": "f" * 64,
            "internal": True,
        },
        "pktTag": 7,
    }
    net = cluster_network(NetworkRecord.from_json(record))
    assert net.key == ("default", "net1") and net.internal and net.docker_id == "f" * 64
