"""KernelRoutes, the agent's real RouteTable (datapath.effects): the routes its BGP speaker
learns, in the host's main table with protocol ``bgp`` (186), so `ip route show proto bgp`
lists them and a route someone else made is never ours to delete."""

from __future__ import annotations

import errno
import ipaddress

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

RTPROT_BGP = 186


class KernelRoutes:
    """Learned routes, each ``prefix via next hop`` in the main table (pyroute2)."""

    def __init__(self, proto: int = RTPROT_BGP) -> None:
        self.proto = proto

    def replace(self, prefix: str, via: str) -> None:
        dst = str(ipaddress.ip_network(prefix, strict=False))
        with IPRoute() as ip:
            ip.route("replace", dst=dst, gateway=via, proto=self.proto)

    def delete(self, prefix: str) -> bool:
        dst = str(ipaddress.ip_network(prefix, strict=False))
        with IPRoute() as ip:
            try:
                ip.route("del", dst=dst, proto=self.proto)
            except NetlinkError as e:
                if e.code == errno.ESRCH:
                    return False
                raise
        return True

    def learned(self) -> dict[str, str]:
        """Our routes now in the table (prefix -> next hop): what a restarted agent finds."""
        out: dict[str, str] = {}
        with IPRoute() as ip:
            for family in (2, 10):
                for r in ip.get_routes(family=family, table=254, proto=self.proto):
                    dst, via = r.get_attr("RTA_DST"), r.get_attr("RTA_GATEWAY")
                    if dst and via:
                        out[f"{dst}/{r['dst_len']}"] = via
        return out
