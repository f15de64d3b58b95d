"""Whether a snapshot of the cluster state holds together: a pure check over {key: value}.

The control plane writes every object together with the keys that point at it, in one
transaction (an endpoint with its index entry and its address allocations; an address
request with its owner record; a network with its tag, pools and gateway address). A
crash, a lost answer or a bug must never leave half of such a group behind. This check
reads a full scan of the store (every key under keys.ROOT) and names every key that breaks
a link, so tests (kill -9 in the middle of a storm, disk full, ...) and tools can use it.

It checks, for every record:
- endpoint <-> index: each endpoint has its index entry pointing at it, each index entry
  points at an endpoint of that ID, and the endpoint's network exists;
- endpoint <-> addresses: each address an endpoint was given is allocated to it, and each
  allocation owned by an endpoint is one of that endpoint's addresses (none orphaned);
- plain requests: each allocation held by a request has its owner record, and each owner
  record's address is allocated to that owner;
- the network's gateway: held as "gateway" only at its pool's gateway address;
- no address is given twice: the same (pool, address) in two endpoints, two allocation keys
  spelling the same address, an address outside its pool, or two overlapping pools of one
  address space (which would let one address be booked twice);
- networks <-> pools and tags: a network's pools and tag exist and point back at it, and
  every pool, tag and allocation belongs to something that exists;
- tenants <-> tags: a tenant has a tag, its tag key points back at it, and no tag is held
  twice or by a tenant that does not exist;
- groups <-> tags: a group's network exists, its tag key points back at it, and no tag is
  held twice or by a group that does not exist;
- policies and rules: every policy a group attaches exists, and every rule's policy and
  the groups and networks it names exist;
- netprofiles and services: every netprofile a group names exists; a service's network
  exists, its VIP is booked for it in that network's IPv4 pool and its tag points back at
  it; no VIP booking or tag is held by a service that does not exist.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from common import keys, owners
from common.models import Endpoint, NetProfile, Policy, Rule
from common.records import (
    AllocRecord,
    GroupRecord,
    NetworkRecord,
    OwnerRecord,
    PoolRecord,
    RecordError,
    ServiceRecord,
    TenantRecord,
    decode_config,
    decode_endpoint,
)

from .endpoints import addresses_of
from .pools import TWIN
from .tenants import MAX_TENANT_TAG

R = TypeVar("R")


@dataclass(frozen=True, order=True)
class Problem:
    """One broken link: the key that shows it and what is wrong."""

    key: str
    what: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}"


def _under(kvs: Mapping[str, bytes], prefix: str) -> Iterator[tuple[str, str, bytes]]:
    """(key, the key's rest after ``prefix``, value) for every key under ``prefix``."""
    for key in sorted(kvs):
        if key.startswith(prefix):
            yield key, key[len(prefix) :], kvs[key]


class _Check:
    def __init__(self, kvs: Mapping[str, bytes]) -> None:
        self.kvs = kvs
        self.problems: list[Problem] = []

    def bad(self, key: str, what: str) -> None:
        self.problems.append(Problem(key, what))

    def decoded(self, key: str, value: bytes, decode: Callable[[bytes], R]) -> R | None:
        try:
            return decode(value)
        except (RecordError, ValueError, TypeError) as e:
            self.bad(key, f"does not decode: {e}")
            return None


def check_state(kvs: Mapping[str, bytes]) -> list[Problem]:
    """Every broken link in a full scan of the store (empty: the state holds together)."""
    c = _Check(kvs)
    networks = _networks(c)
    pools = _pools(c, networks)
    endpoints = _endpoints(c, networks, pools)
    services = _services(c, networks)
    allocs = _allocations(c, pools, endpoints, services)
    _owner_records(c, allocs)
    _tags(c, networks)
    _tenants(c)
    groups = _groups(c, networks)
    _policies(c, groups, networks)
    _netprofiles(c, groups)
    return sorted(c.problems)


def _networks(c: _Check) -> dict[str, tuple[str, NetworkRecord]]:
    """network id -> (key, record)."""
    found = {}
    for key, _, value in _under(c.kvs, keys.NETWORKS):
        rec = c.decoded(key, value, NetworkRecord.decode)
        if rec is None:
            continue
        if key != keys.network(rec.config.tenantName, rec.config.networkName):
            c.bad(key, f"holds network {rec.id}, whose key is another")
        found[rec.id] = (key, rec)
    return found


def _pools(c: _Check, networks: Mapping[str, tuple[str, NetworkRecord]]) -> dict[str, PoolRecord]:
    pools: dict[str, PoolRecord] = {}
    for key, pid, value in _under(c.kvs, keys.POOLS):
        pool = c.decoded(key, value, PoolRecord.decode)
        if pool is None:
            continue
        pools[pid] = pool
        if pool.network:
            net = networks.get(pool.network)
            if net is None:
                c.bad(key, f"belongs to network {pool.network}, which does not exist")
            elif pid not in net[1].pools:
                c.bad(key, f"belongs to network {pool.network}, which does not name it")
    for pid, pool in pools.items():
        if pool.alias:
            target = pools.get(pool.alias.partition("@")[0])
            if target is None or pid not in target.aliases:
                c.bad(keys.pool(pid), f"an alias of pool {pool.alias}, which does not list it")
    for nkey, net in networks.values():
        for pid in net.pools:
            if pid not in pools:
                c.bad(nkey, f"its pool {pid} does not exist")
            elif pools[pid].network != net.id:
                c.bad(nkey, f"its pool {pid} belongs to {pools[pid].network or 'no network'}")
    _overlaps(c, pools)
    return pools


def _overlaps(c: _Check, pools: Mapping[str, PoolRecord]) -> None:
    by_space: dict[str, list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]]] = (
        defaultdict(list)
    )
    for pid, pool in pools.items():
        if pool.alias:
            continue  # books in the pool it stands for
        try:
            by_space[pid.split(":", 1)[0]].append((pid, ipaddress.ip_network(pool.cidr)))
        except ValueError:
            c.bad(keys.pool(pid), f"its cidr {pool.cidr!r} is not a network")
    for space in by_space.values():
        for i, (a, na) in enumerate(space):
            for b, nb in space[i + 1 :]:
                if _twins(a, b) and not (pools[a].network and pools[b].network):
                    continue  # a docker pool's twin id: its docker network has not said yet
                if na.version == nb.version and na.overlaps(nb):  # type: ignore[arg-type]
                    c.bad(keys.pool(a), f"overlaps pool {b}: an address could be booked twice")


