"""Cluster networks mirrored into the local dockerd: the pure plan and the SDK arguments."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

from common.records import NetworkRecord
from plugin.docker_sync import (
    ClusterNetwork,
    DockerNetwork,
    DockerSync,
    cluster_network,
    create_args,
    destroyed_network_of,
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


def destroy_event(name: str, driver: str = "netplugin") -> dict[str, object]:
    return {
        "Type": "network",
        "Action": "destroy",
        "Actor": {"ID": "n" * 64, "Attributes": {"name": name, "type": driver}},
    }


def test_only_our_drivers_destroyed_networks_count() -> None:
    assert destroyed_network_of(destroy_event("web")) == "web"
    assert destroyed_network_of(destroy_event("web", "bridge")) is None
    assert destroyed_network_of({**destroy_event("web"), "Action": "create"}) is None
    assert destroyed_network_of({"Type": "container", "Action": "destroy"}) is None
    assert destroyed_network_of({}) is None


class FakeNetworks:
    """dockerd's networks: what list() shows, and what create() and remove() do."""

    def __init__(self, nets: list[DockerNetwork]) -> None:
        self.nets = {n.id: n for n in nets}
        self.created: list[str] = []
        self.listed = 0

    def list(self) -> list[Any]:
        self.listed += 1
        return [
            SimpleNamespace(
                id=n.id, name=n.name, attrs={"Driver": n.driver, "Options": dict(n.options)}
            )
            for n in self.nets.values()
        ]

    def create(self, name: str, driver: str, options: dict[str, str], **_: Any) -> None:
        nid = f"new{len(self.created)}"
        self.nets[nid] = DockerNetwork(nid, name, driver, options)
        self.created.append(name)


class FakeEvents:
    """dockerd's event stream: yields the queued events, then blocks like a quiet stream."""

    def __init__(self) -> None:
        self.queue: queue.Queue[dict[str, object] | None] = queue.Queue()
        self.filters: list[dict[str, str]] = []

    def events(self, decode: bool, filters: dict[str, str]) -> Any:
        assert decode
        self.filters.append(filters)
        events = self

        class Stream:
            def __iter__(self) -> Iterator[dict[str, object]]:
                while (ev := events.queue.get()) is not None:
                    yield ev

            def close(self) -> None:
                events.queue.put(None)

        return Stream()


def test_a_network_docker_removed_here_is_put_back_when_docker_says_so() -> None:
    """`docker network rm` refused by the cluster: docker drops its copy anyway, and the
    destroy event brings the sync round at once (not at the next periodic pass)."""
    networks = FakeNetworks([mirror(WEB, "a")])
    events = FakeEvents()
    client = SimpleNamespace(networks=networks, events=events.events, close=lambda: None)
    sync = DockerSync(lambda: client, lambda: [WEB], interval=3600, events=lambda: client)
    sync.start()
    try:
        # The stream's start pokes one pass; nothing is missing yet.
        wait(lambda: events.filters == [{"type": "network", "event": "destroy"}])
        wait(lambda: networks.listed == 1)
        del networks.nets["a"]  # what dockerd did, before it sends the event
        events.queue.put(destroy_event("web"))
        wait(lambda: networks.created == ["web"])
    finally:
        sync.stop()


def wait(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
