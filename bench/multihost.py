"""Several hosts: cross-host throughput, network propagation, allocation from 3 hosts.

Runs on the simulated cluster of the integration tests (testbed/multihost.py): three
host namespaces with their own userspace OVS, dockerd and netplugin agent, etcd and two
masters in a control namespace.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import requests_unixsocket

from testbed.host import IPERF_IMAGE, TEST_LABEL
from testbed.multihost import Cluster, SimHost, sh, veth_into, wait_for

BASELINE_NET = "192.168.78"  # the kernel VXLAN's own underlay


def _iperf_json(out: str) -> float:
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e9


def netplugin_vxlan_gbps(cluster: Cluster, seconds: int) -> float:
    """iperf3 between containers on h1 and h2, over a netplugin VXLAN network."""
    net = f"bx{uuid.uuid4().hex[:6]}"
    cluster.netctl("net", "create", "-s", "10.210.0.0/24", net)
    try:
        return iperf_gbps(cluster, net, seconds)
    finally:
        cluster.netctl("net", "rm", net, check=False)


def iperf_gbps(cluster: Cluster, net: str, seconds: int) -> float:
    """iperf3 from a container on h2 to one on h1, on the docker network ``net`` (once
    both hosts' docker have it)."""
    h1, h2 = cluster.hosts[0], cluster.hosts[1]
    for h in (h1, h2):
        wait_for(lambda h=h: net in h.docker("network", "ls", "--format", "{{.Name}}"), 30, net)
    server = f"ips{uuid.uuid4().hex[:6]}"
    h1.docker(
        "run", "-d", "--label", TEST_LABEL, "--name", server, "--net", net, IPERF_IMAGE,
        "iperf3", "-s",
    )  # fmt: skip
    try:
        time.sleep(0.5)
        ip = cluster.ip_of(h1, server)
        out = h2.docker(
            "run", "--rm", "--label", TEST_LABEL, "--net", net, IPERF_IMAGE,
            "iperf3", "-J", "-c", ip, "-t", str(seconds),
            timeout=seconds + 60,
        )  # fmt: skip
        return _iperf_json(out)
    finally:
        h1.docker_res("rm", "-f", server)


def kernel_vxlan_gbps(cluster: Cluster, seconds: int) -> float:
    """iperf3 between the same two host namespaces over a plain Linux VXLAN device, on an
    underlay of the same kind as ours (a veth per host on a Linux bridge)."""
    h1, h2 = cluster.hosts[0], cluster.hosts[1]
    hosts = ((h1, 1, 2), (h2, 2, 1))
    try:
        for h, me, peer in hosts:
            veth_into(h.netns, "kb", f"{cluster.tag}k{me}", cluster.vlan_bridge)
            h.ns("ip", "addr", "add", f"{BASELINE_NET}.{me}/24", "dev", "kb")
            h.ns(
                "ip", "link", "add", "kvx", "type", "vxlan", "id", "4242", "dstport", "4790",
                "local", f"{BASELINE_NET}.{me}", "remote", f"{BASELINE_NET}.{peer}", "dev", "kb",
            )  # fmt: skip
            h.ns("ip", "addr", "add", f"10.211.0.{me}/24", "dev", "kvx")
            h.ns("ip", "link", "set", "kvx", "up")
        h1.ns("iperf3", "-s", "-1", "-D")
        time.sleep(0.5)
        out = h2.ns("iperf3", "-J", "-c", "10.211.0.1", "-t", str(seconds))
        return _iperf_json(out)
    finally:
        for h, me, _ in hosts:
            h.ns("ip", "link", "del", "kvx", check=False)
            sh("ip", "link", "del", f"{cluster.tag}k{me}", check=False)
        sh("pkill", "-f", "iperf3 -s -1 -D", check=False)


def propagation_seconds(cluster: Cluster, runs: int) -> list[float]:
    """From `netctl net create` until the network is in every host's docker."""
    out = []
    for i in range(runs):
        net = f"bp{uuid.uuid4().hex[:6]}"
        t0 = time.perf_counter()
        cluster.netctl("net", "create", "-s", f"10.220.{i}.0/24", net)
        for h in cluster.hosts:
            wait_for(
                lambda h=h, net=net: net in h.docker("network", "ls", "--format", "{{.Name}}"),
                60,
                f"{h.name}: {net}",
                interval=0.02,
            )
        out.append(time.perf_counter() - t0)
        cluster.netctl("net", "rm", net)
    return out


def _plugin_session(host: SimHost) -> tuple[Any, str]:
    assert host.holder is not None
    sock = f"/proc/{host.holder.pid}/root/run/docker/plugins/netplugin.sock"
    return requests_unixsocket.Session(), "http+unix://" + sock.replace("/", "%2F")


def allocation_rates(cluster: Cluster, per_host: int) -> dict[str, float]:
    """Docker's RequestAddress sent straight to each host's plugin socket, on one network:
    1 host alone, then 3 hosts at once (4 threads each). Addresses are released after."""
    net = f"ba{uuid.uuid4().hex[:6]}"
    cluster.netctl("net", "create", "-s", "10.230.0.0/16", net)
    pool = cluster.api("GET", f"inspect/networks/default:{net}").json()["Oper"]["ipv4Pool"]
    given: list[tuple[SimHost, str]] = []
    lock = threading.Lock()

    def allocate(host: SimHost, n: int) -> None:
        session, base = _plugin_session(host)
        for _ in range(n):
            r = session.post(
                f"{base}/IpamDriver.RequestAddress",
                json={"PoolID": pool, "Address": "", "Options": {}},
                timeout=30,
            )
            r.raise_for_status()
            with lock:
                given.append((host, r.json()["Address"]))

    def timed(hosts: list[SimHost], threads: int) -> float:
        workers = [
            threading.Thread(target=allocate, args=(h, per_host // threads))
            for h in hosts
            for _ in range(threads)
        ]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return (per_host // threads) * len(workers) / (time.perf_counter() - t0)

    try:
        one = timed(cluster.hosts[:1], 4)
        three = timed(cluster.hosts, 4)
        addrs = [a for _, a in given]
        assert len(addrs) == len(set(addrs)), "an address was handed out twice"
        return {"one_host": one, "three_hosts": three}
    finally:
        for host, addr in given:
            session, base = _plugin_session(host)
            session.post(
                f"{base}/IpamDriver.ReleaseAddress",
                json={"PoolID": pool, "Address": addr},
                timeout=30,
            )
        cluster.netctl("net", "rm", net, check=False)


def run(workdir: Path) -> dict[str, Any]:
    cluster = Cluster(workdir / "multihost").start()
    try:
        for h in cluster.hosts[:2]:
            h.load_image(IPERF_IMAGE)
        seconds = 5
        ours = netplugin_vxlan_gbps(cluster, seconds)
        kernel = kernel_vxlan_gbps(cluster, seconds)
        prop = propagation_seconds(cluster, 5)
        alloc = allocation_rates(cluster, 240)
        return {
            "iperf": {"netplugin": ours, "kernel": kernel, "seconds": seconds},
            "propagation": {
                "median": statistics.median(prop),
                "max": max(prop),
                "runs": len(prop),
            },
            "alloc": alloc,
            "datapath": "netdev",
        }
    finally:
        cluster.stop()
