"""Swarm mode (issue 26) on three simulated hosts whose dockerds form a swarm over the
underlay (h1 the manager, h2 and h3 workers), each running the real managed plugin with
NETPLUGIN_SWARM=1 against one etcd and the TLS masters; on Docker 20.10 and 26.1.

What a swarm user does, with real packets: `docker network create --scope swarm` on the
manager, `docker service create --network`, scaling, draining a node, an attachable
`docker run`, endpoint groups with policies, a netctl service LB over a service's tasks,
and removal, which frees every address netplugin booked."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.host import BUSYBOX_IMAGE
from testbed.managed_hosts import PLUGIN, managed_cluster
from testbed.multihost import Cluster, SimHost
from testbed.probe import EchoServer, NameServer, tcp_opens, who_answers
from testbed.require import require_etcd
from testbed.site import dockerd_for
from testbed.wait import wait_for

from .test_multihost import container_net, unique

pytestmark = [pytest.mark.usefixtures("root"), pytest.mark.docker26]

SETTLE = 60.0  # a task's container starts in seconds; scheduling after a drain takes longer


@pytest.fixture(scope="module")
def swarm(dockerd: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_etcd()
    workdir = tmp_path_factory.mktemp(f"swarm-{dockerd}")
    with managed_cluster(workdir, 3, swarm=True, dockerd=dockerd_for(dockerd)) as c:
        yield c


@pytest.fixture
def cluster(swarm: Cluster) -> Iterator[Cluster]:
    """The swarm as every test starts: no service, every node active; afterwards the
    test's services and swarm networks are removed."""
    manager = swarm.hosts[0]
    yield swarm
    for svc in manager.docker("service", "ls", "-q").split():
        manager.docker_res("service", "rm", svc)
    for h in swarm.hosts:
        manager.docker_res("node", "update", "--availability", "active", node_id(h))
        for c in h.docker("ps", "-aq").split():
            h.docker_res("rm", "-f", c)
    for net in manager.docker("network", "ls", "-q", "--filter", f"driver={PLUGIN}").split():
        wait_for(lambda net=net: manager.docker_res("network", "rm", net).returncode == 0
                 or net not in manager.docker("network", "ls", "-q"), SETTLE,
                 f"swarm network {net} removed")  # fmt: skip


def node_id(h: SimHost) -> str:
    return h.docker("info", "--format", "{{.Swarm.NodeID}}").strip()


def swarm_network(manager: SimHost, subnet: str, *opts: str) -> str:
    name = unique("sw")
    manager.docker(
        "network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--scope", "swarm",
        "--attachable", "--subnet", subnet, *opts, name,
    )  # fmt: skip
    return name


def service(manager: SimHost, net: str, replicas: int, *opts: str) -> str:
    name = unique("svc")
    manager.docker(
        "service", "create", "--detach", "--name", name, "--replicas", str(replicas),
        "--network", net, "--endpoint-mode", "dnsrr", "--stop-grace-period", "1s", *opts,
        BUSYBOX_IMAGE, "sleep", "3600",
    )  # fmt: skip
    return name


def endpoints(cluster: Cluster, net: str) -> list[dict[str, Any]]:
    """netctl's endpoints of a cluster network."""
    eps = json.loads(cluster.netctl("--json", "endpoint", "ls").stdout)
    return [e for e in eps if e["networkName"] == net]


def task_hosts(cluster: Cluster, net: str, svc: str) -> dict[str, str]:
    """The service's tasks netctl shows on ``net``: address -> host."""
    return {
        e["ipAddress"]: e["host"]
        for e in endpoints(cluster, net)
        if str(e.get("containerName", "")).startswith(f"{svc}.")
    }


def allocated(cluster: Cluster, net: str, tenant: str = "default") -> list[str]:
    shown = json.loads(cluster.netctl("--json", "net", "inspect", "-t", tenant, net).stdout)
    return list(shown["Oper"].get("allocatedAddresses") or [])


def tasks_running(manager: SimHost, svc: str) -> int:
    states = manager.docker(
        "service", "ps", svc, "--filter", "desired-state=running", "--format", "{{.CurrentState}}"
    )
    return sum(line.startswith("Running") for line in states.splitlines())


