"""netctl netprofile and netctl service: Contiv's verbs and flags.

    netctl netprofile create [-t TENANT] [-b BANDWIDTH] [-s BURST_KB] [-d DSCP] NAME
    netctl netprofile rm|inspect [-t TENANT] NAME
    netctl netprofile ls [-t TENANT | -a]
    netctl service create [-t TENANT] -s NETWORK -l KEY=VALUE ... -p SVC:PROV:PROTO ...
        [--preferred-ip IP] NAME
    netctl service rm|inspect [-t TENANT] NAME
    netctl service ls [-t TENANT | -a]

The values are the master's to check, so there is one set of messages.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from common.kinds import NETPROFILES, SERVICES

from .args import Commands, name
from .client import MasterClient
from .output import Column, emit_quiet, field

PROFILE_COLUMNS: list[Column] = [
    ("Tenant", field("tenantName")),
    ("Name", field("profileName")),
    ("Bandwidth", field("bandwidth")),
    ("Burst(KB)", lambda p: p.get("burst") or ""),
    ("DSCP", lambda p: p.get("DSCP") or ""),
]


def _joined(name: str) -> Any:
    return lambda obj: ",".join(obj.get(name) or [])


SERVICE_COLUMNS: list[Column] = [
    ("Tenant", field("tenantName")),
    ("Service", field("serviceName")),
    ("Network", field("networkName")),
    ("Preferred IP", field("ipAddress")),
    ("Selectors", _joined("selectors")),
    ("Ports", _joined("ports")),
]


def _listed(values: list[str]) -> list[str]:
    """Repeatable values, each also comma-separated."""
    return [v.strip() for given in values for v in given.split(",") if v.strip()]


def profile_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl netprofile create: create the profile, or change the one of that name."""
    profile = {"bandwidth": args.bandwidth, "burst": args.burst, "DSCP": args.dscp}
    emit_quiet(args, client.put(NETPROFILES, args.tenant, args.name, **profile), out)


def service_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl service create: create the service, or change the one of that name."""
    result = client.put(
        SERVICES,
        args.tenant,
        args.name,
        networkName=args.network,
        ipAddress=args.preferred_ip,
        selectors=_listed(args.selector),
        ports=_listed(args.port),
    )
    emit_quiet(args, result, out)


def add_service_commands(commands: Commands) -> None:
    """`netctl netprofile ...` and `netctl service ...`."""
    _, p = commands.kind(
        "netprofile",
        NETPROFILES,
        "bandwidth and DSCP profiles of endpoint groups",
        PROFILE_COLUMNS,
        profile_create,
        create_help="create or change a netprofile",
    )
    p.add_argument(
        "-b", "--bandwidth", default="", metavar="RATE", help="e.g. 10mbps (empty: unlimited)"
    )
    p.add_argument("-s", "--burst", type=int, default=0, metavar="KB", help="burst size in KB")
    p.add_argument("-d", "--dscp", type=int, default=0, metavar="DSCP", help="0-63 (0: no mark)")
    p.add_argument("name", type=name)

    _, p = commands.kind(
        "service",
        SERVICES,
        "service load balancers (VIPs over labelled containers)",
        SERVICE_COLUMNS,
        service_create,
        create_help="create or change a service",
    )
    p.add_argument("-s", "--network", required=True, type=name, metavar="NETWORK", help="network")
    p.add_argument(
        "-l",
        "--selector",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="container label a provider carries (repeatable, or comma-separated)",
    )
    p.add_argument(
        "-p",
        "--port",
        action="append",
        default=[],
        metavar="SVC:PROV:PROTO",
        help="service port : provider port : TCP|UDP (repeatable, or comma-separated)",
    )
    p.add_argument("--preferred-ip", default="", metavar="IP", help="the VIP (default: any free)")
    p.add_argument("name", type=name)
