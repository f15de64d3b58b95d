"""A real BGP router for the integration tests: Debian's FRR (zebra and bgpd) in a network
namespace, every file of it under one work directory, started and stopped by PID.

It is the top-of-rack router of routing mode's tests: the hosts' agents peer with it (their
os-ken speakers), it installs the routes they announce in its namespace's kernel (zebra)
and routes between them and the networks behind it. ``vtysh`` asks it what it knows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .multihost import Cluster, SimHost, sh, veth_into
from .ovs import stop_pid
from .wait import wait_for

FRR_DIR = Path("/usr/lib/frr")


def frr_available() -> bool:
    return (
        (FRR_DIR / "bgpd").exists() and (FRR_DIR / "zebra").exists() and bool(shutil.which("vtysh"))
    )


def frr_config(
    router_id: str, asn: int, neighbors: Mapping[str, int], networks: Sequence[str], log: Path
) -> str:
    """bgpd's configuration: eBGP with each neighbor (fast timers, so a dead peer is seen in
    seconds), next hop self (the fabric's traffic goes through the router), and the
    networks behind the router announced; IPv6 unicast too (over the same sessions) if
    one of them is IPv6."""
    lines = [
        "frr defaults datacenter",
        f"log file {log}",
        "!",
        f"router bgp {asn}",
        f" bgp router-id {router_id}",
        " no bgp ebgp-requires-policy",
        " no bgp network import-check",
    ]
    for address, remote_as in neighbors.items():
        lines += [
            f" neighbor {address} remote-as {remote_as}",
            f" neighbor {address} timers 3 9",
            f" neighbor {address} timers connect 1",
        ]
    v6 = [n for n in networks if ":" in n]
    for family, nets in (("ipv4", [n for n in networks if ":" not in n]), ("ipv6", v6)):
        if family == "ipv6" and not nets:
            continue
        lines += [" !", f" address-family {family} unicast"]
        lines += [f"  network {n}" for n in nets]
        if family == "ipv6":
            lines += [f"  neighbor {a} activate" for a in neighbors]
        lines += [f"  neighbor {a} next-hop-self" for a in neighbors]
        lines += [" exit-address-family"]
    lines += ["!", ""]
    return "\n".join(lines)


class FrrRouter:
    """zebra and bgpd in ``netns``; ``start()`` writes the config and waits for bgpd; the
    daemons' logs stay in their directory until ``stop()``."""

    def __init__(
        self,
        netns: str,
        router_id: str,
        asn: int,
        neighbors: Mapping[str, int],
        networks: Sequence[str] = (),
    ) -> None:
        # FRR drops to its own user: its files live in a directory of theirs (a pytest
        # directory is root's alone), removed by stop().
        self.dir = Path(tempfile.mkdtemp(prefix="netplugin-frr-"))
        self.netns = netns
        self.router_id = router_id
        self.asn = asn
        self.neighbors = dict(neighbors)
        self.networks = list(networks)
        self.procs: list[subprocess.Popen[bytes]] = []

    def _daemon(self, name: str, *extra: str) -> subprocess.Popen[bytes]:
        args = [
            "nsenter", f"--net=/var/run/netns/{self.netns}",
            str(FRR_DIR / name),
            "-u", "frr", "-g", "frr",
            "-i", str(self.dir / f"{name}.pid"),
            "-z", str(self.dir / "zserv.api"),
            "--vty_socket", str(self.dir),
            "-f", str(self.dir / "frr.conf"),
            "-A", "127.0.0.1", "-P", "0",
            *extra,
        ]  # fmt: skip
        with open(self.dir / f"{name}.out", "ab") as out:
            return subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start(self) -> FrrRouter:
        self.dir.chmod(0o755)
        shutil.chown(self.dir, "frr", "frr")
        conf = frr_config(
            self.router_id, self.asn, self.neighbors, self.networks, self.dir / "frr.log"
        )
        (self.dir / "frr.conf").write_text(conf)
        shutil.chown(self.dir / "frr.conf", "frr", "frr")
        self.procs.append(self._daemon("zebra"))
        wait_for(lambda: (self.dir / "zserv.api").exists(), 10, "zebra's socket")
        self.procs.append(self._daemon("bgpd", "-l", self.router_id))
        wait_for(lambda: (self.dir / "bgpd.vty").exists(), 10, "bgpd's vty socket")
        return self

    def stop(self, keep_logs: Path | None = None) -> None:
        """Stop the daemons and remove their directory (its logs copied to ``keep_logs``)."""
        for p in reversed(self.procs):
            stop_pid(p)
        self.procs.clear()
        if keep_logs is not None:
            keep_logs.mkdir(parents=True, exist_ok=True)
            for log in self.dir.glob("*.log"):
                shutil.copy(log, keep_logs / log.name)
        shutil.rmtree(self.dir, ignore_errors=True)

    def vtysh(self, command: str) -> str:
        res = subprocess.run(
            ["nsenter", f"--net=/var/run/netns/{self.netns}", "vtysh", "--vty_socket",
             str(self.dir), "-c", command],
            capture_output=True, text=True, timeout=20, check=False,
            env={**os.environ, "VTYSH_PAGER": "cat"},
        )  # fmt: skip
        return res.stdout

    def vjson(self, command: str) -> Any:
        out = self.vtysh(command + " json")
        try:
            return json.loads(out)
        except ValueError:
            return {}

    def routes(self, family: str = "ipv4") -> dict[str, list[str]]:
        """The BGP table of ``family`` (ipv4, ipv6): prefix -> the next hops of its paths."""
        table = self.vjson(f"show bgp {family} unicast").get("routes", {})
        return {
            prefix: sorted(hop.get("ip", "") for path in paths for hop in path.get("nexthops", []))
            for prefix, paths in table.items()
        }

    def peer_state(self, neighbor: str) -> str:
        info = self.vjson(f"show bgp neighbors {neighbor}")
        return str(info.get(neighbor, {}).get("bgpState", ""))


ROUTER_IP = "10.200.0.254"  # the router on the hosts' VLAN uplinks
ROUTER_AS = 65000
OUTSIDE_NET = "10.250.0.0/24"  # behind the router: not the cluster's
OUTSIDE_IP = "10.250.0.2"
ROUTER_IP6 = "fd00:200::fe"  # the same, IPv6 (the hosts' --router-ipv6 are on its /64)
OUTSIDE_NET6 = "fd00:250::/64"
OUTSIDE_IP6 = "fd00:250::2"


def router_ip(host: SimHost) -> str:
    return f"10.200.0.{host.index}"


def router_ip6(host: SimHost) -> str:
    return f"fd00:200::{host.index}"


def host_as(host: SimHost) -> int:
    return 65000 + host.index


class Fabric:
    """Routing mode's fabric for a simulated cluster (testbed.multihost): FRR as the
    top-of-rack router on the hosts' VLAN uplinks (ROUTER_IP), each host its own AS, and a
    namespace outside the cluster behind the router (OUTSIDE_NET)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.router_ns, self.outside_ns = f"{cluster.tag}rt", f"{cluster.tag}out"
        sh("ip", "netns", "add", self.router_ns)
        sh("ip", "netns", "add", self.outside_ns)
        veth_into(self.router_ns, "eth0", f"{cluster.tag}r0", cluster.vlan_bridge)
        self.rt(
            "ip", "link", "add", "eth1", "type", "veth", "peer", "eth0", "netns", self.outside_ns
        )
        for cmd in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{ROUTER_IP}/24", "dev", "eth0"],
            ["ip", "addr", "add", "10.250.0.1/24", "dev", "eth1"],
            ["ip", "addr", "add", f"{ROUTER_IP6}/64", "dev", "eth0", "nodad"],
            ["ip", "addr", "add", "fd00:250::1/64", "dev", "eth1", "nodad"],
            ["ip", "link", "set", "eth1", "up"],
            ["sysctl", "-qw", "net.ipv4.ip_forward=1"],
            ["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"],
            # A real wire carries finished checksums (the hosts' userspace OVS needs them).
            ["ethtool", "-K", "eth0", "tx", "off"],
        ):
            self.rt(*cmd)
        for cmd in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{OUTSIDE_IP}/24", "dev", "eth0"],
            ["ip", "addr", "add", f"{OUTSIDE_IP6}/64", "dev", "eth0", "nodad"],
            ["ip", "link", "set", "eth0", "up"],
            ["ip", "route", "add", "default", "via", "10.250.0.1"],
            ["ip", "-6", "route", "add", "default", "via", "fd00:250::1"],
        ):
            sh("ip", "netns", "exec", self.outside_ns, *cmd)
        neighbors = {router_ip(h): host_as(h) for h in cluster.hosts}
        self.frr = FrrRouter(
            self.router_ns, ROUTER_IP, ROUTER_AS, neighbors, [OUTSIDE_NET, OUTSIDE_NET6]
        )
        self.frr.start()

    def rt(self, *cmd: str) -> str:
        return sh("ip", "netns", "exec", self.router_ns, *cmd).stdout

    def peer_hosts(self) -> Fabric:
        """A Bgp object per host: each agent peers with the router, with an IPv6 router IP
        too (its containers' /128s)."""
        for h in self.cluster.hosts:
            self.cluster.netctl(
                "bgp", "create", "--router-ip", f"{router_ip(h)}/24", "--as", str(host_as(h)),
                "--router-ipv6", f"{router_ip6(h)}/64",
                "--neighbor-as", str(ROUTER_AS), "--neighbor", ROUTER_IP, h.name,
            )  # fmt: skip
        return self

    def stop(self, logs: Path) -> None:
        self.frr.stop(keep_logs=logs)
        for ns in (self.router_ns, self.outside_ns):
            sh("ip", "netns", "del", ns, check=False)