def task_container(h: SimHost, svc: str) -> str:
    ids = h.docker("ps", "-q", "--filter", f"label=com.docker.swarm.service.name={svc}").split()
    assert ids, f"{h.name} runs no task of {svc}"
    return ids[0]


def pings(h: SimHost, container: str, ip: str) -> bool:
    return h.docker_res("exec", container, "ping", "-c", "2", "-W", "2", ip).returncode == 0


def test_a_service_spreads_over_the_hosts_scales_moves_and_frees_every_address(
    cluster: Cluster,
) -> None:
    manager, h2, h3 = cluster.hosts
    net = swarm_network(manager, "10.93.0.0/24")
    # netctl names the cluster network after the docker network.
    shown = json.loads(cluster.netctl("--json", "net", "ls").stdout)
    assert next(n["subnet"] for n in shown if n["networkName"] == net) == "10.93.0.0/24"
    svc = service(manager, net, 3)
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 3, SETTLE, "3 tasks plugged")
    tasks = task_hosts(cluster, net, svc)
    # Spread: one task per host, each shown by netctl with its host.
    assert sorted(tasks.values()) == ["h1", "h2", "h3"], tasks
    by_host = {h: ip for ip, h in tasks.items()}
    # Every task reaches the others across hosts, by address and by name (dnsrr).
    for h in cluster.hosts:
        c = task_container(h, svc)
        for other, ip in by_host.items():
            if other != h.name:
                assert pings(h, c, ip), f"{h.name} -> {other} ({ip})"
    named = manager.docker("exec", task_container(manager, svc), "nslookup", svc, "127.0.0.11")
    assert all(ip in named for ip in tasks), named
    gateway = "10.93.0.1"
    assert sorted(allocated(cluster, net)) == sorted([gateway, *tasks])
    # Scaling down frees the addresses of the tasks that went; up books new ones.
    manager.docker("service", "scale", "--detach", f"{svc}=1")
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 1, SETTLE, "scaled to 1")
    wait_for(lambda: len(allocated(cluster, net)) == 2, SETTLE, "2 tasks' addresses freed")
    manager.docker("service", "scale", "--detach", f"{svc}=3")
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 3, SETTLE, "scaled to 3 again")
    # Draining a node moves its task; its old address is freed, the new one booked.
    drained = h2 if "h2" in task_hosts(cluster, net, svc).values() else h3
    manager.docker("node", "update", "--availability", "drain", node_id(drained))
    wait_for(
        lambda: (
            len(moved := task_hosts(cluster, net, svc)) == 3
            and drained.name not in moved.values()
            and tasks_running(manager, svc) == 3
        ),
        SETTLE,
        f"the task on {drained.name} moved",
    )
    wait_for(lambda: len(allocated(cluster, net)) == 4, SETTLE, "one booking per task")
    moved = task_hosts(cluster, net, svc)
    assert sorted(allocated(cluster, net)) == sorted([gateway, *moved])
    assert not drained.docker("ps", "-q", "--filter", f"label=com.docker.swarm.service.name={svc}")
    manager.docker("service", "rm", svc)
    wait_for(lambda: not endpoints(cluster, net), SETTLE, "no endpoint left")
    wait_for(lambda: allocated(cluster, net) == [gateway], SETTLE, "only the gateway booked")
    manager.docker("network", "rm", net)
    wait_for(lambda: net not in cluster.netctl("net", "ls").stdout, SETTLE, "cluster network gone")


def test_an_attachable_docker_run_joins_a_services_tasks(cluster: Cluster) -> None:
    manager, h2, h3 = cluster.hosts
    net = swarm_network(manager, "10.92.0.0/24")
    svc = service(manager, net, 1, "--constraint", f"node.id=={node_id(h3)}")
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 1, SETTLE, "the task plugged")
    (task_ip,) = task_hosts(cluster, net, svc)
    name = unique("att")
    h2.docker("run", "-d", "--name", name, "--network", net, BUSYBOX_IMAGE, "sleep", "3600")
    ip = cluster.ip_of(h2, name)
    assert {e["ipAddress"]: e["host"] for e in endpoints(cluster, net)}[ip] == "h2"
    assert pings(h2, name, task_ip)
    assert task_ip in h2.docker("exec", name, "nslookup", svc, "127.0.0.11")
    assert sorted(allocated(cluster, net)) == sorted(["10.92.0.1", task_ip, ip])
    h2.docker("rm", "-f", name)
    wait_for(lambda: ip not in allocated(cluster, net), SETTLE, f"{ip} freed")


