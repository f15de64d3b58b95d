"""Cluster state operations. Every read-modify-write is one compare-and-swap transaction.

Each operation reads what it needs at some revision, decides with pure code, then commits
with compares that fail if anything it relied on changed; on failure it re-reads and
decides again. A refused request therefore changes nothing.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from common import keys, owners
from common.models import (
    AddressRelease,
    AddressRequest,
    Endpoint,
    EndpointGroup,
    EndpointRequest,
    GlobalSettings,
    Network,
    PoolRequest,
    Tenant,
    docker_name,
)
from common.records import AllocRecord
from ipam import next_free_pool, parse_address, parse_network
from ipam.defaults import DEFAULT_V4_POOLS, DEFAULT_V6_POOLS
from ipam.errors import AddressInUse, IpamError, PoolExhausted
from ipam.parse import usable_bounds
from store import KV, Compare, Delete, Op, Put, Store, StoreError, StoreUnavailable

from .addresses import IPAddr, PoolCache, pool_spec
from .errors import BadRequest, Conflict, NotFound, Unavailable
from .validate import (
    check_name,
    normalize_group,
    normalize_network,
    tag_range,
    validate_global,
)

MAX_ATTEMPTS = 64
T = TypeVar("T")


class _Retry(Exception):
    """A compare failed: the state moved under us; decide again."""


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _load(kv: KV) -> dict[str, Any]:
    return json.loads(kv.value)


def _unchanged(kv: KV) -> Compare:
    return Compare(kv.key, "mod", "==", kv.mod_revision)


def _absent(key: str) -> Compare:
    return Compare(key, "create", "==", 0)


def _none_under(prefix: str) -> Compare:
    return Compare(prefix, "create", "==", 0, prefix=True)


def _untouched_since(prefix: str, revision: int) -> Compare:
    """No key under ``prefix`` was created or modified after ``revision``."""
    return Compare(prefix, "mod", "<", revision + 1, prefix=True)


def pool_id_for(address_space: str, network: Any) -> str:
    return f"{address_space}:{network}"


class ClusterState:
    def __init__(self, store: Store, backend: str = "embedded") -> None:
        self.store = store
        self.backend = backend
        self.pools = PoolCache(store)
        # Hot-path records (networks, groups, pools) by key, parsed. Used optimistically:
        # every txn compares their mod_revision, and a retry re-reads them fresh.
        self._hot: dict[str, tuple[KV, Any]] = {}

    def _hot_get(self, key: str, fresh: bool, parse: Callable[[KV], Any]) -> tuple[KV, Any] | None:
        if not fresh and (hit := self._hot.get(key)) is not None:
            return hit
        kv = self._get(key)
        if kv is None:
            self._hot.pop(key, None)
            return None
        entry = (kv, parse(kv))
        self._hot[key] = entry
        return entry

    # --- plumbing ---

    def _retrying(self, obj: str, attempt: Callable[[], T]) -> T:
        delay = 0.001
        for _ in range(MAX_ATTEMPTS):
            try:
                return attempt()
            except _Retry:
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
            except StoreUnavailable as e:
                raise Unavailable(obj, f"cluster store unavailable: {e}") from None
            except StoreError as e:
                raise Unavailable(obj, f"cluster store error: {e}") from None
        raise Conflict(obj, "too many concurrent updates; retry the request")

    def _commit(self, compares: Sequence[Compare], ops: Sequence[Op]) -> int:
        res = self.store.txn(compares, ops)
        if not res.succeeded:
            raise _Retry
        return res.revision

    def _get(self, key: str) -> KV | None:
        try:
            return self.store.get(key)
        except StoreError as e:
            raise Unavailable("cluster store", str(e)) from None

    def _range(self, prefix: str) -> tuple[list[KV], int]:
        try:
            rr = self.store.range(prefix)
        except StoreError as e:
            raise Unavailable("cluster store", str(e)) from None
        return rr.kvs, rr.revision

    def ensure_defaults(self) -> None:
        """Create the default tenant and the global settings if they are missing."""

        def attempt() -> None:
            ops: list[Op] = []
            compares: list[Compare] = []
            if self._get(keys.GLOBAL) is None:
                compares.append(_absent(keys.GLOBAL))
                ops.append(Put(keys.GLOBAL, _json({"config": GlobalSettings().dump()})))
            if self._get(keys.tenant("default")) is None:
                compares.append(_absent(keys.tenant("default")))
                tenant = Tenant(tenantName="default")
                ops.append(Put(keys.tenant("default"), _json({"config": tenant.dump()})))
            if ops:
                self._commit(compares, ops)

        self._retrying("cluster defaults", attempt)

    # --- global settings ---

    def _global(self) -> tuple[GlobalSettings, KV]:
        kv = self._get(keys.GLOBAL)
        if kv is None:
            self.ensure_defaults()
            kv = self._get(keys.GLOBAL)
            assert kv is not None
        return GlobalSettings.model_validate(_load(kv)["config"]), kv

    def get_global(self) -> GlobalSettings:
        return self._global()[0]

    def put_global(self, new: GlobalSettings) -> GlobalSettings:
        validate_global(new)

        def attempt() -> GlobalSettings:
            old, gkv = self._global()
            compares = [_unchanged(gkv)]
            if new.fwdMode != old.fwdMode:
                nets, _ = self._range(keys.NETWORKS)
                if nets:
                    names = ", ".join(_net_id(kv) for kv in nets[:5])
                    raise Conflict(
                        "global",
                        f"fwd-mode cannot change from {old.fwdMode} to {new.fwdMode} while "
                        f"{len(nets)} network(s) exist ({names}); delete them first",
                    )
                compares.append(_none_under(keys.NETWORKS))
            tags, rev = self._range(keys.TAGS)
            for kv in tags:
                encap, value = kv.key[len(keys.TAGS) :].split("/")
                lo, hi = tag_range(new, encap)
                if not lo <= int(value) <= hi:
                    owner = kv.value.decode()
                    field = "vlans" if encap == "vlan" else "vxlans"
                    raise Conflict(
                        "global",
                        f"{field} range {getattr(new, field)} would exclude {encap} tag {value} "
                        f"in use by network {owner}",
                    )
            compares.append(_untouched_since(keys.TAGS, rev))
            self._commit(compares, [Put(keys.GLOBAL, _json({"config": new.dump()}))])
            return new

        return self._retrying("global", attempt)

    def inspect_global(self) -> dict[str, Any]:
        g = self.get_global()
        tags, _ = self._range(keys.TAGS)
        used: dict[str, list[int]] = {"vlan": [], "vxlan": []}
        for kv in tags:
            encap, value = kv.key[len(keys.TAGS) :].split("/")
            used[encap].append(int(value))
        nets, _ = self._range(keys.NETWORKS)
        return {
            "Config": g.dump(),
            "Oper": {
                "clusterMode": self.backend,
                "numNetworks": len(nets),
                "vlansInUse": _ranges(sorted(used["vlan"])),
                "vxlansInUse": _ranges(sorted(used["vxlan"])),
                "freeVLANs": _count(tag_range(g, "vlan")) - len(used["vlan"]),
                "freeVXLANs": _count(tag_range(g, "vxlan")) - len(used["vxlan"]),
            },
        }

    # --- tenants ---

    def list_tenants(self) -> list[Tenant]:
        kvs, _ = self._range(keys.TENANTS)
        return [Tenant.model_validate(_load(kv)["config"]) for kv in kvs]

    def get_tenant(self, name: str) -> Tenant:
        kv = self._get(keys.tenant(name))
        if kv is None:
            raise NotFound(f"tenant {name}")
        return Tenant.model_validate(_load(kv)["config"])

    def put_tenant(self, tenant: Tenant) -> Tenant:
        check_name("tenant", tenant.tenantName)

        def attempt() -> Tenant:
            kv = self._get(keys.tenant(tenant.tenantName))
            compares = [_unchanged(kv) if kv else _absent(keys.tenant(tenant.tenantName))]
            value = _json({"config": tenant.dump()})
            if kv is None or kv.value != value:
                self._commit(compares, [Put(keys.tenant(tenant.tenantName), value)])
            return tenant

        return self._retrying(f"tenant {tenant.tenantName}", attempt)

    def delete_tenant(self, name: str) -> None:
        obj = f"tenant {name}"
        if name == "default":
            raise Conflict(obj, "the default tenant cannot be deleted")

        def attempt() -> None:
            kv = self._get(keys.tenant(name))
            if kv is None:
                raise NotFound(obj)
            nets, _ = self._range(keys.networks_of(name))
            groups, _ = self._range(keys.groups_of(name))
            if nets or groups:
                children = [f"network {_net_id(k)}" for k in nets]
                children += [f"endpoint group {_tail(k)}" for k in groups]
                raise Conflict(obj, f"it still has {', '.join(children)}; delete them first")
            self._commit(
                [
                    _unchanged(kv),
                    _none_under(keys.networks_of(name)),
                    _none_under(keys.groups_of(name)),
                ],
                [Delete(keys.tenant(name))],
            )

        self._retrying(obj, attempt)

    def inspect_tenant(self, name: str) -> dict[str, Any]:
        tenant = self.get_tenant(name)
        nets, _ = self._range(keys.networks_of(name))
        groups, _ = self._range(keys.groups_of(name))
        eps, _ = self._range(keys.ENDPOINTS + name + "/")
        return {
            "Config": tenant.dump(),
            "Oper": {
                "networks": [_tail(k) for k in nets],
                "endpointGroups": [_tail(k) for k in groups],
                "numNetworks": len(nets),
                "numEndpointGroups": len(groups),
                "numEndpoints": len(eps),
            },
        }

    # --- networks ---

    def list_networks(self, tenant: str | None = None) -> list[Network]:
        prefix = keys.networks_of(tenant) if tenant else keys.NETWORKS
        kvs, _ = self._range(prefix)
        return [Network.model_validate(_load(kv)["config"]) for kv in kvs]

    def _network(self, tenant: str, name: str) -> tuple[Network, dict[str, Any], KV]:
        kv = self._get(keys.network(tenant, name))
        if kv is None:
            raise NotFound(f"network {tenant}:{name}")
        net, rec = _parse_network(kv)
        return net, rec, kv

    def get_network(self, tenant: str, name: str) -> Network:
        return self._network(tenant, name)[0]

    def put_network(self, net: Network) -> Network:
        net = normalize_network(net)
        obj = f"network {net.id}"

        def attempt() -> Network:
            tkv = self._get(keys.tenant(net.tenantName))
            if tkv is None:
                raise NotFound(f"tenant {net.tenantName}", "not found; create it first")
            g, gkv = self._global()
            compares: list[Compare] = [_unchanged(tkv), _unchanged(gkv)]
            ops: list[Op] = []
            old_kv = self._get(keys.network(net.tenantName, net.networkName))
            old_rec = _load(old_kv) if old_kv else None
            if old_kv is not None and old_rec is not None:
                old = Network.model_validate(old_rec["config"])
                if old == net:
                    return net
                compares.append(_unchanged(old_kv))
                if _addressing(old) != _addressing(net):
                    eps, _ = self._range(keys.endpoints_of(net.tenantName, net.networkName))
                    if eps:
                        raise Conflict(
                            obj,
                            f"subnet, gateway, encap and pkt-tag cannot change while "
                            f"{len(eps)} endpoint(s) exist",
                        )
                    compares.append(_none_under(keys.endpoints_of(net.tenantName, net.networkName)))
                    ops += self._network_teardown(old_rec)
                else:
                    ops.append(Put(old_kv.key, _json({**old_rec, "config": net.dump()})))
                    self._commit(compares, ops)
                    return net
            else:
                compares.append(_absent(keys.network(net.tenantName, net.networkName)))

            # A new tag: the configured one, or the first free one of the global range.
            lo, hi = tag_range(g, net.encap)
            tags, _ = self._range(keys.tags_of(net.encap))
            used = {int(_tail(kv)): kv.value.decode() for kv in tags}
            if old_rec is not None and old_rec.get("encap") == net.encap:
                used.pop(old_rec.get("pktTag", -1), None)
            if net.pktTag:
                if not lo <= net.pktTag <= hi:
                    field = "vlans" if net.encap == "vlan" else "vxlans"
                    raise BadRequest(
                        obj,
                        f"pkt-tag {net.pktTag} is outside the global {field} range {lo}-{hi}",
                    )
                if net.pktTag in used and used[net.pktTag] != net.id:
                    raise Conflict(
                        obj,
                        f"{net.encap} pkt-tag {net.pktTag} is already used by network "
                        f"{used[net.pktTag]}",
                    )
                tag = net.pktTag
            else:
                tag = next((t for t in range(lo, hi + 1) if t not in used), 0)
                if not tag:
                    raise Conflict(obj, f"no free {net.encap} tag left in range {lo}-{hi}")
            if old_rec is None or old_rec.get("pktTag") != tag or old_rec.get("encap") != net.encap:
                compares.append(_absent(keys.tag(net.encap, tag)))
            ops.append(Put(keys.tag(net.encap, tag), net.id.encode()))

            record: dict[str, Any] = {
                "config": net.dump(),
                "encap": net.encap,
                "pktTag": tag,
                "ipv4Pool": "",
                "ipv6Pool": "",
            }
            pools, prev = self._range(keys.POOLS + net.tenantName + ":")
            stale = {old_rec.get("ipv4Pool"), old_rec.get("ipv6Pool")} if old_rec else set()
            existing = [(kv, _load(kv)) for kv in pools if _tail_pool(kv) not in stale]
            for version, subnet, gateway in (
                (4, net.subnet, net.gateway),
                (6, net.ipv6Subnet, net.ipv6Gateway),
            ):
                if not subnet:
                    continue
                network = parse_network(subnet)
                pid = pool_id_for(net.tenantName, network)
                pool_rec = {
                    "cidr": str(network),
                    "range": "",
                    "network": net.id,
                    "gateway": gateway,
                    "name": net.id,
                }
                for kv, rec in existing:
                    other = parse_network(rec["cidr"])
                    if other == network and not rec.get("network"):
                        # A pool docker reserved (RequestPool) for this very network: adopt
                        # it with its sub-pool and the addresses already handed out.
                        pool_rec["range"] = rec.get("range", "")
                        compares.append(_unchanged(kv))
                    elif other.version == network.version and other.overlaps(network):
                        owner = rec.get("network") or "a docker pool"
                        raise Conflict(
                            obj,
                            f"subnet {network} overlaps {other} of network {owner} "
                            f"in tenant {net.tenantName}",
                        )
                ops.append(Put(keys.pool(pid), _json(pool_rec)))
                if gateway:
                    ops.append(
                        Put(keys.alloc(pid, gateway), AllocRecord(owners.NETWORK_GATEWAY).encode())
                    )
                record[f"ipv{version}Pool"] = pid
            compares.append(_untouched_since(keys.POOLS + net.tenantName + ":", prev))
            ops.append(Put(keys.network(net.tenantName, net.networkName), _json(record)))
            self._commit(compares, self._without_overlaps(ops))
            for pid in stale:
                if pid:
                    self.pools.forget(pid)
            return net

        return self._retrying(obj, attempt)

    def _network_teardown(self, rec: dict[str, Any]) -> list[Op]:
        ops: list[Op] = [Delete(keys.tag(rec["encap"], rec["pktTag"]))]
        for field in ("ipv4Pool", "ipv6Pool"):
            if rec.get(field):
                ops += [
                    Delete(keys.pool(rec[field])),
                    Delete(keys.allocs_of(rec[field]), prefix=True),
                ]
        return ops

    def _without_overlaps(self, ops: list[Op]) -> list[Op]:
        """etcd refuses a txn that deletes a key it also puts: drop such deletes.

        A prefix delete that covers a put becomes deletes of the prefix's other keys.
        """
        puts = {op.key for op in ops if isinstance(op, Put)}
        out: list[Op] = []
        for op in ops:
            if isinstance(op, Delete):
                if op.prefix and any(k.startswith(op.key) for k in puts):
                    out += [Delete(kv.key) for kv in self._range(op.key)[0] if kv.key not in puts]
                    continue
                if not op.prefix and op.key in puts:
                    continue
            out.append(op)
        return out

    def rename_network(self, tenant: str, name: str, new_name: str) -> Network:
        """Rename a network that has no endpoints yet (docker names arrive after creation)."""
        obj = f"network {tenant}:{name}"
        check_name("network", new_name)

        def attempt() -> Network:
            net, rec, kv = self._network(tenant, name)
            if new_name == name:
                return net
            new_key = keys.network(tenant, new_name)
            if self._get(new_key) is not None:
                raise Conflict(obj, f"cannot rename: network {tenant}:{new_name} already exists")
            eps, _ = self._range(keys.endpoints_of(tenant, name))
            if eps:
                raise Conflict(obj, f"cannot rename while {len(eps)} endpoint(s) exist")
            renamed = net.model_copy(update={"networkName": new_name})
            compares = [
                _unchanged(kv),
                _absent(new_key),
                _none_under(keys.endpoints_of(tenant, name)),
            ]
            ops: list[Op] = [
                Delete(kv.key),
                Put(new_key, _json({**rec, "config": renamed.dump()})),
                Put(keys.tag(rec["encap"], rec["pktTag"]), renamed.id.encode()),
            ]
            for field in ("ipv4Pool", "ipv6Pool"):
                pkv = self._get(keys.pool(rec[field])) if rec.get(field) else None
                if pkv is not None:
                    compares.append(_unchanged(pkv))
                    ops.append(
                        Put(
                            pkv.key,
                            _json({**_load(pkv), "network": renamed.id, "name": renamed.id}),
                        )
                    )
            self._commit(compares, ops)
            return renamed

        return self._retrying(obj, attempt)

    def delete_network(self, tenant: str, name: str) -> None:
        obj = f"network {tenant}:{name}"

        def attempt() -> None:
            _, rec, kv = self._network(tenant, name)
            eps, _ = self._range(keys.endpoints_of(tenant, name))
            if eps:
                hosts = sorted({_load(e).get("host") or "?" for e in eps})
                raise Conflict(
                    obj,
                    f"it still has {len(eps)} endpoint(s) on host(s) {', '.join(hosts)}; "
                    "remove the containers first",
                )
            gkvs, grev = self._range(keys.groups_of(tenant))
            groups = [_tail(g) for g in gkvs if _load(g)["config"]["networkName"] == name]
            if groups:
                raise Conflict(
                    obj, f"endpoint group(s) {', '.join(groups)} use it; delete them first"
                )
            compares = [
                _unchanged(kv),
                _none_under(keys.endpoints_of(tenant, name)),
                _untouched_since(keys.groups_of(tenant), grev),
            ]
            self._commit(compares, [Delete(kv.key), *self._network_teardown(rec)])
            for field in ("ipv4Pool", "ipv6Pool"):
                if rec.get(field):
                    self.pools.forget(rec[field])

        self._retrying(obj, attempt)

    def inspect_network(self, tenant: str, name: str) -> dict[str, Any]:
        net, rec, _ = self._network(tenant, name)
        eps, _ = self._range(keys.endpoints_of(tenant, name))
        oper: dict[str, Any] = {
            "pktTag": rec["pktTag"],
            "dockerName": docker_name(tenant, name),
            "numEndpoints": len(eps),
            "endpoints": [Endpoint.model_validate(_load(e)).dump() for e in eps],
            # Docker IPAM pool IDs: every host's docker network of it books from these.
            "ipv4Pool": rec.get("ipv4Pool") or "",
            "ipv6Pool": rec.get("ipv6Pool") or "",
        }
        for version in (4, 6):
            pid = rec.get(f"ipv{version}Pool")
            if not pid:
                continue
            pkv = self._get(keys.pool(pid))
            if pkv is None:
                continue
            spec = pool_spec(pid, _load(pkv))
            allocs, _ = self._range(keys.allocs_of(pid))
            addrs = sorted((ipaddress.ip_address(_tail_addr(a, pid)) for a in allocs), key=int)
            key = "allocatedAddresses" if version == 4 else "allocatedIPv6Addresses"
            oper[key] = [str(a) for a in addrs]
            oper["allocatedAddressesCount" if version == 4 else "allocatedIPv6AddressesCount"] = (
                len(addrs)
            )
            if version == 4:
                lo, hi = usable_bounds(spec.network)
                oper["availableAddressesCount"] = (hi - lo + 1) - len(addrs)
        return {"Config": net.dump(), "Oper": oper}

    # --- endpoint groups ---

    def list_groups(self, tenant: str | None = None) -> list[EndpointGroup]:
        kvs, _ = self._range(keys.groups_of(tenant) if tenant else keys.GROUPS)
        return [_parse_group(kv) for kv in kvs]

    def _group(self, tenant: str, name: str) -> tuple[EndpointGroup, KV]:
        kv = self._get(keys.group(tenant, name))
        if kv is None:
            raise NotFound(f"endpoint group {tenant}:{name}")
        return _parse_group(kv), kv

    def get_group(self, tenant: str, name: str) -> EndpointGroup:
        return self._group(tenant, name)[0]

    def put_group(self, group: EndpointGroup) -> EndpointGroup:
        obj = f"endpoint group {group.id}"
        check_name("endpoint group", group.groupName)

        def attempt() -> EndpointGroup:
            tkv = self._get(keys.tenant(group.tenantName))
            if tkv is None:
                raise NotFound(f"tenant {group.tenantName}", "not found; create it first")
            net, _, nkv = self._network(group.tenantName, group.networkName)
            g = normalize_group(group, net)
            compares = [_unchanged(tkv), _unchanged(nkv)]
            old = self._get(keys.group(g.tenantName, g.groupName))
            if old is not None:
                prev = EndpointGroup.model_validate(_load(old)["config"])
                if prev == g:
                    return g
                if (prev.networkName, prev.ipPool) != (g.networkName, g.ipPool):
                    eps = self._group_endpoints(prev)
                    if eps:
                        raise Conflict(
                            obj,
                            f"network and ip-pool cannot change while {len(eps)} "
                            "endpoint(s) are in the group",
                        )
                compares.append(_unchanged(old))
            else:
                compares.append(_absent(keys.group(g.tenantName, g.groupName)))
            others, rev = self._range(keys.groups_of(g.tenantName))
            if g.ipPool:
                mine = _pool_bounds(g.ipPool)
                for kv in others:
                    o = _parse_group(kv)
                    if o.groupName == g.groupName or o.networkName != g.networkName or not o.ipPool:
                        continue
                    theirs = _pool_bounds(o.ipPool)
                    if mine[0] <= theirs[1] and theirs[0] <= mine[1]:
                        raise Conflict(
                            obj, f"ip-pool {g.ipPool} overlaps {o.ipPool} of group {o.id}"
                        )
            compares.append(_untouched_since(keys.groups_of(g.tenantName), rev))
            self._commit(
                compares, [Put(keys.group(g.tenantName, g.groupName), _json({"config": g.dump()}))]
            )
            return g

        return self._retrying(obj, attempt)

    def _group_endpoints(self, g: EndpointGroup) -> list[dict[str, Any]]:
        eps, _ = self._range(keys.endpoints_of(g.tenantName, g.networkName))
        return [e for e in map(_load, eps) if e.get("groupName") == g.groupName]

    def delete_group(self, tenant: str, name: str) -> None:
        obj = f"endpoint group {tenant}:{name}"

        def attempt() -> None:
            g, kv = self._group(tenant, name)
            eps, erev = self._range(keys.endpoints_of(tenant, g.networkName))
            members = [e for e in map(_load, eps) if e.get("groupName") == name]
            if members:
                raise Conflict(obj, f"it still has {len(members)} endpoint(s); remove them first")
            self._commit(
                [_unchanged(kv), _untouched_since(keys.endpoints_of(tenant, g.networkName), erev)],
                [Delete(kv.key)],
            )

        self._retrying(obj, attempt)

    def inspect_group(self, tenant: str, name: str) -> dict[str, Any]:
        g = self.get_group(tenant, name)
        eps = self._group_endpoints(g)
        return {
            "Config": g.dump(),
            "Oper": {
                "dockerName": docker_name(tenant, name),
                "numEndpoints": len(eps),
                "endpoints": [Endpoint.model_validate(e).dump() for e in eps],
            },
        }

    # --- endpoints (allocation API) ---

    def list_endpoints(self) -> list[Endpoint]:
        kvs, _ = self._range(keys.ENDPOINTS)
        return [Endpoint.model_validate(_load(kv)) for kv in kvs]

    def get_endpoint(self, endpoint_id: str) -> Endpoint:
        idx = self._get(keys.endpoint_index(endpoint_id))
        kv = self._get(idx.value.decode()) if idx else None
        if kv is None:
            raise NotFound(f"endpoint {endpoint_id}")
        return Endpoint.model_validate(_load(kv))

    def create_endpoint(self, req: EndpointRequest) -> tuple[Endpoint, bool]:
        """Create an endpoint with its addresses; returns (endpoint, created).

        Idempotent by endpoint ID: a retried request returns the endpoint it created.
        """
        obj = f"endpoint {req.endpointID}"
        tries = 0

        def attempt() -> tuple[Endpoint, bool]:
            nonlocal tries
            # The first try trusts cached records and lets the txn's compares (endpoint
            # absent, records unchanged) check them: one store round trip when nothing moved.
            fresh = tries > 0
            tries += 1
            if fresh:
                existing = self._existing_endpoint(req)
                if existing is not None:
                    return existing, False
            hit = self._hot_get(
                keys.network(req.tenantName, req.networkName), fresh, _parse_network
            )
            if hit is None:
                if not fresh:
                    raise _Retry  # decide on fresh reads, the existing endpoint first
                raise NotFound(f"network {req.tenantName}:{req.networkName}")
            nkv, (net, rec) = hit
            compares: list[Compare] = [
                _unchanged(nkv),
                _absent(keys.endpoint_index(req.endpointID)),
            ]
            within = None
            if req.groupName:
                ghit = self._hot_get(keys.group(req.tenantName, req.groupName), fresh, _parse_group)
                if ghit is None:
                    raise NotFound(f"endpoint group {req.tenantName}:{req.groupName}")
                gkv, group = ghit
                if group.networkName != net.networkName:
                    raise BadRequest(
                        obj,
                        f"endpoint group {group.id} belongs to network {group.networkName}, "
                        f"not {net.networkName}",
                    )
                compares.append(_unchanged(gkv))
                if group.ipPool:
                    within = _pool_bounds(group.ipPool)
            owner = AllocRecord(owners.endpoint(req.endpointID), network=net.id).encode()
            wanted = [
                (rec.get("ipv4Pool"), req.ipAddress, within, "ipAddress"),
                (rec.get("ipv6Pool"), req.ipv6Address, None, "ipv6Address"),
            ]
            claims: list[tuple[str, IPAddr]] = []
            ops: list[Op] = []
            result = {"ipAddress": "", "ipv6Address": "", "ipv4Pool": "", "ipv6Pool": ""}
            try:
                for pid, static, rng, field in wanted:
                    if not pid:
                        if static:
                            raise BadRequest(
                                obj,
                                f"{field} {static} given but network {net.id} has no such subnet",
                            )
                        continue
                    adopted = self._adoptable(pid, static) if req.adoptAddress and static else None
                    if adopted is not None:
                        akv, prev_owner = adopted
                        addr = parse_address(static, "address")
                        compares.append(_unchanged(akv))
                        if self._get(keys.owner(prev_owner)) is not None:
                            ops.append(Delete(keys.owner(prev_owner)))
                    else:
                        addr = self._claim(
                            obj,
                            pid,
                            static,
                            rng,
                            compares,
                            claims,
                            fresh,
                            owners.endpoint(req.endpointID),
                        )
                    ops.append(Put(keys.alloc(pid, str(addr)), owner))
                    result[field] = str(addr)
                    result["ipv4Pool" if field == "ipAddress" else "ipv6Pool"] = pid
                ep = Endpoint(
                    endpointID=req.endpointID,
                    tenantName=req.tenantName,
                    networkName=req.networkName,
                    groupName=req.groupName,
                    host=req.host,
                    macAddress=req.macAddress,
                    containerID=req.containerID,
                    containerName=req.containerName,
                    **result,
                )
                ep_key = keys.endpoint(req.tenantName, req.networkName, req.endpointID)
                ops += [
                    Put(ep_key, _json(ep.dump())),
                    Put(keys.endpoint_index(req.endpointID), ep_key.encode()),
                ]
                res = self.store.txn(compares, ops)
            except BaseException:
                for pid, addr in claims:
                    self.pools.unclaim(pid, addr)
                raise
            if res.succeeded:
                return ep, True
            self._settle_claims(
                obj,
                claims,
                {pid: static for pid, static, _, _ in wanted},
                owners.endpoint(req.endpointID),
            )
            raise _Retry

        return self._retrying(obj, attempt)

    def _adoptable(self, pool_id: str, address: str) -> tuple[KV, str] | None:
        """The alloc record of ``address`` if a plain IPAM request (not an endpoint, not the
        gateway) holds it, so the endpoint can take it over."""
        try:
            canonical = str(parse_address(address, "address"))
        except IpamError:
            return None
        akv = self._get(keys.alloc(pool_id, canonical))
        if akv is None:
            return None
        who = _load(akv).get("owner", "")
        if not owners.is_request(who):
            return None
        return akv, who

    def _existing_endpoint(self, req: EndpointRequest) -> Endpoint | None:
        idx = self._get(keys.endpoint_index(req.endpointID))
        if idx is None:
            return None
        kv = self._get(idx.value.decode())
        if kv is None:
            raise _Retry  # being deleted concurrently
        ep = Endpoint.model_validate(_load(kv))
        if (ep.tenantName, ep.networkName) != (req.tenantName, req.networkName):
            raise Conflict(
                f"endpoint {req.endpointID}",
                f"already exists in network {ep.tenantName}:{ep.networkName}",
            )
        return ep

    def _claim(
        self,
        obj: str,
        pool_id: str,
        static: str,
        within: tuple[int, int] | None,
        compares: list[Compare],
        claims: list[tuple[str, IPAddr]],
        fresh: bool = True,
        requester: str = "",
    ) -> IPAddr:
        hit = self._hot_get(keys.pool(pool_id), fresh, lambda kv: None)
        if hit is None:
            raise _Retry  # the network is being rewritten
        pkv = hit[0]
        try:
            addr = parse_address(static, "address") if static else None
            got = self.pools.claim(pool_id, pkv, addr, within)
        except AddressInUse as e:
            akv = self._get(keys.alloc(pool_id, str(e.address)))
            who = _load(akv).get("owner", "?") if akv else "?"
            if requester and who == requester:
                raise _Retry from None  # held by this very request's earlier attempt
            raise Conflict(
                obj, f"address {e.address} is already in use in pool {pool_id} (by {who})"
            ) from None
        except PoolExhausted as e:
            raise Conflict(obj, str(e)) from None
        except IpamError as e:
            raise BadRequest(obj, str(e)) from None
        claims.append((pool_id, got))
        compares += [_unchanged(pkv), _absent(keys.alloc(pool_id, str(got)))]
        return got

    def _settle_claims(
        self,
        obj: str,
        claims: list[tuple[str, IPAddr]],
        statics: dict[str, str],
        requester: str = "",
    ) -> None:
        """After a failed txn: keep claims another writer really took, drop the others."""
        for pid, addr in claims:
            akv = self._get(keys.alloc(pid, str(addr)))
            if akv is None:
                self.pools.unclaim(pid, addr)
            elif not statics.get(pid):
                # Another writer is allocating from this pool too: stepping past one address
                # at a time would chase it; re-read what it took (one range read).
                self.pools.refresh(pid)
            else:
                who = _load(akv).get("owner", "?")
                if who == requester:
                    continue  # our own earlier attempt committed: the retry will find it
                raise Conflict(obj, f"address {addr} is already in use in pool {pid} (by {who})")

    def delete_endpoint(self, endpoint_id: str) -> Endpoint:
        return self._delete_endpoint(endpoint_id)

    def reclaim_endpoint(self, endpoint_id: str, gone_host: str) -> Endpoint:
        """Delete an endpoint of a host that is gone, releasing its addresses.

        The same txn checks that the host has still no registration (keys.host), so an
        agent that comes back just then keeps its endpoint (Conflict).
        """
        return self._delete_endpoint(endpoint_id, gone_host)

    def _delete_endpoint(self, endpoint_id: str, gone_host: str | None = None) -> Endpoint:
        obj = f"endpoint {endpoint_id}"

        def attempt() -> Endpoint:
            idx = self._get(keys.endpoint_index(endpoint_id))
            if idx is None:
                raise NotFound(obj)
            kv = self._get(idx.value.decode())
            if kv is None:
                raise _Retry
            ep = Endpoint.model_validate(_load(kv))
            ops: list[Op] = [Delete(kv.key), Delete(idx.key)]
            compares = [_unchanged(kv), _unchanged(idx)]
            if gone_host is not None:
                if ep.host != gone_host:
                    raise Conflict(obj, f"it belongs to host {ep.host!r} now, not {gone_host!r}")
                if self._get(keys.host(gone_host)) is not None:
                    raise Conflict(obj, f"host {gone_host} is registered again")
                compares.append(_absent(keys.host(gone_host)))
            released = []
            for pid, addr in ((ep.ipv4Pool, ep.ipAddress), (ep.ipv6Pool, ep.ipv6Address)):
                if not pid or not addr:
                    continue
                akv = self._get(keys.alloc(pid, addr))
                if akv is not None and _load(akv).get("owner") == owners.endpoint(endpoint_id):
                    compares.append(_unchanged(akv))
                    ops.append(Delete(akv.key))
                    released.append((pid, ipaddress.ip_address(addr)))
            self._commit(compares, ops)
            for pid, addr in released:
                self.pools.released(pid, addr)
            return ep

        return self._retrying(obj, attempt)

    # --- raw address API (docker IPAM: RequestPool / RequestAddress) ---

    def request_pool(self, req: PoolRequest) -> dict[str, Any]:
        """Reserve a pool in an address space (a tenant); an existing identical pool is shared."""
        space = req.addressSpace or "default"
        obj = f"pool request in address space {space}"
        if req.subPool and not req.pool:
            raise BadRequest(obj, "a sub-pool (--ip-range) needs a pool (--subnet)")

        def attempt() -> dict[str, Any]:
            pools, rev = self._range(keys.POOLS + space + ":")
            taken = [(kv, _load(kv)) for kv in pools]
            try:
                if req.pool:
                    network = parse_network(req.pool, "pool", version=6 if req.v6 else None)
                else:
                    # Avoid every pool of every space: default pools become host routes.
                    used = [parse_network(_load(kv)["cidr"]) for kv in self._range(keys.POOLS)[0]]
                    candidate = next_free_pool(
                        used, DEFAULT_V6_POOLS if req.v6 else DEFAULT_V4_POOLS
                    )
                    if candidate is None:
                        raise Conflict(obj, "no free default pool left; pass --subnet")
                    network = candidate
                rng = ""
                if req.subPool:
                    sub = parse_network(req.subPool, "sub-pool", version=network.version)
                    if not sub.subnet_of(network):  # type: ignore[arg-type]
                        raise BadRequest(obj, f"sub-pool {sub} is not inside pool {network}")
                    rng = str(sub)
            except IpamError as e:
                raise BadRequest(obj, str(e)) from None
            pid = pool_id_for(space, network)
            for _, rec in taken:
                if rec["cidr"] == str(network):
                    if rng and rec.get("range") != rng:
                        raise Conflict(
                            obj, f"pool {network} already exists with a different sub-pool"
                        )
                    return {"poolID": pid, "pool": str(network), "data": {}}
                other = parse_network(rec["cidr"])
                if other.version == network.version and other.overlaps(network):
                    raise Conflict(
                        obj,
                        f"pool {network} overlaps pool {other} of "
                        f"{rec.get('network') or 'another network'}",
                    )
            rec = {"cidr": str(network), "range": rng, "network": "", "gateway": "", "name": pid}
            self._commit(
                [_absent(keys.pool(pid)), _untouched_since(keys.POOLS + space + ":", rev)],
                [Put(keys.pool(pid), _json(rec))],
            )
            return {"poolID": pid, "pool": str(network), "data": {}}

        return self._retrying(obj, attempt)

    def release_pool(self, pool_id: str) -> None:
        obj = f"pool {pool_id}"

        def attempt() -> None:
            pkv = self._get(keys.pool(pool_id))
            if pkv is None:
                raise NotFound(obj)
            if _load(pkv).get("network"):
                return  # owned by a network: released when the network is deleted
            self._commit(
                [_unchanged(pkv)], [Delete(pkv.key), Delete(keys.allocs_of(pool_id), prefix=True)]
            )
            self.pools.forget(pool_id)

        self._retrying(obj, attempt)

    def request_address(self, req: AddressRequest) -> str:
        """Allocate one address; returns it as CIDR. Idempotent by ``owner``."""
        obj = f"address request in pool {req.poolID}"

        def attempt() -> str:
            okv = self._get(keys.owner(req.owner))
            pkv = self._get(keys.pool(req.poolID))
            if pkv is None:
                raise NotFound(f"pool {req.poolID}")
            spec = pool_spec(req.poolID, _load(pkv))
            if okv is not None:
                prev = _load(okv)
                if prev["pool"] == req.poolID:
                    return f"{prev['address']}/{spec.network.prefixlen}"
                raise Conflict(
                    obj, f"owner {req.owner} already holds an address in pool {prev['pool']}"
                )
            prec = _load(pkv)
            gateway = prec.get("gateway")
            if req.kind == "gateway" and gateway and req.address in ("", gateway):
                # The network's own gateway (every host's docker network of it asks for it).
                return f"{gateway}/{spec.network.prefixlen}"
            compares: list[Compare] = [_absent(keys.owner(req.owner))]
            claims: list[tuple[str, IPAddr]] = []
            try:
                addr = self._claim(obj, req.poolID, req.address, None, compares, claims)
                value = _json({"owner": req.owner, "kind": req.kind})
                ops: list[Op] = [
                    Put(keys.alloc(req.poolID, str(addr)), value),
                    Put(keys.owner(req.owner), _json({"pool": req.poolID, "address": str(addr)})),
                ]
                res = self.store.txn(compares, ops)
            except BaseException:
                for pid, a in claims:
                    self.pools.unclaim(pid, a)
                raise
            if res.succeeded:
                return f"{addr}/{spec.network.prefixlen}"
            self._settle_claims(obj, claims, {req.poolID: req.address})
            raise _Retry

        return self._retrying(obj, attempt)

    def release_address(self, req: AddressRelease) -> bool:
        obj = f"address {req.address} in pool {req.poolID}"
        try:
            addr = parse_address(req.address, "address")
        except IpamError as e:
            raise BadRequest(obj, str(e)) from None

        def attempt() -> bool:
            akv = self._get(keys.alloc(req.poolID, str(addr)))
            if akv is None:
                return False
            rec = _load(akv)
            ops: list[Op] = [Delete(akv.key)]
            if (holder := owners.endpoint_of(rec.get("owner", ""))) is not None:
                raise Conflict(obj, f"it belongs to endpoint {holder}; delete the endpoint")
            if rec.get("owner") == owners.NETWORK_GATEWAY:
                return False  # the network's gateway lives as long as the network
            okey = keys.owner(rec["owner"])
            if self._get(okey) is not None:
                ops.append(Delete(okey))
            self._commit([_unchanged(akv)], ops)
            self.pools.released(req.poolID, addr)
            return True

        return self._retrying(obj, attempt)


def _addressing(n: Network) -> tuple[Any, ...]:
    return (n.subnet, n.gateway, n.ipv6Subnet, n.ipv6Gateway, n.encap, n.pktTag)


def _tail(kv: KV) -> str:
    return kv.key.rsplit("/", 1)[1]


def _tail_pool(kv: KV) -> str:
    return kv.key[len(keys.POOLS) :]


def _tail_addr(kv: KV, pool_id: str) -> str:
    return kv.key[len(keys.allocs_of(pool_id)) :]


def _net_id(kv: KV) -> str:
    tenant, name = kv.key[len(keys.NETWORKS) :].split("/", 1)
    return f"{tenant}:{name}"


def _pool_bounds(ip_pool: str) -> tuple[int, int]:
    lo, hi = ip_pool.split("-")
    return int(ipaddress.ip_address(lo)), int(ipaddress.ip_address(hi))


def _count(r: tuple[int, int]) -> int:
    return r[1] - r[0] + 1


def _ranges(values: list[int]) -> str:
    """Compress sorted ints to "1-3,7" like Contiv's oper output."""
    out: list[str] = []
    for v in values:
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == v - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        elif out and "-" not in out[-1] and int(out[-1]) == v - 1:
            out[-1] = f"{out[-1]}-{v}"
        else:
            out.append(str(v))
    return ",".join(out)


def _parse_network(kv: KV) -> tuple[Network, dict[str, Any]]:
    rec = _load(kv)
    return Network.model_validate(rec["config"]), rec


def _parse_group(kv: KV) -> EndpointGroup:
    return EndpointGroup.model_validate(_load(kv)["config"])
