"""Routing mode across simulated hosts: a cluster switched to `fwdMode routing` while empty,
its tenants' networks routed by each host's switch (a tenant is a VRF), real containers on
real dockerds, real packets. VXLAN networks are routed between the hosts' switches; VLAN
networks through a real BGP router: Debian's FRR in a namespace on the hosts' VLAN uplinks,
which every agent peers with (its Bgp object), with an outside network behind it."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.frr import (
    OUTSIDE_IP,
    OUTSIDE_IP6,
    OUTSIDE_NET,
    ROUTER_IP,
    Fabric,
    frr_available,
    router_ip,
    router_ip6,
)
from testbed.multihost import Cluster, SimHost, sh
from testbed.ovs import stop_pid
from testbed.probe import ContainerNet, EchoServer, NamespaceNet, tcp_opens
from testbed.require import require_etcd
from testbed.wait import wait_for

pytestmark = pytest.mark.usefixtures("root")

ROUTER_MAC = "02:4e:52:00:00:01"  # datapath.routing.ROUTER_MAC, as a container sees it


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Fabric]]:
    """Two hosts and one master, switched to routing mode before any network exists; a
    router every host peers with by its Bgp object."""
    require_etcd()
    if not frr_available():
        pytest.fail("FRR (zebra, bgpd, vtysh) is missing: scripts/bootstrap.sh installs it")
    workdir = tmp_path_factory.mktemp("routing")
    c = Cluster(workdir, hosts=2, masters=1)
    c.start()
    fabric = None
    try:
        c.netctl("global", "set", "--fwd-mode", "routing")
        fabric = Fabric(c).peer_hosts()
        yield c, fabric
    finally:
        if fabric is not None:
            fabric.stop(workdir / "frr")
        c.stop()


@pytest.fixture
def cluster(lab: tuple[Cluster, Fabric]) -> Iterator[Cluster]:
    c, _ = lab
    c.heal()
    before = c.snapshot()
    yield c
    c.heal()
    c.remove_made_since(before)


@pytest.fixture
def fabric(lab: tuple[Cluster, Fabric], cluster: Cluster) -> Fabric:
    """The router, once every host's session with it is up."""
    f = lab[1]
    for h in cluster.hosts:
        wait_for(
            lambda h=h: f.frr.peer_state(router_ip(h)) == "Established",
            30,
            f"{h.name}'s BGP session with the router",
            last=lambda h=h: f.frr.peer_state(router_ip(h)),
        )
    return f


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def tenant_network(cluster: Cluster, tenant: str, subnet: str, gateway: str, *opts: str) -> str:
    """A network of ``tenant`` (VXLAN unless ``opts`` say otherwise) made with netctl; its
    docker name (NAME/TENANT), once every host's docker has it."""
    name = unique("n")
    cluster.netctl("net", "create", "-t", tenant, "-s", subnet, "-g", gateway, *opts, name)
    docker_name = f"{name}/{tenant}"
    in_every_docker(cluster, docker_name)
    return docker_name


def in_every_docker(cluster: Cluster, docker_name: str) -> None:
    """Wait for the docker network ``docker_name`` on every host."""
    for h in cluster.hosts:
        wait_for(
            lambda h=h: docker_name in h.docker("network", "ls", "--format", "{{.Name}}").split(),
            20,
            f"{h.name}: docker network {docker_name}",
        )


def ping_ttl(host: SimHost, container: str, target: str) -> int | None:
    """The TTL of the first echo reply ``container`` gets from ``target``; None: no reply."""
    res = host.docker_res("exec", container, "ping", "-c", "1", "-W", "2", target)
    m = re.search(r"ttl=(\d+)", res.stdout)
    return int(m.group(1)) if res.returncode == 0 and m else None


def neighbour_mac(host: SimHost, container: str, ip: str) -> str:
    """The MAC the container's kernel resolved ``ip`` to ('' if none)."""
    for line in host.docker("exec", container, "cat", "/proc/net/arp").splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == ip:
            return fields[3]
    return ""


def container_net(host: SimHost, container: str) -> ContainerNet:
    pid = int(host.docker("inspect", "-f", "{{.State.Pid}}", container).strip())
    return ContainerNet(container, pid)


