"""Networks against the cluster state: their tag, their pools, and when they may change."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import Any

from common.models import MAX_VLAN, GlobalSettings, Network, docker_name
from common.records import GroupRecord, HostRecord, NetworkRecord, PoolRecord
from ipam import check_ownable, parse_address, parse_network
from ipam.errors import IpamError
from ipam.parse import usable_bounds

from ..errors import BadRequest, Conflict
from ..validate import check_name
from .pools import free_pool_id, pool_id_for
from .settings import tag_range


def addressing(n: Network) -> tuple[Any, ...]:
    """What endpoints depend on: changing any of it needs a network without endpoints."""
    return (n.subnet, n.gateway, n.ipv6Subnet, n.ipv6Gateway, n.encap, n.pktTag)


def check_clear_of_hosts(net: Network, hosts: Iterable[HostRecord]) -> None:
    """A network's subnets hold no registered host's VTEP or control address (``hosts``:
    the registrations): its containers could be given one, and every host would route it to
    the network's gateway port, taking the tunnels to that host (or its control traffic)
    with it. (The master knows no other address of a host.)"""
    known = sorted({(h.host, what, a) for h in hosts for what, a in _addresses(h)})
    for subnet in (net.subnet, net.ipv6Subnet):
        if not subnet:
            continue
        network = parse_network(subnet)
        for host, what, address in known:
            try:
                held = ip_address(address) in network
            except ValueError:
                continue  # not an address: it cannot clash with one
            if held:
                raise Conflict(
                    f"network {net.id}",
                    f"subnet {network} holds {address}, the {what} address of host {host}: its "
                    "containers could be given it, and every host would route it to this "
                    "network's gateway port; choose a subnet that holds no host's address",
                )


def _addresses(host: HostRecord) -> list[tuple[str, str]]:
    return [(what, a) for what, a in (("VTEP", host.vtep_ip), ("control", host.ctrl_ip)) if a]


def check_readdress(net: Network, endpoints: int) -> None:
    if endpoints:
        raise Conflict(
            f"network {net.id}",
            f"subnet, gateway, encap and pkt-tag cannot change while {endpoints} endpoint(s) exist",
        )


def choose_tag(
    net: Network,
    settings: GlobalSettings,
    used: Mapping[int, str],
    previous: NetworkRecord | None = None,
) -> int:
    """The network's tag: its pkt-tag, or the first free one of the global range.

    ``used`` maps the tags of the network's encap in use to their network's id. The tag
    ``previous`` (the network's record being replaced) holds counts as free.
    """
    obj = f"network {net.id}"
    lo, hi = tag_range(settings, net.encap)
    if previous is not None and previous.encap == net.encap:
        used = {t: n for t, n in used.items() if t != previous.pkt_tag}
    if net.pktTag:
        if not lo <= net.pktTag <= hi:
            what = "vlans" if net.encap == "vlan" else "vxlans"
            raise BadRequest(
                obj, f"pkt-tag {net.pktTag} is outside the global {what} range {lo}-{hi}"
            )
        if net.pktTag in used and used[net.pktTag] != net.id:
            raise Conflict(
                obj,
                f"{net.encap} pkt-tag {net.pktTag} is already used by network {used[net.pktTag]}",
            )
        return net.pktTag
    tag = next((t for t in range(lo, hi + 1) if t not in used), 0)
    if not tag:
        raise Conflict(obj, f"no free {net.encap} tag left in range {lo}-{hi}")
    return tag


@dataclass(frozen=True)
class NetworkPlan:
    """What writing a network (new, or with new addressing) puts into the store."""

    record: NetworkRecord
    new_tag: bool  # the tag key must be absent: it was not this network's before
    pools: dict[int, tuple[str, PoolRecord]] = field(default_factory=dict)  # by IP version
    adopted: list[str] = field(default_factory=list)  # docker's pools it takes over
    stale: tuple[str, ...] = ()  # the pools of ``previous`` (deleted unless rewritten)


def plan_pools(
    net: Network, pools: Mapping[str, PoolRecord], previous: NetworkRecord | None = None
) -> tuple[dict[int, tuple[str, PoolRecord]], list[str]]:
    """The network's pools by IP version (pool id, record), and the docker pools it adopts.

    ``pools`` are the pools of the network's tenant. A pool docker reserved (RequestPool)
    for the very same subnet is adopted, with its sub-pool and the addresses already handed
    out from it. Any other overlap is refused. The pools of ``previous`` do not count, nor
    do aliases (docker pool ids standing for another network's pool), though their ids are
    taken: the pool then gets a twin id ("<tenant>:<cidr>~2", see free_pool_id).
    """
    stale = set(previous.pools) if previous else set()
    taken = {pid for pid in pools if pid not in stale}
    existing = [(pid, pools[pid]) for pid in sorted(taken) if not pools[pid].alias]
    planned: dict[int, tuple[str, PoolRecord]] = {}
    adopted: list[str] = []
    for version, subnet, gateway in (
        (4, net.subnet, net.gateway),
        (6, net.ipv6Subnet, net.ipv6Gateway),
    ):
        if not subnet:
            continue
        network = parse_network(subnet)
        docker: list[str] = []
        for pid, rec in existing:
            other = parse_network(rec.cidr)
            if other == network and not rec.network:
                docker.append(pid)
            elif other.version == network.version and other.overlaps(network):
                raise Conflict(
                    f"network {net.id}",
                    f"subnet {network} overlaps {other} of network "
                    f"{rec.network or 'a docker pool'} in tenant {net.tenantName}",
                )
        plain = pool_id_for(net.tenantName, network)
        if plain in docker or plain not in taken:
            pid = plain
        else:
            pid = docker[0] if docker else free_pool_id(plain, taken)
        rng = ""
        if pid in docker:
            rng = pools[pid].range
            adopted.append(pid)
        record = PoolRecord(
            cidr=str(network), range=rng, network=net.id, gateway=gateway, name=net.id
        )
        planned[version] = (pid, record)
    return planned, adopted


def plan_network(
    net: Network,
    settings: GlobalSettings,
    tags: Mapping[int, str],
    pools: Mapping[str, PoolRecord],
    previous: NetworkRecord | None = None,
) -> NetworkPlan:
    """A network's record, tag and pools, replacing ``previous`` (its addressing changed).

    ``tags``: the tags of its encap in use (tag -> network id); ``pools``: the pools of
    its tenant (pool id -> record).
    """
    tag = choose_tag(net, settings, tags, previous)
    planned, adopted = plan_pools(net, pools, previous)
    v4, v6 = (planned[v][0] if v in planned else "" for v in (4, 6))
    new_tag = previous is None or (previous.encap, previous.pkt_tag) != (net.encap, tag)
    return NetworkPlan(
        record=NetworkRecord(config=net, encap=net.encap, pkt_tag=tag, ipv4_pool=v4, ipv6_pool=v6),
        new_tag=new_tag,
        pools=planned,
        adopted=adopted,
        stale=previous.pools if previous else (),
    )


def check_deletable(
    net_id: str, endpoint_hosts: Sequence[str], groups: Sequence[str], rules: Sequence[str] = ()
) -> None:
    """A network goes once it has no endpoints (on ``endpoint_hosts``, "" for no host), no
    endpoint group uses it (``groups``: their names) and no rule names it (their ids)."""
    if endpoint_hosts:
        hosts = sorted({h or "?" for h in endpoint_hosts})
        raise Conflict(
            f"network {net_id}",
            f"it still has {len(endpoint_hosts)} endpoint(s) on host(s) {', '.join(hosts)}; "
            "remove the containers first",
        )
    if groups:
        raise Conflict(
            f"network {net_id}", f"endpoint group(s) {', '.join(groups)} use it; delete them first"
        )
    check_unnamed(net_id, rules)


def check_unnamed(net_id: str, rules: Sequence[str]) -> None:
    """A network named by rules (``rules``: their ids) neither goes nor changes its name."""
    if rules:
        raise Conflict(
            f"network {net_id}",
            f"it is named by rule(s) {', '.join(rules)}; remove the rule(s) first",
        )


def check_name_free(net_id: str, tenant: str, name: str, group_exists: bool) -> None:
    """A network (``net_id``, made or renamed) may not take the name ``name`` of an endpoint
    group of its tenant: in docker, both would be the same network."""
    if group_exists:
        raise Conflict(
            f"network {net_id}",
            f"endpoint group {tenant}:{name} has the name {name} (both would be docker network "
            f"{docker_name(tenant, name)}); choose another name",
        )


def check_rename(net_id: str, new_id: str, taken: bool, endpoints: int) -> None:
    """A network is renamed (docker names arrive after creation) only to a free name, and
    only while it has no endpoints."""
    if taken:
        raise Conflict(f"network {net_id}", f"cannot rename: network {new_id} already exists")
    if endpoints:
        raise Conflict(f"network {net_id}", f"cannot rename while {endpoints} endpoint(s) exist")


def renamed(rec: NetworkRecord, new_name: str) -> NetworkRecord:
    return rec.with_config(rec.config.model_copy(update={"networkName": new_name}))


def renamed_pool(pool: PoolRecord, network: NetworkRecord) -> PoolRecord:
    """A network's pool follows its network's rename (its aliases' pool ids stay)."""
    return pool.model_copy(update={"network": network.id, "name": network.id})


def carried_groups(groups: Iterable[GroupRecord], old: str, new: str) -> list[GroupRecord]:
    """The endpoint groups (``groups``: those of the network's tenant) on network ``old``,
    moved to ``new``: a rename carries them along, with their tags, ip-pools (the subnet
    stays), policies and netprofiles. A group left naming ``old`` would refuse its
    containers, leave ``new`` deletable under it, and go to a new network ``old``."""
    return [
        g.model_copy(update={"config": g.config.model_copy(update={"networkName": new})})
        for g in groups
        if g.config.networkName == old
    ]


def normalize_network(n: Network) -> Network:
    """Validate the addressing of ``n`` and fill defaults (gateway = first usable address)."""
    obj = f"network {n.id}"
    check_name("tenant", n.tenantName)
    check_name("network", n.networkName)
    if n.encap == "vlan" and n.pktTag > MAX_VLAN:
        raise BadRequest(obj, f"pkt-tag {n.pktTag} is not a valid VLAN id (1-{MAX_VLAN})")
    if not n.subnet and not n.ipv6Subnet:
        raise BadRequest(obj, "a subnet is required (e.g. -s 10.1.1.0/24)")
    update: dict[str, str] = {}
    try:
        if n.subnet:
            net4 = check_ownable(parse_network(n.subnet, "subnet", version=4))
            update["subnet"] = str(net4)
            gw = _gateway(obj, n.gateway, net4, "gateway")
            update["gateway"] = str(gw) if gw else ""
        elif n.gateway:
            raise BadRequest(obj, "gateway given without a subnet")
        if n.ipv6Subnet:
            net6 = check_ownable(
                parse_network(n.ipv6Subnet, "ipv6-subnet", version=6), "ipv6-subnet"
            )
            update["ipv6Subnet"] = str(net6)
            gw6 = _gateway(obj, n.ipv6Gateway, net6, "ipv6-gateway")
            update["ipv6Gateway"] = str(gw6) if gw6 else ""
        elif n.ipv6Gateway:
            raise BadRequest(obj, "ipv6-gateway given without an ipv6-subnet")
    except IpamError as e:
        raise BadRequest(obj, str(e)) from None
    return n.model_copy(update=update)


def _gateway(obj: str, value: str, net: Any, what: str) -> Any:
    lo, hi = usable_bounds(net)
    if not value:
        return ip_address(lo)
    gw = parse_address(value, what, version=net.version)
    if not lo <= int(gw) <= hi:
        raise BadRequest(obj, f"{what} {gw} is not a usable address of {net}")
    return gw
