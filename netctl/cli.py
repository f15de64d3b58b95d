"""netctl: the command line of the netplugin master's REST API, with Contiv's verbs and flags."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import requests

from common.credentials import CredentialError, client_cert, client_token

from . import __version__
from .client import DEFAULT_URL, MasterClient, MasterError, normalize_url

PROG = "netctl"

Handler = Callable[[MasterClient, argparse.Namespace, TextIO], None]
Column = tuple[str, Callable[[dict[str, Any]], Any]]


# --- output ---


def _cell(value: Any) -> str:
    """Render one table cell: lists joined by commas, None as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(_cell(v) for v in value)
    return str(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Fixed-width columns with a header row and a dashed separator line, like Contiv's netctl."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [list(headers), ["-" * len(h) for h in headers], *cells]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )


def _field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: obj.get(name, "")


def _container(ep: dict[str, Any]) -> str:
    return ep.get("containerName") or (ep.get("containerID") or "")[:12]


TENANT_COLUMNS: list[Column] = [("Name", _field("tenantName"))]
NETWORK_COLUMNS: list[Column] = [
    ("Tenant", _field("tenantName")),
    ("Network", _field("networkName")),
    ("Nw Type", _field("nwType")),
    ("Encap type", _field("encap")),
    ("Packet tag", _field("pktTag")),
    ("Subnet", _field("subnet")),
    ("Gateway", _field("gateway")),
    ("IPv6Subnet", _field("ipv6Subnet")),
    ("IPv6Gateway", _field("ipv6Gateway")),
]
GROUP_COLUMNS: list[Column] = [
    ("Tenant", _field("tenantName")),
    ("Group", _field("groupName")),
    ("Network", _field("networkName")),
    ("IP Pool", _field("ipPool")),
    ("Policies", _field("policies")),
    ("Network profile", _field("netProfile")),
]
ENDPOINT_COLUMNS: list[Column] = [
    ("Endpoint", _field("endpointID")),
    ("Tenant", _field("tenantName")),
    ("Network", _field("networkName")),
    ("Group", _field("groupName")),
    ("Host", _field("host")),
    ("IPv4", _field("ipAddress")),
    ("IPv6", _field("ipv6Address")),
    ("Container", _container),
]

GLOBAL_LABELS: dict[str, str] = {
    "networkInfraType": "Fabric mode",
    "fwdMode": "Forward mode",
    "arpMode": "ARP mode",
    "vlans": "Vlan range",
    "vxlans": "Vxlan range",
    "pvtSubnet": "Private subnet",
    "clusterMode": "Cluster mode",
    "numNetworks": "Networks",
    "vlansInUse": "Vlans in use",
    "vxlansInUse": "Vxlans in use",
    "freeVLANs": "Free vlans",
    "freeVXLANs": "Free vxlans",
}
GLOBAL_HIDDEN = {"key", "name"}


def _emit_json(data: Any, out: TextIO) -> None:
    out.write(json.dumps(data, indent=2) + "\n")


def _emit_list(
    args: argparse.Namespace, items: list[dict[str, Any]], columns: list[Column], out: TextIO
) -> None:
    """Print a list result as JSON (--json) or as a table."""
    if _json_wanted(args):
        _emit_json(items, out)
        return
    rows = [[get(item) for _, get in columns] for item in items]
    out.write(render_table([h for h, _ in columns], rows))


def _emit_quiet(args: argparse.Namespace, result: Any, out: TextIO) -> None:
    """create/rm print nothing on success unless --json."""
    if _json_wanted(args):
        _emit_json(result, out)


def render_global(info: dict[str, Any]) -> str:
    """`global info` as aligned "Label: value" lines, config first, then oper state."""
    pairs: list[tuple[str, str]] = []
    for section in ("Config", "Oper"):
        fields = info.get(section) or {}
        known = [k for k in GLOBAL_LABELS if k in fields]
        rest = [k for k in fields if k not in GLOBAL_LABELS and k not in GLOBAL_HIDDEN]
        pairs += [(GLOBAL_LABELS.get(k, k), _cell(fields[k]) or "-") for k in known + rest]
    width = max((len(label) for label, _ in pairs), default=0) + 1
    return "".join(f"{(label + ':').ljust(width)}  {value}\n" for label, value in pairs)


def _json_wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


# --- handlers ---


def global_info(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl global info."""
    info = client.inspect_global()
    if _json_wanted(args):
        _emit_json(info, out)
    else:
        out.write(render_global(info))


def global_set(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl global set."""
    result = client.update_global(
        fwd_mode=args.fwd_mode,
        arp_mode=args.arp_mode,
        vlans=args.vlan_range,
        vxlans=args.vxlan_range,
        pvt_subnet=args.private_subnet,
    )
    _emit_quiet(args, result, out)


def tenant_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl tenant create."""
    _emit_quiet(args, client.create_tenant(args.name), out)


def tenant_rm(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl tenant rm."""
    _emit_quiet(args, client.delete_tenant(args.name), out)


def tenant_ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl tenant ls."""
    _emit_list(args, client.list_tenants(), TENANT_COLUMNS, out)


def tenant_inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl tenant inspect."""
    _emit_json(client.inspect_tenant(args.name), out)


def net_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl net create."""
    result = client.create_network(
        args.tenant,
        args.name,
        encap=args.encap,
        pkt_tag=args.pkt_tag,
        subnet=args.subnet,
        gateway=args.gateway,
        ipv6_subnet=args.subnetv6,
        ipv6_gateway=args.gatewayv6,
        nw_type=args.nw_type,
    )
    _emit_quiet(args, result, out)


def net_rm(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl net rm."""
    _emit_quiet(args, client.delete_network(args.tenant, args.name), out)


def net_ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl net ls."""
    items = client.list_networks(None if args.all else args.tenant)
    _emit_list(args, items, NETWORK_COLUMNS, out)


def net_inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl net inspect."""
    _emit_json(client.inspect_network(args.tenant, args.name), out)


def group_create(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl group create."""
    policies = [p.strip() for given in args.policy for p in given.split(",") if p.strip()]
    result = client.create_group(
        args.tenant,
        args.group,
        args.network,
        ip_pool=args.ip_pool,
        policies=policies,
        net_profile=args.networkprofile,
    )
    _emit_quiet(args, result, out)


def group_rm(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl group rm."""
    _emit_quiet(args, client.delete_group(args.tenant, args.group), out)


def group_ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl group ls."""
    items = client.list_groups(None if args.all else args.tenant)
    _emit_list(args, items, GROUP_COLUMNS, out)


def group_inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl group inspect."""
    _emit_json(client.inspect_group(args.tenant, args.group), out)


def endpoint_inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl endpoint inspect."""
    _emit_json(client.inspect_endpoint(args.id), out)


def endpoint_ls(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl endpoint ls."""
    _emit_list(args, client.list_endpoints(), ENDPOINT_COLUMNS, out)


def version(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl version: the client's version, then the master's."""
    if _json_wanted(args):
        server = client.version()
        _emit_json({"client": {"version": __version__}, "server": server}, out)
        return
    out.write(f"Client Version:\nVersion: {__version__}\n\n")
    out.flush()
    server = client.version()
    out.write(f"Server Version:\nVersion: {server.get('version', '')}\n")
    if server.get("backend"):
        out.write(f"Backend: {server['backend']}\n")


# --- parser ---


def _name(value: str) -> str:
    """An argparse type for object names: non-empty."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


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


def _tenant_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-t", "--tenant", default="default", type=_name, help="tenant (default: default)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The whole netctl command line."""
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Command line of the netplugin master (Contiv netctl compatible).",
        parents=[common],
    )
    objects = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def obj(name: str, help_: str, aliases: Sequence[str] = ()) -> argparse._SubParsersAction:
        p = objects.add_parser(name, aliases=list(aliases), help=help_, parents=[common])
        return p.add_subparsers(dest="verb", metavar="VERB", required=True)

    def verb(
        subs: argparse._SubParsersAction,
        name: str,
        handler: Handler,
        help_: str,
        aliases: Sequence[str] = (),
    ) -> argparse.ArgumentParser:
        p = subs.add_parser(name, aliases=list(aliases), help=help_, parents=[common])
        p.set_defaults(func=handler, parser=p)
        return p

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
    t = obj("tenant", "tenants")
    verb(t, "create", tenant_create, "create a tenant").add_argument("name", type=_name)
    verb(t, "rm", tenant_rm, "delete a tenant", ["delete"]).add_argument("name", type=_name)
    verb(t, "ls", tenant_ls, "list tenants", ["list"])
    verb(t, "inspect", tenant_inspect, "tenant config and oper state").add_argument(
        "name", type=_name
    )

    # net
    n = obj("net", "networks", ["network"])
    p = verb(n, "create", net_create, "create a network")
    _tenant_option(p)
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
    p.add_argument("name", type=_name)
    p = verb(n, "rm", net_rm, "delete a network", ["delete"])
    _tenant_option(p)
    p.add_argument("name", type=_name)
    p = verb(n, "ls", net_ls, "list networks", ["list"])
    _tenant_option(p)
    p.add_argument("-a", "--all", action="store_true", help="list networks of all tenants")
    p = verb(n, "inspect", net_inspect, "network config and oper state")
    _tenant_option(p)
    p.add_argument("name", type=_name)

    # group
    e = obj("group", "endpoint groups", ["epg"])
    p = verb(e, "create", group_create, "create an endpoint group")
    _tenant_option(p)
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
    p.add_argument("network", type=_name)
    p.add_argument("group", type=_name)
    p = verb(e, "rm", group_rm, "delete an endpoint group", ["delete"])
    _tenant_option(p)
    p.add_argument("group", type=_name)
    p = verb(e, "ls", group_ls, "list endpoint groups", ["list"])
    _tenant_option(p)
    p.add_argument("-a", "--all", action="store_true", help="list groups of all tenants")
    p = verb(e, "inspect", group_inspect, "endpoint group config and oper state")
    _tenant_option(p)
    p.add_argument("group", type=_name)

    # endpoint
    ep = obj("endpoint", "endpoints (read-only)", ["ep"])
    verb(ep, "inspect", endpoint_inspect, "endpoint config and oper state").add_argument(
        "id", type=_name
    )
    verb(ep, "ls", endpoint_ls, "list endpoints", ["list"])

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