def test_a_task_publishes_a_port_on_its_host(cluster: Cluster) -> None:
    manager, h2, _ = cluster.hosts
    net = swarm_network(manager, "10.87.0.0/24")
    name = unique("pub")
    manager.docker(
        "service", "create", "--detach", "--name", name, "--network", net,
        "--endpoint-mode", "dnsrr", "--constraint", f"node.id=={node_id(h2)}",
        "--publish", "mode=host,target=80,published=8080", BUSYBOX_IMAGE,
        "sh", "-c", "echo swarm > /tmp/index.html && httpd -f -p 80 -h /tmp",
    )  # fmt: skip

    def page() -> str:
        url = f"http://{h2.vtep_ip}:8080/"
        return manager.ns("curl", "-s", "-m", "2", url, check=False).strip()

    wait_for(lambda: page() == "swarm", SETTLE, f"the task answers on {h2.name}:8080")


def test_groups_policies_and_a_service_lb_apply_to_tasks(cluster: Cluster) -> None:
    manager, h2, h3 = cluster.hosts
    net, group, policy, lb = unique("app"), unique("db"), unique("p"), unique("lb")
    cluster.netctl("net", "create", "-s", "10.91.0.0/24", net)
    cluster.netctl("policy", "create", policy)
    cluster.netctl("policy", "rule-add", policy, "1", "-d", "in", "-l", "tcp", "-P", "81",
                   "-j", "deny")  # fmt: skip
    cluster.netctl("group", "create", "-p", policy, net, group)
    # A swarm network per endpoint group, as for docker run: -o and --ipam-opt name both.
    dnet = unique("sw")
    manager.docker(
        "network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--scope", "swarm",
        "--attachable", "-o", f"network={net}", "-o", f"group={group}",
        "--ipam-opt", f"network={net}", "--ipam-opt", f"group={group}", dnet,
    )  # fmt: skip
    svc = service(manager, dnet, 2, "--constraint", f"node.id!={node_id(manager)}")
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 2, SETTLE, "2 tasks plugged")
    eps = [e for e in endpoints(cluster, net) if e["containerName"].startswith(f"{svc}.")]
    assert {e["groupName"] for e in eps} == {group}
    assert sorted(e["host"] for e in eps) == ["h2", "h3"]
    client = unique("cl")
    manager.docker("run", "-d", "--name", client, "--network", dnet, BUSYBOX_IMAGE, "sleep", "3600")
    nets = {h.name: container_net(h, task_container(h, svc)) for h in (h2, h3)}
    cnet = container_net(manager, client)
    servers = []
    try:
        for h in (h2, h3):
            net_h = nets[h.name]
            servers += [EchoServer(net_h, 80), EchoServer(net_h, 81), NameServer(net_h, 90, h.name)]
        ips = {e["host"]: e["ipAddress"] for e in eps}
        # The group's policy applies to the tasks: tcp/81 in is denied, tcp/80 is not.
        wait_for(lambda: tcp_opens(cnet, ips["h2"], 80), SETTLE, "tcp/80 to a task opens")
        assert not tcp_opens(cnet, ips["h2"], 81) and not tcp_opens(cnet, ips["h3"], 81)
        # A netctl service LB selects the tasks by swarm's own container labels.
        label = f"com.docker.swarm.service.name={svc}"
        cluster.netctl("service", "create", "-s", net, "-l", label, "-p", "9090:90:TCP", lb)
        vip = json.loads(cluster.netctl("--json", "service", "inspect", lb).stdout)["Oper"][
            "serviceVip"
        ]
        wait_for(
            lambda: set(who_answers(cnet, vip, 9090, 20)) == {"h2", "h3"},
            SETTLE,
            "the LB's VIP reaches both tasks",
        )
    finally:
        for s in servers:
            s.close()
        for n in (*nets.values(), cnet):
            n.close()
        cluster.netctl("service", "rm", lb, check=False)
        manager.docker_res("rm", "-f", client)
        manager.docker_res("service", "rm", svc)
        wait_for(lambda: not endpoints(cluster, net), SETTLE, "the tasks' endpoints gone")
        wait_for(lambda: manager.docker_res("network", "rm", dnet).returncode == 0,
                 SETTLE, f"{dnet} removed")  # fmt: skip
        cluster.netctl("group", "rm", group, check=False)
        cluster.netctl("policy", "rm", policy, check=False)
        cluster.netctl("net", "rm", net, check=False)