def _twins(a: str, b: str) -> bool:
    """Pool ids of one subnet in one space ("<space>:<cidr>", "<space>:<cidr>~2")."""
    return a.split(TWIN, 1)[0] == b.split(TWIN, 1)[0]


def _endpoints(
    c: _Check, networks: Mapping[str, tuple[str, NetworkRecord]], pools: Mapping[str, PoolRecord]
) -> dict[str, tuple[str, Endpoint]]:
    """endpoint id -> (key, endpoint)."""
    found: dict[str, tuple[str, Endpoint]] = {}
    given: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, _, value in _under(c.kvs, keys.ENDPOINTS):
        ep = c.decoded(key, value, decode_endpoint)
        if ep is None:
            continue
        if key != keys.endpoint(ep.tenantName, ep.networkName, ep.endpointID):
            c.bad(key, f"holds endpoint {ep.endpointID} of {ep.network_id}, whose key is another")
        if ep.endpointID in found:
            c.bad(key, f"endpoint ID {ep.endpointID} is also {found[ep.endpointID][0]}")
        found[ep.endpointID] = (key, ep)
        if ep.network_id not in networks:
            c.bad(key, f"its network {ep.network_id} does not exist")
        index = c.kvs.get(keys.endpoint_index(ep.endpointID))
        if index is None:
            c.bad(key, "has no index entry")
        elif index != key.encode():
            c.bad(key, f"its index entry points at {index!r}")
        for pid, addr in addresses_of(ep):
            given[(pid, addr)].append(ep.endpointID)
            if pid not in pools:
                c.bad(key, f"its pool {pid} does not exist")
            held = c.kvs.get(keys.alloc(pid, addr))
            if held is None:
                c.bad(key, f"its address {addr} in pool {pid} is not allocated")
            else:
                rec = c.decoded(keys.alloc(pid, addr), held, AllocRecord.decode)
                if rec is not None and not _holds(rec, ep.endpointID):
                    c.bad(key, f"its address {addr} in pool {pid} is held by {rec.owner}")
    for (pid, addr), ids in given.items():
        if len(ids) > 1:
            c.bad(keys.alloc(pid, addr), f"given to several endpoints: {', '.join(sorted(ids))}")
    for key, ep_id, value in _under(c.kvs, keys.ENDPOINT_INDEX):
        target = value.decode(errors="replace")
        if target not in c.kvs or not target.startswith(keys.ENDPOINTS):
            c.bad(key, f"points at {target}, which does not exist")
        elif found.get(ep_id, ("",))[0] != target:
            c.bad(key, f"points at {target}, which is not endpoint {ep_id}")
    return found


