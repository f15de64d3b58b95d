"""TX offloads of container interfaces: what the switch can take, decided purely, and the
one reading of the running ovs-vswitchd it depends on."""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


def keeps_offloads(datapath_type: str, switch_tso: bool, encap: str, tunnels: bool) -> bool:
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


class Offloads:
    """What this host's switch takes: the datapath type and, for the userspace one,
    whether ovs-vswitchd runs with userspace TSO (read again after it restarts)."""

    def __init__(self, datapath_type: str | None, tunnels: bool) -> None:
        self.tunnels = tunnels  # this host has a VTEP: VXLAN networks span hosts
        self.datapath_type = datapath_type or ""  # known for sure once probed
        self.switch_tso = False

    def keeps(self, encap: str) -> bool:
        """Whether interfaces of a network with ``encap`` keep their TX offloads."""
        return keeps_offloads(self.datapath_type, self.switch_tso, encap, self.tunnels)

    def probe(self, datapath_type: str, links: _ReadsTso, bridge: str) -> None:
        """Read the switch; say what it means for container interfaces when it changes."""
        was = self.switch_tso
        self.datapath_type = datapath_type
        self.switch_tso = datapath_type == "netdev" and links.switch_tso(bridge)
        if datapath_type != "netdev" or was == self.switch_tso:
            return
        if self.switch_tso:
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
