"""ARP answered by the switch itself: the actions that turn a request into its reply."""

from __future__ import annotations

from datapath.flows import Action

ARP_REQUEST = 1
ARP_REPLY = 2
OFPP_IN_PORT = 0xFFFFFFF8  # output back where the packet came from


def responder(mac: str, ip: str) -> list[Action]:
    """Turn an ARP request into the reply of ``mac``/``ip`` and send it back."""
    return [
        ("move", "eth_src", "eth_dst", 48),
        ("set_field", "eth_src", mac),
        ("set_field", "arp_op", ARP_REPLY),
        ("move", "arp_sha", "arp_tha", 48),
        ("move", "arp_spa", "arp_tpa", 32),
        ("set_field", "arp_sha", mac),
        ("set_field", "arp_spa", ip),
        ("output", OFPP_IN_PORT),
    ]
