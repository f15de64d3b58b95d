"""The port pool's kernel side (datapath.portpool's PoolLinks) through netlink."""

from __future__ import annotations

from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from .portpool import PoolPort
from .veth import delete_link, isolate_host_end


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

    def claim(self, port: PoolPort, endpoint_id: str, mac: str, mtu: int) -> None:
        with IPRoute() as ip:
            host = ip.link_lookup(ifname=port.host)
            container = ip.link_lookup(ifname=port.container)
            if not host or not container:
                raise OSError(f"pool port {port.host}: its pair is not whole in this namespace")
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

    def aliases(self) -> dict[str, str]:
        """Every link's alias by link name (those that have one): which endpoint each pool
        port serves, for a restarted agent."""
        with IPRoute() as ip:
            links = ip.get_links()
        return {
            name: alias
            for link in links
            if (name := link.get("ifname")) and (alias := link.get("ifalias"))
        }
