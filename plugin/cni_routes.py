"""Which routes a CNI interface gets (pure): the configuration's "routes", or else a
default route per address family the pod has none of yet. And a result's routes against
the namespace's, for CHECK.

A route is (destination CIDR, gateway), normalised (``10.9.0.0/16``, ``fd01::1``), as the
result lists it and as datapath.netns reads the namespace's back.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from common import cni
from common.models import Network
from datapath.netns import NetnsRoute

Route = tuple[str, str]
DEFAULT_ROUTES = {4: "0.0.0.0/0", 6: "::/0"}


def _refused(what: str, why: str) -> cni.CniError:
    return cni.CniError(cni.INVALID_CONFIG, f'"routes": {what}: {why}')


def requested_routes(config: Mapping[str, Any]) -> tuple[Route, ...] | None:
    """The configuration's "routes" (as the spec's IPAM routes: [{"dst": CIDR, "gw": IP}],
    "gw" optional), normalised; None when it names none. A malformed one is refused
    (code 7), and so is ipam.routes: netplugin has no IPAM section to read it from."""
    ipam = config.get("ipam")
    if isinstance(ipam, dict) and "routes" in ipam:
        raise _refused(
            "ipam.routes", 'netplugin allocates the addresses itself: put "routes" at the top'
        )
    if "routes" not in config:
        return None
    given = config["routes"]
    if not isinstance(given, list):
        raise _refused(repr(given), 'must be a list of {"dst": CIDR, "gw": IP}')
    out: dict[str, str] = {}
    for r in given:
        if not isinstance(r, dict) or not isinstance(r.get("dst"), str):
            raise _refused(repr(r), 'each route is {"dst": CIDR}, with an optional "gw"')
        try:
            dst = ipaddress.ip_network(r["dst"], strict=False)
        except ValueError:
            raise _refused(repr(r["dst"]), "dst is not a CIDR") from None
        gw = r.get("gw") or ""
        try:
            if not isinstance(gw, str):
                raise ValueError
            gw = str(ipaddress.ip_address(gw)) if gw else ""
        except ValueError:
            raise _refused(str(dst), f"gw {gw!r} is not an IP address") from None
        if gw and ipaddress.ip_address(gw).version != dst.version:
            raise _refused(str(dst), f"gw {gw} is not an IPv{dst.version} address")
        if str(dst) in out and out[str(dst)] != gw:
            raise _refused(str(dst), "listed twice with two gateways")
        out[str(dst)] = gw
    return tuple(out.items())


def plan_routes(
    requested: tuple[Route, ...] | None, net: Network, taken: Mapping[str, str]
) -> tuple[Route, ...]:
    """The routes an interface on ``net`` gets, given the routes the namespace has via its
    other interfaces (``taken``: destination -> interface).

    Asked for (``requested``): exactly those, a missing gateway being the network's of the
    route's family; one the namespace has already via another interface is refused
    (code 101: it would not be the interface's, and DEL must not take another's route).
    Not asked: a default route via the network's gateway for each family of the network
    the namespace has no default route of yet; none on an internal network. So the first
    interface (eth0) gets the default routes and a second one (Multus's net1, podman's
    eth1) none, as Debian's ptp and bridge with host-local give none unless asked.

        eth0 on 10.1.0.0/24 + fd01::/64, no routes yet -> 0.0.0.0/0 via 10.1.0.1, ::/0 via fd01::1
        net1 on 10.2.0.0/24, eth0 has 0.0.0.0/0        -> ()
        net1 asking [{"dst": "10.9.0.0/16"}]           -> 10.9.0.0/16 via 10.2.0.1
        net1 asking [{"dst": "0.0.0.0/0"}], eth0 has it -> refused
    """
    families = {
        v: (subnet, gw)
        for v, subnet, gw in ((4, net.subnet, net.gateway), (6, net.ipv6Subnet, net.ipv6Gateway))
        if subnet
    }
    if requested is None:
        return tuple(
            (DEFAULT_ROUTES[v], gw)
            for v, (_, gw) in families.items()
            if gw and not net.internal and DEFAULT_ROUTES[v] not in taken
        )
    out = []
    for dst, gw in requested:
        v = ipaddress.ip_network(dst).version
        if v not in families:
            raise _refused(dst, f"network {net.id} has no IPv{v} subnet")
        subnet, network_gw = families[v]
        gw = gw or network_gw
        if not gw:
            raise _refused(dst, f'no "gw", and network {net.id} has no IPv{v} gateway')
        if ipaddress.ip_address(gw) not in ipaddress.ip_network(subnet):
            raise _refused(dst, f"gw {gw} is not in network {net.id}'s subnet {subnet}")
        if dst in taken:
            raise cni.CniError(
                cni.DATAPATH_FAILURE,
                f"route {dst}: the pod has it already via {taken[dst] or 'a multipath route'}; "
                'leave it out of "routes"',
            )
        out.append((dst, gw))
    return tuple(out)


def taken(routes: Iterable[NetnsRoute], ifname: str) -> dict[str, str]:
    """The namespace's routes via other interfaces than ``ifname``: destination -> interface."""
    return {r.dst: r.ifname for r in sorted(routes, key=str) if r.ifname != ifname}


def via(routes: Iterable[NetnsRoute], ifname: str) -> set[Route]:
    """The namespace's routes through a gateway via ``ifname``."""
    return {(r.dst, r.gateway) for r in routes if r.ifname == ifname and r.gateway}


def absent_routes(
    result: Mapping[str, Any], routes: Iterable[NetnsRoute], ifname: str
) -> list[str]:
    """The routes ``result`` lists that the namespace does not have via ``ifname`` (a route
    without "gw" matches any gateway)."""
    there = via(routes, ifname)
    lost = []
    for r in result.get("routes") or []:
        if not isinstance(r, dict):
            continue
        dst, gw = str(r.get("dst", "")), str(r.get("gw") or "")
        try:
            dst = str(ipaddress.ip_network(dst, strict=False))
            gw = str(ipaddress.ip_address(gw)) if gw else ""
        except ValueError:
            lost.append(f"{dst} via {gw}")
            continue
        if (dst, gw) not in there and not (not gw and any(d == dst for d, _ in there)):
            lost.append(f"{dst} via {gw or 'a gateway'}")
    return lost
