"""The port pool's kernel side (datapath.portpool's PoolLinks): netlink for the pairs, and
a directory of the agent's for which endpoint each pool port serves.

That record is a file per pool port (named by its host end, holding the endpoint's ID),
not anything on the link: every link change in the host's namespace makes ovs-vswitchd
reconfigure all its ports (datapath.portpool), and the file costs it nothing. Veths do
not outlive a reboot and a record is only believed for a pool port that exists, so the
files need no fsync; records of ports that are gone are dropped when the agent surveys
its pool ports at start. A port claimed by an older netplugin is known by its kernel alias
(IFLA_IFALIAS), which is how that one recorded it.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from .portpool import PoolLink, PoolPort, Shape, container_end, is_pool_port
from .veth import delete_link, isolate_host_end, set_tx_checksumming


class NetlinkPoolLinks:
    """``records``: the agent's directory of which endpoint each pool port serves (one
    per agent: its host's name in the cluster)."""

    def __init__(self, records: str | Path, proc_sys: str | Path = "/proc/sys") -> None:
        self.records = Path(records)
        self.proc_sys = Path(proc_sys)
        self.records.mkdir(parents=True, exist_ok=True)

    def create_pool_veth(self, host: str, container: str, shape: Shape) -> None:
        with IPRoute() as ip:
            ip.link("add", ifname=host, kind="veth", peer={"ifname": container})
            try:
                if shape.offloads_off:
                    set_tx_checksumming(container, False)
                index = ip.link_lookup(ifname=host)[0]
                ip.link("set", index=ip.link_lookup(ifname=container)[0], mtu=shape.mtu)
                isolate_host_end(host, self.proc_sys)
                ip.link("set", index=index, mtu=shape.mtu, state="up")
            except (OSError, NetlinkError, IndexError):
                delete_link(host)
                raise

    def claim(self, port: PoolPort, endpoint_id: str, shape: Shape) -> None:
        try:  # an ioctl each, in this thread's namespace: no netlink socket to open
            host, container = (
                socket.if_nametoindex(port.host),
                socket.if_nametoindex(port.container),
            )
        except OSError:
            raise OSError(
                f"pool port {port.host}: its pair is not whole in this namespace"
            ) from None
        if port.offloads_off != shape.offloads_off:  # None (not known) included
            set_tx_checksumming(port.container, not shape.offloads_off)
        if port.mtu != shape.mtu:
            try:
                with IPRoute() as ip:
                    ip.link("set", index=container, mtu=shape.mtu)
                    ip.link("set", index=host, mtu=shape.mtu)
            except NetlinkError as e:
                raise OSError(f"pool port {port.host}: {e}") from e
        self._record(port.host, endpoint_id)

    def release(self, port: PoolPort) -> bool:
        self._forget(port.host)
        with IPRoute() as ip:
            try:
                (link,) = ip.link("get", ifname=port.host)
            except NetlinkError:
                return False
            if link.get("ifalias"):  # an older netplugin's record: once, then never again
                ip.link("set", index=link["index"], ifalias="")
            return bool(ip.link_lookup(ifname=port.container))

    def discard(self, host: str) -> None:
        delete_link(host)
        self._forget(host)

    def survey(self) -> dict[str, PoolLink]:
        """Every pool port's pair by host end: the endpoint it serves (its record, or an
        older netplugin's alias), and whether its container end is home; for a restarted
        agent. The records of pool ports that are gone are dropped."""
        with IPRoute() as ip:
            links = ip.get_links()
        names = {link.get("ifname") for link in links}
        out = {
            name: PoolLink(
                self._serving(name, link.get("ifalias") or ""), container_end(name) in names
            )
            for link in links
            if (name := link.get("ifname")) and is_pool_port(name)
        }
        for record in self.records.iterdir():
            if record.name not in out:
                with contextlib.suppress(FileNotFoundError):
                    record.unlink()
        return out

    def _serving(self, host: str, alias: str) -> str:
        try:
            return (self.records / host).read_text().strip()
        except FileNotFoundError:
            return alias

    def _record(self, host: str, endpoint_id: str) -> None:
        path = self.records / host
        temp = path.with_name(f".{host}.new")
        temp.write_text(endpoint_id)
        os.replace(temp, path)

    def _forget(self, host: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.records / host).unlink()
