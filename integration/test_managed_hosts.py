"""The managed (v2) plugin as the agent of two simulated hosts (testbed.managed_hosts): the
artifact users install on each host, against the cluster's etcd and TLS masters, with the
userspace datapath's VXLAN underlay (`--vtep-ip`). A network made with netctl reaches
both hosts' docker under the plugin's name; containers on the two hosts talk over it; and
`netctl` shows each endpoint with its host. (The base of issue 26's swarm tests: swarm
takes only a managed plugin.)"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from testbed.managed_hosts import PLUGIN, managed_cluster
from testbed.multihost import Cluster
from testbed.require import require_etcd
from testbed.wait import wait_for

pytestmark = pytest.mark.usefixtures("root")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_etcd()  # the plugin's Debian base is built (debootstrap) if build/ has none
    with managed_cluster(tmp_path_factory.mktemp("managedhosts"), 2) as c:
        yield c


def test_containers_on_two_hosts_talk_through_the_managed_plugin(cluster: Cluster) -> None:
    h1, h2 = cluster.hosts
    net = f"m{uuid.uuid4().hex[:6]}"
    cluster.netctl("net", "create", "-s", "10.96.0.0/24", net)
    for h in cluster.hosts:
        wait_for(
            lambda h=h: (
                net
                in h.docker(
                    "network", "ls", "--filter", f"driver={PLUGIN}", "--format", "{{.Name}}"
                )
            ),
            30,
            f"{h.name}: docker network {net} of {PLUGIN}",
        )
    a, b = cluster.run(h1, f"a{net}", net), cluster.run(h2, f"b{net}", net)
    aip, bip = cluster.ip_of(h1, a), cluster.ip_of(h2, b)
    res = h1.docker_res("exec", a, "ping", "-c", "2", "-W", "2", bip)
    assert res.returncode == 0, res.stdout + res.stderr
    eps = json.loads(cluster.netctl("--json", "endpoint", "ls").stdout)
    hosts = {e["ipAddress"].split("/")[0]: e["host"] for e in eps if e["networkName"] == net}
    assert hosts == {aip: h1.name, bip: h2.name}
    for h, c in ((h1, a), (h2, b)):
        h.docker("rm", "-f", c)
    cluster.netctl("net", "rm", net)
