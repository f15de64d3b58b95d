"""The kernel datapath on one real kernel: a Debian 12 guest (stock kernel, openvswitch.ko)
under QEMU, netplugin started by the README's `make run` in a copy of the checkout.

Everything a user does on such a host, with real packets through the kernel's OVS
datapath: docker run, ping, isolation, NAT out, a published port; a policy enforced with
conntrack zones of the kernel, where a connection made before a deny carries on; a
netprofile's kernel meter and DSCP; a service VIP (select group and conntrack NAT in the
kernel) with hairpin; and a netplugin restart that changes no flow and drops no ping.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.host import (
    AGENT_DATA_DIR,
    IPERF_IMAGE,
    LIST_POOL_RECORDS,
    TEST_LABEL,
    endpoint_port,
    parse_pool_records,
)
from testbed.vm.image import Image
from testbed.vm.lab import Lab
from testbed.vm.node import CHECKOUT, Node, copy_checkout
from testbed.wait import wait_for

MAKE_RUN_LOG = "/var/log/make-run.log"
MAKE_RUN_PID = "/run/make-run.pid"
SETTLE = 30.0  # seconds for a change to reach the switch under emulation
# "Outside": a namespace behind the guest, reached only through its NAT (10.0.2.x is QEMU's).
OUTSIDE = "172.31.0.2"
GUEST_SIDE = "172.31.0.1"

# The first test also pays for the guest and `make run`'s install, under emulation.
pytestmark = pytest.mark.timeout(1800)


def start_make_run(node: Node) -> int:
    """`make run` in the copied checkout, in the background as a user's terminal would
    hold it; the log size before it (where to look for this run's lines)."""
    since = node.log_size(MAKE_RUN_LOG)
    node.sh(
        f"cd {CHECKOUT} && (setsid sh -c 'echo $$ >{MAKE_RUN_PID}; exec make run' "
        f">>{MAKE_RUN_LOG} 2>&1 </dev/null &)"
    )
    return since


def stop_make_run(node: Node) -> None:
    """Ctrl-C: SIGINT to make's process group, and wait for all of it to exit."""
    node.sh(
        f"pid=$(cat {MAKE_RUN_PID}); kill -INT -- -$pid; "
        "for i in $(seq 300); do kill -0 -- -$pid 2>/dev/null || exit 0; sleep 0.2; done; exit 1"
    )


@pytest.fixture(scope="module")
def host(vm_image: Image, vm_workdir: Path) -> Iterator[Node]:
    lab = Lab(vm_image, vm_workdir, 1, cpus=2, memory_mb=2048)
    lab.start()
    g = lab.guests[0]
    try:
        copy_checkout(g)
        node = Node(g, "")
        start_make_run(node)
        # The first `make run` makes the venv from the wheels on disk: minutes under TCG.
        node.wait_log(MAKE_RUN_LOG, "netplugin serving", 1200)
        node.master_url = g.forward("127.0.0.1:9999")
        node.sh(f"cd {CHECKOUT} && scripts/test-image.sh all", timeout=600)
        node.sh(
            f"ip netns add outside && ip link add vout type veth peer name vin netns outside && "
            f"ip addr add {GUEST_SIDE}/24 dev vout && ip link set vout up && "
            f"ip -n outside addr add {OUTSIDE}/24 dev vin && ip -n outside link set vin up && "
            f"ip -n outside link set lo up && ip -n outside route add default via {GUEST_SIDE}"
        )
        yield node
    finally:
        (vm_workdir / "make-run.log").write_text(g.run(f"cat {MAKE_RUN_LOG}").stdout)
        lab.stop()


def test_make_run_takes_the_kernel_datapath_and_says_so(host: Node) -> None:
    log = host.sh(f"cat {MAKE_RUN_LOG}")
    assert "openvswitch: started (datapath system)" in log
    assert re.search(r"netplugin serving .*datapath system", log)
    assert host.sh("ovs-vsctl get bridge netplugin datapath_type").strip() == "system"
    # The bridge is a kernel datapath: the module's own view of it.
    assert re.search(r"port \d+: netplugin \(internal\)", host.sh("ovs-dpctl show"))


def test_run_ping_isolation_nat_and_a_published_port(host: Node) -> None:
    create = f"docker network create --label {TEST_LABEL} -d netplugin --ipam-driver netplugin"
    host.sh(f"{create} --subnet 10.11.0.0/24 k1 && {create} --subnet 10.12.0.0/24 k2")
    a, b, c = host.box("ka", "k1"), host.box("kb", "k1"), host.box("kc", "k2")
    assert host.pings(b, host.ip(a))
    # Their ports (pool ports, found by the agent's records of whom each serves) are on the
    # kernel datapath, and the echo went through it.
    records = parse_pool_records(host.sh(LIST_POOL_RECORDS.format(root=AGENT_DATA_DIR)))
    kernel_ports = host.sh("ovs-dpctl show")
    for box in (a, b, c):
        port = endpoint_port(records, host.endpoint_id(box))
        assert re.search(rf"port \d+: {port}\n", kernel_ports), (port, kernel_ports)
    assert f"ipv4(src={host.ip(b)}" in host.sh("ovs-dpctl dump-flows")
    assert host.pings(a, "10.11.0.1")  # the gateway
    # Networks do not reach each other.
    assert not host.pings(c, host.ip(a), count=1)
    # Out through NAT: the outside sees the guest's address, not the container's.
    server = (
        "import socket; s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('{OUTSIDE}', 7000)); s.listen(); c, a = s.accept(); "
        "c.send(a[0].encode()); c.close()"
    )
    host.sh(f"(ip netns exec outside timeout 300 python3 -c {shlex.quote(server)} "
            ">/dev/null 2>&1 </dev/null &)")  # fmt: skip
    wait_for(lambda: ":7000" in host.sh("ip netns exec outside ss -ltn"), SETTLE, "server up")
    seen = host.exec(a, f"sleep 3 | nc -w 5 {OUTSIDE} 7000").stdout.strip()
    assert seen == GUEST_SIDE
    # A published port, from outside: DNAT to the container, and docker port shows it.
    host.box("kweb", "k1", "sh", "-c",
             "mkdir /www && hostname >/www/index.html && httpd -f -p 80 -h /www",
             opts="-p 8080:80")  # fmt: skip
    body = wait_for(
        lambda: host.g.run(f"ip netns exec outside wget -qO- -T 5 http://{GUEST_SIDE}:8080/").stdout,
        SETTLE, "the published port answers from outside",
    )  # fmt: skip
    assert body.strip()


def test_policy_uses_kernel_conntrack_zones_and_keeps_established(host: Node) -> None:
    host.netctl("net", "create", "-s", "10.13.0.0/24", "kp")
    host.netctl("group", "create", "kp", "kweb2")
    host.netctl("group", "create", "kp", "kapp")
    host.netctl("policy", "create", "kdeny")
    host.netctl("group", "update", "-p", "kdeny", "kweb2")
    host.wait_network("kweb2", SETTLE)
    w = host.box("kw", "kweb2", "nc", "-ll", "-p", "80", "-e", "cat")
    app, app2 = host.box("kapp1", "kapp"), host.box("kapp2", "kapp")
    wip = host.ip(w)
    # A long session: a line every 0.2 s, echoed back into /out.
    host.sh(f"docker exec -d {app} sh -c "
            f"'(while true; do echo x; sleep 0.2; done) | nc {wip} 80 >/out'")  # fmt: skip

    def size() -> int:
        return int(host.exec(app, "wc -c </out").stdout.strip() or 0)

    wait_for(lambda: size() > 0, SETTLE, "the session echoes")
    assert host.exec(app2, f"echo hi | nc -w 3 {wip} 80").stdout.strip() == "hi"
    host.netctl(
        "policy", "rule-add", "-d", "in", "-l", "tcp", "-P", "80", "-j", "deny", "kdeny", "1"
    )
    wait_for(lambda: host.exec(app2, f"echo hi | nc -w 3 {wip} 80").stdout.strip() == "",
             SETTLE * 2, "a new connection is denied")  # fmt: skip
    before = size()
    wait_for(lambda: size() > before + 10, SETTLE, "the established session carries on")
    # The kernel's conntrack holds the session, in a zone of netplugin's.
    entries = host.sh(f"conntrack -L -p tcp --dport 80 -d {wip} 2>/dev/null")
    assert re.search(r"ESTABLISHED .* zone=\d+", entries), entries


def iperf_mbps(host: Node, sender: str, server_ip: str) -> float:
    out = host.exec(sender, f"iperf3 -J -c {server_ip} -t 5", timeout=120).stdout
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


def test_netprofile_is_a_kernel_meter_and_marks_dscp(host: Node) -> None:
    host.netctl("net", "create", "-s", "10.14.0.0/24", "kn")
    host.netctl("netprofile", "create", "-b", "8mbps", "-d", "46", "kgold")
    host.netctl("group", "create", "-n", "kgold", "kn", "kvideo")
    host.wait_network("kvideo", SETTLE)
    server = host.box("kiperf", "kn", "iperf3", "-s", image=IPERF_IMAGE)
    sender = host.box("ksend", "kvideo", image=IPERF_IMAGE)
    sip = host.ip(server)
    rate = iperf_mbps(host, sender, sip)
    assert abs(rate - 8) <= 0.15 * 8, rate
    # The kernel datapath applies the meter itself.
    assert "meter(" in host.sh("ovs-dpctl dump-flows")
    # DSCP 46 on what it sends, seen by a capture in the receiver's namespace.
    pid = host.pid(server)
    out = host.sh(
        f"(nsenter -t {pid} -n timeout 20 tcpdump -l -nn -v -c 3 -i eth0 icmp >/tmp/tos "
        f"2>/dev/null &); sleep 2; docker exec {sender} ping -c 3 -i 0.3 {sip} >/dev/null; "
        "sleep 1; cat /tmp/tos"
    )
    assert set(re.findall(r"\btos (0x[0-9a-f]+)", out)) == {"0xb8"}, out


def test_service_vip_in_the_kernel_with_hairpin(host: Node) -> None:
    host.netctl("net", "create", "-s", "10.15.0.0/24", "ks")
    host.netctl("service", "create", "-s", "ks", "-l", "app=kweb", "-p", "80:8080:TCP", "ksvc")
    web = "mkdir /www && hostname >/www/index.html && httpd -f -p 8080 -h /www"
    p1 = host.box("kp1", "ks", "sh", "-c", web, opts="--label app=kweb")
    host.box("kp2", "ks", "sh", "-c", web, opts="--label app=kweb")
    client = host.box("kcl", "ks")
    vip = host.service_vip("ksvc")

    def providers() -> set[str]:
        return {host.http_get(client, vip) for _ in range(8)}

    wait_for(lambda: len(providers() - {""}) == 2, SETTLE * 2,
             "connections to the VIP reach both providers")  # fmt: skip
    # Hairpin: a provider reaches its own VIP (and may be picked for itself).
    assert host.http_get(p1, vip)
    groups = host.sh("ovs-ofctl -O OpenFlow15 dump-groups netplugin")
    assert "type=select" in groups and "dp_hash" in groups


def test_restart_changes_no_flow_and_drops_no_ping(host: Node) -> None:
    a, b = "ka", "kb"  # from the first test: their network and flows stand
    target = host.ip(a)
    before = host.flows()
    host.sh(f"docker exec -d {b} sh -c 'ping -i 0.2 {target} >/ping.log'")
    stop_make_run(host)
    since = start_make_run(host)
    host.wait_log(MAKE_RUN_LOG, "resynced with the cluster", 600, since=since)
    reconciled = host.wait_log(MAKE_RUN_LOG, "reconciled switch", 120, since=since)
    assert re.search(r"0 added \(0 replaced\), 0 deleted", reconciled), reconciled
    assert host.flows() == before
    host.sh(f"pkill -INT -f 'ping -i 0.2 {target}'")
    log = host.exec(b, "cat /ping.log").stdout
    sent = len(re.findall(r"seq=\d+", log))
    seqs = {int(s) for s in re.findall(r"seq=(\d+)", log)}
    assert sent > 20 and seqs == set(range(min(seqs), max(seqs) + 1)), log[-500:]
