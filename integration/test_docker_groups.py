"""Endpoint groups in docker, end to end on one host: the real docker CLI, dockerd, Open
vSwitch, netmaster, netplugin and netctl.

Every endpoint group is a docker network (GROUP, or GROUP/TENANT) made and removed by the
agent's docker sync; a container on it is an endpoint of the group, on its network, with
its address from the group's ip-pool.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
import requests

from testbed.host import CREATE_NETWORK
from testbed.master import MasterProcess
from testbed.plugin import PluginProcess
from testbed.site import stack, stack_up  # noqa: F401 (fixtures)
from testbed.wait import wait_for

from .test_docker_single_host import BIN, IMAGE, RUN, ip_of, ping, sh

# A group's docker network appears when the docker sync next runs: at once when something
# it watches changes, else at its periodic pass (30 s).
SYNC = 45.0


@dataclass
class Made:
    """What one test made: removed after it, containers first, whatever state it left."""

    master: MasterProcess
    containers: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    docker_networks: list[str] = field(default_factory=list)  # made by the test itself
    endpoints: list[str] = field(default_factory=list)  # made through the REST API

    def netctl(self, *args: str, check: bool = True) -> str:
        res = sh(str(BIN / "netctl"), "--netmaster", self.master.url, *args, check=check)
        return res.stdout + res.stderr

    def names(self, kind: str, name_field: str) -> list[str]:
        """The names of the master's objects of a kind (REST plural)."""
        objects = requests.get(f"{self.master.url}/api/v1/{kind}", timeout=10).json()
        return [o[name_field] for o in objects]

    def network(self, subnet: str) -> str:
        name = f"pn-{uuid.uuid4().hex[:6]}"
        self.networks.append(name)
        self.netctl("net", "create", "-s", subnet, name)
        return name

    def group(self, network: str, prefix: str, *extra: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.groups.append(name)
        self.netctl("group", "create", *extra, network, name)
        return name

    def run(self, net: str) -> str:
        name = f"c-{uuid.uuid4().hex[:6]}"
        self.containers.append(name)
        sh(*RUN, "--name", name, "--net", net, IMAGE, "sleep", "600")
        return name

    def cleanup(self) -> None:
        for c in self.containers:
            sh("docker", "rm", "-f", c, check=False)
        for e in self.endpoints:
            requests.delete(f"{self.master.url}/api/v1/alloc/endpoints/{e}", timeout=10)
        for n in self.docker_networks:
            sh("docker", "network", "rm", n, check=False)
        for g in self.groups:
            self.netctl("group", "rm", g, check=False)
        for n in self.networks:
            self.netctl("net", "rm", n, check=False)
        # The sync would remove their docker networks at its next pass; do it now.
        for n in self.groups + self.networks:
            if exists(n):
                sh("docker", "network", "rm", n, check=False)


@pytest.fixture
def made(stack: tuple[MasterProcess, PluginProcess]) -> Iterator[Made]:  # noqa: F811
    m = Made(stack[0])
    try:
        yield m
    finally:
        m.cleanup()


def exists(docker_network: str) -> bool:
    return sh("docker", "network", "inspect", docker_network, check=False).returncode == 0


def docker_id(docker_network: str) -> str:
    return sh("docker", "network", "inspect", "-f", "{{.Id}}", docker_network).stdout.strip()


def docker_options(docker_network: str) -> dict[str, str]:
    return dict(
        json.loads(
            sh("docker", "network", "inspect", "-f", "{{json .Options}}", docker_network).stdout
        )
    )


def endpoint_of(master: MasterProcess, container: str) -> dict[str, str]:
    ip = ip_of(container)
    eps = requests.get(f"{master.url}/api/v1/endpoints", timeout=5).json()
    return next(e for e in eps if e["ipAddress"] == ip)


def last_octet(ip: str) -> int:
    return int(ip.rsplit(".", 1)[1])


def test_groups_are_docker_networks_whose_containers_are_their_endpoints(made: Made) -> None:
    net = made.network("10.91.0.0/24")
    web = made.group(net, "web", "-r", "10.91.0.100-10.91.0.120")
    app = made.group(net, "app")
    for name in (net, web, app):
        wait_for(lambda n=name: exists(n), SYNC, f"docker network {name} appears")
    assert docker_options(web) == {"tenant": "default", "network": net, "group": web}

    a, b, c = made.run(web), made.run(app), made.run(net)
    assert ip_of(a).startswith("10.91.0.") and 100 <= last_octet(ip_of(a)) <= 120
    assert ip_of(b).startswith("10.91.0.") and ip_of(c).startswith("10.91.0.")
    for container, group in ((a, web), (b, app), (c, "")):
        ep = endpoint_of(made.master, container)
        assert (ep["networkName"], ep["groupName"]) == (net, group), ep
    # Groups of one network share its segment: no policy, so they talk to each other, to
    # the network's containers outside any group, and to the gateway.
    assert ping(a, ip_of(b)) and ping(b, ip_of(a))
    assert ping(a, ip_of(c)) and ping(c, ip_of(b))
    assert ping(a, "10.91.0.1")

    # docker refuses to remove a network with a container on it: the group stays.
    res = sh("docker", "network", "rm", web, check=False)
    assert res.returncode != 0 and exists(web)
    # netctl refuses to delete a group with endpoints.
    out = made.netctl("group", "rm", web, check=False)
    assert f"endpoint group default:{web}: it still has 1 endpoint(s)" in out, out

    # Without its container, `netctl group rm` removes the group's docker network, and only
    # that: the network and the other group keep theirs, and their containers still talk.
    sh("docker", "rm", "-f", a)
    made.netctl("group", "rm", web)
    wait_for(lambda: not exists(web), SYNC, f"docker network {web} goes with its group")
    assert exists(net) and exists(app)
    assert ping(b, ip_of(c)) and ping(b, "10.91.0.1")


def test_docker_network_rm_of_a_group_deletes_the_group_or_is_undone(made: Made) -> None:
    net = made.network("10.92.0.0/24")
    web = made.group(net, "web")
    wait_for(lambda: exists(web), SYNC, f"docker network {web} appears")
    # An endpoint of the group on another host (made through the master's allocation API,
    # as that host's agent would): the group cannot go.
    eid = uuid.uuid4().hex
    made.endpoints.append(eid)
    requests.post(
        f"{made.master.url}/api/v1/alloc/endpoints",
        json={"endpointID": eid, "networkName": net, "groupName": web, "host": "elsewhere"},
        timeout=10,
    ).raise_for_status()
    before = (docker_id(web), docker_options(web))
    # The driver's refusal (409) does not stop docker: libnetwork removes its copy whatever
    # a remote driver answers, and says nothing. The sync, told by dockerd's event, puts it
    # back at once.
    sh("docker", "network", "rm", web)
    wait_for(lambda: exists(web), 20, f"docker network {web} comes back")
    assert docker_id(web) != before[0] and docker_options(web) == before[1]
    assert web in made.names("endpointGroups", "groupName")

    # Without endpoints, `docker network rm` deletes the group; its network stays.
    made.endpoints.remove(eid)
    requests.delete(
        f"{made.master.url}/api/v1/alloc/endpoints/{eid}", timeout=10
    ).raise_for_status()
    sh("docker", "network", "rm", web)
    assert web not in made.names("endpointGroups", "groupName")
    assert net in made.names("networks", "networkName") and exists(net)
    c = made.run(net)
    assert ping(c, "10.92.0.1")  # the network's switch state is intact


def test_a_users_own_docker_network_of_a_group(made: Made) -> None:
    """`docker network create -d netplugin -o network=N -o group=G` keeps working."""
    net = made.network("10.93.0.0/24")
    web = made.group(net, "web", "-r", "10.93.0.50-10.93.0.60")
    mine = f"mine-{uuid.uuid4().hex[:6]}"
    opts = ("network=" + net, "group=" + web)
    sh(
        *CREATE_NETWORK,
        *(x for o in opts for x in ("-o", o)),
        *(x for o in opts for x in ("--ipam-opt", o)),
        mine,
    )
    made.docker_networks.append(mine)
    a = made.run(mine)
    assert 50 <= last_octet(ip_of(a)) <= 60
    ep = endpoint_of(made.master, a)
    assert (ep["networkName"], ep["groupName"]) == (net, web)
    # The group's own docker network, whenever the sync made it, is the same segment.
    wait_for(lambda: exists(net), SYNC, f"docker network {net} appears")
    b = made.run(net)
    assert ping(a, ip_of(b)) and ping(b, ip_of(a))

    # A group that does not exist, or is on another network: refused, saying what to type.
    res = sh(
        "docker",
        "network",
        "create",
        "-d",
        "netplugin",
        "-o",
        f"network={net}",
        "-o",
        "group=nosuch",
        f"x-{web}",
        check=False,
    )
    assert res.returncode != 0
    assert "endpoint group default:nosuch does not exist" in res.stderr, res.stderr
    assert f"netctl group create {net} nosuch" in res.stderr, res.stderr
    other = made.network("10.94.0.0/24")
    res = sh(
        "docker",
        "network",
        "create",
        "-d",
        "netplugin",
        "-o",
        f"network={other}",
        "-o",
        f"group={web}",
        f"y-{web}",
        check=False,
    )
    assert res.returncode != 0
    assert f"is on network {net}, not {other}: use -o network={net}" in res.stderr, res.stderr
    assert not exists(f"x-{web}") and not exists(f"y-{web}")


def group_on(docker_network: str) -> str | None:
    """The cluster network a group's docker network names (-o network=), None while absent."""
    res = sh("docker", "network", "inspect", "-f", "{{json .Options}}", docker_network, check=False)
    return json.loads(res.stdout).get("network") if res.returncode == 0 else None


def test_a_renamed_networks_groups_follow_it(made: Made) -> None:
    """Renaming a network carries its groups along (issue 22): the group's docker network
    is made again on the new name, and `docker run --net GROUP` lands on the renamed network
    with the group's ip-pool, beside the network's own containers."""
    net = made.network("10.95.0.0/24")
    web = made.group(net, "web", "-r", "10.95.0.100-10.95.0.120")
    wait_for(lambda: group_on(web) == net, SYNC, f"docker network {web} appears on {net}")
    # The agent held the network once (a container came and went): the rename replaces it.
    once = made.run(net)
    sh("docker", "rm", "-f", once)
    made.containers.remove(once)

    renamed = f"pn-{uuid.uuid4().hex[:6]}"
    r = requests.post(
        f"{made.master.url}/api/v1/networks/default:{net}/rename",
        json={"networkName": renamed},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    made.networks[made.networks.index(net)] = renamed
    group = requests.get(f"{made.master.url}/api/v1/endpointGroups/default:{web}", timeout=10)
    assert group.json()["networkName"] == renamed

    wait_for(lambda: group_on(web) == renamed, SYNC, f"docker network {web} on {renamed}")
    wait_for(lambda: exists(renamed), SYNC, f"docker network {renamed} appears")
    a = made.run(web)
    assert 100 <= last_octet(ip_of(a)) <= 120
    ep = endpoint_of(made.master, a)
    assert (ep["networkName"], ep["groupName"]) == (renamed, web)
    b = made.run(renamed)
    assert ping(a, ip_of(b)) and ping(b, ip_of(a)) and ping(a, "10.95.0.1")
    assert not exists(net)  # the old name's docker network went
