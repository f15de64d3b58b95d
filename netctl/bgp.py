"""netctl bgp: Contiv's verbs and flags for a host's peering with its router.

    netctl bgp create --router-ip CIDR [--router-ipv6 CIDR] --as N --neighbor-as M
                      --neighbor IP HOST
    netctl bgp rm|inspect HOST
    netctl bgp ls

The values are the master's to check, so there is one set of messages.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from common.kinds import BGPS

from .args import Commands, name
from .client import MasterClient
from .output import Column, emit_quiet, field

BGP_COLUMNS: list[Column] = [
    ("Hostname", field("hostname")),
    ("Router IP", field("routerip")),
    ("AS", field("as")),
    ("Neighbor", field("neighbor")),
    ("Neighbor AS", field("neighbor-as")),
]


def bgp_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl bgp create: create the host's Bgp object, or change it."""
    fields = {
        "routerip": args.router_ip,
        "as": args.as_number,
        "neighbor-as": args.neighbor_as,
        "neighbor": args.neighbor,
    }
    if args.router_ipv6:
        fields["routeripv6"] = args.router_ipv6
    emit_quiet(args, client.put(BGPS, args.host, **fields), out)


def add_bgp_commands(commands: Commands) -> None:
    """`netctl bgp ...`."""
    _, p = commands.kind(
        "bgp",
        BGPS,
        "each host's BGP peering with its router (routing mode)",
        BGP_COLUMNS,
        bgp_create,
        what="host's BGP peering",
        plural="hosts' BGP peerings",
        key="HOST",
        create_help="create or change a host's BGP peering",
    )
    p.add_argument(
        "--router-ip", required=True, metavar="CIDR", help="the host's address, e.g. 50.1.1.1/24"
    )
    p.add_argument(
        "--router-ipv6",
        default="",
        metavar="CIDR",
        help="the host's IPv6 address on the same link, e.g. 2001:db8::1/64: its containers' "
        "/128s are announced with it (none without)",
    )
    p.add_argument(
        "--as", dest="as_number", required=True, metavar="N", help="the host's AS number"
    )
    p.add_argument("--neighbor-as", required=True, metavar="N", help="the router's AS number")
    p.add_argument("--neighbor", required=True, metavar="IP", help="the router's address")
    p.add_argument("host", type=name, metavar="HOST")
