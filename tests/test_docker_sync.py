"""Cluster networks and endpoint groups mirrored into the local dockerd: the pure plan, the
SDK arguments, and what the sync reads from the store."""

from __future__ import annotations

import json
import logging
import queue
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common import keys
from common.models import EndpointGroup, Network
from common.records import NetworkRecord, encode_config
from plugin.docker_events import FILTERS, DockerEvents
from plugin.docker_sync import (
    ClusterNetwork,
    DockerNetwork,
    DockerSync,
    Plan,
    cluster_group,
    cluster_network,
    cluster_networks_in,
    create_args,
    created_network_of,
    destroyed_network_of,
    plan,
)
from plugin.options import MIRROR_OPTION
from store.embedded import EmbeddedStore
from testbed.wait import wait_for

WEB = ClusterNetwork("default", "web", "10.1.0.0/24", "10.1.0.1")
DB = ClusterNetwork("blue", "db", "10.2.0.0/24", "10.2.0.1", "fd00:2::/64", "fd00:2::1")
MADE_BY_DOCKER = ClusterNetwork("default", "net1", "10.3.0.0/24", docker_id="f" * 64)
PENDING = ClusterNetwork("default", "e" * 12, "10.4.0.0/24", docker_id="e" * 64)


# Endpoint groups: front (with the docker name of nothing else) on web, and one of blue.
FRONT = ClusterNetwork("default", "web", "10.1.0.0/24", "10.1.0.1", group="front")
BACK = ClusterNetwork("blue", "db", "10.2.0.0/24", "10.2.0.1", group="back")
NOTHING = Plan([], [], [])


def mirror(net: ClusterNetwork, nid: str, name: str = "") -> DockerNetwork:
    """The docker network the sync (or a user with the same -o options) made for ``net``."""
    opts = {"tenant": net.tenant, "network": net.name}
    if net.group:
        opts["group"] = net.group
    return DockerNetwork(nid, name or net.docker_name, "netplugin", opts)


def test_missing_networks_are_created_under_their_docker_names() -> None:
    create, remove, blocked = plan([WEB, DB], [])
    assert [n.docker_name for n in create] == ["db/blue", "web"] and remove == blocked == []


def test_present_networks_are_left_alone() -> None:
    docker = [mirror(WEB, "a"), DockerNetwork("f" * 64, "net1", "netplugin", {})]
    assert plan([WEB, MADE_BY_DOCKER], docker) == NOTHING


def test_networks_whose_cluster_network_is_gone_are_removed() -> None:
    stale = mirror(ClusterNetwork("default", "old"), "b")
    by_hand = DockerNetwork("c", "mine", "netplugin", {"tenant": "blue"})  # maps to nothing
    create, remove, _ = plan([WEB], [mirror(WEB, "a"), stale, by_hand])
    assert create == [] and remove == [stale, by_hand]


def test_other_drivers_are_never_touched() -> None:
    theirs = [
        DockerNetwork("x", "bridge", "bridge", {}),
        DockerNetwork("y", "web", "overlay", {"network": "web"}),
    ]
    # A name taken by another driver: nothing is created over it, nothing removed.
    assert plan([WEB], theirs) == Plan([], [], [(WEB, "docker network web of driver overlay")])


def test_a_network_still_named_by_its_docker_id_is_not_mirrored_yet() -> None:
    assert not PENDING.settled and MADE_BY_DOCKER.settled
    assert plan([PENDING], []) == NOTHING


# --- endpoint groups ---


def test_groups_are_created_under_their_docker_names_on_their_networks_subnet() -> None:
    create, remove, blocked = plan([WEB, FRONT, BACK], [mirror(WEB, "a")])
    assert [(n.docker_name, n.key) for n in create] == [
        ("back/blue", ("blue", "db", "back")),
        ("front", ("default", "web", "front")),
    ]
    assert remove == blocked == []
    assert plan([WEB, FRONT], [mirror(WEB, "a"), mirror(FRONT, "b")]) == NOTHING


def test_a_groups_docker_network_goes_with_the_group() -> None:
    docker = [mirror(WEB, "a"), mirror(FRONT, "b")]
    assert plan([WEB], docker) == Plan([], [docker[1]], [])
    # ... and with its network, or when the group moved to another network.
    moved = ClusterNetwork("default", "db", "10.2.0.0/24", group="front")
    assert plan([moved], docker) == Plan([moved], docker, [])


def test_a_users_own_docker_network_of_a_group_is_its_mirror() -> None:
    """`docker network create -d netplugin -o network=web -o group=front mine`: the same
    key as the agent's, so no second docker network `front` appears."""
    mine = mirror(FRONT, "m", name="mine")
    assert plan([WEB, FRONT], [mirror(WEB, "a"), mine]) == NOTHING
    # One naming a group the cluster does not have (any more) goes.
    gone = DockerNetwork("g", "old", "netplugin", {"network": "web", "group": "old"})
    assert plan([WEB, FRONT], [mirror(WEB, "a"), mine, gone]).remove == [gone]


