"""netctl host inspect: one host's agent seen through its inspect API (netplugin
--api-socket, or --api-listen), not through the master.

    netctl host inspect [--socket PATH | --url http://HOST:PORT] [--json] [SECTION]

SECTION is driver (the default: a summary), endpoints, tunnels, cluster or flows.
"""

from __future__ import annotations

import argparse
import glob
import os
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import quote

import requests

from common.client import MasterError
from common.flags import AGENT_API_SOCKET, PLUGIN_API_SOCKET_NAME
from common.http import os_reason

from .args import Commands
from .client import MasterClient
from .output import cell, emit_json, json_wanted, render_table

SECTIONS = ("driver", "endpoints", "tunnels", "cluster", "flows", "teardown")
TIMEOUT = 30.0


def agent_url(socket: str, url: str) -> tuple[str, requests.Session]:
    """The base URL of the agent's inspect API and a session that reaches it."""
    if url:
        if "://" not in url:
            url = "http://" + url
        return url.rstrip("/"), requests.Session()
    import requests_unixsocket

    return "http+unix://" + quote(socket, safe=""), requests_unixsocket.Session()


PLUGIN_SOCKETS = "/run/docker/plugins/*/" + PLUGIN_API_SOCKET_NAME


def default_socket(
    socket: str, plugin_sockets: str = PLUGIN_SOCKETS, default: str = AGENT_API_SOCKET
) -> str:
    """The agent's API socket: ``socket`` unless it is the default and missing, and one
    managed plugin's agent serves its API in the plugin's socket directory."""
    if socket != default or os.path.exists(socket):
        return socket
    found = glob.glob(plugin_sockets)
    return found[0] if len(found) == 1 else socket


def fetch(socket: str, url: str, section: str) -> Any:
    """GET /inspect/SECTION; a MasterError (netctl's one error) naming the agent otherwise."""
    socket = default_socket(socket) if not url else socket
    base, session = agent_url(socket, url)
    where = url or socket
    try:
        r = session.get(f"{base}/inspect/{section}", timeout=TIMEOUT)
    except requests.RequestException as e:
        reason = os_reason(e) or str(e)
        hint = " (is netplugin running, and are you root?)" if not url else ""
        raise MasterError(f"cannot reach the agent at {where}: {reason}{hint}", 503) from None
    finally:
        session.close()
    try:
        body = r.json()
    except ValueError:
        raise MasterError(f"the agent at {where} answered {r.status_code} without JSON") from None
    if not r.ok:
        reason = body.get("reason", r.reason) if isinstance(body, dict) else r.reason
        raise MasterError(f"agent at {where}: {reason}", r.status_code)
    return body


# --- the readable forms ---


def _labelled(pairs: list[tuple[str, Any]]) -> str:
    width = max((len(label) for label, _ in pairs), default=0) + 1
    return "".join(f"{(label + ':').ljust(width)}  {cell(v) or '-'}\n" for label, v in pairs)


def published(ports: list[str]) -> str:
    """Published ports as `docker ps` shows them, without the every-address 0.0.0.0:
    "8080->80/tcp, 127.0.0.1:8081->80/tcp"."""
    return ", ".join(p.removeprefix("0.0.0.0:") for p in ports)


def render_endpoints(eps: list[dict[str, Any]]) -> str:
    headers = ["Endpoint", "Container", "Network", "Group", "IPv4", "IPv6", "MAC"]
    headers += ["OVS port", "ofport", "Published ports"]
    rows = [
        [
            e["endpointID"][:12],
            e.get("containerName") or e.get("containerID", "")[:12],
            e["network"],
            e["group"],
            e["ipv4"],
            e["ipv6"],
            e["mac"],
            e["ovsPort"],
            e["ofport"],
            published(e.get("publishedPorts") or []),
        ]
        for e in eps
    ]
    return render_table(headers, rows)


def render_tunnels(t: dict[str, Any]) -> str:
    uplink = t.get("vlanUplink") or {}
    head = _labelled(
        [
            ("VTEP", t.get("vtep")),
            ("Bridge", t.get("bridge")),
            ("VLAN uplink", f"{uplink['interface']} (ofport {uplink['ofport']})" if uplink else ""),
        ]
    )
    rows = [
        [p["host"], p["vtepIp"], p["port"], p["ofport"] if p["ofport"] is not None else "none"]
        for p in t.get("peers", [])
    ]
    return head + "\n" + render_table(["Peer", "VTEP IP", "Port", "ofport"], rows)


def render_cluster(c: dict[str, Any]) -> str:
    head = _labelled(
        [
            ("Synced", c.get("synced")),
            ("Mirror revision", c.get("revision")),
            ("Store revision", c.get("storeRevision") or c.get("storeError")),
            ("Lag (revisions, at most)", c.get("lagRevisions")),
            ("Last resync", c.get("lastResync")),
            ("Watch restarts", c.get("watchRestarts")),
            ("Unresolved rules", len(c.get("unresolvedRules", []))),
        ]
    )
    rows = [
        [m["prefix"], m["keys"], m["revision"], m["synced"], m["restarts"], m["lastRead"]]
        for m in c.get("mirrors", [])
    ]
    table = render_table(["Prefix", "Keys", "Revision", "Synced", "Restarts", "Last read"], rows)
    rules = "".join(
        f"rule {u['rule']} of group {u['group']} not enforced: {u['reason']}\n"
        for u in c.get("unresolvedRules", [])
    )
    return head + "\n" + table + ("\n" + rules if rules else "")