def test_a_network_netplugin_refuses_shows_why_on_each_task(cluster: Cluster) -> None:
    manager = cluster.hosts[0]
    # A group's swarm network must name the network's subnet (or --ipam-opt network=).
    net, group = unique("app"), unique("db")
    cluster.netctl("net", "create", "-s", "10.90.0.0/24", net)
    cluster.netctl("group", "create", net, group)
    dnet = unique("sw")
    manager.docker(
        "network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--scope", "swarm",
        "-o", f"network={net}", "-o", f"group={group}", "--subnet", "10.89.0.0/24", dnet,
    )  # fmt: skip
    svc = service(manager, dnet, 1)

    def error() -> str:
        return manager.docker("service", "ps", "--no-trunc", svc, "--format", "{{.Error}}")

    wait_for(lambda: "netplugin refused" in error(), SETTLE, "the task fails with the reason")
    assert "has subnet 10.90.0.0/24, not 10.89.0.0/24: pass --subnet 10.90.0.0/24" in error()
    manager.docker("service", "rm", svc)
    wait_for(lambda: manager.docker_res("network", "rm", dnet).returncode == 0, SETTLE,
             f"{dnet} removed")  # fmt: skip
    assert not endpoints(cluster, net)
    cluster.netctl("group", "rm", group)
    cluster.netctl("net", "rm", net)


def test_without_netplugins_ipam_or_with_internal_each_task_says_what_to_change(
    cluster: Cluster,
) -> None:
    manager, h2, _ = cluster.hosts
    res = h2.docker_res("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "onworker")
    assert res.returncode != 0
    assert "Cannot create a multi-host network from a worker node" in res.stderr
    for opts, reason in (
        ((), "a swarm network needs netplugin as its IPAM driver too"),
        (("--ipam-driver", PLUGIN, "--internal"), "--internal is not supported"),
    ):
        dnet = unique("sw")
        manager.docker("network", "create", "-d", PLUGIN, *opts, "--scope", "swarm", dnet)
        svc = service(manager, dnet, 1)

        def error(svc: str = svc) -> str:
            return manager.docker("service", "ps", "--no-trunc", svc, "--format", "{{.Error}}")

        wait_for(lambda reason=reason: reason in error(), SETTLE, f"tasks fail: {reason}")
        manager.docker("service", "rm", svc)
        wait_for(lambda dnet=dnet: manager.docker_res("network", "rm", dnet).returncode == 0,
                 SETTLE, f"{dnet} removed")  # fmt: skip
        wait_for(lambda dnet=dnet: dnet not in cluster.netctl("net", "ls").stdout, SETTLE,
                 f"{dnet} gone from the cluster")  # fmt: skip


def test_a_tenants_vlan_swarm_network_and_what_vip_mode_gets(cluster: Cluster) -> None:
    manager = cluster.hosts[0]
    tenant = unique("t")
    cluster.netctl("tenant", "create", tenant)
    opts = ("-o", f"tenant={tenant}", "-o", "encap=vlan", "-o", "pkt-tag=320")
    net = swarm_network(manager, "10.86.0.0/24", *opts)
    shown = json.loads(cluster.netctl("--json", "net", "inspect", "-t", tenant, net).stdout)
    assert (shown["Config"]["encap"], shown["Config"]["pktTag"]) == ("vlan", 320)
    # The default endpoint mode: swarm takes a VIP from netplugin, and its DNS answers the
    # service's name with it; Docker load-balances VIPs only on its overlay driver.
    svc = service(manager, net, 2, "--endpoint-mode", "vip")
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 2, SETTLE, "2 tasks plugged")
    eps = endpoints(cluster, net)
    assert {e["tenantName"] for e in eps} == {tenant}
    vips = json.loads(manager.docker("service", "inspect", "-f", "{{json .Endpoint.VirtualIPs}}",
                                     svc))  # fmt: skip
    (vip,) = [v["Addr"].split("/")[0] for v in vips]
    assert vip in allocated(cluster, net, tenant) and vip not in task_hosts(cluster, net, svc)
    tasks = task_hosts(cluster, net, svc)
    h = next(x for x in cluster.hosts if x.name == next(iter(tasks.values())))
    c = task_container(h, svc)
    (other,) = [ip for ip in tasks if ip != cluster.ip_of(h, c)]
    assert pings(h, c, other)
    assert vip in h.docker("exec", c, "nslookup", svc, "127.0.0.11")
    assert not pings(h, c, vip)  # nothing answers it: use dnsrr or a netctl service LB
    manager.docker("service", "rm", svc)
    wait_for(lambda: len(allocated(cluster, net, tenant)) == 1, SETTLE, "VIP and tasks freed")


