"""IPv6 neighbour discovery answered for the router (routing mode, datapath.routing): the
neighbour advertisement that answers a neighbour solicitation, as bytes. Pure.

The switch cannot write an advertisement itself with the fields os-ken encodes (an NA
needs ND's flags and the option type changed, which only OVS's own NXM fields reach), so
routing mode sends solicitations for the VRF's addresses to the controller
(datapath.ofapp), which answers each with ``advertisement``: from the router's MAC, for
the solicited address, with the Router, Solicited and Override flags, and the router's MAC
as the target link-layer address.
"""

from __future__ import annotations

from os_ken.lib.packet import ethernet, icmpv6, ipv6, packet

ETH_TYPE_IPV6 = 0x86DD
ND_FLAGS = 0b111  # Router, Solicited, Override (the three high bits of the NA's flags)
ND_HOP_LIMIT = 255  # RFC 4861: anything else is dropped by the receiver


def solicitation(frame: bytes) -> tuple[str, str, str] | None:
    """(sender MAC, sender address, target) of a neighbour solicitation; None for
    anything else, and for duplicate address detection (from ::, answered by no one)."""
    try:
        pkt = packet.Packet(frame)
    except Exception:  # not a frame os-ken can parse: not ours to answer
        return None
    eth = pkt.get_protocol(ethernet.ethernet)
    ip6 = pkt.get_protocol(ipv6.ipv6)
    icmp = pkt.get_protocol(icmpv6.icmpv6)
    if eth is None or ip6 is None or icmp is None or icmp.type_ != icmpv6.ND_NEIGHBOR_SOLICIT:
        return None
    if ip6.src == "::" or not isinstance(icmp.data, icmpv6.nd_neighbor):
        return None
    return eth.src, ip6.src, icmp.data.dst


def advertisement(frame: bytes, router_mac: str) -> bytes | None:
    """The advertisement answering the solicitation ``frame`` with ``router_mac``; None if
    ``frame`` is not one to answer."""
    asked = solicitation(frame)
    if asked is None:
        return None
    mac, sender, target = asked
    reply = packet.Packet()
    reply.add_protocol(ethernet.ethernet(dst=mac, src=router_mac, ethertype=ETH_TYPE_IPV6))
    reply.add_protocol(ipv6.ipv6(src=target, dst=sender, nxt=58, hop_limit=ND_HOP_LIMIT))
    reply.add_protocol(
        icmpv6.icmpv6(
            type_=icmpv6.ND_NEIGHBOR_ADVERT,
            data=icmpv6.nd_neighbor(
                res=ND_FLAGS, dst=target, option=icmpv6.nd_option_tla(hw_src=router_mac)
            ),
        )
    )
    reply.serialize()
    return bytes(reply.data)