def _allocations(
    c: _Check,
    pools: Mapping[str, PoolRecord],
    endpoints: Mapping[str, tuple[str, Endpoint]],
    services: Mapping[str, ServiceRecord],
) -> dict[tuple[str, str], AllocRecord]:
    allocs: dict[tuple[str, str], AllocRecord] = {}
    spelled: dict[tuple[str, str], str] = {}
    for key, rest, value in _under(c.kvs, keys.ALLOC):
        pid, _, addr = rest.rpartition("/")
        rec = c.decoded(key, value, AllocRecord.decode)
        if rec is None:
            continue
        allocs[(pid, addr)] = rec
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            c.bad(key, f"{addr!r} is not an address")
            continue
        if str(ip) != addr:
            c.bad(key, f"{addr} is not written as {ip}: one address could be booked twice")
        if (pid, str(ip)) in spelled:
            c.bad(key, f"the same address as {spelled[(pid, str(ip))]}")
        spelled[(pid, str(ip))] = key
        pool = pools.get(pid)
        if pool is None:
            c.bad(key, f"its pool {pid} does not exist (orphaned)")
        elif not _inside(ip, pool.cidr):
            c.bad(key, f"{addr} is outside pool {pid}")
        _holder(c, key, pid, addr, rec, pool, endpoints, services)
    return allocs


def _inside(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, cidr: str) -> bool:
    try:
        return ip in ipaddress.ip_network(cidr)
    except ValueError:
        return True  # a pool whose cidr is not a network is reported by _overlaps


def _holder(
    c: _Check,
    key: str,
    pid: str,
    addr: str,
    rec: AllocRecord,
    pool: PoolRecord | None,
    endpoints: Mapping[str, tuple[str, Endpoint]],
    services: Mapping[str, ServiceRecord],
) -> None:
    """Whether the holder an allocation names exists and knows it holds the address."""
    ep_id = owners.endpoint_of(rec.owner)
    service_id = owners.service_of(rec.owner)
    if service_id is not None:
        svc = services.get(service_id)
        if svc is None:
            c.bad(key, f"held by service {service_id}, which does not exist (orphaned)")
        elif svc.vip != addr:
            c.bad(key, f"held by service {service_id}, whose VIP is {svc.vip}")
    elif ep_id is not None:
        found = endpoints.get(ep_id)
        if found is None:
            c.bad(key, f"held by endpoint {ep_id}, which does not exist (orphaned)")
        elif (pid, addr) not in addresses_of(found[1]):
            c.bad(key, f"held by endpoint {ep_id}, which does not have it")
    elif rec.owner == owners.SWARM:
        found = endpoints.get(rec.user) if rec.user else None
        if rec.user and found is None:
            c.bad(key, f"a swarm booking used by endpoint {rec.user}, which does not exist")
        elif found is not None and (pid, addr) not in addresses_of(found[1]):
            c.bad(key, f"a swarm booking used by endpoint {rec.user}, which does not have it")
    elif rec.owner == owners.NETWORK_GATEWAY:
        if pool is not None and pool.gateway != addr:
            c.bad(key, f"held as the gateway of pool {pid}, whose gateway is {pool.gateway!r}")
    elif owners.is_request(rec.owner):
        okey = keys.owner(rec.owner)
        value = c.kvs.get(okey)
        held = c.decoded(okey, value, OwnerRecord.decode) if value is not None else None
        if held is None:
            c.bad(key, f"held by request {rec.owner}, which has no owner record (orphaned)")
        elif (held.pool, held.address) != (pid, addr):
            c.bad(key, f"held by request {rec.owner}, whose record says {held.address}")
    else:
        c.bad(key, "held by nobody")
    if pool is not None and pool.gateway == addr and rec.owner != owners.NETWORK_GATEWAY:
        c.bad(key, f"the gateway of pool {pid} is held by {rec.owner}")


