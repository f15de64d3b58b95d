"""The kernel datapath across real kernels: two Debian 12 guests under QEMU on one
underlay segment (eth1) and one VLAN trunk (eth2), etcd and a master on the first, an agent
on each, as README "Several hosts" sets them up.

With the OVS kernel module the tunnels are kernel VXLAN ports (``vxlan_sys_4789``) and the
VTEP address stays on its interface; VLAN networks leave tagged on ``--vlan-if``; an ``in``
rule is enforced at the destination; a service VIP reaches providers on the other guest;
killing an agent and starting it again drops no ping across the tunnel.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.vm.image import Image
from testbed.vm.lab import Lab
from testbed.vm.node import AGENT_LOG, AGENT_PID, Node, save_logs, start_agent, start_cluster
from testbed.wait import wait_for

SETTLE = 60.0  # seconds for a change to reach both guests under emulation

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def hosts(vm_image: Image, vm_workdir: Path) -> Iterator[list[Node]]:
    lab = Lab(vm_image, vm_workdir, 2)
    lab.start()
    try:
        yield start_cluster(lab)
    finally:
        save_logs(lab, vm_workdir)
        lab.stop()


def network(nodes: list[Node], *create: str) -> str:
    """``netctl net create`` and wait for its docker network on every guest; its name."""
    nodes[0].netctl("net", "create", *create)
    for n in nodes:
        n.wait_network(create[-1], SETTLE)
    return create[-1]


def test_vxlan_tunnels_are_kernel_ports_and_nothing_moves(hosts: list[Node]) -> None:
    one, two = hosts
    net = network(hosts, "-s", "10.21.0.0/24", "kvx")
    a, b = one.box("xa", net), two.box("xb", net)
    bip = two.ip(b)
    wait_for(lambda: one.pings(a, bip), SETTLE, "a container pings one on the other guest")
    port = "vx" + bytes(int(x) for x in two.g.ip.split(".")).hex()
    assert one.sh(f"ovs-vsctl get interface {port} type").strip() == "vxlan"
    # The kernel's VXLAN device carries it, and the VTEP address stayed on eth1.
    assert "vxlan_sys_4789" in one.sh("ovs-dpctl show")
    assert one.g.ip in one.sh("ip -br addr show eth1")
    assert not one.ok("ip link show npunderlay")


def test_vlan_leaves_tagged_on_the_uplink(hosts: list[Node]) -> None:
    one, two = hosts
    net = network(hosts, "-e", "vlan", "-p", "100", "-s", "10.22.0.0/24", "kvl")
    a, b = one.box("va", net), two.box("vb", net)
    bip = two.ip(b)
    two.sh("(timeout 60 tcpdump -l -nn -e -c 2 -i eth2 'vlan 100 and icmp' >/tmp/vl 2>&1 &)")
    wait_for(lambda: one.pings(a, bip), SETTLE, "a container pings across the VLAN")
    wait_for(lambda: "vlan 100" in two.sh("cat /tmp/vl"), SETTLE, "tagged frames on eth2")


def test_in_rules_are_enforced_at_the_destination(hosts: list[Node]) -> None:
    one, two = hosts
    hosts[0].netctl("group", "create", "kvx", "kguard")
    hosts[0].netctl("policy", "create", "kno-icmp")
    hosts[0].netctl("policy", "rule-add", "-d", "in", "-l", "icmp", "-j", "deny", "kno-icmp", "1")
    hosts[0].netctl("group", "update", "-p", "kno-icmp", "kguard")
    for n in hosts:
        n.wait_network("kguard", SETTLE)
    guarded = two.box("xg", "kguard")
    gip = two.ip(guarded)
    assert not one.pings("xa", gip, count=2)  # denied at vm2, where the group's container is
    assert one.pings("xa", two.ip("xb"))  # the rest of the network is untouched


def test_a_vip_reaches_providers_on_the_other_guest(hosts: list[Node]) -> None:
    one, two = hosts
    one.netctl("service", "create", "-s", "kvx", "-l", "app=kxweb", "-p", "80:8080:TCP", "kxsvc")
    web = "mkdir /www && hostname >/www/index.html && httpd -f -p 8080 -h /www"
    for name in ("xp1", "xp2"):
        two.box(name, "kvx", "sh", "-c", web, opts="--label app=kxweb")
    vip = one.service_vip("kxsvc")

    def answers() -> set[str]:
        return {one.http_get("xa", vip) for _ in range(8)}

    wait_for(lambda: len(answers() - {""}) == 2, SETTLE * 2,
             "connections from vm1 reach both providers on vm2")  # fmt: skip


def test_agent_kill_and_restart_under_ping(hosts: list[Node]) -> None:
    one, two = hosts
    bip = two.ip("xb")
    flows = two.flows()
    one.sh(f"docker exec -d xa sh -c 'ping -i 0.2 {bip} >/ping.log'")
    two.sh(f"kill -9 $(cat {AGENT_PID})")
    since = start_agent(two.g, one.g)
    two.wait_log(AGENT_LOG, "resynced with the cluster", 600, since=since)
    assert two.ip("xb") == bip
    assert two.flows() == flows
    one.sh(f"pkill -INT -f 'ping -i 0.2 {bip}'")
    log = one.exec("xa", "cat /ping.log").stdout
    seqs = [int(s) for s in re.findall(r"seq=(\d+)", log)]
    assert len(seqs) > 20 and set(seqs) == set(range(min(seqs), max(seqs) + 1)), log[-500:]
