"""Cluster networks and endpoint groups as docker networks on this host's dockerd, both ways.

Every netplugin network and every endpoint group exists in every host's docker, named NAME
in the default tenant and NAME/TENANT elsewhere, so `docker run --net` works on any host
whichever host or tool created it. The agent creates the missing ones through the docker
SDK, with `-o` and `--ipam-opt` naming the cluster network (and the group): its driver then
joins the existing network and books from the existing pool instead of making new ones. A
group's docker network is on its network's subnet. Docker networks of our driver whose
cluster network or group is gone are removed. Networks of other drivers are never touched,
and a name already taken in docker is never taken over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from common import keys
from common.loop import Reconciler
from common.models import EndpointGroup, docker_name
from common.records import NetworkRecord, decode_config
from store import Store

from .options import MIRROR_OPTION

log = logging.getLogger(__name__)

DRIVER = "netplugin"
MANAGED_LABEL = "io.netplugin.managed"  # on docker networks the agent created


Key = tuple[str, str, str]  # (tenant, network, group): group "" for the network itself


@dataclass(frozen=True)
class ClusterNetwork:
    """A cluster network, or an endpoint group (``group``) on network ``name``, as one docker
    network."""

    tenant: str
    name: str
    subnet: str = ""
    gateway: str = ""
    ipv6_subnet: str = ""
    ipv6_gateway: str = ""
    internal: bool = False
    docker_id: str = ""  # the docker network that created it, on the host that did
    group: str = ""

    @property
    def key(self) -> Key:
        return (self.tenant, self.name, self.group)

    @property
    def docker_name(self) -> str:
        return docker_name(self.tenant, self.group or self.name)

    @property
    def what(self) -> str:
        """How log lines name it."""
        if self.group:
            return f"endpoint group {self.tenant}:{self.group} (network {self.name})"
        return f"network {self.tenant}:{self.name}"

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


def cluster_group(group: EndpointGroup, network: NetworkRecord) -> ClusterNetwork:
    """An endpoint group of the store (keys.group), with the record of its network: a docker
    network on the network's subnets."""
    return replace(cluster_network(network), docker_id="", group=group.groupName)


def cluster_networks_in(store: Store) -> list[ClusterNetwork]:
    """Every cluster network and endpoint group in the store, read now.

    A record that does not decode fails the whole read: the sync must not take its network
    or group for gone and remove it from docker. Groups are read first: a network is not
    deleted while a group is on it, so each group read finds its network in the read after.
    (A group whose network is missing all the same is left out.)"""
    groups = [decode_config(EndpointGroup, kv.value) for kv in store.range(keys.GROUPS).kvs]
    networks = {
        (r.config.tenantName, r.config.networkName): r
        for r in (NetworkRecord.decode(kv.value) for kv in store.range(keys.NETWORKS).kvs)
    }
    return [cluster_network(r) for r in networks.values()] + [
        cluster_group(g, networks[(g.tenantName, g.networkName)])
        for g in groups
        if (g.tenantName, g.networkName) in networks
    ]


def cluster_key(net: DockerNetwork, by_docker_id: Mapping[str, Key]) -> Key | None:
    """Which cluster network or group a docker network of our driver stands for, if we can
    tell (the -o options the agent or a user gave it)."""
    if net.options.get("network"):
        return (
            net.options.get("tenant") or "default",
            net.options["network"],
            net.options.get("group") or "",
        )
    return by_docker_id.get(net.id)


class Plan(NamedTuple):
    create: list[ClusterNetwork]  # to create in docker
    remove: list[DockerNetwork]  # to remove from docker
    # Not created because their docker name is taken, with what holds it.
    blocked: list[tuple[ClusterNetwork, str]]


def plan(
    cluster: Iterable[ClusterNetwork], docker: Iterable[DockerNetwork], driver: str = DRIVER
) -> Plan:
    """What makes this docker mirror the cluster's networks and groups (``driver``: the
    name dockerd knows us by, plugin.plugin_name).

    A docker network of our driver that stands for no cluster network or group is removed;
    one we cannot map at all (made by hand with our driver, its cluster network deleted) is
    too. A docker name already taken, by any driver's network, is left to its holder: the
    cluster network or group that wants it is blocked. So is a group with the docker name of
    a network of its tenant (one docker name, two cluster objects): the network keeps it.
    """
    nets = {n.key: n for n in cluster}
    by_docker_id = {n.docker_id: n.key for n in nets.values() if n.docker_id}
    present: set[Key] = set()
    remove: list[DockerNetwork] = []
    holders: dict[str, str] = {}
    for d in docker:
        key = cluster_key(d, by_docker_id) if d.driver == driver else None
        if d.driver != driver:
            holders[d.name] = f"docker network {d.name} of driver {d.driver or '?'}"
        elif key is not None and key in nets:
            present.add(key)
            holders[d.name] = f"docker network {d.name} of {nets[key].what}"
        else:
            remove.append(d)
    create: list[ClusterNetwork] = []
    blocked: list[tuple[ClusterNetwork, str]] = []
    for n in sorted(nets.values(), key=lambda n: (n.group != "", n.key)):  # networks first
        if n.key in present or not n.settled:
            continue
        holder = holders.get(n.docker_name)
        if holder is not None:
            blocked.append((n, holder))
            continue
        holders[n.docker_name] = n.what
        create.append(n)
    return Plan(create, remove, blocked)