def render_flows(f: dict[str, Any]) -> str:
    if not f.get("connected") or f.get("error"):
        return _labelled([("Connected", f.get("connected")), ("Error", f.get("error"))])
    head = _labelled(
        [
            ("Expected flows", f["expected"]),
            ("On the switch", f["onSwitch"]),
            ("In sync", f["inSync"]),
            ("Settled", f.get("settled")),
        ]
    )
    rows = [
        [
            t["table"],
            t["name"],
            t["expected"],
            t["onSwitch"],
            t["missing"],
            t["changed"],
            t["extra"],
        ]
        for t in f.get("tables", [])
    ]
    headers = ["Table", "Name", "Expected", "On switch", "Missing", "Changed", "Extra"]
    out = head + "\n" + render_table(headers, rows)
    for kind in ("missing", "changed", "extra"):
        if f.get(kind):
            out += f"\n{kind.capitalize()} (first {f.get('listedUpTo')}):\n"
            out += "".join(f"  {line}\n" for line in f[kind])
    return out


def render_teardown(t: dict[str, Any]) -> str:
    pending = t.get("pending") or []
    pool = t.get("pool")
    rows: list[tuple[str, Any]] = [
        ("Removals pending", len(pending)),
        ("Handled since start", t.get("done")),
        ("Failed since start", t.get("failed")),
    ]
    if pool:
        rows += [
            ("Pool ports free", f"{pool.get('free')} of {pool.get('size')}"),
            ("Pool ports taken", pool.get("taken")),
            ("Pool ports reused", pool.get("reused")),
            ("Pool ports made", pool.get("made")),
            ("Pool found empty", pool.get("missed")),
        ]
        if costs := t.get("costs"):
            pair = {"own": "their own pair", "pool": "a pool port, moved in"}
            rows += [
                (
                    "Port add costs",
                    f"{costs.get('port_add_ms')} ms ({costs.get('port_adds')} measured; last "
                    f"at {costs.get('port_add_ports')} ports, {costs.get('ports')} now)",
                ),
                ("Move costs", f"{costs.get('move_ms')} ms ({costs.get('moves')} measured)"),
                ("CNI pods get", f"{pair.get(costs.get('cni_pair'))} ({costs.get('chosen_by')})"),
            ]
    else:
        rows.append(("Port pool", "off (--port-pool 0)"))
    return _labelled(rows) + "".join(f"  {eid}\n" for eid in pending)


def render_driver(d: dict[str, Any]) -> str:
    sw, cl, fl = d.get("switch") or {}, d.get("cluster") or {}, d.get("flows") or {}
    flows = (
        f"{fl.get('expected')} expected, {fl.get('onSwitch')} on the switch, "
        f"{fl.get('missing')} missing, {fl.get('changed')} changed, {fl.get('extra')} extra"
        if fl.get("connected") and "expected" in fl
        else fl.get("error") or "no switch connected"
    )
    return _labelled(
        [
            ("Version", d.get("version")),
            ("Uptime (s)", d.get("uptimeSeconds")),
            ("Host", d.get("host")),
            ("Bridge", f"{d.get('bridge')} ({d.get('datapath')} datapath)"),
            ("Ready", d.get("ready")),
            ("Switch connected", sw.get("connected")),
            ("Reconciles", sw.get("reconciles")),
            ("Networks", d.get("networks")),
            ("Endpoints", d.get("endpoints")),
            ("VTEP", d.get("vtep")),
            ("Peers", d.get("peers")),
            ("Cluster synced", cl.get("synced")),
            ("Cluster revision", f"{cl.get('revision')} (store {cl.get('storeRevision')})"),
            ("Last resync", cl.get("lastResync")),
            ("Watch restarts", cl.get("watchRestarts")),
            ("Unresolved rules", cl.get("unresolvedRules")),
            ("Flows", flows),
        ]
    )


RENDER: dict[str, Callable[[Any], str]] = {
    "driver": render_driver,
    "endpoints": render_endpoints,
    "tunnels": render_tunnels,
    "cluster": render_cluster,
    "flows": render_flows,
    "teardown": render_teardown,
}


def host_inspect(client: MasterClient, args: argparse.Namespace, out: TextIO) -> None:
    """netctl host inspect (the master is not asked)."""
    data = fetch(args.socket, args.url, args.section)
    if json_wanted(args):
        emit_json(data, out)
    else:
        out.write(RENDER[args.section](data))


def add_host_commands(commands: Commands) -> None:
    h = commands.obj("host", "a host's agent, through its inspect API")
    p = commands.verb(h, "inspect", host_inspect, "what the agent on a host holds and sees")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--socket",
        default=AGENT_API_SOCKET,
        metavar="PATH",
        help=f"the agent's --api-socket (default: {AGENT_API_SOCKET}, or a managed plugin's)",
    )
    where.add_argument(
        "--url", default="", metavar="URL", help="the agent's --api-listen, http://HOST:PORT"
    )
    p.add_argument("section", nargs="?", default="driver", choices=SECTIONS, help="what to show")