def test_a_tenant_is_routed_across_hosts_and_other_tenants_are_not(cluster: Cluster) -> None:
    """Networks of one tenant reach each other, on one host and across hosts, through the
    switch's router (one hop: TTL 63, the router MAC in the neighbour table); another
    tenant's network is out of reach."""
    h1, h2 = cluster.hosts
    blue, red = unique("blue"), unique("red")
    for t in (blue, red):
        cluster.netctl("tenant", "create", t)
    web = tenant_network(cluster, blue, "10.71.0.0/24", "10.71.0.1")
    db = tenant_network(cluster, blue, "10.72.0.0/24", "10.72.0.1")
    other = tenant_network(cluster, red, "10.73.0.0/24", "10.73.0.1")
    a = cluster.run(h1, unique("a"), web)
    c = cluster.run(h2, unique("c"), web)
    b = cluster.run(h2, unique("b"), db)
    r = cluster.run(h2, unique("r"), other)
    aip, bip, cip, rip = (cluster.ip_of(h, x) for h, x in ((h1, a), (h2, b), (h2, c), (h2, r)))
    # The same network across hosts: routed, not bridged (one hop, the router's MAC).
    wait_for(lambda: ping_ttl(h1, a, cip) is not None, 15, f"{a} reaches {c} across hosts")
    assert ping_ttl(h1, a, cip) == 63
    assert neighbour_mac(h1, a, cip) == ROUTER_MAC
    # Another network of the tenant, on the other host, both ways.
    assert ping_ttl(h1, a, bip) == 63 and ping_ttl(h2, b, aip) == 63
    # Each host's gateways of the tenant answer: its own network's and the other's (the
    # host kernel is behind the switch's router: its replies are routed, one hop).
    assert ping_ttl(h1, a, "10.71.0.1") == 63 and ping_ttl(h1, a, "10.72.0.1") == 63
    # TCP, not only ICMP.
    server = EchoServer(container_net(h2, b), 8080)
    try:
        with contextlib.closing(container_net(h1, a)) as anet:
            assert tcp_opens(anet, bip, 8080)
    finally:
        server.close()
    # red is another VRF: its container is not reached from blue's, on its host or another,
    # though its network's gateway is on b's host; nor are blue's reached from it.
    assert ping_ttl(h1, a, rip) is None and ping_ttl(h2, b, rip) is None
    assert ping_ttl(h2, r, bip) is None and ping_ttl(h2, r, cip) is None
    # A container gone: its address is no longer routed to.
    h2.docker("rm", "-f", c)
    wait_for(lambda: ping_ttl(h1, a, cip) is None, 10, f"{cip} unreachable once {c} is gone")


def container_pid(host: SimHost, container: str) -> str:
    return host.docker("inspect", "-f", "{{.State.Pid}}", container).strip()


