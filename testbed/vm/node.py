"""netplugin in a lab guest: the checkout copied in, the daemons, docker and netctl.

A guest gets the checkout as a user's clone would be: copied from the read-only 9p mount
to ``/root/netplugin``, without the host's venv. netctl runs on the host against the
guest's master, through a forwarded port: a client from anywhere, as the README says.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

from ..host import BUSYBOX_IMAGE, TEST_LABEL
from ..wait import wait_for
from .lab import Guest, GuestError, Lab

CHECKOUT = "/root/netplugin"
NETCTL = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "netctl")
# The lab's own venv, made in the image from the same pins (the guests of the cluster
# suite do not each pay for a `make run` install under emulation).
LAB_PYTHON = "/opt/netplugin/venv/bin/python"
MASTER_PORT = 9999
AGENT_LOG = "/var/log/netplugin.log"
AGENT_PID = "/run/netplugin.pid"


def copy_checkout(g: Guest) -> None:
    g.sh(
        f"mkdir -p {CHECKOUT} && tar -C /src --exclude=./.venv --exclude=./build "
        f"--exclude=./.git --exclude='*.egg-info' -cf - . | tar -C {CHECKOUT} -xf -"
    )


class Node:
    """One guest running netplugin; ``netctl`` goes to the master at ``master_url``."""

    def __init__(self, guest: Guest, master_url: str) -> None:
        self.g = guest
        self.master_url = master_url

    @property
    def name(self) -> str:
        return self.g.name

    def sh(self, cmd: str, timeout: float = 300) -> str:
        return self.g.sh(cmd, timeout=timeout)

    def ok(self, cmd: str, timeout: float = 300) -> bool:
        return self.g.ok(cmd, timeout=timeout)

    def netctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [NETCTL, "--netmaster", self.master_url, *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if check and r.returncode != 0:
            raise GuestError(f"netctl {' '.join(args)}: {r.stdout}{r.stderr}")
        return r

    def box(
        self, name: str, net: str, *cmd: str, opts: str = "", image: str = BUSYBOX_IMAGE
    ) -> str:
        """``docker run -d`` a container (``sleep`` unless ``cmd``); its name."""
        command = " ".join(shlex.quote(c) for c in cmd) if cmd else "sleep 3600"
        self.sh(
            f"docker run -d --label {TEST_LABEL} --name {name} --net {shlex.quote(net)} {opts} "
            f"{image} {command}",
            timeout=180,
        )
        return name

    def ip(self, container: str) -> str:
        return self.sh(
            f"docker inspect -f '{{{{range .NetworkSettings.Networks}}}}{{{{.IPAddress}}}}"
            f"{{{{end}}}}' {container}"
        ).strip()

    def endpoint_id(self, container: str) -> str:
        return self.sh(
            f"docker inspect -f '{{{{range .NetworkSettings.Networks}}}}{{{{.EndpointID}}}}"
            f"{{{{end}}}}' {container}"
        ).strip()

    def pid(self, container: str) -> str:
        return self.sh(f"docker inspect -f '{{{{.State.Pid}}}}' {container}").strip()

    def exec(
        self, container: str, cmd: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.g.run(f"docker exec {container} sh -c {shlex.quote(cmd)}", timeout=timeout)

    def http_get(self, container: str, addr: str, port: int = 80) -> str:
        """The body ``container`` gets for ``GET /`` from ``addr:port`` ("" if none). With
        nc: Debian 12's static busybox 1.35 `wget` segfaults in these guests, in the
        guest's own root namespace as well (under TCG; not on this host's kernel)."""
        r = self.exec(container, f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {addr} {port}")
        head, _, body = r.stdout.replace("\r\n", "\n").partition("\n\n")
        return body.strip() if head.startswith("HTTP/1.") else ""

    def pings(self, container: str, target: str, count: int = 2) -> bool:
        return self.exec(container, f"ping -c {count} -W 2 {target}").returncode == 0

    def flows(self) -> list[str]:
        """The bridge's flows, groups and meters, without counters: what a restart must
        leave exactly as it was."""
        out = self.sh(
            "ovs-ofctl -O OpenFlow15 --no-stats dump-flows netplugin; "
            "ovs-ofctl -O OpenFlow15 dump-groups netplugin; "
            "ovs-ofctl -O OpenFlow15 dump-meters netplugin"
        )
        return sorted(
            line.strip() for line in out.splitlines()
            if line.strip() and "reply" not in line and "duration" not in line
        )  # fmt: skip

    def wait_log(self, path: str, text: str, timeout: float, since: int = 0) -> str:
        """Wait until the log ``path`` holds ``text`` after its first ``since`` bytes."""
        q = shlex.quote(text)

        def seen() -> str:
            r = self.g.run(f"tail -c +{since + 1} {path} | grep -F -- {q}", timeout=60)
            return r.stdout if r.returncode == 0 else ""

        return wait_for(seen, timeout, f"{self.name}: {path} says {text!r}", interval=2,
                        last=lambda: self.g.run(f"tail -n 20 {path}").stdout)  # fmt: skip

    def log_size(self, path: str) -> int:
        return file_size(self.g, path)

    def wait_network(self, name: str, timeout: float = 120) -> str:
        """Wait until the docker network ``name`` (made by netctl) is on this guest; its name."""
        wait_for(lambda: self.ok(f"docker network inspect {name} >/dev/null"), timeout,
                 f"{self.name}: docker network {name}")  # fmt: skip
        return name

    def service_vip(self, service: str) -> str:
        """The VIP the master gave a service (netctl service inspect)."""
        inspect = json.loads(self.netctl("--json", "service", "inspect", service).stdout)
        return str(inspect["Oper"]["serviceVip"])


def file_size(g: Guest, path: str) -> int:
    """The size of a file on the guest (0 if it is not there yet)."""
    return int(g.sh(f"stat -c %s {path} 2>/dev/null || echo 0").strip())


def etcd_url(g: Guest) -> str:
    return f"http://{g.ip}:2379"


def start_agent(g: Guest, first: Guest) -> int:
    """The agent on ``g``, in the background, on the etcd and master of ``first``, with its
    tunnels on eth1 and VLAN uplink eth2 (README "Several hosts"); the log size before it."""
    since = file_size(g, AGENT_LOG)
    g.sh(
        f"cd {CHECKOUT} && (setsid sh -c 'echo $$ >{AGENT_PID}; exec {LAB_PYTHON} -m plugin.cli "
        f"--etcd-endpoints {etcd_url(first)} --netmaster http://{first.ip}:{MASTER_PORT} "
        f"--host {g.name} --vtep-ip {g.ip} --vlan-if eth2' >>{AGENT_LOG} 2>&1 </dev/null &)"
    )
    return since


def start_cluster(lab: Lab) -> list[Node]:
    """OVS and dockerd on every guest, etcd and a master on the first, an agent on each, the
    busybox test image everywhere; the guests as Nodes whose netctl reaches that master."""
    first = lab.guests[0]
    for g in lab.guests:
        copy_checkout(g)
        g.sh(f"cd {CHECKOUT} && DOCKERD_WAIT=0 scripts/host-daemons.sh", timeout=300)
    first.sh(
        f"(setsid etcd --name lab --data-dir /var/lib/etcd-lab --listen-client-urls "
        f"{etcd_url(first)} --advertise-client-urls {etcd_url(first)} "
        f">/var/log/etcd.log 2>&1 </dev/null &)"
    )
    first.sh(
        f"cd {CHECKOUT} && (setsid {LAB_PYTHON} -m master.cli --etcd-endpoints "
        f"{etcd_url(first)} --listen-url {first.ip}:{MASTER_PORT} "
        f"--control-url http://{first.ip}:{MASTER_PORT} --insecure "
        f">/var/log/netmaster.log 2>&1 </dev/null &)"
    )
    nodes = [Node(g, "") for g in lab.guests]
    for g in lab.guests:
        start_agent(g, first)
    for n in nodes:
        n.wait_log(AGENT_LOG, "netplugin serving", 600)
        n.sh(f"cd {CHECKOUT} && scripts/test-image.sh busybox", timeout=300)
    url = first.forward(f"{first.ip}:{MASTER_PORT}")
    for n in nodes:
        n.master_url = url
    return nodes


def save_logs(lab: Lab, dest: Path) -> None:
    """The agents' and master's logs, beside the guests' consoles (for a failed run)."""
    for g in lab.guests:
        if g.alive():
            logs = g.run(f"tail -n 300 {AGENT_LOG} /var/log/netmaster.log").stdout
            (dest / f"{g.name}.netplugin.log").write_text(logs)