def create_args(net: ClusterNetwork, driver: str = DRIVER) -> dict[str, Any]:
    """docker SDK networks.create() arguments for a cluster network or group."""
    from docker.types import IPAMConfig, IPAMPool

    opts = {"tenant": net.tenant, "network": net.name}
    if net.group:
        opts["group"] = net.group
    pools = []
    if net.subnet:
        pools.append(IPAMPool(subnet=net.subnet, gateway=net.gateway or None))
    if net.ipv6_subnet:
        pools.append(IPAMPool(subnet=net.ipv6_subnet, gateway=net.ipv6_gateway or None))
    return {
        "name": net.docker_name,
        "driver": driver,
        "options": opts,
        "ipam": IPAMConfig(driver=driver, pool_configs=pools, options={**opts, MIRROR_OPTION: "1"}),
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


def created_network_of(event: Mapping[str, Any], driver: str = DRIVER) -> tuple[str, str] | None:
    """(ID, name) of the network a docker event says was created, if it was one of ours."""
    if event.get("Type") != "network" or event.get("Action") != "create":
        return None
    actor = event.get("Actor") or {}
    attrs = actor.get("Attributes") or {}
    if attrs.get("type") != driver or not actor.get("ID") or not attrs.get("name"):
        return None
    return str(actor["ID"]), str(attrs["name"])


class DockerSync(Reconciler):
    """Runs plan() against the local dockerd whenever poked, whenever dockerd destroys a
    network of our driver, and every ``interval``; tells ``created`` of every network of our
    driver dockerd creates, with its name (the driver's CreateNetwork never learns it).
    dockerd's events come to on_event (plugin.docker_events).

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
        driver: Callable[[], str] = lambda: DRIVER,
        created: Callable[[str, str], None] | None = None,
    ) -> None:
        self.client = client  # a docker.DockerClient, made on first use
        self.cluster = cluster  # None while the cluster state is not known yet
        # Our driver name (plugin.plugin_name.DriverName): may raise until dockerd answers.
        self.driver = driver
        # (network ID, docker name) of each network of our driver docker creates, as dockerd
        # announces it: while it answers `docker network create`, before its client can act.
        self.created = created
        self._blocked: set[tuple[Key, str]] = set()  # logged already
        super().__init__(
            "docker network sync", self._pass, interval=interval, expected=(Exception,)
        )

    def _pass(self) -> None:
        self.sync_once()

    def on_event(self, event: Mapping[str, Any] | None) -> None:
        """One of dockerd's events (None: its stream restarted, events may have been missed)."""
        if event is None:
            self.poke()
            return
        driver = self.driver()
        made = created_network_of(event, driver)
        if made is not None and self.created is not None:
            self.created(*made)
        name = destroyed_network_of(event, driver)
        if name is not None:
            log.info("docker network %s was removed here; checking the cluster", name)
            self.poke()

    def sync_once(self) -> tuple[list[str], list[str]]:
        """One pass; returns the docker names created and removed."""
        client = self.client()
        driver = self.driver()
        # docker first, the cluster after: a network docker shows has its cluster record
        # already (the driver wrote it in CreateNetwork), so it is never taken for stale.
        docker = [
            DockerNetwork(n.id, n.name, n.attrs.get("Driver", ""), n.attrs.get("Options") or {})
            for n in client.networks.list()
        ]
        cluster = self.cluster()
        if cluster is None:
            return [], []
        create, remove, blocked = plan(cluster, docker, driver)
        self._log_blocked(blocked)
        made, gone = [], []
        # Removals first: a name they free may be the one a creation wants (a group deleted
        # and a network of its name made).
        for d in remove:
            try:
                client.networks.get(d.id).remove()
                gone.append(d.name)
                log.info("docker network %s removed: its cluster network or group is gone", d.name)
            except Exception as e:
                log.warning("docker network %s: cannot remove it: %s", d.name, e)
        for net in create:
            try:
                client.networks.create(**create_args(net, driver))
                made.append(net.docker_name)
                log.info("docker network %s created for %s", net.docker_name, net.what)
            except Exception as e:
                log.warning("docker network %s: cannot create it: %s", net.docker_name, e)
        return made, gone

    def _log_blocked(self, blocked: list[tuple[ClusterNetwork, str]]) -> None:
        """Each name clash once, for as long as it lasts (the sync runs every few seconds)."""
        now = {(n.key, holder) for n, holder in blocked}
        for n, holder in blocked:
            if (n.key, holder) not in self._blocked:
                log.warning(
                    "%s is not in docker on this host: its name %s is taken by %s",
                    n.what,
                    n.docker_name,
                    holder,
                )
        self._blocked = now