def _holds(rec: AllocRecord, endpoint_id: str) -> bool:
    """Whether an endpoint holds an address: its own, or the swarm booking it uses."""
    if rec.owner == owners.SWARM:
        return rec.user == endpoint_id
    return rec.owner == owners.endpoint(endpoint_id)


def _owner_records(c: _Check, allocs: Mapping[tuple[str, str], AllocRecord]) -> None:
    for key, owner, value in _under(c.kvs, keys.OWNERS):
        held = c.decoded(key, value, OwnerRecord.decode)
        if held is None:
            continue
        rec = allocs.get((held.pool, held.address))
        if rec is None:
            c.bad(key, f"holds {held.address} in pool {held.pool}, which is not allocated")
        elif rec.owner != owner:
            c.bad(key, f"holds {held.address} in pool {held.pool}, allocated to {rec.owner}")


def _tags(c: _Check, networks: Mapping[str, tuple[str, NetworkRecord]]) -> None:
    for key, _, value in _under(c.kvs, keys.TAGS):
        net = networks.get(value.decode(errors="replace"))
        if net is None:
            c.bad(key, f"held by network {value!r}, which does not exist")
        elif key != keys.tag(net[1].encap, net[1].pkt_tag):
            c.bad(key, f"held by network {net[1].id}, whose tag is another")
    for nkey, net in networks.values():
        if c.kvs.get(keys.tag(net.encap, net.pkt_tag)) != net.id.encode():
            c.bad(nkey, f"its tag {net.encap} {net.pkt_tag} is not held by it")


def _tenants(c: _Check) -> None:
    """Each tenant's tag is held by it, and each tenant tag by the tenant that has it."""
    found: dict[str, TenantRecord] = {}
    for key, _, value in _under(c.kvs, keys.TENANTS):
        rec = c.decoded(key, value, TenantRecord.decode)
        if rec is None:
            continue
        if key != keys.tenant(rec.id):
            c.bad(key, f"holds tenant {rec.id}, whose key is another")
        found[rec.id] = rec
        if not rec.tag:
            c.bad(key, "has no tenant tag (the master gives it one when it starts)")
        elif c.kvs.get(keys.tenant_tag(rec.tag)) != rec.id.encode():
            c.bad(key, f"its tenant tag {rec.tag} is not held by it")
    _tag_index(c, keys.TENANT_TAGS, found, "tenant", "tenant", MAX_TENANT_TAG)


def _groups(c: _Check, networks: Mapping[str, tuple[str, NetworkRecord]]) -> dict[str, GroupRecord]:
    """group id -> record; each group's network exists and each tag is held once."""
    found: dict[str, GroupRecord] = {}
    for key, _, value in _under(c.kvs, keys.GROUPS):
        rec = c.decoded(key, value, GroupRecord.decode)
        if rec is None:
            continue
        g = rec.config
        if key != keys.group(g.tenantName, g.groupName):
            c.bad(key, f"holds endpoint group {rec.id}, whose key is another")
        found[rec.id] = rec
        if f"{g.tenantName}:{g.networkName}" not in networks:
            c.bad(key, f"its network {g.tenantName}:{g.networkName} does not exist")
        if not rec.tag:
            c.bad(key, "has no group tag (the master gives it one when it starts)")
        elif c.kvs.get(keys.group_tag(rec.tag)) != rec.id.encode():
            c.bad(key, f"its group tag {rec.tag} is not held by it")
    _tag_index(c, keys.GROUP_TAGS, found, "group", "endpoint group", 2**31 - 1)
    return found


