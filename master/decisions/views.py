"""The inspect views ({"Config", "Oper"}, as Contiv shows them), built from what was read."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.models import (
    Bgp,
    Endpoint,
    EndpointGroup,
    GlobalSettings,
    NetProfile,
    Policy,
    Rule,
    Tenant,
    docker_name,
)
from common.records import HostRecord, NetworkRecord, ServiceRecord
from common.services import providers
from ipam.parse import Network, usable_bounds

from .settings import TagUse, tag_range


def ranges(values: Iterable[int]) -> str:
    """Compress sorted ints to "1-3,7" like Contiv's oper output."""
    runs: list[list[int]] = []
    for v in values:
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


def count(bounds: tuple[int, int]) -> int:
    return bounds[1] - bounds[0] + 1


def global_view(
    settings: GlobalSettings, backend: str, networks: int, tags: Iterable[TagUse]
) -> dict[str, Any]:
    used: dict[str, list[int]] = {"vlan": [], "vxlan": []}
    for use in tags:
        used[use.encap].append(use.tag)
    return {
        "Config": settings.dump(),
        "Oper": {
            "clusterMode": backend,
            "numNetworks": networks,
            "vlansInUse": ranges(sorted(used["vlan"])),
            "vxlansInUse": ranges(sorted(used["vxlan"])),
            "freeVLANs": count(tag_range(settings, "vlan")) - len(used["vlan"]),
            "freeVXLANs": count(tag_range(settings, "vxlan")) - len(used["vxlan"]),
        },
    }


def tenant_view(
    tenant: Tenant, networks: Sequence[str], groups: Sequence[str], endpoints: int, tag: int = 0
) -> dict[str, Any]:
    """``networks`` and ``groups``: the names of the tenant's networks and groups; ``tag``:
    the tenant's tag (its VRF's number in routing mode; 0: none yet)."""
    return {
        "Config": tenant.dump(),
        "Oper": {
            "tenantTag": tag,
            "networks": list(networks),
            "endpointGroups": list(groups),
            "numNetworks": len(networks),
            "numEndpointGroups": len(groups),
            "numEndpoints": endpoints,
        },
    }


def pool_view(version: int, network: Network, allocated: Iterable[str]) -> dict[str, Any]:
    """A network's addresses in use in its pool of IP ``version``, and what is left (IPv4)."""
    addrs = sorted((ipaddress.ip_address(a) for a in allocated), key=int)
    if version == 6:
        return {
            "allocatedIPv6Addresses": [str(a) for a in addrs],
            "allocatedIPv6AddressesCount": len(addrs),
        }
    return {
        "allocatedAddresses": [str(a) for a in addrs],
        "allocatedAddressesCount": len(addrs),
        "availableAddressesCount": count(usable_bounds(network)) - len(addrs),
    }


def network_view(
    rec: NetworkRecord, endpoints: Sequence[Endpoint], pools: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """``pools``: the pool_view of each of the network's pools that exists."""
    net = rec.config
    oper: dict[str, Any] = {
        "pktTag": rec.pkt_tag,
        "dockerName": docker_name(net.tenantName, net.networkName),
        "numEndpoints": len(endpoints),
        "endpoints": [e.dump() for e in endpoints],
        # Docker IPAM pool IDs: every host's docker network of it books from these.
        "ipv4Pool": rec.ipv4_pool,
        "ipv6Pool": rec.ipv6_pool,
    }
    for view in pools:
        oper.update(view)
    return {"Config": net.dump(), "Oper": oper}


def group_view(group: EndpointGroup, members: Sequence[Endpoint], tag: int = 0) -> dict[str, Any]:
    """``tag``: the group's tag (0: none yet)."""
    return {
        "Config": group.dump(),
        "Oper": {
            "dockerName": docker_name(group.tenantName, group.groupName),
            "groupTag": tag,
            "numEndpoints": len(members),
            "endpoints": [e.dump() for e in members],
        },
    }


def policy_view(
    policy: Policy, groups: Sequence[str], members: Sequence[Endpoint], rules: Sequence[Rule]
) -> dict[str, Any]:
    """``groups``: the names of the groups that attach the policy; ``members``: their
    endpoints (the ones it applies to); ``rules``: its rules."""
    return {
        "Config": policy.dump(),
        "Oper": {
            "endpointGroups": list(groups),
            "numEndpoints": len(members),
            "endpoints": [e.dump() for e in members],
            "numRules": len(rules),
            "rules": [r.ruleId for r in rules],
        },
    }


def netprofile_view(
    profile: NetProfile, groups: Sequence[str], members: Sequence[Endpoint]
) -> dict[str, Any]:
    """``groups``: the names of the groups that name the profile; ``members``: their
    endpoints (the ones it limits and marks)."""
    return {
        "Config": profile.dump(),
        "Oper": {
            "endpointGroups": list(groups),
            "numEndpoints": len(members),
            "endpoints": [e.endpointID for e in members],
        },
    }


def service_view(rec: ServiceRecord, endpoints: Sequence[Endpoint]) -> dict[str, Any]:
    """``endpoints``: those of the service's network; its providers are found among them."""
    found = providers(rec.config, endpoints)
    return {
        "Config": rec.config.dump(),
        "Oper": {
            "serviceVip": rec.vip,
            "serviceTag": rec.tag,
            "numProviders": len(found),
            "providers": [
                {
                    "endpointID": e.endpointID,
                    "containerID": e.containerID,
                    "containerName": e.containerName,
                    "ipAddress": e.ipAddress,
                    "host": e.host,
                }
                for e in found
            ],
        },
    }


@dataclass(frozen=True)
class BgpSession:
    """What a host's BGP speaker reports of its peering (keys.bgp_session, under the host's
    lease: absent while its agent is down or not peering, and then not shown)."""

    state: str  # the BGP FSM state: "Idle", "Connect", "Active", ..., "Established"
    announced: tuple[str, ...]  # prefixes the host announces (its containers' /32s)
    learned: Mapping[str, str]  # prefix -> next hop, learned from the neighbor


def bgp_view(
    bgp: Bgp, host: HostRecord | None, fwd_mode: str, session: BgpSession | None = None
) -> dict[str, Any]:
    """``host``: the host's live registration (None: its agent is not running); ``fwd_mode``:
    the cluster's (hosts peer only in routing mode); ``session``: what the host's speaker
    reported, None while nothing did."""
    oper: dict[str, Any] = {"hostRegistered": host is not None, "fwdMode": fwd_mode}
    if session is not None:
        oper.update(
            neighborState=session.state,
            announcedRoutes=list(session.announced),
            learnedRoutes=[f"{p} via {nh}" for p, nh in sorted(session.learned.items())],
            numAnnouncedRoutes=len(session.announced),
            numLearnedRoutes=len(session.learned),
        )
    return {"Config": bgp.dump(), "Oper": oper}
