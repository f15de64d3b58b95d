"""A simulated cluster on one machine: hosts are network namespaces.

Layout (everything named with this run's tag, removed by stop()):

    root namespace: underlay bridge UL (192.168.77.254/24: the test's own client address)
                    and VLAN bridge VL (no address: it carries tagged frames between hosts)
    control namespace: etcd and the masters on 192.168.77.100, its eth0 on UL; the masters
                    serve HTTPS with a certificate of this run's own CA and require tokens
                    (the agents present the agent token, the test the admin token)
    host i (i = 1..n), one namespace each:
        eth1 on UL with 192.168.77.i   the VTEP address (moved onto OVS by userspace tunneling)
        eth2 on VL                     the VLAN uplink (--vlan-if)
        its own ovsdb-server and userspace ovs-vswitchd
        a private mount namespace (its own /run/docker/plugins) holding its own dockerd and
        its own netplugin agent; the test talks to that dockerd through its socket

Docker's FORWARD policy DROP and br_netfilter would drop IPv4 bridged between the hosts, so
the two bridges get ACCEPT rules while the lab runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from common import keys
from store import Store, open_store

from .etcd import EtcdServer
from .host import (
    BUSYBOX_IMAGE,
    TEST_LABEL,
    ensure_test_image,
    pool_records,
    read_pid,
    spare_pool_ports,
)
from .master import MasterProcess
from .ovs import OvsInstance, stop_pid
from .pki import MasterSecurity
from .wait import wait_for

BIN = Path(sys.executable).parent
SUBNET = "192.168.77"
CONTROL_IP = f"{SUBNET}.100"
CLIENT_IP = f"{SUBNET}.254"


def sh(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr or res.stdout}")
    return res


def veth_into(netns: str, ns_end: str, root_end: str, bridge: str) -> None:
    """A veth whose ``ns_end`` is in ``netns`` and whose ``root_end`` is on ``bridge``."""
    sh("ip", "link", "add", root_end, "type", "veth", "peer", "name", ns_end, "netns", netns)
    sh("ip", "link", "set", root_end, "master", bridge, "up")
    sh("ip", "netns", "exec", netns, "ip", "link", "set", ns_end, "up")


@dataclass
class SimHost:
    """One simulated host: namespace, OVS, dockerd and netplugin agent."""

    index: int
    tag: str
    workdir: Path
    ovs: OvsInstance = field(init=False)
    holder: subprocess.Popen[bytes] | None = None
    dockerd: subprocess.Popen[bytes] | None = None
    agent: subprocess.Popen[bytes] | None = None
    agent_extra: list[str] = field(default_factory=list)
    security: MasterSecurity | None = None  # the masters' CA and the agent's token
    # The dockerd to run (testbed/site.py: the host's 20.10, or Docker 26).
    dockerd_cmd: list[str] = field(default_factory=lambda: ["dockerd"])

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ovs = OvsInstance(f"{self.tag}h{self.index}", self.workdir / "ovs", userspace_tso=True)

    @property
    def name(self) -> str:
        return f"h{self.index}"

    @property
    def netns(self) -> str:
        return self.ovs.netns

    @property
    def vtep_ip(self) -> str:
        return f"{SUBNET}.{self.index}"

    @property
    def docker_sock(self) -> Path:
        return self.workdir / "docker.sock"

    @property
    def agent_log(self) -> Path:
        return self.workdir / "netplugin.log"

    def docker(self, *args: str, check: bool = True, timeout: float = 90) -> str:
        """The docker CLI against this host's dockerd."""
        return sh(
            "docker", "-H", f"unix://{self.docker_sock}", *args, check=check, timeout=timeout
        ).stdout

    def docker_res(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return sh("docker", "-H", f"unix://{self.docker_sock}", *args, check=False, timeout=timeout)

    def ns(self, *cmd: str, check: bool = True) -> str:
        return sh("ip", "netns", "exec", self.netns, *cmd, check=check).stdout

    def _in_host(self, cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
        """Start cmd in this host's network and mount namespaces."""
        assert self.holder is not None
        with open(log, "ab") as out:
            return subprocess.Popen(
                ["nsenter", "-t", str(self.holder.pid), "--mount", "--net", *cmd],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def start_namespaces(self, underlay: str, vlan_bridge: str) -> None:
        self.ovs.start()
        for ifname, bridge in (("eth1", underlay), ("eth2", vlan_bridge)):
            veth_into(self.netns, ifname, f"{self.tag}{self.index}{ifname[-1]}", bridge)
        self.ns("ip", "addr", "add", f"{self.vtep_ip}/24", "dev", "eth1")
        # A private mount namespace inside the host's network namespace, kept by a holder
        # process: its own /run/docker/plugins for its dockerd and its agent.
        self.holder = subprocess.Popen(
            [
                "nsenter",
                f"--net=/var/run/netns/{self.netns}",
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                "mount -t tmpfs netplugin-plugins /run/docker/plugins && exec sleep infinity",
            ],
            start_new_session=True,
        )
        wait_for(
            lambda: "netplugin-plugins" in Path(f"/proc/{self.holder.pid}/mounts").read_text(),  # type: ignore[union-attr]
            10,
            f"{self.name}: private /run/docker/plugins",
            interval=0.05,
        )

    def start_dockerd(self) -> None:
        data = self.workdir / "docker"
        self.dockerd = self._in_host(
            [
                *self.dockerd_cmd,
                "--data-root",
                str(data / "data"),
                "--exec-root",
                str(data / "exec"),
                "-H",
                f"unix://{self.docker_sock}",
                "--pidfile",
                str(data / "docker.pid"),
                "--bridge",
                "none",
            ],
            self.workdir / "dockerd.log",
        )
        wait_for(
            lambda: self.docker_res("info").returncode == 0,
            90,
            f"{self.name}: dockerd answering",
            interval=0.3,
        )

    def stop_dockerd(self, timeout: float = 60) -> None:
        """Stop dockerd and its containerd, as a service manager would, and wait for both:
        a dockerd started before the previous containerd exited times out on its socket."""
        stop_pid(self.dockerd, timeout=timeout)
        self.dockerd = None
        pidfile = self.workdir / "docker" / "exec" / "containerd" / "containerd.pid"
        containerd = read_pid(pidfile)
        if containerd is not None:
            os.kill(containerd, signal.SIGTERM)
            wait_for(
                lambda: read_pid(pidfile) != containerd,
                timeout,
                f"{self.name}: containerd {containerd} exits",
                interval=0.2,
            )

    def restart_dockerd(self) -> None:
        self.stop_dockerd()
        self.start_dockerd()

    def load_image(self, image: str = BUSYBOX_IMAGE) -> None:
        ensure_test_image(image)
        saved = self.workdir.parent / f"{image.replace('/', '_')}.tar"
        if not saved.exists():
            sh("docker", "save", "-o", str(saved), image, timeout=120)
        self.docker("load", "-i", str(saved), timeout=120)

    def agent_command(self, etcd: str, master: str) -> list[str]:
        sec = self.security
        secured = (
            ["--tls-ca", str(sec.ca), "--auth-token-file", str(sec.token_file("agent"))]
            if sec is not None
            else []
        )
        return [
            str(BIN / "netplugin"),
            "--host", self.name,
            "--netmaster", master,
            "--etcd-endpoints", etcd,
            "--vtep-ip", self.vtep_ip,
            "--vlan-if", "eth2",
            "--ovsdb", self.ovs.db_target,
            "--docker-host", f"unix://{self.docker_sock}",
            "--host-ttl", "3",
            "--log-level", "info",
            # The simulated hosts share one filesystem: each agent its own inspect API.
            "--api-socket", str(self.workdir / "api.sock"),
            "--cni-socket", str(self.workdir / "cni.sock"),
            *secured,
            *self.agent_extra,
        ]  # fmt: skip

    def start_agent(self, etcd: str, master: str, timeout: float = 30) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NETPLUGIN_")}
        assert self.holder is not None
        with open(self.agent_log, "ab") as out:
            self.agent = subprocess.Popen(
                [
                    "nsenter",
                    "-t",
                    str(self.holder.pid),
                    "--mount",
                    "--net",
                    *self.agent_command(etcd, master),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        sock = f"/proc/{self.holder.pid}/root/run/docker/plugins/netplugin.sock"
        wait_for(
            lambda: self._agent_alive() and os.path.exists(sock),
            timeout,
            f"{self.name}: netplugin serving",
        )

    def _agent_alive(self) -> bool:
        if not self.agent_running():
            raise RuntimeError(f"{self.name}: netplugin exited:\n{self.log_tail()}")
        return True

    def agent_running(self) -> bool:
        return self.agent is not None and self.agent.poll() is None

    def stop_agent(self, sig: int = signal.SIGTERM) -> None:
        stop_pid(self.agent, sig)
        self.agent = None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.agent_log.read_text().splitlines()[-n:])
        except OSError:
            return ""

    def ovs_ports(self, bridge: str = "netplugin") -> list[str]:
        return self.ovs.vsctl("list-ports", bridge).split()

    def endpoint_ports(self, bridge: str = "netplugin") -> list[str]:
        """The switch ports serving endpoints: veths' (vp...) and pool ports' (vq...) the
        agent recorded as serving one; not the pool's spare ones."""
        spare = spare_pool_ports(self.ns("ip", "-o", "link"), pool_records())
        return [p for p in self.ovs_ports(bridge) if p[:2] in ("vp", "vq") and p not in spare]

    def tunnels(self) -> set[str]:
        return {p for p in self.ovs_ports() if p.startswith("vx")}

    @property
    def tunnel(self) -> str:
        """The name of the tunnel port that the other hosts have to this one."""
        return f"vx{bytes(int(o) for o in self.vtep_ip.split('.')).hex()}"

    def netplugin_networks(self) -> set[str]:
        """The networks of this host's dockerd that netplugin drives."""
        out = self.docker("network", "ls", "--filter", "driver=netplugin", "--format", "{{.Name}}")
        return set(out.split())

    def test_containers(self) -> list[str]:
        return self.docker("ps", "-aq", "--filter", f"label={TEST_LABEL}").split()

    def stop(self) -> None:
        # Containers first (their endpoints), while the agent still answers dockerd.
        if self.dockerd is not None and self.dockerd.poll() is None:
            ids = self.docker_res("ps", "-aq").stdout.split()
            if ids:
                self.docker_res("rm", "-f", *ids)
        self.stop_agent()
        self.stop_dockerd()
        stop_pid(self.holder, signal.SIGKILL)
        self.holder = None
        self.ovs.stop()


_LAB_NETNS = re.compile(r"^np\d+(h\d+|ctl|rt|out)$")
_LAB_LINK = re.compile(r"^np\d+(ul|vl)$")


def sweep_stale_labs(tag: str) -> list[str]:
    """Remove what a killed run of another tag left: its namespaces (and the processes
    in them), bridges and FORWARD rules. A leftover bridge holding CLIENT_IP would steal
    this run's traffic."""
    removed = []
    for line in sh("ip", "netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if _LAB_NETNS.match(name) and not name.startswith(tag):
            for pid in sh("ip", "netns", "pids", name, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            sh("ip", "netns", "del", name, check=False)
            removed.append(f"netns {name}")
    for line in sh("ip", "-o", "link", "show", "type", "bridge").stdout.splitlines():
        name = line.split(":")[1].strip()
        if _LAB_LINK.match(name) and not name.startswith(tag):
            sh("ip", "link", "del", name, check=False)
            removed.append(f"bridge {name}")
    for rule in sh("iptables", "-S", "FORWARD").stdout.splitlines():
        parts = rule.split()
        stale = len(parts) > 3 and _LAB_LINK.match(parts[3]) and not parts[3].startswith(tag)
        if stale and parts[:2] == ["-A", "FORWARD"]:
            sh("iptables", "-D", *parts[1:], check=False)
            removed.append(f"rule {rule}")
    return removed


@dataclass(frozen=True)
class Snapshot:
    """What a test found: the cluster's networks, and each host's netplugin docker networks."""

    networks: set[str]
    docker_networks: dict[str, set[str]]


class Cluster:
    """etcd, two masters and ``n`` hosts with their own OVS, dockerd and agent."""

    def __init__(
        self,
        workdir: Path,
        hosts: int = 3,
        masters: int = 2,
        dockerd: list[str] | None = None,
    ) -> None:
        self.tag = f"np{os.getpid() % 10000}"
        self.workdir = workdir
        self.underlay = f"{self.tag}ul"
        self.vlan_bridge = f"{self.tag}vl"
        self.control_ns = f"{self.tag}ctl"
        self.etcd = EtcdServer(workdir / "etcd", host=CONTROL_IP, netns=self.control_ns)
        # The masters listen beyond loopback: the secure way, as the README tells operators.
        self.security = MasterSecurity.create(workdir / "pki", ips=[CONTROL_IP])
        self.masters = [
            MasterProcess(
                workdir / f"master{i}",
                etcd_endpoints=self.etcd.endpoint,
                port=9990 + i,
                host=CONTROL_IP,
                netns=self.control_ns,
                extra=["--leader-ttl", "3"],
                security=self.security,
            )
            for i in range(masters)
        ]
        self.hosts = [
            SimHost(
                i + 1,
                self.tag,
                workdir / f"h{i + 1}",
                security=self.security,
                dockerd_cmd=dockerd or ["dockerd"],
            )
            for i in range(hosts)
        ]
        self._rules: list[list[str]] = []
        self._store: Store | None = None

    @property
    def master_url(self) -> str:
        """A running master's URL (any works: followers forward to the leader)."""
        return next((m.url for m in self.masters if m.proc is not None), self.masters[0].url)

    def start(self, agents: bool = True) -> Cluster:
        """Start it all; without ``agents``, the hosts' dockerds run with no netplugin (a
        test runs its own, e.g. a managed plugin)."""
        for what in sweep_stale_labs(self.tag):
            print(f"multihost: removed a killed run's {what}", file=sys.stderr)
        try:
            self._start_network()
            self.etcd.start()
            for m in self.masters:
                m.start()
            for h in self.hosts:
                h.start_namespaces(self.underlay, self.vlan_bridge)
                h.start_dockerd()
                h.load_image()
            if not agents:
                return self
            for h in self.hosts:
                self.start_agent(h)
            self.wait_tunnels()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_network(self) -> None:
        for br in (self.underlay, self.vlan_bridge):
            sh("ip", "link", "add", br, "type", "bridge")
            sh("ip", "link", "set", br, "up")
            rule = ["FORWARD", "-i", br, "-o", br, "-j", "ACCEPT"]
            sh("iptables", "-I", *rule)
            self._rules.append(rule)
        sh("ip", "addr", "add", f"{CLIENT_IP}/24", "dev", self.underlay)
        sh("ip", "netns", "add", self.control_ns)
        veth_into(self.control_ns, "eth0", f"{self.tag}c", self.underlay)
        for cmd in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{CONTROL_IP}/24", "dev", "eth0"],
            # A real wire carries finished checksums; a veth passes the kernel's partial
            # ones, which the hosts' userspace OVS (AF_PACKET) then delivers unfinished.
            ["ethtool", "-K", "eth0", "tx", "off"],
        ):
            sh("ip", "netns", "exec", self.control_ns, *cmd)

    def underlay_port(self, host: SimHost) -> str:
        """The root-namespace end of a host's underlay link: down = host cut off."""
        return f"{self.tag}{host.index}1"

    def wait_tunnels(self, timeout: float = 30) -> None:
        """Every host has a tunnel to every other one."""
        for h in self.hosts:
            peers = {o.tunnel for o in self.hosts if o is not h}
            wait_for(
                lambda h=h, peers=peers: h.tunnels() == peers,
                timeout,
                f"{h.name}: tunnels to its {len(peers)} peers {sorted(peers)}",
                last=h.tunnels,
            )

    def store(self) -> Store:
        """The cluster store (etcd), read through the store API as the agents read it."""
        if self._store is None:
            self._store = open_store([self.etcd.endpoint], str(self.workdir / "unused-store"))
        return self._store

    def registered(self, host: SimHost) -> bool:
        """Whether ``host`` is a live host: its registration (bound to a lease of the host
        TTL, refreshed by its agent) is in the store. Every agent's cluster view reads it."""
        return self.store().get(keys.host(host.name)) is not None

    def start_agent(self, host: SimHost) -> None:
        host.start_agent(self.etcd.endpoint, self.master_url)

    def ensure_agent(self, host: SimHost) -> None:
        """Start ``host``'s agent again if it was stopped or killed."""
        if not host.agent_running():
            host.stop_agent()  # reaps an agent that died
            self.start_agent(host)

    @staticmethod
    def ensure_master(master: MasterProcess) -> None:
        """Start ``master`` again if it was stopped or killed."""
        if not master.running():
            master.stop()  # reaps one that died, and waits until its port is free
            master.start()

    def heal(self, timeout: float = 60) -> None:
        """Undo what a test may have stopped or cut (etcd, a master, an underlay link, an
        agent), then wait until a master leads, every host is registered, and the tunnels
        form a full mesh. Cheap when nothing is amiss."""
        self.etcd.start()  # a no-op while it runs
        for m in self.masters:
            self.ensure_master(m)
        for h in self.hosts:
            sh("ip", "link", "set", self.underlay_port(h), "up")
        for h in self.hosts:
            self.ensure_agent(h)
        wait_for(lambda: any(self.is_leader(m) for m in self.masters), timeout, "a master leads")
        for h in self.hosts:
            wait_for(
                lambda h=h: self.registered(h), timeout, f"{h.name} is registered in the store"
            )
        self.wait_tunnels(timeout)

    def network_keys(self) -> set[str]:
        """The keys (TENANT:NAME) of the cluster's networks, as the master lists them."""
        r = self.api("GET", "networks")
        r.raise_for_status()
        return {n["key"] for n in r.json()}

    def snapshot(self) -> Snapshot:
        return Snapshot(self.network_keys(), {h.name: h.netplugin_networks() for h in self.hosts})

    def remove_made_since(self, before: Snapshot, timeout: float = 60) -> None:
        """Remove what a test made: its containers (all carry TEST_LABEL), the cluster
        networks that were not there ``before``, and labelled docker networks; then wait
        until every host's docker shows only the netplugin networks it showed ``before``."""
        for h in self.hosts:
            ids = h.test_containers()
            if ids:
                h.docker("rm", "-f", *ids)
        for key in sorted(self.network_keys() - before.networks):
            replies: list[requests.Response] = []

            def deleted(key: str = key, replies: list[requests.Response] = replies) -> bool:
                replies.append(self.api("DELETE", f"networks/{key}"))
                return replies[-1].status_code in (200, 404)

            wait_for(
                deleted,
                timeout,
                f"the master deletes network {key}",
                interval=1,
                last=lambda replies=replies: replies[-1].text,
            )
        for h in self.hosts:
            ids = h.docker("network", "ls", "-q", "--filter", f"label={TEST_LABEL}").split()
            if ids:
                h.docker_res("network", "rm", *ids)
        for h in self.hosts:
            wait_for(
                lambda h=h: h.netplugin_networks() <= before.docker_networks[h.name],
                timeout,
                f"{h.name}: its docker drops the networks a test made",
                last=lambda h=h: h.netplugin_networks() - before.docker_networks[h.name],
            )

    def is_leader(self, master: MasterProcess) -> bool:
        """Whether ``master`` leads (it says so itself)."""
        try:
            info = requests.get(
                f"{master.url}/api/v1/leader", timeout=5, verify=master.verify
            ).json()
        except (requests.RequestException, ValueError):
            return False
        return bool(info.get("self", {}).get("role") == "leader")

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        """A REST call to a running master, as the admin."""
        kw = {"headers": self.security.headers("admin"), "verify": str(self.security.ca), **kw}
        return requests.request(
            method, f"{self.master_url}/api/v1/{path.lstrip('/')}", timeout=30, **kw
        )

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """netctl against a running master, as the admin."""
        secured = [
            "--tls-ca", str(self.security.ca),
            "--auth-token-file", str(self.security.token_file("admin")),
        ]  # fmt: skip
        return sh(str(BIN / "netctl"), "--netmaster", self.master_url, *secured, *args, check=check)

    def run(self, host: SimHost, name: str, net: str, *extra: str) -> str:
        host.docker(
            "run", "-d", "--label", TEST_LABEL, "--name", name, "--net", net, *extra,
            BUSYBOX_IMAGE, "sleep", "3600",
        )  # fmt: skip
        return name

    @staticmethod
    def ip_of(host: SimHost, container: str) -> str:
        nets = json.loads(
            host.docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", container)
        )
        return str(next(iter(nets.values()))["IPAddress"])

    @staticmethod
    def tx_offloads(host: SimHost, container: str) -> bool:
        """Whether the container's eth0 has TX checksumming on."""
        pid = host.docker("inspect", "-f", "{{.State.Pid}}", container).strip()
        features = sh("nsenter", "-t", pid, "-n", "ethtool", "-k", "eth0").stdout
        return "tx-checksumming: on" in features

    def bulk_tcp(
        self, src: tuple[SimHost, str], dst: tuple[SimHost, str], port: int, mib: int = 16
    ) -> int:
        """Send ``mib`` MiB over one TCP connection from a container (or, with container
        "", the host itself, through its gateway port) to a container; the bytes the
        receiver counted. (nc's stdin stays open: busybox nc ends at its stdin's end.)"""
        (sender, s), (receiver, d) = src, dst
        server = f"sleep 120 | nc -l -p {port} | wc -c > /tmp/got{port}"
        receiver.docker("exec", "-d", d, "sh", "-c", server)
        tables = ("cat", "/proc/net/tcp", "/proc/net/tcp6")
        wait_for(
            lambda: f":{port:04X} " in receiver.docker("exec", d, *tables),
            10,
            f"{receiver.name}: nc in {d} listens on {port}",
        )
        target = self.ip_of(receiver, d)
        if s:
            client = f"dd if=/dev/zero bs=1M count={mib} | nc -w 3 {target} {port}"
            sender.docker("exec", s, "sh", "-c", client, timeout=120)
        else:
            send = (
                "import socket,sys\n"
                "with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20) as c:\n"
                "    [c.sendall(bytes(1 << 20)) for _ in range(int(sys.argv[3]))]\n"
            )
            sender.ns(sys.executable, "-c", send, target, str(port), str(mib))

        def got() -> str:
            return receiver.docker_res("exec", d, "cat", f"/tmp/got{port}").stdout.strip()

        with contextlib.suppress(TimeoutError):
            wait_for(lambda: got() == str(mib << 20), 30, f"{d} received {mib} MiB")
        return int(got() or 0)

    @staticmethod
    def ping(host: SimHost, container: str, target: str, count: int = 2) -> bool:
        res = host.docker_res("exec", container, "ping", "-c", str(count), "-W", "2", target)
        return res.returncode == 0

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        for h in self.hosts:
            try:
                h.stop()
            except Exception as e:  # keep tearing down the rest
                print(f"multihost: stopping {h.name}: {e}", file=sys.stderr)
        for m in self.masters:
            m.stop()
        self.etcd.stop()
        sh("ip", "netns", "del", self.control_ns, check=False)
        for br in (self.underlay, self.vlan_bridge):
            sh("ip", "link", "del", br, check=False)
        for rule in self._rules:
            sh("iptables", "-D", *rule, check=False)
        self._rules.clear()
