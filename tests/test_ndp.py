"""datapath.ndp: the router's neighbour advertisement, checked field by field against a
solicitation built as a container's kernel sends it, and parsed back by os-ken."""

from __future__ import annotations

import struct

from os_ken.lib.packet import ethernet, icmpv6, ipv6, packet

from datapath.ndp import advertisement, solicitation

ROUTER_MAC = "02:4e:52:00:00:01"
CONTAINER_MAC = "02:42:0a:01:00:02"


def ns(src: str, target: str, mac: str = CONTAINER_MAC) -> bytes:
    p = packet.Packet()
    p.add_protocol(ethernet.ethernet(dst="33:33:ff:00:00:07", src=mac, ethertype=0x86DD))
    p.add_protocol(ipv6.ipv6(src=src, dst="ff02::1:ff00:7", nxt=58, hop_limit=255))
    option = icmpv6.nd_option_sla(hw_src=mac) if src != "::" else None
    p.add_protocol(
        icmpv6.icmpv6(
            type_=icmpv6.ND_NEIGHBOR_SOLICIT, data=icmpv6.nd_neighbor(dst=target, option=option)
        )
    )
    p.serialize()
    return bytes(p.data)


def pseudo_header(frame: bytes) -> bytes:
    length = len(frame) - 54
    return frame[22:38] + frame[38:54] + struct.pack("!I3xB", length, 58)


def ones_complement_sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def test_a_solicitation_is_answered_by_the_router() -> None:
    frame = advertisement(ns("fd00:1::2", "fd00:2::7"), ROUTER_MAC)
    assert frame is not None
    p = packet.Packet(frame)
    eth, ip6, icmp = (p.get_protocol(c) for c in (ethernet.ethernet, ipv6.ipv6, icmpv6.icmpv6))
    assert (eth.src, eth.dst, eth.ethertype) == (ROUTER_MAC, CONTAINER_MAC, 0x86DD)
    assert (ip6.src, ip6.dst, ip6.hop_limit, ip6.nxt) == ("fd00:2::7", "fd00:1::2", 255, 58)
    assert icmp.type_ == icmpv6.ND_NEIGHBOR_ADVERT
    assert icmp.data.dst == "fd00:2::7" and icmp.data.res == 0b111  # R, S, O
    assert icmp.data.option.hw_src == ROUTER_MAC
    # The flags word on the wire: R (bit 31), S (30), O (29).
    flags = struct.unpack_from("!I", frame, 14 + 40 + 4)[0]
    assert flags == 0xE000_0000
    # The checksum verifies as a kernel checks it: over the pseudo-header and the message.
    assert ones_complement_sum(pseudo_header(frame) + frame[54:]) == 0xFFFF


def test_duplicate_address_detection_and_other_packets_are_not_answered() -> None:
    assert advertisement(ns("::", "fd00:1::2"), ROUTER_MAC) is None
    assert solicitation(b"\x00" * 10) is None
    arp = packet.Packet()
    arp.add_protocol(ethernet.ethernet(ethertype=0x0806))
    arp.serialize()
    assert advertisement(bytes(arp.data) + b"\x00" * 28, ROUTER_MAC) is None
    assert solicitation(ns("fd00:1::2", "fd00:2::7")) == (CONTAINER_MAC, "fd00:1::2", "fd00:2::7")
