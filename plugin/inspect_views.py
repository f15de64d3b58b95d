"""The agent's inspect API answers, as plain data from plain inputs (pure; the app in
plugin.inspect_api gathers the inputs). Field names are camelCase like the master's."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from common.models import Endpoint
from datapath.endpointports import port_names
from datapath.local import tunnel_port_name
from datapath.report import LocalSnapshot

from .policy_view import Unresolved

LAG_NOTE = (
    "store revision minus the newest revision the mirrors hold: writes to keys no mirror "
    "follows (address claims, pools, the leader key) count too, so it is an upper bound; "
    "0 means caught up"
)


@dataclass(frozen=True)
class MirrorState:
    """One PrefixMirror, as read at one moment."""

    prefix: str
    keys: int
    revision: int
    synced: bool
    restarts: int
    last_read: float | None  # time.time()


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(timespec="seconds")


def endpoints_view(snap: LocalSnapshot, records: Mapping[str, Endpoint]) -> list[dict[str, Any]]:
    """This host's endpoints as its datapath holds them, with their container from the
    cluster's record (empty until the mirror has it)."""
    out = []
    for ep in sorted(snap.endpoints.values(), key=lambda e: (e.network_id, e.id)):
        host_if, container_if = port_names(ep)
        rec = records.get(ep.id)
        out.append(
            {
                "endpointID": ep.id,
                "containerID": rec.containerID if rec else "",
                "containerName": rec.containerName if rec else "",
                "network": ep.network_id,
                "group": ep.group,
                "ipv4": ep.ipv4,
                "ipv6": ep.ipv6,
                "mac": ep.mac,
                "ovsPort": host_if,  # the host end of the veth is the switch port
                "ofport": ep.ofport,
                "hostVeth": host_if,
                "containerVeth": container_if,
                "publishedPorts": [
                    f"{m.host_ip or '0.0.0.0'}:{m.host_port}->{m.container_port}/{m.proto}"
                    for m in ep.port_mappings
                ],
            }
        )
    return out


def tunnels_view(snap: LocalSnapshot, vtep_ip: str, peers: Mapping[str, str]) -> dict[str, Any]:
    """This host's VTEP, a row per peer host (the cluster's peers and the tunnel ports on
    the bridge: a peer without an ofport has no working port), and the VLAN uplink."""
    rows = []
    for host in sorted(set(peers) | set(snap.tunnels)):
        ip = peers.get(host, "")
        rows.append(
            {
                "host": host,
                "vtepIp": ip,
                "port": tunnel_port_name(ip) if ip else "",
                "ofport": snap.tunnels.get(host),
                "inCluster": host in peers,
            }
        )
    uplink = (
        {"interface": snap.vlan_uplink, "ofport": snap.uplink_ofport} if snap.vlan_uplink else None
    )
    return {"vtep": vtep_ip or None, "bridge": snap.bridge, "peers": rows, "vlanUplink": uplink}


def cluster_view(
    mirrors: Iterable[MirrorState],
    store_revision: int | None,
    store_error: str | None,
    last_resync: float | None,
    resync_result: Mapping[str, int] | None,
    unresolved: Iterable[Unresolved],
    now: float,
) -> dict[str, Any]:
    """The mirror of the cluster store: its revision against the store's, its watches'
    restarts, the last resync, and the rules this host cannot enforce."""
    ms = list(mirrors)
    revision = max((m.revision for m in ms), default=0)
    lag = None if store_revision is None else max(0, store_revision - revision)
    return {
        "synced": bool(ms) and all(m.synced for m in ms),
        "revision": revision,
        "storeRevision": store_revision,
        "storeError": store_error,
        "lagRevisions": lag,
        "lagNote": LAG_NOTE,
        "lastResync": iso(last_resync),
        "secondsSinceResync": None if last_resync is None else round(now - last_resync, 1),
        "resync": dict(resync_result) if resync_result is not None else None,
        "watchRestarts": sum(m.restarts for m in ms),
        "mirrors": [
            {
                "prefix": m.prefix,
                "keys": m.keys,
                "revision": m.revision,
                "synced": m.synced,
                "restarts": m.restarts,
                "lastRead": iso(m.last_read),
            }
            for m in ms
        ],
        "unresolvedRules": [
            {"group": u.group, "rule": u.rule, "reason": u.reason}
            for u in sorted(unresolved, key=lambda u: (u.group, u.rule))
        ],
    }


def flows_summary(report: Mapping[str, Any]) -> dict[str, Any]:
    """The counts of a flows answer, without the per-table rows and the flows listed."""
    if not report.get("connected"):
        return {k: report.get(k) for k in ("connected", "error")}
    keys = ("connected", "expected", "onSwitch", "inSync", "settled", "generation")
    out = {k: report.get(k) for k in keys}
    for kind in ("missing", "changed", "extra"):
        out[kind] = sum(t[kind] for t in report.get("tables", []))
    return out


def driver_view(
    *,
    version: str,
    uptime: float,
    host: str,
    snap: LocalSnapshot,
    switch: Mapping[str, Any],
    tunnels: Mapping[str, Any],
    cluster: Mapping[str, Any],
    flows: Mapping[str, Any],
) -> dict[str, Any]:
    """Contiv's /inspect/driver: one answer that summarises every other."""
    last = switch.get("last") or {}
    return {
        "version": version,
        "uptimeSeconds": round(uptime, 1),
        "host": host,
        "bridge": snap.bridge,
        "datapath": snap.datapath_type,
        "ready": snap.ready,
        "switch": {
            "connected": switch.get("connected"),
            "dpid": switch.get("dpid"),
            "reconciles": switch.get("reconcile_count"),
            "lastReconcile": {k: last.get(k) for k in ("full", "added", "deleted", "seconds")}
            if last
            else None,
            "lastError": switch.get("last_error"),
        },
        "networks": sorted(snap.networks),
        "endpoints": len(snap.endpoints),
        "vtep": tunnels.get("vtep"),
        "peers": len(tunnels.get("peers", [])),
        "vlanUplink": tunnels.get("vlanUplink"),
        "cluster": {
            k: cluster.get(k)
            for k in (
                "synced",
                "revision",
                "storeRevision",
                "lagRevisions",
                "lastResync",
                "watchRestarts",
            )
        }
        | {"unresolvedRules": len(cluster.get("unresolvedRules", []))},
        "flows": flows_summary(flows),
    }
