"""netctl's output: tables like Contiv's netctl, `global info`'s labelled lines, and --json."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any, TextIO

Column = tuple[str, Callable[[dict[str, Any]], Any]]


def cell(value: Any) -> str:
    """Render one table cell: lists joined by commas, None as empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value)
    return str(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Fixed-width columns with a header row and a dashed separator line, like Contiv's netctl."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [list(headers), ["-" * len(h) for h in headers], *cells]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
        for line in lines
    )


def field(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda obj: obj.get(name, "")


def container(ep: dict[str, Any]) -> str:
    return ep.get("containerName") or (ep.get("containerID") or "")[:12]


TENANT_COLUMNS: list[Column] = [("Name", field("tenantName"))]
NETWORK_COLUMNS: list[Column] = [
    ("Tenant", field("tenantName")),
    ("Network", field("networkName")),
    ("Nw Type", field("nwType")),
    ("Encap type", field("encap")),
    ("Packet tag", field("pktTag")),
    ("Subnet", field("subnet")),
    ("Gateway", field("gateway")),
    ("IPv6Subnet", field("ipv6Subnet")),
    ("IPv6Gateway", field("ipv6Gateway")),
]
GROUP_COLUMNS: list[Column] = [
    ("Tenant", field("tenantName")),
    ("Group", field("groupName")),
    ("Network", field("networkName")),
    ("IP Pool", field("ipPool")),
    ("Policies", field("policies")),
    ("Network profile", field("netProfile")),
]
ENDPOINT_COLUMNS: list[Column] = [
    ("Endpoint", field("endpointID")),
    ("Tenant", field("tenantName")),
    ("Network", field("networkName")),
    ("Group", field("groupName")),
    ("Host", field("host")),
    ("IPv4", field("ipAddress")),
    ("IPv6", field("ipv6Address")),
    ("Container", container),
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


def emit_json(data: Any, out: TextIO) -> None:
    out.write(json.dumps(data, indent=2) + "\n")


def emit_list(
    args: argparse.Namespace, items: list[dict[str, Any]], columns: list[Column], out: TextIO
) -> None:
    """Print a list result as JSON (--json) or as a table."""
    if json_wanted(args):
        emit_json(items, out)
        return
    rows = [[get(item) for _, get in columns] for item in items]
    out.write(render_table([h for h, _ in columns], rows))


def emit_quiet(args: argparse.Namespace, result: Any, out: TextIO) -> None:
    """create/rm print nothing on success unless --json."""
    if json_wanted(args):
        emit_json(result, out)


def render_global(info: dict[str, Any]) -> str:
    """`global info` as aligned "Label: value" lines, config first, then oper state."""
    pairs: list[tuple[str, str]] = []
    for section in ("Config", "Oper"):
        fields = info.get(section) or {}
        known = [k for k in GLOBAL_LABELS if k in fields]
        rest = [k for k in fields if k not in GLOBAL_LABELS and k not in GLOBAL_HIDDEN]
        pairs += [(GLOBAL_LABELS.get(k, k), cell(fields[k]) or "-") for k in known + rest]
    width = max((len(label) for label, _ in pairs), default=0) + 1
    return "".join(f"{(label + ':').ljust(width)}  {value}\n" for label, value in pairs)


def json_wanted(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))
