"""netctl: the command line of the netplugin master's REST API, with Contiv's verbs and flags."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TextIO

import requests

from common.credentials import CredentialError, client_cert, client_token
from common.kinds import ENDPOINTS, GLOBALS, GROUPS, NETWORKS, TENANTS

from . import __version__
from .args import Commands, name, tenant_option
from .bgp import add_bgp_commands
from .client import DEFAULT_URL, MasterClient, MasterError, normalize_url
from .host import add_host_commands
from .output import (
    ENDPOINT_COLUMNS,
    GROUP_COLUMNS,
    NETWORK_COLUMNS,
    TENANT_COLUMNS,
    emit_json,
    emit_list,
    emit_quiet,
    json_wanted,
    render_global,
    render_table,
)
from .policy import add_policy_commands
from .services import add_service_commands

PROG = "netctl"
__all__ = ["PROG", "build_parser", "main", "render_table"]


# --- handlers ---


def global_info(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl global info."""
    info = client.inspect(GLOBALS)
    if json_wanted(args):
        emit_json(info, out)
    else:
        out.write(render_global(info))


def global_set(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl global set."""
    given = {
        "fwdMode": args.fwd_mode,
        "arpMode": args.arp_mode,
        "vlans": args.vlan_range,
        "vxlans": args.vxlan_range,
        "pvtSubnet": args.private_subnet,
    }
    fields = {k: v for k, v in given.items() if v is not None}  # the master merges the rest
    emit_quiet(args, client.put(GLOBALS, **fields), out)


def tenant_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl tenant create."""
    emit_quiet(args, client.put(TENANTS, args.name), out)


def net_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl net create."""
    result = client.put(
        NETWORKS,
        args.tenant,
        args.name,
        encap=args.encap,
        pktTag=args.pkt_tag,
        subnet=args.subnet,
        gateway=args.gateway,
        ipv6Subnet=args.subnetv6,
        ipv6Gateway=args.gatewayv6,
        nwType=args.nw_type,
    )
    emit_quiet(args, result, out)


def group_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl group create."""
    policies = _policies(args.policy)
    result = client.put(
        GROUPS,
        args.tenant,
        args.group,
        networkName=args.network,
        ipPool=args.ip_pool,
        policies=policies,
        netProfile=args.networkprofile,
    )
    emit_quiet(args, result, out)


def _policies(given: list[str]) -> list[str]:
    """-p values: repeatable, each also comma-separated."""
    return [p.strip() for g in given for p in g.split(",") if p.strip()]


def group_update(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl group update: replace the group's policies and/or netprofile (the master merges
    the change into the group in one transaction, so a concurrent change of its other fields
    stays)."""
    policies = [] if args.no_policy else (_policies(args.policy) or None)
    profile = "" if args.no_netprofile else (args.networkprofile or None)
    if policies is None and profile is None:
        args.parser.error("nothing to change; give -p, --no-policy, -n or --no-netprofile")
    fields = {"policies": policies, "netProfile": profile}
    changes = {k: v for k, v in fields.items() if v is not None}
    result = client.patch(GROUPS, args.tenant, args.group, **changes)
    emit_quiet(args, result, out)


def endpoint_inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl endpoint inspect."""
    emit_json(client.inspect(ENDPOINTS, args.id), out)


def endpoint_ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl endpoint ls."""
    emit_list(args, client.list(ENDPOINTS), ENDPOINT_COLUMNS, out)


def version(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl version: the client's version, then the master's."""
    if json_wanted(args):
        server = client.version()
        emit_json({"client": {"version": __version__}, "server": server}, out)
        return
    out.write(f"Client Version:\nVersion: {__version__}\n\n")
    out.flush()
    server = client.version()
    out.write(f"Server Version:\nVersion: {server.get('version', '')}\n")
    if server.get("backend"):
        out.write(f"Backend: {server['backend']}\n")


# --- parser ---


# Global options that name a file, with the environment variable each falls back to.
FILE_OPTIONS = (
    ("--tls-ca", "NETCTL_TLS_CA", "CA certificate that signed the master's (https://)"),
    ("--tls-cert", "NETCTL_TLS_CERT", "client certificate, for a master that requires one"),
    ("--tls-key", "NETCTL_TLS_KEY", "the private key of --tls-cert"),
    (
        "--auth-token-file",
        "NETCTL_AUTH_TOKEN_FILE",
        "file holding the bearer token; else the token in $NETCTL_AUTH_TOKEN",
    ),
)


def _file_option(args: argparse.Namespace, flag: str) -> str:
    env = next(e for f, e, _ in FILE_OPTIONS if f == flag)
    return getattr(args, flag[2:].replace("-", "_"), None) or os.environ.get(env, "")


def _common_options() -> argparse.ArgumentParser:
    """Global options, accepted both before and after the subcommand (SUPPRESS defaults)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("global options")
    group.add_argument(
        "--netmaster",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=f"netmaster URL or host:port (default: $NETMASTER or {DEFAULT_URL})",
    )
    for flag, env, help_ in FILE_OPTIONS:
        group.add_argument(
            flag, metavar="FILE", default=argparse.SUPPRESS, help=f"{help_} (default: ${env})"
        )
    group.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the raw JSON result, for scripts",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    """The whole netctl command line."""
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Command line of the netplugin master (Contiv netctl compatible).",
        parents=[common],
    )
    objects = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands = Commands(objects, common)
    obj, verb = commands.obj, commands.verb

    # global
    g = obj("global", "global settings")
    verb(g, "info", global_info, "show global settings and their oper state")
    p = verb(g, "set", global_set, "change global settings (only the given ones)")
    p.add_argument("--fwd-mode", choices=["bridge", "routing"], help="forwarding mode")
    p.add_argument("--arp-mode", choices=["proxy", "flood"], help="ARP mode")
    p.add_argument("--vlan-range", metavar="RANGE", help="vlan range, e.g. 1-4094")
    p.add_argument("--vxlan-range", metavar="RANGE", help="vxlan range, e.g. 1-10000")
    p.add_argument("--private-subnet", metavar="CIDR", help="private subnet, e.g. 172.19.0.0/16")

    # tenant
    commands.kind("tenant", TENANTS, "tenants", TENANT_COLUMNS, tenant_create)[1].add_argument(
        "name", type=name
    )

    # net
    _, p = commands.kind(
        "net",
        NETWORKS,
        "networks",
        NETWORK_COLUMNS,
        net_create,
        what="network",
        aliases=["network"],
    )
    p.add_argument("-e", "--encap", choices=["vxlan", "vlan"], default="vxlan", help="encap")
    p.add_argument(
        "-p", "--pkt-tag", type=int, default=0, metavar="N", help="vlan id or vni (0: pick one)"
    )
    p.add_argument("-s", "--subnet", default="", metavar="CIDR", help="IPv4 subnet")
    p.add_argument("-g", "--gateway", default="", metavar="IP", help="IPv4 gateway")
    p.add_argument("--subnetv6", default="", metavar="CIDR", help="IPv6 subnet")
    p.add_argument("--gatewayv6", default="", metavar="IP", help="IPv6 gateway")
    p.add_argument(
        "-n", "--nw-type", choices=["data", "infra"], default="data", help="network type"
    )
    p.add_argument("name", type=name)

    # group
    e, p = commands.kind(
        "group",
        GROUPS,
        "endpoint groups",
        GROUP_COLUMNS,
        group_create,
        what="endpoint group",
        aliases=["epg"],
        key="group",
    )
    p.add_argument("-r", "--ip-pool", default="", metavar="RANGE", help="ip pool, e.g. A-B")
    p.add_argument(
        "-p",
        "--policy",
        action="append",
        default=[],
        metavar="NAME",
        help="policy (repeatable, or comma-separated)",
    )
    p.add_argument("-n", "--networkprofile", default="", metavar="NAME", help="network profile")
    p.add_argument("network", type=name)
    p.add_argument("group", type=name)

    p = verb(e, "update", group_update, "change an endpoint group's policies or netprofile")
    tenant_option(p)
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "-p",
        "--policy",
        action="append",
        default=[],
        metavar="NAME",
        help="the group's policies from now on (repeatable, or comma-separated)",
    )
    which.add_argument("--no-policy", action="store_true", help="detach every policy")
    profile = p.add_mutually_exclusive_group()
    profile.add_argument(
        "-n", "--networkprofile", default="", metavar="NAME", help="the group's netprofile"
    )
    profile.add_argument("--no-netprofile", action="store_true", help="drop the netprofile")
    p.add_argument("group", type=name)

    # policy
    add_policy_commands(commands)

    # netprofile, service
    add_service_commands(commands)

    # bgp
    add_bgp_commands(commands)

    # endpoint
    ep = obj("endpoint", "endpoints (read-only)", ["ep"])
    verb(ep, "inspect", endpoint_inspect, "endpoint config and oper state").add_argument(
        "id", type=name
    )
    verb(ep, "ls", endpoint_ls, "list endpoints", ["list"])

    # host (the agent's inspect API, not the master)
    add_host_commands(commands)

    # version
    p = objects.add_parser("version", help="netctl's and the master's versions", parents=[common])
    p.set_defaults(func=version, parser=p)
    return parser


def main(argv: Sequence[str] | None = None, *, session: requests.Session | None = None) -> int:
    """Run netctl; returns the exit code (0 ok, 1 refused or unreachable, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "global" and args.verb == "set":
        wanted = (args.fwd_mode, args.arp_mode, args.vlan_range, args.vxlan_range)
        if all(v is None for v in (*wanted, args.private_subnet)):
            args.parser.error("nothing to set; give at least one option (see --help)")
    url = getattr(args, "netmaster", None) or os.environ.get("NETMASTER") or DEFAULT_URL
    tls_ca, cert, key = (_file_option(args, f) for f in ("--tls-ca", "--tls-cert", "--tls-key"))
    try:
        url = normalize_url(url, "https" if tls_ca else "http")
        token = client_token(
            _file_option(args, "--auth-token-file"), os.environ.get("NETCTL_AUTH_TOKEN", "")
        )
    except ValueError as e:
        parser.error(str(e))
    try:
        pair = client_cert(cert, key)
    except CredentialError as e:
        parser.error(str(e))
    client = MasterClient(url, session=session, tls_ca=tls_ca, token=token, client_cert=pair)
    try:
        args.func(client, args, sys.stdout)
    except MasterError as e:
        sys.stdout.flush()
        print(f"{PROG}: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
