"""An endpoint's interface in a network namespace a CNI runtime made: moved there, named,
addressed and routed; read back (CHECK); removed (DEL).

Netlink calls inside the namespace run in a thread of their own that joined it (setns: a
namespace is a property of a thread, and a netlink socket opened there stays there); the
thread ends with the call, so nothing else ever runs in the pod's namespace.
"""

from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

T = TypeVar("T")
log = logging.getLogger(__name__)
CLONE_NEWNET = 0x40000000
IFA_F_NODAD = 0x02  # no duplicate address detection: the address is ours by allocation
EEXIST = 17
ENODEV = 19
MAIN_TABLE = 254
FAMILIES = (2, 10)  # AF_INET, AF_INET6


@dataclass(frozen=True)
class NetnsInterface:
    """An interface in a namespace as CHECK compares it."""

    mac: str
    mtu: int
    up: bool
    addresses: frozenset[str]  # "10.1.0.5/24"


@dataclass(frozen=True)
class NetnsRoute:
    """A route of a namespace's main table, both families."""

    dst: str  # "0.0.0.0/0", "10.1.0.0/24", "::/0"
    gateway: str  # "" for a route on the link
    ifname: str  # the interface it leaves by ("" for a multipath route)


def in_netns(path: str, fn: Callable[[], T], first: Callable[[], object] | None = None) -> T:
    """Run ``fn`` in the network namespace at ``path`` (a fresh thread that joins it), after
    ``first`` in this host's, on the same thread: one thread per call, whatever it does."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if first is not None:
                    first()
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"network namespace {path}: {os.strerror(err)}")
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=body, name="netns", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def _index(ip: IPRoute, ifname: str) -> int | None:
    found = ip.link_lookup(ifname=ifname)
    return found[0] if found else None


def move(ifname: str, netns: str, name: str, missing_ok: bool = False) -> None:
    """Move this host's ``ifname`` into the namespace at ``netns``, named ``name`` as it
    arrives (the kernel renames in the move: no rename, down and up there). The move costs
    the kernel about 20 ms whatever the host holds (its RCU waits). Raises OSError (a name
    taken there, a namespace gone), or if ``ifname`` is not here unless ``missing_ok``."""
    with IPRoute() as ip:
        index = _index(ip, ifname)
        if index is None:
            if missing_ok:
                return
            raise OSError(ENODEV, f"interface {ifname} is not on this host")
        try:
            ip.link("set", index=index, net_ns_fd=netns, ifname=name)
        except NetlinkError as e:
            raise OSError(e.code, os.strerror(e.code)) from e


def move_into(
    ifname: str,
    netns: str,
    name: str,
    addresses: Sequence[str],
    routes: Sequence[tuple[str, str]],
    mac: str = "",
) -> None:
    """Move this host's ``ifname`` into the namespace at ``netns`` as ``name``, bring it up
    with ``mac`` (if given: set there, where ovs-vswitchd does not hear of it),
    ``addresses`` ("10.1.0.5/24") and ``routes`` ((dst, gateway)) via it, and only those.
    An interface already there under ``name`` (made there: ``ifname`` "", or an ADD
    retried) is brought in line instead; a route the namespace has already, not via this
    interface, is an error."""

    def moved() -> None:
        if ifname:
            move(ifname, netns, name, missing_ok=True)

    def configure() -> None:
        with IPRoute() as ip:
            index = _index(ip, ifname) if ifname else None
            if index is not None:  # moved by an earlier ADD that failed before the rename
                ip.link("set", index=index, state="down")
                ip.link("set", index=index, ifname=name)
            else:
                index = _index(ip, name)
            if index is None:
                raise OSError(f"interface {ifname} did not arrive in {netns}")
            ip.link("set", index=index, state="up", **({"address": mac} if mac else {}))
            for cidr in addresses:
                iface = ipaddress.ip_interface(cidr)
                try:
                    ip.addr(
                        "add",
                        index=index,
                        address=str(iface.ip),
                        prefixlen=iface.network.prefixlen,
                        flags=IFA_F_NODAD if iface.version == 6 else 0,
                    )
                except NetlinkError as e:
                    if e.code != EEXIST:
                        raise
            for dst, gw in routes:
                try:
                    ip.route("add", dst=dst, gateway=gw, oif=index)
                except NetlinkError as e:
                    if e.code != EEXIST:
                        raise
                    if NetnsRoute(dst, gw, name) not in _routes(ip):  # not ours: say whose
                        raise OSError(
                            EEXIST, f"route {dst} exists already in {netns}, not via {name}"
                        ) from None

    in_netns(netns, configure, first=moved)


def _routes(ip: IPRoute) -> frozenset[NetnsRoute]:
    names = {link["index"]: str(link.get("IFLA_IFNAME")) for link in ip.get_links()}
    found = set()
    for family in FAMILIES:
        for r in ip.get_routes(family=family):
            if r.get("RTA_TABLE", r["table"]) != MAIN_TABLE:
                continue
            default = "0.0.0.0" if family == 2 else "::"
            dst = ipaddress.ip_network(f"{r.get('RTA_DST') or default}/{r['dst_len']}")
            gw = r.get("RTA_GATEWAY")
            found.add(
                NetnsRoute(
                    str(dst),
                    str(ipaddress.ip_address(gw)) if gw else "",
                    names.get(r.get("RTA_OIF"), ""),
                )
            )
    return frozenset(found)


def routes(netns: str) -> frozenset[NetnsRoute]:
    """The main table of the namespace at ``netns`` (empty if there is no such namespace)."""
    if not os.path.exists(netns):
        return frozenset()

    def look() -> frozenset[NetnsRoute]:
        with IPRoute() as ip:
            return _routes(ip)

    return in_netns(netns, look)


def read(netns: str, name: str) -> NetnsInterface | None:
    """The interface ``name`` in the namespace, or None (no such interface or namespace)."""

    def look() -> NetnsInterface | None:
        with IPRoute() as ip:
            index = _index(ip, name)
            if index is None:
                return None
            link = ip.get_links(index)[0]
            addrs = frozenset(
                f"{a.get('IFA_ADDRESS')}/{a['prefixlen']}"
                for a in ip.get_addr(index=index)
                if not str(a.get("IFA_ADDRESS", "")).startswith("fe80:")
            )
            return NetnsInterface(
                mac=str(link.get("IFLA_ADDRESS")),
                mtu=int(link.get("IFLA_MTU")),
                up=bool(link["flags"] & 1),
                addresses=addrs,
            )

    if not os.path.exists(netns):
        return None
    return in_netns(netns, look)


def remove(netns: str, name: str, mac: str = "", home: str = "") -> bool:
    """Delete ``name`` in the namespace (its veth peer on the host goes with it), only if its
    MAC is ``mac`` when that is given; with ``home``, move it back to this host's namespace
    under that name instead (a pool port's container end: the port serves again), or delete
    it if that fails. False if there was nothing of that to remove."""
    fds: list[int] = []

    def open_home() -> None:  # on the thread, before it joins the namespace
        fds.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY))

    def delete() -> bool:
        with IPRoute() as ip:
            index = _index(ip, name)
            if index is None:
                return False
            try:
                link = ip.get_links(index)[0]
                if mac and str(link.get("IFLA_ADDRESS")).lower() != mac.lower():
                    return False
                if fds and _moved(ip, index, fds[0], home):
                    return True
                ip.link("del", index=index)
            except NetlinkError as e:
                if e.code != ENODEV:  # gone meanwhile (its host end deleted, say)
                    raise
                return False
            return True

    if not netns or not os.path.exists(netns):
        return False
    try:
        return in_netns(netns, delete, first=open_home if home else None)
    finally:
        for fd in fds:
            os.close(fd)


def _moved(ip: IPRoute, index: int, home_fd: int, home: str) -> bool:
    """Move the interface to the namespace of ``home_fd`` as ``home`` (the kernel takes it
    down and drops its addresses and routes on the way); False if it could not."""
    try:
        ip.link("set", index=index, net_ns_fd=home_fd, ifname=home)
    except NetlinkError as e:
        if e.code == ENODEV:
            raise
        log.warning("cannot move interface %d home as %s (deleting it): %s", index, home, e)
        return False
    return True


class NetlinkNetns:
    """The datapath.effects.Netns of this host."""

    def move_into(
        self,
        ifname: str,
        netns: str,
        name: str,
        addresses: Sequence[str],
        routes: Sequence[tuple[str, str]],
        mac: str = "",
    ) -> None:
        move_into(ifname, netns, name, addresses, routes, mac)

    def read(self, netns: str, name: str) -> NetnsInterface | None:
        return read(netns, name)

    def routes(self, netns: str) -> frozenset[NetnsRoute]:
        return routes(netns)

    def remove(self, netns: str, name: str, mac: str = "", home: str = "") -> bool:
        return remove(netns, name, mac, home)