def test_a_group_and_a_network_of_one_docker_name_never_clobber_each_other() -> None:
    """Both would be docker network `web`: whichever holds the name keeps it; with neither
    in docker yet, the network gets it."""
    group_web = ClusterNetwork("default", "pn", "10.9.0.0/24", group="web")
    assert plan([WEB, group_web], []) == Plan([WEB], [], [(group_web, "network default:web")])
    assert plan([WEB, group_web], [mirror(WEB, "a")]) == Plan(
        [], [], [(group_web, "docker network web of network default:web")]
    )
    held = mirror(group_web, "g")
    assert plan([WEB, group_web], [held]) == Plan(
        [], [], [(WEB, "docker network web of endpoint group default:web (network pn)")]
    )
    # In other tenants the names differ: no clash.
    other = ClusterNetwork("blue", "pn", "10.9.0.0/24", group="web")
    assert [n.docker_name for n in plan([WEB, other], []).create] == ["web", "web/blue"]


def test_a_group_gets_a_name_freed_in_the_same_pass() -> None:
    """A network deleted and a group of its name made: the old docker network goes first."""
    group_web = ClusterNetwork("default", "pn", "10.9.0.0/24", group="web")
    stale = mirror(WEB, "a")
    assert plan([group_web], [stale]) == Plan([group_web], [stale], [])


def test_create_args_of_a_group() -> None:
    args = create_args(BACK)
    opts = {"tenant": "blue", "network": "db", "group": "back"}
    assert args["name"] == "back/blue" and args["options"] == opts
    assert args["ipam"]["Options"] == {**opts, MIRROR_OPTION: "1"}  # its pool: no grant
    assert [(c["Subnet"], c["Gateway"]) for c in args["ipam"]["Config"]] == [
        ("10.2.0.0/24", "10.2.0.1")
    ]


def test_create_args_name_the_cluster_network_to_the_driver_and_the_ipam() -> None:
    args = create_args(DB)
    assert args["name"] == "db/blue" and args["driver"] == "netplugin"
    assert args["options"] == {"tenant": "blue", "network": "db"}
    ipam = args["ipam"]
    assert ipam["Driver"] == "netplugin"
    assert ipam["Options"] == {"tenant": "blue", "network": "db", MIRROR_OPTION: "1"}
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
    net = cluster_network(NetworkRecord.model_validate(record))
    assert net.key == ("default", "net1", "") and net.internal and net.docker_id == "f" * 64
    group = EndpointGroup(groupName="g", networkName="net1")
    assert cluster_group(group, NetworkRecord.model_validate(record)) == ClusterNetwork(
        "default", "net1", "10.3.0.0/24", internal=True, group="g"
    )


def test_the_sync_reads_networks_and_groups_from_the_store(tmp_path: Path) -> None:
    with EmbeddedStore(str(tmp_path / "state.db")) as store:
        web = Network(networkName="web", subnet="10.1.0.0/24", gateway="10.1.0.1")
        store.put(
            keys.network("default", "web"),
            NetworkRecord(config=web, encap="vxlan", pkt_tag=5).encode(),
        )
        front = EndpointGroup(groupName="front", networkName="web")
        store.put(keys.group("default", "front"), encode_config(front))
        # A group record with more than its config (a tag) reads the same.
        tagged = {"config": EndpointGroup(groupName="tagged", networkName="web").dump(), "tag": 7}
        store.put(keys.group("default", "tagged"), json.dumps(tagged).encode())
        # A group whose network is not there (being deleted): not mirrored until it is.
        orphan = EndpointGroup(groupName="orphan", networkName="gone")
        store.put(keys.group("default", "orphan"), encode_config(orphan))
        assert sorted(n.docker_name for n in cluster_networks_in(store)) == [
            "front",
            "tagged",
            "web",
        ]
        store.put(keys.group("default", "bad"), b"{not json")
        with pytest.raises(ValueError):
            cluster_networks_in(store)  # never "every group is gone"


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


def create_event(name: str, driver: str = "netplugin", nid: str = "n" * 64) -> dict[str, object]:
    return {
        "Type": "network",
        "Action": "create",
        "Actor": {"ID": nid, "Attributes": {"name": name, "type": driver}},
    }


