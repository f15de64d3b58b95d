"""The port pool's kernel side (datapath.portpool's PoolLinks) through netlink."""

from __future__ import annotations

from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from .portpool import PoolLink, PoolPort, container_end, is_pool_port
from .veth import delete_link, isolate_host_end, set_tx_checksumming


class NetlinkPoolLinks:
    def __init__(self, proc_sys: str | Path = "/proc/sys") -> None:
        self.proc_sys = Path(proc_sys)

    def create_pool_veth(self, host: str, container: str) -> None:
        with IPRoute() as ip:
            ip.link("add", ifname=host, kind="veth", peer={"ifname": container})
            try:
                isolate_host_end(host, self.proc_sys)
                ip.link("set", index=ip.link_lookup(ifname=host)[0], state="up")
            except (OSError, NetlinkError, IndexError):
                delete_link(host)
                raise

    def claim(
        self, port: PoolPort, endpoint_id: str, mac: str, mtu: int, offloads_off: bool
    ) -> None:
        with IPRoute() as ip:
            host = ip.link_lookup(ifname=port.host)
            container = ip.link_lookup(ifname=port.container)
            if not host or not container:
                raise OSError(f"pool port {port.host}: its pair is not whole in this namespace")
            if port.offloads_off is None or port.offloads_off != offloads_off:
                set_tx_checksumming(port.container, not offloads_off)
            try:
                ip.link("set", index=container[0], address=mac, mtu=mtu)
                ip.link("set", index=host[0], mtu=mtu, ifalias=endpoint_id)
            except NetlinkError as e:
                raise OSError(f"pool port {port.host}: {e}") from e

    def release(self, port: PoolPort) -> bool:
        with IPRoute() as ip:
            host = ip.link_lookup(ifname=port.host)
            if not host:
                return False
            try:
                ip.link("set", index=host[0], ifalias="")
            except NetlinkError as e:
                raise OSError(f"pool port {port.host}: {e}") from e
            return bool(ip.link_lookup(ifname=port.container))

    def discard(self, host: str) -> None:
        delete_link(host)

    def survey(self) -> dict[str, PoolLink]:
        """Every pool port's pair by host end: the endpoint it serves (its alias), and
        whether its container end is home; for a restarted agent."""
        with IPRoute() as ip:
            links = ip.get_links()
        names = {link.get("ifname") for link in links}
        return {
            name: PoolLink(link.get("ifalias") or "", container_end(name) in names)
            for link in links
            if (name := link.get("ifname")) and is_pool_port(name)
        }