def test_removing_a_service_and_its_network_mid_deployment_leaks_nothing(
    cluster: Cluster,
) -> None:
    manager = cluster.hosts[0]
    net = swarm_network(manager, "10.88.0.0/24")
    svc = service(manager, net, 6)
    wait_for(lambda: len(task_hosts(cluster, net, svc)) >= 1, SETTLE, "the first task plugged")
    manager.docker("service", "rm", svc)
    wait_for(lambda: manager.docker_res("network", "rm", net).returncode == 0, SETTLE,
             f"{net} removed")  # fmt: skip
    wait_for(lambda: net not in cluster.netctl("net", "ls").stdout, SETTLE, "cluster network gone")
    assert not endpoints(cluster, net)
    for h in cluster.hosts:  # no task's port left on any host's switch (removed after the
        # answer to DeleteEndpoint, within moments)
        wait_for(lambda h=h: not h.endpoint_ports(), 10,
                 f"no task's port left on {h.name}: {h.ovs_ports()}")  # fmt: skip


def ping_through(src: SimHost, container: str, ip: str, count: int) -> subprocess.Popen[str]:
    """A ping every 50 ms from a container, in the background."""
    cmd = ["exec", container, "ping", "-q", "-i", "0.05", "-c", str(count), ip]
    return subprocess.Popen(
        ["docker", "-H", f"unix://{src.docker_sock}", *cmd], stdout=subprocess.PIPE, text=True
    )


def received(pinger: subprocess.Popen[str]) -> tuple[int, int]:
    out, _ = pinger.communicate(timeout=90)
    summary = next(line for line in out.splitlines() if "packets transmitted" in line)
    sent, got = (int(part.split()[0]) for part in summary.split(",")[:2])
    return sent, got


def test_plugin_restarts_on_a_worker_and_the_manager_keep_tasks_talking_and_booked(
    cluster: Cluster,
) -> None:
    manager, h2, h3 = cluster.hosts
    net = swarm_network(manager, "10.85.0.0/24")
    svc = service(manager, net, 2, "--constraint", f"node.id!={node_id(manager)}")
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 2, SETTLE, "2 tasks plugged")
    on = {h: ip for ip, h in task_hosts(cluster, net, svc).items()}
    assert sorted(on) == ["h2", "h3"]
    booked = sorted(allocated(cluster, net))
    c2 = task_container(h2, svc)
    assert pings(h2, c2, on["h3"])
    for restarted in (h3, manager):  # a worker's plugin, then the leader's
        pinger = ping_through(h2, c2, on["h3"], 200)
        restarted.docker("plugin", "disable", "-f", PLUGIN)
        restarted.docker("plugin", "enable", PLUGIN, timeout=120)
        assert received(pinger) == (200, 200), restarted.name
        assert sorted(allocated(cluster, net)) == booked
    # Both agents are back: new tasks get addresses and plug, on the restarted worker too.
    manager.docker("service", "scale", "--detach", f"{svc}=4")
    wait_for(lambda: len(task_hosts(cluster, net, svc)) == 4, SETTLE, "scaled to 4")
    assert sorted(task_hosts(cluster, net, svc).values()) == ["h2", "h2", "h3", "h3"]
    manager.docker("service", "rm", svc)
    wait_for(lambda: allocated(cluster, net) == ["10.85.0.1"], SETTLE, "every task freed")