def test_only_our_drivers_created_networks_count_with_their_id_and_name() -> None:
    assert created_network_of(create_event("web")) == ("n" * 64, "web")
    assert created_network_of(create_event("web", "bridge")) is None
    assert created_network_of(destroy_event("web")) is None
    assert created_network_of({**create_event("web"), "Actor": {"ID": "n" * 64}}) is None
    assert created_network_of({}) is None
    name = "reg:5000/netplugin:2.0"
    assert created_network_of(create_event("web", name), name) == ("n" * 64, "web")


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
    sync = DockerSync(lambda: client, lambda: [WEB], interval=3600)
    stream = DockerEvents(lambda: client)
    stream.subscribe(sync.on_event)
    sync.start()
    stream.start()
    try:
        # The stream's start pokes one pass; nothing is missing yet.
        wait_for(lambda: events.filters == [FILTERS], 5, "the network events watched")
        wait_for(lambda: networks.listed == 1, 5, "the networks listed once")
        del networks.nets["a"]  # what dockerd did, before it sends the event
        events.queue.put(destroy_event("web"))
        wait_for(lambda: networks.created == ["web"], 5, "web created")
    finally:
        stream.stop()
        sync.stop()


def test_a_network_docker_creates_is_told_with_its_name_as_docker_announces_it() -> None:
    """Issue 22: the name `docker network create` gave reaches the driver from dockerd's
    create event (sent as dockerd answers the client), not from a lookup made too early."""
    events = FakeEvents()
    client = SimpleNamespace(networks=FakeNetworks([]), events=events.events, close=lambda: None)
    told: queue.Queue[tuple[str, str]] = queue.Queue()
    sync = DockerSync(
        lambda: client,
        lambda: [],
        interval=3600,
        created=lambda nid, name: told.put((nid, name)),
    )
    # One stream for every user: the container reporter is told of the same events.
    seen: queue.Queue[object] = queue.Queue()
    stream = DockerEvents(lambda: client)
    stream.subscribe(sync.on_event)
    stream.subscribe(seen.put)
    stream.start()
    try:
        events.queue.put(create_event("other", "bridge", "b" * 64))  # not ours
        events.queue.put(create_event("frontend", nid="f" * 64))
        assert told.get(timeout=5) == ("f" * 64, "frontend")
        assert told.empty()
        assert [seen.get(timeout=5) for _ in range(3)] == [
            None,  # the stream started: what came before is unknown
            create_event("other", "bridge", "b" * 64),
            create_event("frontend", nid="f" * 64),
        ]
    finally:
        stream.stop()


def test_a_name_clash_is_logged_once_while_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    group_web = ClusterNetwork("default", "pn", "10.9.0.0/24", group="web")
    networks = FakeNetworks([mirror(WEB, "a")])
    cluster = [WEB, group_web]
    sync = DockerSync(lambda: SimpleNamespace(networks=networks), lambda: cluster)
    caplog.set_level(logging.WARNING, logger="plugin.docker_sync")
    for _ in range(3):
        assert sync.sync_once() == ([], [])
    clash = [r.getMessage() for r in caplog.records]
    assert clash == [
        "endpoint group default:web (network pn) is not in docker on this host: its name web "
        "is taken by docker network web of network default:web"
    ]
    cluster = [WEB]
    sync.sync_once()
    cluster = [WEB, group_web]
    sync.sync_once()  # a new clash: logged again
    assert len(caplog.records) == 2


def test_a_managed_plugin_compares_and_creates_under_its_full_name() -> None:
    """Docker records a managed plugin's networks as NAME:TAG: the socket plugin's name
    would take every one of them for another driver's."""
    name = "reg:5000/netplugin:2.0"
    ours = DockerNetwork("a", "web", name, {"tenant": "default", "network": "web"})
    stale = DockerNetwork("b", "old", name, {"tenant": "default", "network": "old"})
    create, remove, blocked = plan([WEB, DB], [ours, stale], driver=name)
    assert [n.docker_name for n in create] == ["db/blue"] and remove == [stale] and not blocked
    args = create_args(DB, name)
    assert args["driver"] == args["ipam"]["Driver"] == name
    assert destroyed_network_of(destroy_event("web", name), name) == "web"
    assert destroyed_network_of(destroy_event("web"), name) is None


def test_the_event_stream_is_followed_again_when_it_ends() -> None:
    """dockerd restarting ends the stream: it is followed again, and each user hears that
    events may have been missed (None) each time."""
    events = FakeEvents()
    events.queue.put(None)  # the first stream ends at once
    client = SimpleNamespace(events=events.events, close=lambda: None)
    seen: queue.Queue[object] = queue.Queue()
    stream = DockerEvents(lambda: client)
    stream.subscribe(seen.put)
    stream.start()
    try:
        assert [seen.get(timeout=5) for _ in range(2)] == [None, None]
        assert len(events.filters) == 2
    finally:
        stream.stop()