def test_vlan_networks_are_routed_through_the_router_that_learns_them_by_bgp(
    cluster: Cluster, fabric: Fabric
) -> None:
    """Each host announces its containers' /32s with itself as next hop; containers on
    different hosts talk through the router; a host outside the cluster reaches a container
    by its own address, and the container sees the outside host's (no NAT either way); a
    stopped container's route is withdrawn within seconds; `netctl bgp inspect` shows the
    session and its routes."""
    h1, h2 = cluster.hosts
    blue = unique("blue")
    cluster.netctl("tenant", "create", blue)
    vl = tenant_network(cluster, blue, "10.80.0.0/24", "10.80.0.1", "-e", "vlan", "-p", "400")
    a, b = cluster.run(h1, unique("a"), vl), cluster.run(h2, unique("b"), vl)
    aip, bip = cluster.ip_of(h1, a), cluster.ip_of(h2, b)
    wanted = {f"{aip}/32": [router_ip(h1)], f"{bip}/32": [router_ip(h2)]}

    def announced() -> dict[str, list[str]]:
        routes = fabric.frr.routes()
        return {p: routes[p] for p in wanted if p in routes}

    wait_for(lambda: announced() == wanted, 15, "the router learns both containers", last=announced)
    # Through the router: h2's kernel, the router and h1's kernel each count a hop, then
    # h1's switch routes it to a (64 - 4).
    wait_for(lambda: ping_ttl(h2, b, aip) is not None, 15, f"{b} reaches {a} via the router")
    assert ping_ttl(h2, b, aip) == 60 and ping_ttl(h1, a, bip) == 60
    assert neighbour_mac(h2, b, aip) == ROUTER_MAC
    # The outside host reaches a by its address, and a sees the outside host's address.
    res = sh(
        "ip", "netns", "exec", fabric.outside_ns, "ping", "-c", "1", "-W", "2", aip, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    outside = NamespaceNet(f"/var/run/netns/{fabric.outside_ns}")
    with contextlib.closing(outside.socket(socket.SOCK_STREAM)) as server:
        server.bind((OUTSIDE_IP, 9400))
        server.listen(1)
        server.settimeout(10)
        h1.docker("exec", "-d", a, "sh", "-c", f"echo hi | nc {OUTSIDE_IP} 9400")
        conn, peer = server.accept()
        conn.close()
    outside.close()
    assert peer[0] == aip  # not NATed to the host's address
    # What the hosts report, through the master.
    inspect = json.loads(cluster.netctl("--json", "bgp", "inspect", h1.name).stdout)
    oper = inspect["Oper"]
    assert oper["neighborState"] == "Established" and f"{aip}/32" in oper["announcedRoutes"]
    assert f"{OUTSIDE_NET} via {ROUTER_IP}" in oper["learnedRoutes"]
    assert f"{bip}/32 via {ROUTER_IP}" in oper["learnedRoutes"]
    # b stops: its route leaves the router within seconds, and a no longer reaches it.
    h2.docker("rm", "-f", b)
    wait_for(lambda: f"{bip}/32" not in fabric.frr.routes(), 5, f"{bip}/32 withdrawn")
    assert f"{aip}/32" in fabric.frr.routes()


def test_a_killed_agent_loses_its_session_and_routes_and_a_new_one_peers_again(
    cluster: Cluster, fabric: Fabric
) -> None:
    _, h2 = cluster.hosts
    tenant = unique("t")
    cluster.netctl("tenant", "create", tenant)
    vl = tenant_network(cluster, tenant, "10.82.0.0/24", "10.82.0.1", "-e", "vlan", "-p", "402")
    b = cluster.run(h2, unique("b"), vl)
    bip = cluster.ip_of(h2, b)
    wait_for(lambda: f"{bip}/32" in fabric.frr.routes(), 15, f"{bip}/32 announced")
    h2.stop_agent(signal.SIGKILL)
    # The session ends at once (the kernel closes its connection); the router keeps the
    # routes, stale, for the graceful restart time (20 s), as no agent comes back.
    wait_for(lambda: fabric.frr.peer_state(router_ip(h2)) != "Established", 10, "h2's session ends")
    wait_for(lambda: f"{bip}/32" not in fabric.frr.routes(), 35, "h2's routes dropped")
    cluster.start_agent(h2)
    wait_for(lambda: f"{bip}/32" in fabric.frr.routes(), 30, "h2 peers and announces again")
    assert fabric.frr.routes()[f"{bip}/32"] == [router_ip(h2)]


def test_over_the_fabric_a_tenant_reaches_its_networks_and_not_another_tenants(
    cluster: Cluster, fabric: Fabric
) -> None:
    h1, h2 = cluster.hosts
    blue, red = unique("blue"), unique("red")
    for t in (blue, red):
        cluster.netctl("tenant", "create", t)
    web = tenant_network(cluster, blue, "10.83.0.0/24", "10.83.0.1", "-e", "vlan", "-p", "403")
    db = tenant_network(cluster, blue, "10.84.0.0/24", "10.84.0.1", "-e", "vlan", "-p", "404")
    other = tenant_network(cluster, red, "10.85.0.0/24", "10.85.0.1", "-e", "vlan", "-p", "405")
    a, b = cluster.run(h1, unique("a"), web), cluster.run(h2, unique("b"), db)
    r = cluster.run(h2, unique("r"), other)
    aip, bip, rip = cluster.ip_of(h1, a), cluster.ip_of(h2, b), cluster.ip_of(h2, r)
    for ip in (aip, bip, rip):
        wait_for(lambda ip=ip: f"{ip}/32" in fabric.frr.routes(), 15, f"{ip}/32 announced")
    wait_for(lambda: ping_ttl(h1, a, bip) is not None, 15, f"{a} reaches {b} across networks")
    assert ping_ttl(h1, a, rip) is None  # dropped by r's host: it comes from blue
    assert ping_ttl(h2, r, aip) is None
    # From outside the cluster, every tenant's containers are reachable (the fabric's own
    # addresses are nobody's tenant).
    res = sh(
        "ip", "netns", "exec", fabric.outside_ns, "ping", "-c", "1", "-W", "2", rip, check=False
    )
    assert res.returncode == 0


def test_a_policy_denies_across_the_routed_path(cluster: Cluster) -> None:
    """Policies judge routed packets as they judge bridged ones: a group's `in` rule on
    another network of the tenant, on another host."""
    h1, h2 = cluster.hosts
    blue = unique("blue")
    cluster.netctl("tenant", "create", blue)
    web = tenant_network(cluster, blue, "10.74.0.0/24", "10.74.0.1")
    db = tenant_network(cluster, blue, "10.75.0.0/24", "10.75.0.1")
    group, policy = unique("g"), unique("p")
    cluster.netctl("policy", "create", "-t", blue, policy)
    cluster.netctl("policy", "rule-add", "-t", blue, "-d", "in", "-l", "tcp", "-P", "8081",
                   "-j", "deny", policy, "1")  # fmt: skip
    cluster.netctl("group", "create", "-t", blue, "-p", policy, db.split("/")[0], group)
    in_every_docker(cluster, f"{group}/{blue}")
    a = cluster.run(h1, unique("a"), web)
    b = cluster.run(h2, unique("b"), f"{group}/{blue}")
    bip = cluster.ip_of(h2, b)
    bnet = container_net(h2, b)
    servers = [EchoServer(bnet, 8080), EchoServer(bnet, 8081)]
    try:
        with contextlib.closing(container_net(h1, a)) as anet:
            wait_for(lambda: tcp_opens(anet, bip, 8080), 15, f"{a} reaches {b}:8080 routed")
            assert not tcp_opens(anet, bip, 8081)  # denied into the group
            assert ping_ttl(h1, a, bip) == 63  # routed, and ICMP is not denied
    finally:
        for s in servers:
            s.close()
        bnet.close()
        h2.docker("rm", "-f", b, check=False)
        cluster.netctl("group", "rm", "-t", blue, group, check=False)
        cluster.netctl("policy", "rm", "-t", blue, policy, check=False)


def test_an_agent_restart_keeps_routed_traffic(
    cluster: Cluster, fabric: Fabric, tmp_path: Path
) -> None:
    """The agent of a host restarts (SIGTERM, then a new one) while a container there is
    pinged across hosts over VXLAN and from outside the cluster through the router: the
    switch keeps routing, and the router keeps the host's routes (graceful restart)."""
    h1, h2 = cluster.hosts
    blue = unique("blue")
    cluster.netctl("tenant", "create", blue)
    vx = tenant_network(cluster, blue, "10.76.0.0/24", "10.76.0.1")
    vl = tenant_network(cluster, blue, "10.86.0.0/24", "10.86.0.1", "-e", "vlan", "-p", "406")
    a, c = cluster.run(h1, unique("a"), vx), cluster.run(h2, unique("c"), vx)
    v = cluster.run(h1, unique("v"), vl)
    aip, vip = cluster.ip_of(h1, a), cluster.ip_of(h1, v)
    wait_for(lambda: ping_ttl(h2, c, aip) is not None, 15, f"{c} reaches {a}")
    wait_for(lambda: f"{vip}/32" in fabric.frr.routes(), 15, f"{vip}/32 announced")
    pings = {
        "vxlan": ["docker", "-H", f"unix://{h2.docker_sock}", "exec", c, "ping"],
        "fabric": ["ip", "netns", "exec", fabric.outside_ns, "ping"],
    }
    targets = {"vxlan": aip, "fabric": vip}
    logs = {k: tmp_path / f"{k}.out" for k in pings}
    procs = {}
    for k, cmd in pings.items():
        with open(logs[k], "w") as out:
            procs[k] = subprocess.Popen(
                [*cmd, "-i", "0.2", "-c", "60", "-W", "1", targets[k]],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
    try:
        for k in pings:
            wait_for(lambda k=k: "bytes from" in logs[k].read_text(), 20, f"{k} ping answered")
        h1.stop_agent(signal.SIGTERM)
        cluster.start_agent(h1)
        for p in procs.values():
            p.wait(60)
    finally:
        for p in procs.values():
            stop_pid(p)
    for k in pings:
        out = logs[k].read_text()
        m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", out)
        assert m, out
        assert int(m.group(1)) - int(m.group(2)) <= 1, f"{k}: {out}"


def ping6_ttl(host: SimHost, container: str, target: str) -> int | None:
    """The hop limit of the echo reply (iputils ping in the container's namespace)."""
    res = sh("nsenter", "-t", container_pid(host, container), "-n",
             "ping", "-6", "-c", "1", "-W", "2", target, check=False)  # fmt: skip
    m = re.search(r"ttl=(\d+)", res.stdout)
    return int(m.group(1)) if res.returncode == 0 and m else None


def ipv6_of(host: SimHost, container: str) -> str:
    nets = json.loads(host.docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", container))
    return str(next(iter(nets.values()))["GlobalIPv6Address"])


def test_ipv6_is_routed_across_hosts_with_the_router_answering_neighbour_discovery(
    cluster: Cluster,
) -> None:
    """Dual-stack networks of one tenant: the switch answers neighbour solicitations for
    the VRF's addresses with the router MAC (through the controller), so IPv6 is routed
    like IPv4, one hop, on one host and across hosts."""
    h1, h2 = cluster.hosts
    blue = unique("blue")
    cluster.netctl("tenant", "create", blue)
    web = tenant_network(cluster, blue, "10.77.0.0/24", "10.77.0.1", "--subnetv6", "fd77:1::/64")
    db = tenant_network(cluster, blue, "10.78.0.0/24", "10.78.0.1", "--subnetv6", "fd78:1::/64")
    a, c = cluster.run(h1, unique("a"), web), cluster.run(h2, unique("c"), web)
    b = cluster.run(h2, unique("b"), db)
    a6, b6, c6 = ipv6_of(h1, a), ipv6_of(h2, b), ipv6_of(h2, c)
    assert a6 and b6 and c6
    wait_for(lambda: ping6_ttl(h1, a, c6) is not None, 15, f"{a} reaches {c} over IPv6")
    assert ping6_ttl(h1, a, c6) == 63 and ping6_ttl(h2, b, a6) == 63
    assert ping6_ttl(h1, a, b6) == 63
    neigh = sh("nsenter", "-t", container_pid(h1, a), "-n", "ip", "-6", "neigh", "show", c6).stdout
    assert ROUTER_MAC in neigh, neigh


def test_ipv6_of_vlan_networks_is_announced_and_routed_through_the_router(
    cluster: Cluster, fabric: Fabric
) -> None:
    """With an IPv6 router IP, each host announces its containers' /128s with it as next
    hop: containers on different hosts talk IPv6 through the router (the hosts' kernels
    forward IPv6), and the outside host reaches a container by its IPv6 address; another
    tenant's routed IPv6 subnet does not reach it (ip6tables, as iptables for IPv4)."""
    h1, h2 = cluster.hosts
    blue, red = unique("blue"), unique("red")
    cluster.netctl("tenant", "create", blue)
    cluster.netctl("tenant", "create", red)
    vl = tenant_network(cluster, blue, "10.84.0.0/24", "10.84.0.1", "-e", "vlan", "-p", "404",
                        "--subnetv6", "fd84:1::/64")  # fmt: skip
    other = tenant_network(cluster, red, "10.85.0.0/24", "10.85.0.1", "-e", "vlan", "-p", "405",
                           "--subnetv6", "fd85:1::/64")  # fmt: skip
    a, b = cluster.run(h1, unique("a"), vl), cluster.run(h2, unique("b"), vl)
    r = cluster.run(h2, unique("r"), other)
    a6, b6, r6 = ipv6_of(h1, a), ipv6_of(h2, b), ipv6_of(h2, r)
    wanted = {f"{a6}/128": [router_ip6(h1)], f"{b6}/128": [router_ip6(h2)]}

    def announced() -> dict[str, list[str]]:
        routes = fabric.frr.routes("ipv6")
        return {p: routes[p] for p in wanted if p in routes}

    wait_for(lambda: announced() == wanted, 15, "the router learns both /128s", last=announced)
    # Through the router: h2's kernel, the router and h1's kernel each count a hop, then
    # h1's switch routes it to a.
    wait_for(lambda: ping6_ttl(h2, b, a6) is not None, 15, f"{b} reaches {a} via the router")
    assert ping6_ttl(h2, b, a6) == 60 and ping6_ttl(h1, a, b6) == 60
    res = sh("ip", "netns", "exec", fabric.outside_ns,
             "ping", "-6", "-c", "1", "-W", "2", a6, check=False)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert ping6_ttl(h1, a, OUTSIDE_IP6) is not None
    # Red's container is routed too, but not into blue's network.
    wait_for(lambda: f"{r6}/128" in fabric.frr.routes("ipv6"), 15, f"{r6}/128 announced")
    assert ping6_ttl(h2, r, a6) is None and ping6_ttl(h2, r, OUTSIDE_IP6) is not None


def test_a_group_rule_judges_traffic_over_the_fabric(cluster: Cluster, fabric: Fabric) -> None:
    """Through the router a packet reaches its host from the host kernel, without its
    sender's MAC: its group is found by its address, so `-g` rules hold there too."""
    h1, h2 = cluster.hosts
    blue = unique("blue")
    cluster.netctl("tenant", "create", blue)
    vl = tenant_network(cluster, blue, "10.87.0.0/24", "10.87.0.1", "-e", "vlan", "-p", "407")
    net = vl.split("/")[0]
    app, dbg, policy = unique("app"), unique("db"), unique("p")
    cluster.netctl("group", "create", "-t", blue, net, app)
    cluster.netctl("policy", "create", "-t", blue, policy)
    cluster.netctl("policy", "rule-add", "-t", blue, "-d", "in", "-g", app, "-l", "tcp",
                   "-P", "8081", "-j", "deny", policy, "1")  # fmt: skip
    cluster.netctl("group", "create", "-t", blue, "-p", policy, net, dbg)
    for g in (app, dbg):
        in_every_docker(cluster, f"{g}/{blue}")
    a = cluster.run(h1, unique("a"), f"{app}/{blue}")
    p = cluster.run(h1, unique("p"), vl)  # no group
    d = cluster.run(h2, unique("d"), f"{dbg}/{blue}")
    dip = cluster.ip_of(h2, d)
    for ip in (cluster.ip_of(h1, a), dip):
        wait_for(lambda ip=ip: f"{ip}/32" in fabric.frr.routes(), 15, f"{ip}/32 announced")
    dnet = container_net(h2, d)
    servers = [EchoServer(dnet, 8080), EchoServer(dnet, 8081)]
    try:
        with (
            contextlib.closing(container_net(h1, a)) as anet,
            contextlib.closing(container_net(h1, p)) as pnet,
        ):
            wait_for(lambda: tcp_opens(anet, dip, 8080), 15, f"{a} reaches {d}:8080 via the router")
            assert not tcp_opens(anet, dip, 8081)  # app's: denied
            assert tcp_opens(pnet, dip, 8081)  # no group's: allowed
    finally:
        for s in servers:
            s.close()
        dnet.close()
        for h, c in ((h1, a), (h1, p), (h2, d)):
            h.docker("rm", "-f", c, check=False)
        # The policy's group, the policy (its rule names app), then app.
        cluster.netctl("group", "rm", "-t", blue, dbg, check=False)
        cluster.netctl("policy", "rm", "-t", blue, policy, check=False)
        cluster.netctl("group", "rm", "-t", blue, app, check=False)
