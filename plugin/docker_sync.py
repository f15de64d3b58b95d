"""Cluster networks as docker networks on this host's dockerd, both ways.

Every netplugin network exists in every host's docker, named NAME in the default tenant and
NAME/TENANT elsewhere, so `docker run --net` works on any host whichever host or tool
created it. The agent creates the missing ones through the docker SDK, with `-o` and
`--ipam-opt` naming the cluster network: its driver then joins the existing network and
books from the existing pool instead of making new ones. Docker networks of our driver
whose cluster network is gone are removed. Networks of other drivers are never touched.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from common.models import docker_name
from common.records import NetworkRecord

log = logging.getLogger(__name__)

DRIVER = "netplugin"
MANAGED_LABEL = "io.netplugin.managed"  # on docker networks the agent created


@dataclass(frozen=True)
class ClusterNetwork:
    tenant: str
    name: str
    subnet: str = ""
    gateway: str = ""
    ipv6_subnet: str = ""
    ipv6_gateway: str = ""
    internal: bool = False
    docker_id: str = ""  # the docker network that created it, on the host that did

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.name)

    @property
    def docker_name(self) -> str:
        return docker_name(self.tenant, self.name)

    @property
    def settled(self) -> bool:
        """False while a network made by `docker network create` still has the placeholder
        name its driver gave it (docker tells the name only after CreateNetwork)."""
        return not (self.docker_id and self.name == self.docker_id[:12])


@dataclass(frozen=True)
class DockerNetwork:
    id: str
    name: str
    driver: str
    options: Mapping[str, str]


def cluster_network(record: NetworkRecord) -> ClusterNetwork:
    """A network record of the store (keys.network) as the sync sees it."""
    c = record.config
    return ClusterNetwork(
        tenant=c.tenantName,
        name=c.networkName,
        subnet=c.subnet,
        gateway=c.gateway,
        ipv6_subnet=c.ipv6Subnet,
        ipv6_gateway=c.ipv6Gateway,
        internal=c.internal,
        docker_id=c.dockerNetworkID,
    )


def cluster_key(
    net: DockerNetwork, by_docker_id: Mapping[str, tuple[str, str]]
) -> tuple[str, str] | None:
    """Which cluster network a docker network of our driver stands for, if we can tell."""
    if net.options.get("network"):
        return (net.options.get("tenant") or "default", net.options["network"])
    return by_docker_id.get(net.id)


def plan(
    cluster: Iterable[ClusterNetwork], docker: Iterable[DockerNetwork]
) -> tuple[list[ClusterNetwork], list[DockerNetwork]]:
    """(cluster networks to create in docker, docker networks to remove).

    A docker network of our driver that stands for no cluster network is removed; one we
    cannot map at all (made by hand with our driver, its cluster network deleted) is too.
    """
    nets = {n.key: n for n in cluster}
    by_docker_id = {n.docker_id: n.key for n in nets.values() if n.docker_id}
    ours = [d for d in docker if d.driver == DRIVER]
    present: set[tuple[str, str]] = set()
    remove: list[DockerNetwork] = []
    names = {d.name for d in docker}
    for d in ours:
        key = cluster_key(d, by_docker_id)
        if key is not None and key in nets:
            present.add(key)
        else:
            remove.append(d)
    create = [
        n
        for key, n in sorted(nets.items())
        if key not in present and n.settled and n.docker_name not in names
    ]
    return create, remove


def create_args(net: ClusterNetwork) -> dict[str, Any]:
    """docker SDK networks.create() arguments for a cluster network."""
    from docker.types import IPAMConfig, IPAMPool

    opts = {"tenant": net.tenant, "network": net.name}
    pools = []
    if net.subnet:
        pools.append(IPAMPool(subnet=net.subnet, gateway=net.gateway or None))
    if net.ipv6_subnet:
        pools.append(IPAMPool(subnet=net.ipv6_subnet, gateway=net.ipv6_gateway or None))
    return {
        "name": net.docker_name,
        "driver": DRIVER,
        "options": opts,
        "ipam": IPAMConfig(driver=DRIVER, pool_configs=pools, options=opts),
        "enable_ipv6": bool(net.ipv6_subnet),
        "internal": net.internal,
        "labels": {MANAGED_LABEL: "true"},
        "check_duplicate": True,
    }


def destroyed_network_of(event: Mapping[str, Any], driver: str = DRIVER) -> str | None:
    """The name of the network a docker event says was destroyed, if it was one of ours."""
    if event.get("Type") != "network" or event.get("Action") != "destroy":
        return None
    attrs = (event.get("Actor") or {}).get("Attributes") or {}
    if attrs.get("type") != driver:
        return None
    return str(attrs.get("name") or "")


class DockerSync:
    """Runs plan() against the local dockerd whenever poked, whenever dockerd destroys a
    network of our driver, and every ``interval``.

    Docker removes its own copy of a network even when our DeleteNetwork refuses (libnetwork
    honours only a built-in driver's "forbidden" error), so a `docker network rm` the cluster
    refused (endpoints on other hosts) leaves this host without the network: following
    dockerd's events puts it back as soon as docker is done, instead of at the next pass.
    """

    def __init__(
        self,
        client: Callable[[], Any],
        cluster: Callable[[], list[ClusterNetwork] | None],
        interval: float = 30.0,
        events: Callable[[], Any] | None = None,
    ) -> None:
        self.client = client  # a docker.DockerClient, made on first use
        self.cluster = cluster  # None while the cluster state is not known yet
        self.interval = interval
        # A client for dockerd's event stream (its own: a stream holds its connection).
        self.events = events
        self._poke = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="docker-sync", daemon=True)
        self._follower = threading.Thread(
            target=self._follow_events, name="docker-events", daemon=True
        )
        self._stream: Any = None

    def start(self) -> DockerSync:
        self._thread.start()
        if self.events is not None:
            self._follower.start()
        return self

    def poke(self) -> None:
        self._poke.set()

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def _follow_events(self) -> None:
        assert self.events is not None
        failing = False
        while not self._stop.is_set():
            client = None
            try:
                client = self.events()
                stream = client.events(decode=True, filters={"type": "network", "event": "destroy"})
                self._stream = stream
                if failing:
                    log.info("following dockerd's network events again")
                failing = False
                self.poke()  # whatever happened while we were not following
                for event in stream:
                    if self._stop.is_set():
                        return
                    name = destroyed_network_of(event)
                    if name is not None:
                        log.info("docker network %s was removed here; checking the cluster", name)
                        self.poke()
            except Exception as e:
                if self._stop.is_set():
                    return
                if not failing:
                    log.warning("cannot follow dockerd's network events (%s); retrying", e)
                failing = True
            finally:
                if client is not None:  # each attempt's own client: not left open
                    with contextlib.suppress(Exception):
                        client.close()
            self._stop.wait(2.0)

    def _run(self) -> None:
        failing = False
        while not self._stop.is_set():
            self._poke.wait(self.interval)
            self._poke.clear()
            if self._stop.is_set():
                return
            try:
                self.sync_once()
                if failing:
                    log.info("docker networks in sync with the cluster again")
                failing = False
            except Exception as e:
                if not failing:
                    log.warning("cannot sync docker networks with the cluster (%s); retrying", e)
                failing = True
                self._stop.wait(2.0)
                self._poke.set()

    def sync_once(self) -> tuple[list[str], list[str]]:
        """One pass; returns the docker names created and removed."""
        client = self.client()
        # docker first, the cluster after: a network docker shows has its cluster record
        # already (the driver wrote it in CreateNetwork), so it is never taken for stale.
        docker = [
            DockerNetwork(n.id, n.name, n.attrs.get("Driver", ""), n.attrs.get("Options") or {})
            for n in client.networks.list()
        ]
        cluster = self.cluster()
        if cluster is None:
            return [], []
        create, remove = plan(cluster, docker)
        made, gone = [], []
        for net in create:
            try:
                client.networks.create(**create_args(net))
                made.append(net.docker_name)
                log.info(
                    "docker network %s created for cluster network %s:%s", net.docker_name, *net.key
                )
            except Exception as e:
                log.warning("docker network %s: cannot create it: %s", net.docker_name, e)
        for d in remove:
            try:
                client.networks.get(d.id).remove()
                gone.append(d.name)
                log.info("docker network %s removed: its cluster network is gone", d.name)
            except Exception as e:
                log.warning("docker network %s: cannot remove it: %s", d.name, e)
        return made, gone
