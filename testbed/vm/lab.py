"""QEMU guests for the kernel-datapath suite: boot, the ssh control channel, the underlay.

Each guest boots the image's stock Debian kernel with ``init=`` our vm-init, its root disk
copy-on-write over the cached image (``snapshot=on``: nothing a test does reaches the
image), and the checkout read-only over virtio-9p at ``/src``. It has two NICs:

- ``eth0``, QEMU's user network: the lab's ssh, forwarded from a port on the host's
  127.0.0.1, and a NAT route out (10.0.2.2 is the host's 127.0.0.1);
- ``eth1``, the underlay: a QEMU multicast socket hub that all guests of one lab join (a
  group and port of its own, on the host's loopback), so guests reach each other over a
  plain Ethernet segment that carries VXLAN and VLAN-tagged frames.

The accelerator is TCG (software emulation): KVM guests hang on this kind of machine right
after the kernel decompresses (measured; see README "VM lab"). ``NETPLUGIN_VM_ACCEL=kvm``
tries KVM.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..wait import wait_for
from .image import CHECKOUT, Image

ACCEL = os.environ.get("NETPLUGIN_VM_ACCEL", "tcg")
UNDERLAY_PREFIX = "192.168.77"
BOOT_TIMEOUT = float(os.environ.get("NETPLUGIN_VM_BOOT_TIMEOUT", "240"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GuestError(RuntimeError):
    """A command in a guest failed; the message carries its output."""


@dataclass
class Guest:
    """One booted guest. ``sh`` runs a shell command in it as root."""

    name: str
    index: int
    image: Image
    workdir: Path
    underlay: str  # "mcast=GROUP:PORT"
    vlan_segment: str  # the same, for eth2
    memory_mb: int = 1536
    cpus: int = 1
    ssh_port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def ip(self) -> str:
        """The underlay address (eth1)."""
        return f"{UNDERLAY_PREFIX}.{10 + self.index}"

    @property
    def console(self) -> Path:
        return self.workdir / f"{self.name}.console"

    def forward(self, target: str) -> str:
        """``http://127.0.0.1:PORT`` on the host, forwarded over the lab's ssh connection to
        ``target`` (``ADDR:PORT`` as the guest sees it): how host-side clients reach a
        server in the guest that listens on its loopback or underlay."""
        port = _free_port()
        subprocess.run(
            [*self._ssh()[:-1], "-O", "forward", "-L", f"127.0.0.1:{port}:{target}",
             "root@127.0.0.1"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        return f"http://127.0.0.1:{port}"

    def command(self) -> list[str]:
        append = (
            "root=/dev/vda rw console=ttyS0 panic=-1 quiet net.ifnames=0 "
            f"init=/usr/local/sbin/vm-init np.name={self.name} np.ip={self.ip}/24"
        )
        mac = f"52:54:00:77:00:{10 + self.index:02x}"
        vmac = f"52:54:00:78:00:{10 + self.index:02x}"
        return [
            "qemu-system-x86_64",
            "-accel", ACCEL if ACCEL != "tcg" else "tcg,thread=multi",
            "-smp", str(self.cpus), "-m", str(self.memory_mb),
            "-nodefaults", "-display", "none", "-no-reboot",
            "-serial", f"file:{self.console}", "-monitor", "none",
            "-kernel", str(self.image.kernel), "-initrd", str(self.image.initrd),
            "-append", append,
            "-drive", f"file={self.image.root},format=raw,if=virtio,snapshot=on",
            "-netdev", f"user,id=ctl,hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22",
            "-device", "virtio-net-pci,netdev=ctl",
            "-netdev", f"socket,id=ul,{self.underlay},localaddr=127.0.0.1",
            "-device", f"virtio-net-pci,netdev=ul,mac={mac}",
            "-netdev", f"socket,id=vl,{self.vlan_segment},localaddr=127.0.0.1",
            "-device", f"virtio-net-pci,netdev=vl,mac={vmac}",
            "-virtfs", f"local,path={CHECKOUT},mount_tag=src,security_model=none,readonly=on",
        ]  # fmt: skip

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / f"{self.name}.qemu.log").open("wb")
        self.proc = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )

    def _ssh(self) -> list[str]:
        return [
            "ssh", "-i", str(self.image.key), "-p", str(self.ssh_port),
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            "-o", "ControlMaster=auto", "-o", f"ControlPath={self.workdir}/{self.name}.ssh",
            "-o", "ControlPersist=900", "-o", "ServerAliveInterval=15",
            "root@127.0.0.1",
        ]  # fmt: skip

    def tail(self, n: int = 3000) -> str:
        try:
            return self.console.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = BOOT_TIMEOUT) -> None:
        def up() -> bool:
            if not self.alive():
                raise GuestError(f"{self.name}: QEMU exited while booting:\n{self.tail()}")
            if "vm-init: ready" not in self.tail(100000):
                return False
            return self.run("true", timeout=30).returncode == 0

        wait_for(up, timeout, f"{self.name} boots and answers ssh", interval=0.5,
                 last=lambda: self.tail(600))  # fmt: skip

    def run(
        self, cmd: str, timeout: float = 300, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` (a shell command line) in the guest; do not check its status."""
        try:
            return subprocess.run(
                [*self._ssh(), cmd], capture_output=True, text=True, timeout=timeout,
                input=input, stdin=None if input is not None else subprocess.DEVNULL,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            raise GuestError(f"{self.name}: not done within {timeout}s: {cmd}") from e

    def sh(self, cmd: str, timeout: float = 300, input: str | None = None) -> str:
        """Run ``cmd`` in the guest; its stdout, or GuestError with its output."""
        r = self.run(cmd, timeout=timeout, input=input)
        if r.returncode != 0:
            raise GuestError(
                f"{self.name}: `{cmd}` exited {r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
            )
        return r.stdout

    def ok(self, cmd: str, timeout: float = 300) -> bool:
        return self.run(cmd, timeout=timeout).returncode == 0

    def stop(self) -> None:
        subprocess.run([*self._ssh()[:-1], "-O", "exit", "root@127.0.0.1"],
                       capture_output=True, timeout=10)  # fmt: skip
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Lab:
    """``n`` guests on two Ethernet segments of their own: the underlay (eth1, addressed,
    for tunnels) and a VLAN trunk (eth2, no address, for VLAN uplinks)."""

    def __init__(self, image: Image, workdir: Path, n: int, **guest: object) -> None:
        def segment() -> str:
            group = ".".join(str(random.randint(1, 254)) for _ in range(3))
            return f"mcast=239.{group}:{random.randint(20000, 60000)}"

        underlay, trunk = segment(), segment()
        self.guests = [
            Guest(f"vm{i + 1}", i + 1, image, workdir, underlay, trunk, **guest)  # type: ignore[arg-type]
            for i in range(n)
        ]

    def start(self, timeout: float = BOOT_TIMEOUT) -> None:
        started = time.monotonic()
        for g in self.guests:
            g.start()
        try:
            for g in self.guests:
                g.wait_ready(max(30.0, timeout - (time.monotonic() - started)))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for g in self.guests:
            g.stop()
