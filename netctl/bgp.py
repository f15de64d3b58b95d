"""netctl bgp: Contiv's verbs and flags for a host's peering with its router.

    netctl bgp create --router-ip CIDR --as N --neighbor-as M --neighbor IP HOST
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
from .output import Column, emit_json, emit_list, emit_quiet, field

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
    emit_quiet(args, client.put(BGPS, args.host, **fields), out)


def bgp_rm(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    emit_quiet(args, client.delete(BGPS, args.host), out)


def bgp_ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    emit_list(args, client.list(BGPS), BGP_COLUMNS, out)


def bgp_inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    emit_json(client.inspect(BGPS, args.host), out)


def add_bgp_commands(commands: Commands) -> None:
    """`netctl bgp ...`."""
    subs = commands.obj("bgp", "each host's BGP peering with its router (routing mode)")
    p = commands.verb(subs, "create", bgp_create, "create or change a host's BGP peering")
    p.add_argument(
        "--router-ip", required=True, metavar="CIDR", help="the host's address, e.g. 50.1.1.1/24"
    )
    p.add_argument(
        "--as", dest="as_number", required=True, metavar="N", help="the host's AS number"
    )
    p.add_argument("--neighbor-as", required=True, metavar="N", help="the router's AS number")
    p.add_argument("--neighbor", required=True, metavar="IP", help="the router's address")
    p.add_argument("host", type=name, metavar="HOST")
    p = commands.verb(subs, "rm", bgp_rm, "delete a host's BGP peering", ["delete"])
    p.add_argument("host", type=name, metavar="HOST")
    p = commands.verb(subs, "inspect", bgp_inspect, "a host's BGP config and oper state")
    p.add_argument("host", type=name, metavar="HOST")
    commands.verb(subs, "ls", bgp_ls, "list every host's BGP peering", ["list"])
