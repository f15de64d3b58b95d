"""Endpoint veth pairs: names derived from the endpoint ID, created and removed with pyroute2;
and NetlinkLinks, the agent's real Links (datapath.effects)."""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

HOST_PREFIX = "vp"  # the end on the OVS bridge
CONTAINER_PREFIX = "vc"  # the end docker moves into the container and renames
_ID_CHARS = 11  # 2 + 11 = 13 characters, inside the kernel's 15-character limit
_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class Into:
    """Where an endpoint's container end is made, instead of this host's namespace: a
    network namespace (its path) and the interface's name there (a CNI pod's). ``made`` is
    set once the end is there under that name (made there, or moved in), so that the pod's
    interface can be configured while the switch takes its port and flows."""

    netns: str
    name: str
    made: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


def veth_names(endpoint_id: str) -> tuple[str, str]:
    """(host end, container end) for an endpoint; docker IDs keep their readable prefix."""
    eid = endpoint_id.lower()
    tag = eid[:_ID_CHARS] if _HEX.match(eid) and len(eid) >= _ID_CHARS else _digest(endpoint_id)
    return HOST_PREFIX + tag, CONTAINER_PREFIX + tag


def _digest(endpoint_id: str) -> str:
    return hashlib.sha256(endpoint_id.encode()).hexdigest()[:_ID_CHARS]


def endpoint_mac(ipv4: str) -> str:
    """A locally administered unicast MAC derived from the address, like docker's bridge."""
    octets = [int(o) for o in ipv4.split(".")] if ipv4 else [0, 0, 0, 0]
    return "02:42:" + ":".join(f"{o:02x}" for o in octets)


def create_veth(
    endpoint_id: str, mac: str, mtu: int, proc_sys: str | Path = "/proc/sys"
) -> tuple[str, str]:
    """Create the pair (idempotent: an existing complete pair is kept as it is)."""
    host, container = veth_names(endpoint_id)
    with IPRoute() as ip:
        if ip.link_lookup(ifname=host):
            if ip.link_lookup(ifname=container):
                return host, container
            # A half pair (container end already moved away or lost): start over.
            ip.link("del", index=ip.link_lookup(ifname=host)[0])
        ip.link(
            "add",
            ifname=host,
            kind="veth",
            mtu=mtu,
            peer={"ifname": container, "address": mac, "mtu": mtu},
        )
        try:
            isolate_host_end(host, proc_sys)
            ip.link("set", index=ip.link_lookup(ifname=host)[0], state="up")
        except (OSError, NetlinkError, IndexError):
            delete_veth(endpoint_id)
            raise
    return host, container


def create_veth_in_netns(
    endpoint_id: str,
    mac: str,
    mtu: int,
    netns: str,
    name: str,
    tx_offload: bool = True,
    proc_sys: str | Path = "/proc/sys",
) -> str:
    """Create the pair with its container end made in the network namespace at ``netns`` as
    ``name`` (down, no address; TX checksumming off there unless ``tx_offload``): a CNI
    pod's, which otherwise is made here and moved, and the move costs the kernel about 20 ms
    (its RCU waits) where making it there costs what making it here does. The host end,
    returned. Idempotent: a complete pair is kept; a host end whose peer is not ``name``
    with ``mac`` in ``netns`` is replaced. A ``name`` taken there is an error, made nothing."""
    from .netns import in_netns, read

    host, _ = veth_names(endpoint_id)

    def add() -> None:
        fd = os.open(netns, os.O_RDONLY)
        try:
            peer = {"ifname": name, "address": mac, "mtu": mtu, "net_ns_fd": fd}
            ip.link("add", ifname=host, kind="veth", mtu=mtu, peer=peer)
        finally:
            os.close(fd)

    with IPRoute() as ip:
        try:  # made at once: a retry (the host end is here) is the rare case
            add()
        except NetlinkError as e:
            if e.code != errno.EEXIST or not ip.link_lookup(ifname=host):
                raise  # the name is taken in the pod's namespace
            there = read(netns, name)
            if there is not None and there.mac.lower() == mac.lower():
                return host
            ip.link("del", index=ip.link_lookup(ifname=host)[0])
            add()
        try:
            isolate_host_end(host, proc_sys)
            ip.link("set", ifname=host, state="up")
            if not tx_offload:
                in_netns(netns, lambda: disable_tx_offload(name))
        except (OSError, NetlinkError, IndexError):
            delete_veth(endpoint_id)
            raise
    return host


# The host end of an endpoint veth is a switch port, never an IP interface of the host.
# With the userspace datapath the kernel still receives every frame on it beside OVS's
# AF_PACKET socket: without these it answers the container's ARP for the gateway with the
# veth's own MAC, and routes what follows around the bridge and our FORWARD rules.
HOST_END_SYSCTLS = (
    ("ipv4", "arp_ignore", "8"),  # answer no ARP on it, whatever the address
    ("ipv4", "rp_filter", "1"),  # no route points at it: drop any IPv4 arriving on it
    ("ipv6", "disable_ipv6", "1"),  # no link-local address, no NDP, no IPv6 input
)


def isolate_host_end(ifname: str, proc_sys: str | Path = "/proc/sys") -> None:
    """Keep the host's IP stack off an endpoint's host end (idempotent)."""
    for family, key, value in HOST_END_SYSCTLS:
        set_sysctl(Path(proc_sys) / "net" / family / "conf" / ifname / key, value)


def set_sysctl(path: Path, value: str) -> None:
    if path.read_text().strip() != value:
        path.write_text(value)


