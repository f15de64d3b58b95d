"""From the cluster's groups, policies, rules and netprofiles (names) to what the datapath
compiles (tags, CIDRs, protocol numbers, rates): pure, so every agent resolves them the
same way.

A rule belongs to a policy; a group attaches policies. For each group with a tag, its
rules are resolved against the group's own tenant:
- the peer (``from*`` of an ``in`` rule, ``to*`` of an ``out`` rule) becomes the peer
  group's tag and the CIDRs its network and address fields allow (ANDed);
- a reference that does not resolve (the master refuses them, so only for a moment while
  a deletion propagates) leaves that rule out, and the caller logs it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from common.models import NetProfile, Network, Rule
from common.profiles import bandwidth_kbps
from common.records import GroupRecord, NetworkRecord
from datapath.policy import TAG_MAX, GroupState, RuleState, check_rule, sorted_rules
from datapath.qos import QosState, check_qos

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1}

IPNet = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Unresolved:
    """A rule left out of a group's policy, and why (for the log)."""

    group: str
    rule: str
    reason: str


def _subnets(net: Network) -> list[IPNet]:
    return [ipaddress.ip_network(s, strict=False) for s in (net.subnet, net.ipv6Subnet) if s]


def _intersect(a: list[IPNet], b: list[IPNet]) -> list[IPNet]:
    """The CIDRs in both sets (for two CIDRs: the narrower if they overlap)."""
    out: list[IPNet] = []
    for x in a:
        for y in b:
            if x.version == y.version and x.overlaps(y):
                out.append(x if x.prefixlen >= y.prefixlen else y)
    return out


def protocol_number(protocol: str) -> int | None:
    """A stored rule's protocol: "" (any), a name, or a number."""
    if not protocol:
        return None
    if protocol in PROTOCOLS:
        return PROTOCOLS[protocol]
    if not protocol.isdigit():
        raise ValueError(f"protocol {protocol!r} is not tcp, udp, icmp or a number")
    return int(protocol)


def resolve_rule(
    rule: Rule,
    tenant_groups: Mapping[str, GroupRecord],
    tenant_networks: Mapping[str, NetworkRecord],
) -> RuleState | str:
    """The rule as the datapath sees it, or why it cannot be resolved. A stored rule the
    master would have refused (written by hand, or by a newer master) is a reason too:
    raising would stop the agent's resync and all its later cluster updates."""
    try:
        state = _resolve(rule, tenant_groups, tenant_networks)
        if not isinstance(state, str):
            check_rule(f"rule {rule.id}", state)
    except ValueError as e:
        return f"the datapath cannot enforce it: {e}"
    return state


def _resolve(
    rule: Rule,
    tenant_groups: Mapping[str, GroupRecord],
    tenant_networks: Mapping[str, NetworkRecord],
) -> RuleState | str:
    inbound = rule.direction == "in"
    group = rule.fromEndpointGroup if inbound else rule.toEndpointGroup
    network = rule.fromNetwork if inbound else rule.toNetwork
    address = rule.fromIpAddress if inbound else rule.toIpAddress
    tag = 0
    if group:
        rec = tenant_groups.get(group)
        if rec is None or rec.tag <= 0:
            return f"endpoint group {group} is unknown or has no tag yet"
        tag = rec.tag
    cidrs: list[IPNet] | None = None  # None: any address
    if network:
        nrec = tenant_networks.get(network)
        if nrec is None:
            return f"network {network} is unknown"
        cidrs = _subnets(nrec.config)
    if address:
        mine = [ipaddress.ip_network(address, strict=False)]
        cidrs = mine if cidrs is None else _intersect(cidrs, mine)
    if cidrs is not None and not cidrs:
        return f"network {network} has no address in {address}" if address else "no subnet"
    return RuleState(
        direction=rule.direction,
        priority=rule.priority,
        action=rule.action,
        peer_tag=tag,
        peer_cidrs=tuple(sorted({str(c) for c in cidrs or ()})),
        protocol=protocol_number(rule.protocol),
        port=rule.port,
    )


def qos_of(profile: NetProfile | None) -> QosState | None:
    """What a netprofile asks of the datapath (None: nothing, or a profile it cannot use:
    the master refuses those, so only one written by hand)."""
    if profile is None:
        return None
    try:
        kbps = bandwidth_kbps(profile.bandwidth)
        q = QosState(kbps, profile.burst * 8 if kbps else 0, profile.DSCP)
        check_qos(f"netprofile {profile.id}", q)
    except ValueError:
        return None
    return q if q != QosState() else None


def group_states(
    groups: Iterable[GroupRecord],
    rules: Iterable[Rule],
    networks: Iterable[NetworkRecord],
    profiles: Iterable[NetProfile] = (),
) -> tuple[list[GroupState], list[Unresolved]]:
    """Every tagged group with the resolved rules of the policies it attaches and its
    netprofile."""
    qos = {(p.tenantName, p.profileName): qos_of(p) for p in profiles}
    by_tenant: dict[str, dict[str, GroupRecord]] = {}
    for g in groups:
        by_tenant.setdefault(g.config.tenantName, {})[g.config.groupName] = g
    nets: dict[str, dict[str, NetworkRecord]] = {}
    for n in networks:
        nets.setdefault(n.config.tenantName, {})[n.config.networkName] = n
    of_policy: dict[tuple[str, str], list[Rule]] = {}
    for r in rules:
        of_policy.setdefault((r.tenantName, r.policyName), []).append(r)
    out: list[GroupState] = []
    skipped: list[Unresolved] = []
    for tenant, members in sorted(by_tenant.items()):
        tenant_nets = nets.get(tenant, {})
        for _, g in sorted(members.items()):
            if not 0 < g.tag <= TAG_MAX or g.config.networkName not in tenant_nets:
                continue  # not tagged yet (or a tag no master gives: the datapath refuses it)
            resolved: set[RuleState] = set()
            for policy in dict.fromkeys(g.config.policies):
                for r in of_policy.get((tenant, policy), []):
                    state = resolve_rule(r, members, tenant_nets)
                    if isinstance(state, str):
                        skipped.append(
                            Unresolved(g.config.id, f"{tenant}:{policy}:{r.ruleId}", state)
                        )
                    else:
                        resolved.add(state)
            out.append(
                GroupState(
                    id=g.config.id,
                    network_id=tenant_nets[g.config.networkName].id,
                    tag=g.tag,
                    rules=sorted_rules(resolved),
                    qos=qos.get((tenant, g.config.netProfile)) if g.config.netProfile else None,
                )
            )
    return out, skipped
