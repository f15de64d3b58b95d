"""The VXLAN ports toward the other hosts: one per peer VTEP, named after its address.

Their outer IP header takes the inner packet's DSCP (tos=inherit), so a netprofile's mark
crosses the underlay too (shared/spec/DATAPATH-FEATURES.md §3: without it the outer header
is 0). A tunnel made before has its options brought in line, in place."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from .effects import Ovsdb
from .local import tunnel_port_name
from .ovs import PortInfo

log = logging.getLogger(__name__)

EXT_TUNNEL = "netplugin-tunnel"  # value: the peer host


def tunnel_options(remote_ip: str) -> dict[str, str]:
    """A tunnel port's options: its peer, the VNI from the flow, the inner DSCP outside."""
    return {"remote_ip": remote_ip, "key": "flow", "tos": "inherit"}


def present_tunnels(ports: Mapping[str, PortInfo]) -> dict[str, int]:
    """The tunnel ports already on the bridge, by peer host (adopted before the peers are
    known, so the flows keep using them)."""
    return {
        info.external_ids[EXT_TUNNEL]: info.ofport
        for info in ports.values()
        if EXT_TUNNEL in info.external_ids and info.ofport and info.ofport > 0
    }


def ensure_tunnels(
    ovs: Ovsdb, bridge: str, peers: Mapping[str, str], ports: Mapping[str, PortInfo]
) -> dict[str, int]:
    """Add a tunnel per peer (kept when it exists), delete the tunnels of peers gone; the
    tunnels' ofports by peer host."""
    wanted = {tunnel_port_name(ip): (host, ip) for host, ip in peers.items()}
    tunnels: dict[str, int] = {}
    for name, (host, ip) in sorted(wanted.items()):
        info = ports.get(name)
        options = tunnel_options(ip)
        if (
            info is not None
            and info.external_ids.get(EXT_TUNNEL) == host
            and info.ofport
            and info.options == options
        ):
            tunnels[host] = info.ofport
            continue
        try:
            tunnels[host] = ovs.add_port(
                bridge, name, type="vxlan", options=options, external_ids={EXT_TUNNEL: host}
            )
            log.info("tunnel %s to host %s (%s)", name, host, ip)
        except RuntimeError as e:
            log.error("host %s: cannot add tunnel %s to %s: %s", host, name, ip, e)
    for name, info in ports.items():
        if EXT_TUNNEL in info.external_ids and name not in wanted:
            ovs.del_port(bridge, name)
            log.info("tunnel %s to host %s removed", name, info.external_ids[EXT_TUNNEL])
    return tunnels
