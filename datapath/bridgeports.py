"""The ports netplugin owns on the bridge: endpoint veths plugged and removed, ports and
veths nothing owns removed (datapath.endpointports adopts the endpoints'); and the router
port.

The router port (routing mode with BGP) is an OVS internal port holding the host's address
on the fabric (the Bgp object's router IP) on the untagged side of the VLAN uplink. The
host kernel owns it: BGP's session to the router and the routes it learns go through it,
and so do the packets the fabric routes to and from this host's VLAN networks (the switch's
flows are datapath.routing.fabric_flows; iptables' are datapath.hostnat's). Its address is
kept in its external_ids, so a restarted agent adopts the port as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping

from .effects import Links, Ovsdb
from .hostnat import FABRIC_PORT
from .ovs import PortInfo
from .veth import Into, veth_names

log = logging.getLogger(__name__)

EXT_ENDPOINT = "netplugin-endpoint"
EXT_NETWORK = "netplugin-network"
EXT_UPLINK = "netplugin-uplink"
EXT_FABRIC = "netplugin-fabric"  # on the router port; its value: its addresses, by commas


def adopt_fabric(ports: Mapping[str, PortInfo]) -> tuple[int | None, tuple[str, ...]]:
    """(ofport, addresses) of the router port on the bridge, (None, ()) if there is none."""
    info = ports.get(FABRIC_PORT)
    if info is None or not info.ofport or info.ofport < 0:
        return None, ()
    return info.ofport, tuple(a for a in info.external_ids.get(EXT_FABRIC, "").split(",") if a)


def by_tag(subnets: Mapping[int, Iterable[str]] | None) -> dict[int, tuple[str, ...]]:
    """The fabric's routed subnets by tenant tag, as the host state keeps them."""
    return {k: tuple(sorted(v)) for k, v in (subnets or {}).items()}


def ensure_fabric(
    ovs: Ovsdb,
    links: Links,
    bridge: str,
    mtu: int,
    have: tuple[int | None, tuple[str, ...]],
    addresses: tuple[str, ...],
) -> tuple[int | None, tuple[str, ...]]:
    """Make the router port hold ``addresses`` (its router IP, and its IPv6 one if given;
    () = no port); ``have``: (ofport, addresses) as it is. New addresses get a new port, so
    the old ones go with the old one. The host forwards IPv6 once the port has an IPv6
    address (IPv4 forwarding is on already: the host daemons' setup and docker's)."""
    ofport, held = have
    if ofport is not None and held != addresses:
        ovs.del_port(bridge, FABRIC_PORT)
        ofport, held = None, ()
    if addresses and ofport is None:
        ofport = ovs.add_port(
            bridge, FABRIC_PORT, type="internal", external_ids={EXT_FABRIC: ",".join(addresses)}
        )
        held = addresses
    if ofport is not None:  # again after a restart too: vswitchd's restart drops addresses
        links.address_gateway(FABRIC_PORT, mtu, list(held))
        if any(":" in a for a in held):
            links.forward_ipv6()
    return ofport, held


def remove_unowned(
    ovs: Ovsdb, links: Links, bridge: str, ports: Mapping[str, PortInfo], keep: Collection[str]
) -> int:
    """Remove our endpoint and gateway ports (in one OVSDB transaction: one
    reconfiguration of ovs-vswitchd), and host veths, not in ``keep``; how many."""
    ours = (EXT_ENDPOINT, EXT_NETWORK)
    stale = [
        name
        for name, info in ports.items()
        if any(k in info.external_ids for k in ours) and name not in keep
    ]
    ovs.del_ports(bridge, stale)
    removed = len(stale)
    for name in links.host_veths():
        if name not in keep:
            links.delete_link(name)
            removed += 1
    return removed


def plug_endpoint(
    ovs: Ovsdb,
    links: Links,
    bridge: str,
    endpoint_id: str,
    network_id: str,
    mac: str,
    mtu: int,
    offloads_off: bool = False,
    into: Into | None = None,
) -> tuple[int, str, str]:
    """The endpoint's veth pair, its host end a port of the bridge, its container end here
    or made in ``into`` (TX checksumming off on it if ``offloads_off``): (ofport, host end,
    container end here, "" if made in ``into``). A failure removes what it made."""
    if into is None:
        host, container = links.create_veth(endpoint_id, mac, mtu)
    else:
        host = links.create_veth_in_netns(endpoint_id, mac, mtu, into, not offloads_off)
        container = ""
        into.made.set()  # the pod's interface may be configured while the port is added
    try:
        if offloads_off and container:
            links.disable_tx_offload(container)
        ext = {EXT_ENDPOINT: endpoint_id, EXT_NETWORK: network_id}
        return ovs.add_port(bridge, host, external_ids=ext), host, container
    except BaseException:
        unplug_endpoint(ovs, links, bridge, endpoint_id)
        raise


def unplug_endpoint(ovs: Ovsdb, links: Links, bridge: str, endpoint_id: str) -> None:
    """Remove the endpoint's own port and veth pair, whichever are there."""
    remove_ports(ovs, links, bridge, [veth_names(endpoint_id)[0]])


def remove_ports(ovs: Ovsdb, links: Links, bridge: str, names: list[str]) -> None:
    """Remove these ports (in one OVSDB transaction: one reconfiguration of ovs-vswitchd)
    and their veth pairs (by the host end: its peer goes with it), whichever are there;
    raises the first failure once every veth was tried."""
    if not names:
        return
    ovs.del_ports(bridge, names)
    failure: OSError | None = None
    for name in names:
        try:
            links.delete_link(name)
        except OSError as e:
            log.error("cannot delete veth %s: %s", name, e)
            failure = failure or e
    if failure is not None:
        raise failure
