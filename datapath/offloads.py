"""TX offloads of container interfaces: what the switch can take, decided purely, and the
one reading of the running ovs-vswitchd it depends on."""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


def keeps_offloads(datapath_type: str | None, switch_tso: bool, encap: str, tunnels: bool) -> bool:
    """Whether a container interface on a network may keep TX checksumming and TSO (else
    the kernel finishes checksums and segments before the switch sees a packet).

    The kernel datapath handles both. The userspace one (OVS 3.1, `netdev`) gets partial
    checksums through AF_PACKET: without `userspace-tso-enable` in ovs-vswitchd TCP then
    fails, so offloads go; with it, packets carry their offload state and same-host TCP is
    ~10x faster, conntrack included, but its VXLAN tunnel ports cannot segment, so the
    interfaces of VXLAN networks that span hosts (this host has a VTEP) keep offloads off.
    VLAN uplinks are kernel interfaces that segment what they get. Gateway taps keep
    what ovs-vswitchd gives them: the pipeline sends the gateway's packets to local
    endpoints only, never into a tunnel."""
    if datapath_type != "netdev":
        return True
    if not switch_tso:
        return False
    return not (encap == "vxlan" and tunnels)


class _ReadsTso(Protocol):
    def switch_tso(self, bridge: str) -> bool: ...


def read_switch_tso(datapath_type: str | None, links: _ReadsTso, bridge: str, was: bool) -> bool:
    """Whether the running ovs-vswitchd has userspace TSO (netdev only; ``was``: the last
    reading); says what a change means for container interfaces."""
    now = datapath_type == "netdev" and links.switch_tso(bridge)
    if datapath_type != "netdev" or was == now:
        return now
    if now:
        log.info(
            "ovs-vswitchd has userspace TSO: container interfaces keep TX offloads, "
            "except on VXLAN networks that span hosts"
        )
    else:
        log.warning(
            "ovs-vswitchd runs without userspace TSO: TX checksumming off on new container "
            "interfaces (about 1 Gbit/s per TCP flow); set Open_vSwitch "
            "other_config:userspace-tso-enable=true and restart ovs-vswitchd to lift it%s",
            "; containers started before this restart must be restarted" if was else "",
        )
    return now
