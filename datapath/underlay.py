"""The underlay: where this host's VTEP address lives, its MTU, and userspace tunneling.

With the kernel datapath (`system`) OVS sends VXLAN through the host's own stack, so the
VTEP address may stay on any interface. The userspace datapath (`netdev`) encapsulates in
OVS itself and must own the path out: the interface that holds the VTEP address becomes a
port of an OVS bridge (the underlay bridge), and the address and the routes through that
interface move to the bridge's internal port (OVS's userspace-tunneling howto). OVS then
resolves tunnel routes and ARP on that bridge. Done once; a restarted agent finds the
address already moved and changes nothing.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from .ovs import Ovs
from .veth import isolate_host_end, wait_link

log = logging.getLogger(__name__)

DEFAULT_UNDERLAY_BRIDGE = "npunderlay"


@dataclass(frozen=True)
class Underlay:
    """Where the VTEP address is, and the MTU of the way out."""

    vtep_ip: str
    device: str
    mtu: int


@dataclass(frozen=True)
class _Addr:
    device: str
    index: int
    prefixlen: int


class UnderlayError(RuntimeError):
    """The VTEP address cannot be used (not on this host, or cannot be moved)."""


def _find_address(ip: IPRoute, vtep_ip: str) -> _Addr:
    version = ipaddress.ip_address(vtep_ip).version
    family = 2 if version == 4 else 10
    for msg in ip.get_addr(family=family):
        if msg.get("address") == vtep_ip:
            index = msg["index"]
            name = ip.get_links(index)[0].get("ifname")
            return _Addr(name, index, msg["prefixlen"])
    raise UnderlayError(
        f"VTEP address {vtep_ip} is not on any interface of this host; check --vtep-ip"
    )


def _link_attr(ip: IPRoute, index: int, attr: str) -> Any:
    return ip.get_links(index)[0].get(attr)


def discover(vtep_ip: str) -> Underlay:
    """Where ``vtep_ip`` is and the MTU there (no change made)."""
    with IPRoute() as ip:
        addr = _find_address(ip, vtep_ip)
        return Underlay(vtep_ip, addr.device, int(_link_attr(ip, addr.index, "mtu")))


def ensure_userspace_tunneling(
    ovs: Ovs,
    vtep_ip: str,
    bridge: str = DEFAULT_UNDERLAY_BRIDGE,
    proc_sys: str | Path = "/proc/sys",
) -> Underlay:
    """Move the VTEP address onto an OVS bridge that owns its interface (idempotent).
    ``proc_sys``: where the host's sysctls are (a managed plugin's /proc/sys is read-only;
    it sees the host's as /host/proc/sys)."""
    with IPRoute() as ip:
        addr = _find_address(ip, vtep_ip)
        if addr.device == bridge:
            mtu = int(_link_attr(ip, addr.index, "mtu"))
            return Underlay(vtep_ip, bridge, mtu)
        nic, nic_index = addr.device, addr.index
        mac = _link_attr(ip, nic_index, "address")
        mtu = int(_link_attr(ip, nic_index, "mtu"))
        family = 2 if ipaddress.ip_address(vtep_ip).version == 4 else 10
        routes = [
            r
            for r in ip.get_routes(family=family, table=254)
            if r.get_attr("RTA_OIF") == nic_index and r.get_attr("RTA_GATEWAY")
        ]
        log.info(
            "userspace tunneling: moving %s/%d from %s to bridge %s",
            vtep_ip,
            addr.prefixlen,
            nic,
            bridge,
        )
        ovs.ensure_bridge(bridge, datapath_type="netdev", fail_mode=None, controller=[], hwaddr=mac)
        ovs.add_port(bridge, nic)
        isolate_host_end(nic, proc_sys)  # frames on it are OVS's now, not the host stack's
        idx = wait_link(ip, bridge)
        ip.link("set", index=idx, mtu=mtu, state="up")
        ip.addr("replace", index=idx, address=vtep_ip, prefixlen=addr.prefixlen)
        ip.addr("del", index=nic_index, address=vtep_ip, prefixlen=addr.prefixlen)
        for r in routes:
            dst = r.get_attr("RTA_DST")
            spec = {"dst": f"{dst}/{r['dst_len']}"} if dst else {"dst": "default"}
            try:
                ip.route("replace", **spec, gateway=r.get_attr("RTA_GATEWAY"), oif=idx)
            except Exception as e:  # keep going: the VTEP subnet itself is already there
                log.warning("route %s via %s not moved to %s: %s", spec, nic, bridge, e)
        return Underlay(vtep_ip, bridge, mtu)
