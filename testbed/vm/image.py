"""The guest image, built once per set of inputs and cached on the machine.

The key is a hash of everything that goes into the image: the build script, the guest's
init, the package list in scripts/bootstrap.sh and the Python pins in constraints.txt. A
change to any of them builds a new image beside the old one; a build interrupted half way
leaves nothing under the key (build-image.sh moves its outputs in last).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
CACHE = Path(os.environ.get("NETPLUGIN_VM_CACHE", "/var/cache/netplugin/vm"))
INPUTS = (
    HERE / "build-image.sh",
    HERE / "vm-init",
    CHECKOUT / "scripts" / "bootstrap.sh",
    CHECKOUT / "constraints.txt",
)
# How many images to keep: the newest ones, by the time they were last used.
KEEP = 2


@dataclass(frozen=True)
class Image:
    """A built image: the kernel and initramfs to boot, the root disk, the lab's ssh key."""

    dir: Path

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"

    @property
    def root(self) -> Path:
        return self.dir / "root.ext4"

    @property
    def key(self) -> Path:
        return self.dir / "id_ed25519"

    def complete(self) -> bool:
        return all(p.exists() for p in (self.kernel, self.initrd, self.root, self.key))


def image_key(inputs: tuple[Path, ...] = INPUTS) -> str:
    """The hash of the image's inputs (their names and contents)."""
    h = hashlib.sha256()
    for path in inputs:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _wheelhouse(dest: Path) -> None:
    """Wheels for every pin in constraints.txt, made by this checkout's venv's pip."""
    pip = [sys.executable, "-m", "pip"]
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *pip,
            "wheel",
            "-q",
            "--no-deps",
            "-r",
            str(CHECKOUT / "constraints.txt"),
            "-w",
            str(dest),
        ],
        check=True,
    )


def _prune(keep: Path) -> None:
    images = sorted(
        (d for d in CACHE.iterdir() if d.is_dir() and d.name.startswith("img-")),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    for old in images[KEEP:]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)


def ensure_image(log: bool = True) -> Image:
    """The image for this checkout's inputs, built first if the cache has none (needs root
    and the Debian mirror; takes a few minutes). Concurrent callers wait for one build."""
    CACHE.mkdir(parents=True, exist_ok=True)
    image = Image(CACHE / f"img-{image_key()}")
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not image.complete():
            wheels = CACHE / f"wheels-{image.dir.name}"
            shutil.rmtree(wheels, ignore_errors=True)
            _wheelhouse(wheels)
            out = None if log else subprocess.DEVNULL
            subprocess.run(
                [str(HERE / "build-image.sh"), str(image.dir), str(wheels)], check=True, stdout=out
            )
            shutil.rmtree(wheels, ignore_errors=True)
        os.utime(image.dir)
        _prune(image.dir)
    return image


if __name__ == "__main__":
    print(ensure_image().dir)
