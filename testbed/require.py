"""What a test needs of the machine. When it is missing the test is skipped, or fails
under CI (``CI=1``, set by .ci/run): a runner that lacks root, OVS, etcd or QEMU must not
go green by skipping the tests that need them."""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

from .etcd import ETCD_BINARY

OVS_TOOLS = ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ip")
QEMU_TOOLS = ("qemu-system-x86_64", "ssh", "debootstrap")
INSTALL = "scripts/bootstrap.sh installs it"


def unavailable(why: str) -> NoReturn:
    """Fail under CI, skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"{why}, and CI must run this test")
    pytest.skip(why)


def require_root(what: str = "this test") -> None:
    if os.geteuid() != 0:
        unavailable(f"{what} needs root")


def require_ovs() -> None:
    """Root, iproute2 and Open vSwitch's programs: a private OVS in a namespace."""
    missing = [t for t in OVS_TOOLS if not shutil.which(t)]
    if os.geteuid() != 0 or missing:
        unavailable(f"needs root, iproute2 and openvswitch-switch ({INSTALL}); missing: {missing}")


def require_etcd(binary: str = ETCD_BINARY) -> None:
    if not os.access(binary, os.X_OK):
        unavailable(f"{binary} is not installed ({INSTALL})")


def qemu_missing() -> list[str]:
    return [t for t in QEMU_TOOLS if not shutil.which(t)]


def require_qemu() -> None:
    if missing := qemu_missing():
        unavailable(f"the VM lab needs {', '.join(missing)} (make test installs them)")