def delete_veth(endpoint_id: str) -> bool:
    """Remove the pair (deleting the host end removes its peer, wherever it is)."""
    host, _ = veth_names(endpoint_id)
    return delete_link(host)


def delete_link(ifname: str) -> bool:
    with IPRoute() as ip:
        found = ip.link_lookup(ifname=ifname)
        if not found:
            return False
        try:
            ip.link("del", index=found[0])
        except NetlinkError as e:
            if e.code != 19:  # ENODEV: gone meanwhile
                raise
            return False
    return True


def host_veths() -> list[str]:
    """Host ends of every endpoint veth on this host, for garbage collection."""
    with IPRoute() as ip:
        names = [link.get("ifname") for link in ip.get_links()]
    return sorted(n for n in names if n and n.startswith(HOST_PREFIX) and len(n) == 2 + _ID_CHARS)


def disable_tx_offload(ifname: str) -> None:
    """Userspace OVS gets partial TX checksums via AF_PACKET: make the kernel finish them.

    One SIOCETHTOOL ioctl (ETHTOOL_STXCSUM off, through pyroute2's ethtool), what `ethtool
    -K IF tx off` does without a process per endpoint; the kernel drops the features that
    need TX checksumming (TSO, ...) with it."""
    set_tx_checksumming(ifname, False)


def set_tx_checksumming(ifname: str, on: bool) -> None:
    """TX checksumming on or off (off takes the features that need it, TSO..., with it;
    on gives back those still wanted)."""
    from pyroute2.ethtool.ioctl import EthtoolError, IoctlEthtool

    ethtool = IoctlEthtool(ifname)
    try:
        ethtool.set_offload_flag("tx-checksumming", int(on))
    except EthtoolError as e:  # no such device, not supported: an OSError as the ioctl's own
        state = "on" if on else "off"
        raise OSError(f"{ifname}: cannot turn TX checksumming {state} ({type(e).__name__})") from e
    finally:
        ethtool.close()


def tx_checksumming(ifname: str) -> bool:
    """Whether ``ifname`` has TX checksumming on (ethtool offload flags, by ioctl)."""
    from pyroute2.ethtool.ioctl import EthtoolError, IoctlEthtool

    ethtool = IoctlEthtool(ifname)
    try:
        return bool(ethtool.get_offload_flags()["tx-checksumming"])
    except EthtoolError as e:
        raise OSError(f"{ifname}: cannot read its offloads ({type(e).__name__})") from e
    finally:
        ethtool.close()


def wait_link(ip: IPRoute, name: str, timeout: float = 5.0) -> int:
    """The index of ``name``; OVS creates internal ports asynchronously, so wait for it."""
    deadline = time.monotonic() + timeout
    while True:
        found = ip.link_lookup(ifname=name)
        if found:
            return int(found[0])
        if time.monotonic() > deadline:
            raise RuntimeError(f"interface {name} did not appear; is ovs-vswitchd running?")
        time.sleep(0.02)


def address_link(ifname: str, mtu: int, addresses: Sequence[str]) -> None:
    """Wait for ``ifname``, set its MTU, bring it up and replace its addresses ("a.b.c.d/n")."""
    with IPRoute() as ip:
        idx = wait_link(ip, ifname)
        ip.link("set", index=idx, mtu=mtu, state="up")
        for address in addresses:
            iface = ipaddress.ip_interface(address)
            ip.addr("replace", index=idx, address=str(iface.ip), prefixlen=iface.network.prefixlen)


class NetlinkLinks:
    """The agent's links through netlink, the ethtool ioctl and ``proc_sys`` (a managed
    plugin sees the host's as /host/proc/sys)."""

    def __init__(self, proc_sys: str | Path = "/proc/sys") -> None:
        self.proc_sys = Path(proc_sys)

    def create_veth(self, endpoint_id: str, mac: str, mtu: int) -> tuple[str, str]:
        return create_veth(endpoint_id, mac, mtu, self.proc_sys)

    def create_veth_in_netns(
        self, endpoint_id: str, mac: str, mtu: int, into: Into, tx_offload: bool
    ) -> str:
        return create_veth_in_netns(
            endpoint_id, mac, mtu, into.netns, into.name, tx_offload, self.proc_sys
        )

    def move_to_netns(self, ifname: str, into: Into) -> None:
        from .netns import move

        move(ifname, into.netns, into.name)

    def delete_veth(self, endpoint_id: str) -> bool:
        return delete_veth(endpoint_id)

    def delete_link(self, ifname: str) -> bool:
        return delete_link(ifname)

    def host_veths(self) -> list[str]:
        return host_veths()

    def isolate_host_end(self, ifname: str) -> None:
        isolate_host_end(ifname, self.proc_sys)

    def disable_tx_offload(self, ifname: str) -> None:
        disable_tx_offload(ifname)

    def switch_tso(self, bridge: str) -> bool:
        with IPRoute() as ip:
            wait_link(ip, bridge)
        return tx_checksumming(bridge)

    def address_gateway(self, ifname: str, mtu: int, addresses: Sequence[str]) -> None:
        address_link(ifname, mtu, addresses)
        # The host reaches published ports on 127.0.0.1: DNAT'ed, such packets leave through
        # the gateway port with a loopback source until NETPLUGIN-POSTROUTING masquerades them.
        set_sysctl(self.proc_sys / "net" / "ipv4" / "conf" / ifname / "route_localnet", "1")

    def forward_ipv6(self) -> None:
        # "all" sets every interface's, as docker does for its IPv6 networks; an interface
        # that learns its default route from router advertisements needs accept_ra=2 then.
        set_sysctl(self.proc_sys / "net" / "ipv6" / "conf" / "all" / "forwarding", "1")