def _tag_index(
    c: _Check, prefix: str, found: Mapping[str, Any], tag_name: str, holder_name: str, limit: int
) -> None:
    """Each tag key under ``prefix`` is a tag in range, held by a record of ``found`` (by
    id) that has that tag."""
    for key, tag, value in _under(c.kvs, prefix):
        holder = value.decode(errors="replace")
        rec = found.get(holder)
        if not tag.isdigit() or not 1 <= int(tag) <= limit or str(int(tag)) != tag:
            c.bad(key, f"{tag!r} is not a {tag_name} tag")
        elif rec is None:
            c.bad(key, f"held by {holder_name} {holder}, which does not exist")
        elif rec.tag != int(tag):
            c.bad(key, f"held by {holder_name} {holder}, whose tag is {rec.tag}")


def _policies(
    c: _Check,
    groups: Mapping[str, GroupRecord],
    networks: Mapping[str, tuple[str, NetworkRecord]],
) -> None:
    policies: set[str] = set()
    for key, _, value in _under(c.kvs, keys.POLICIES):
        p = c.decoded(key, value, lambda v: decode_config(Policy, v))
        if p is None:
            continue
        if key != keys.policy(p.tenantName, p.policyName):
            c.bad(key, f"holds policy {p.id}, whose key is another")
        policies.add(p.id)
    for rec in groups.values():
        g = rec.config
        for name in g.policies:
            if f"{g.tenantName}:{name}" not in policies:
                c.bad(keys.group(g.tenantName, g.groupName), f"its policy {name} does not exist")
    for key, _, value in _under(c.kvs, keys.RULES):
        r = c.decoded(key, value, lambda v: decode_config(Rule, v))
        if r is None:
            continue
        if key != keys.rule(r.tenantName, r.policyName, r.ruleId):
            c.bad(key, f"holds rule {r.id}, whose key is another")
        if r.policy_id not in policies:
            c.bad(key, f"its policy {r.policy_id} does not exist")
        for field in ("fromEndpointGroup", "toEndpointGroup", "fromNetwork", "toNetwork"):
            name = getattr(r, field)
            known = groups if field.endswith("Group") else networks
            if name and f"{r.tenantName}:{name}" not in known:
                what = "endpoint group" if field.endswith("Group") else "network"
                c.bad(key, f"its {field} names {what} {r.tenantName}:{name}, which does not exist")


def _services(
    c: _Check, networks: Mapping[str, tuple[str, NetworkRecord]]
) -> dict[str, ServiceRecord]:
    """service id -> record; each one's network exists, its VIP is booked for it there and
    its tag points back at it."""
    found: dict[str, ServiceRecord] = {}
    for key, _, value in _under(c.kvs, keys.SERVICES):
        rec = c.decoded(key, value, ServiceRecord.decode)
        if rec is None:
            continue
        s = rec.config
        if key != keys.service(s.tenantName, s.serviceName):
            c.bad(key, f"holds service {rec.id}, whose key is another")
        found[rec.id] = rec
        net = networks.get(f"{s.tenantName}:{s.networkName}")
        if net is None:
            c.bad(key, f"its network {s.tenantName}:{s.networkName} does not exist")
        else:
            akey = keys.alloc(net[1].ipv4_pool, rec.vip)
            held = c.kvs.get(akey)
            booked = c.decoded(akey, held, AllocRecord.decode) if held is not None else None
            if booked is None or booked.owner != owners.service(rec.id):
                c.bad(key, f"its VIP {rec.vip} is not booked for it in {net[1].ipv4_pool}")
        if c.kvs.get(keys.service_tag(rec.tag)) != rec.id.encode():
            c.bad(key, f"its service tag {rec.tag} is not held by it")
    for key, tag, value in _under(c.kvs, keys.SERVICE_TAGS):
        holder = value.decode(errors="replace")
        if holder not in found or str(found[holder].tag) != tag:
            c.bad(key, f"held by service {holder}, which does not exist or has another tag")
    return found


def _netprofiles(c: _Check, groups: Mapping[str, GroupRecord]) -> None:
    profiles: set[str] = set()
    for key, _, value in _under(c.kvs, keys.NETPROFILES):
        p = c.decoded(key, value, lambda v: decode_config(NetProfile, v))
        if p is not None:
            profiles.add(p.id)
    for rec in groups.values():
        g = rec.config
        if g.netProfile and f"{g.tenantName}:{g.netProfile}" not in profiles:
            c.bad(
                keys.group(g.tenantName, g.groupName),
                f"its netprofile {g.netProfile} does not exist",
            )
