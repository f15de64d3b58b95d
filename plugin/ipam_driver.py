"""Docker's IPAM calls (RequestPool, RequestAddress and their releases) on the master's
allocation API, and the look-ups of an existing cluster network or endpoint group the
network driver shares.

A docker network of an endpoint group (`--ipam-opt network=N --ipam-opt group=G`) gets its
network's pool id with the group's name after an "@" (GROUP_POOL): Docker asks for an
address before the endpoint exists, and with options that do not name the group, so the
master finds the group's ip-pool in the pool id (master.decisions.pools.split_group_pool).

RequestPool sees only the --ipam-opt options, CreateNetwork only the -o ones. So at
CreateNetwork the driver binds the pool id Docker got from RequestPool (remembered here
from that call, moments before) to the pool of the network the -o options made or name
(master.decisions.bindings): with `-o tenant=T` or `-o network=N -o group=G` alone, every
address is still booked once, in the network's pool. The binding lives in the store.
"""

from __future__ import annotations

import ipaddress
import threading
from collections import OrderedDict
from typing import Any

from common import owners
from common.models import (
    AddressRelease,
    AddressRequest,
    EndpointGroup,
    PoolBinding,
    PoolRequest,
)
from common.records import NetworkRecord

from . import schemas as s
from .master_client import MasterClient, MasterError
from .options import (
    GATEWAY_REQUEST,
    MAC_OPTION,
    MIRROR_OPTION,
    SWARM_NODE_POOL,
    SWARM_SPACE,
    DriverError,
    NetworkRef,
    request_model,
    strip_len,
)

GROUP_POOL = "{pool}@{group}"  # the pool id of a group's docker network
GRANTS_KEPT = 64  # pool ids handed out and not yet bound by a CreateNetwork


def group_create_hint(tenant: str, network: str, group: str) -> str:
    """The netctl command that creates the group."""
    flag = "" if tenant == "default" else f" -t {tenant}"
    return f"netctl group create{flag} {network or 'NETWORK'} {group}"


def _named_in_node_pool(pool_id: str, address: str) -> str:
    """A swarm node's request in its pool (SWARM_NODE_POOL): the address it names, as
    "a.b.c.d/len", if it is in the pool's subnet; anything else is refused."""
    try:
        subnet = ipaddress.ip_network(pool_id[len(SWARM_NODE_POOL) :])
    except ValueError:
        raise DriverError(f"pool {pool_id} is not a swarm node's pool", 404) from None
    if not address:
        raise DriverError(
            f"pool {pool_id}: on a swarm node every address comes from the swarm manager, "
            "and this request names none"
        )
    try:
        inside = ipaddress.ip_address(address) in subnet
    except ValueError:
        inside = False
    if not inside:
        raise DriverError(f"pool {pool_id}: address {address!r} is not in {subnet}")
    return f"{address}/{subnet.prefixlen}"


class IpamDriver:
    def __init__(self, master: MasterClient, swarm: bool = False) -> None:
        self.master = master
        # Swarm mode: the manager's allocator books every address; a node's requests name
        # what it chose (see request_pool).
        self.swarm = swarm
        # CIDR -> the pool id RequestPool last handed out for it: the CreateNetwork that
        # follows binds that pool id (it carries only the CIDR).
        self._granted: OrderedDict[str, str] = OrderedDict()
        self._granting = threading.Lock()

    def _grant(self, got: dict[str, Any]) -> dict[str, Any]:
        with self._granting:
            self._granted.pop(got["Pool"], None)
            self._granted[got["Pool"]] = got["PoolID"]
            while len(self._granted) > GRANTS_KEPT:
                self._granted.popitem(last=False)
        return got

    def bind_docker_pools(self, req: s.CreateNetwork, ref: NetworkRef) -> None:
        """CreateNetwork: the pool ids Docker got for this network book in ``ref``'s pools
        (a no-op where they do already). A pool id this process did not hand out (it
        restarted between RequestPool and CreateNetwork) is left as it is."""
        for data in (*(req.IPv4Data or []), *(req.IPv6Data or [])):
            with self._granting:
                pool_id = self._granted.pop(data.Pool, None)
            if pool_id is None:
                continue
            binding = {
                "poolID": pool_id,
                "tenantName": ref.tenant,
                "networkName": ref.name,
                "groupName": ref.group,
                "dockerNetworkID": req.NetworkID,
            }
            self.master.bind_pool(request_model(PoolBinding, binding, f"docker pool {pool_id}"))

    def address_spaces(self) -> dict[str, str]:
        global_space = SWARM_SPACE if self.swarm else "default"
        return {"LocalDefaultAddressSpace": "default", "GlobalDefaultAddressSpace": global_space}

    def request_pool(self, req: s.RequestPool) -> dict[str, Any]:
        opts = req.Options or {}
        if self.swarm and req.AddressSpace != SWARM_SPACE:
            return self._swarm_node_pool(req)
        if req.SubPool and not req.Pool:
            raise DriverError("a sub-pool (--ip-range) needs a pool (--subnet)")
        space = opts.get("tenant") or "default"
        if opts.get("network"):
            return self._network_pool(space, opts["network"], str(opts.get("group") or ""), req)
        if opts.get("group"):
            self._group_without_network(space, str(opts["group"]), "--ipam-opt")
        request = request_model(
            PoolRequest,
            {
                "addressSpace": space,
                "pool": req.Pool,
                "subPool": req.SubPool,
                "v6": req.V6,
                "options": {str(k): str(v) for k, v in opts.items()},
            },
            f"pool request in address space {space}",
        )
        got = self.master.request_pool(request)
        return self._grant({"PoolID": got.pool_id, "Pool": got.pool, "Data": got.data})

    def _cluster_network(self, tenant: str, name: str) -> NetworkRecord:
        """An existing cluster network's config and oper state, or a clear refusal."""
        try:
            return self.master.network_record(tenant, name)
        except MasterError as e:
            if e.status == 404:
                raise DriverError(
                    f"network {tenant}:{name} does not exist in netmaster; "
                    "create it first (netctl net create)",
                    404,
                ) from None
            raise

    def _cluster_group(self, tenant: str, name: str, network: str, flag: str) -> EndpointGroup:
        """An existing endpoint group on ``network``, or a refusal saying what to type
        (``flag``: the docker option that named the network, -o or --ipam-opt)."""
        try:
            group = self.master.get_group(tenant, name)
        except MasterError as e:
            if e.status == 404:
                raise DriverError(
                    f"endpoint group {tenant}:{name} does not exist in netmaster; create it "
                    f"first: {group_create_hint(tenant, network, name)}",
                    404,
                ) from None
            raise
        if group.networkName != network:
            raise DriverError(
                f"endpoint group {tenant}:{name} is on network {group.networkName}, not "
                f"{network}: use {flag} network={group.networkName}"
            )
        return group

    def _group_without_network(self, tenant: str, name: str, flag: str) -> None:
        """`group=G` without `network=N`: refused, naming the group's network if it has one."""
        try:
            network = self.master.get_group(tenant, name).networkName
        except MasterError as e:
            if e.status != 404:
                raise
            raise DriverError(
                f"endpoint group {tenant}:{name} does not exist in netmaster; create it first "
                f"({group_create_hint(tenant, '', name)}) and name its network too: "
                f"{flag} network=NETWORK {flag} group={name}",
                404,
            ) from None
        raise DriverError(
            f"option group={name} needs its network too: {flag} network={network} {flag} "
            f"group={name}"
        )

    def _network_pool(
        self, tenant: str, name: str, group: str, req: s.RequestPool
    ) -> dict[str, Any]:
        """`--ipam-opt network=NAME`: the pool the cluster network already has; with
        `--ipam-opt group=G`, that pool as the group's (GROUP_POOL)."""
        record = self._cluster_network(tenant, name)
        if group:
            self._cluster_group(tenant, group, name, "--ipam-opt")
        pool_id = record.pool(6 if req.V6 else 4)
        subnet = record.config.ipv6Subnet if req.V6 else record.config.subnet
        if not pool_id or (req.Pool and req.Pool != subnet):
            family = "IPv6" if req.V6 else "IPv4"
            raise DriverError(
                f"network {tenant}:{name} has {family} subnet {subnet or 'none'}, "
                f"not {req.Pool or 'a default one'}"
            )
        if group:
            pool_id = GROUP_POOL.format(pool=pool_id, group=group)
        got = {"PoolID": pool_id, "Pool": subnet, "Data": {}}
        if (req.Options or {}).get(MIRROR_OPTION):
            # The agent's docker copy of the network: its pool id books there already, and a
            # grant would take the place of another RequestPool's for the same subnet whose
            # CreateNetwork has yet to come (a user's docker network for this cluster
            # network, made while the agent makes its copy).
            return got
        return self._grant(got)  # its CreateNetwork checks -o against --ipam-opt by binding

    def _swarm_node_pool(self, req: s.RequestPool) -> dict[str, Any]:
        """A swarm node's pool for a network the manager allocated: every address in it was
        booked by the manager's allocator (the endpoint is refused if not), so the node's
        requests only name them again, and its releases are no-ops (the manager's free)."""
        if not req.Pool:
            raise DriverError("a swarm node's pool request names no subnet", 400)
        return {"PoolID": SWARM_NODE_POOL + req.Pool, "Pool": req.Pool, "Data": {}}

    def release_pool(self, req: s.ReleasePool) -> dict[str, Any]:
        if req.PoolID.startswith(SWARM_NODE_POOL):
            return {}
        try:
            self.master.release_pool(req.PoolID)
        except MasterError as e:
            if e.status != 404:
                raise
        return {}

    def request_address(self, req: s.RequestAddress) -> dict[str, Any]:
        opts = req.Options or {}
        address = strip_len(req.Address)
        if req.PoolID.startswith(SWARM_NODE_POOL):
            return {"Address": _named_in_node_pool(req.PoolID, address)}
        kind = "gateway" if opts.get("RequestAddressType") == GATEWAY_REQUEST else ""
        if self.swarm and not kind:
            kind = "swarm"  # a task's or a VIP's, or an attachable container's (the manager's)
        # The owner makes a retried request get the same address: derive it from what
        # identifies the request, and fall back to a fresh one only when nothing does.
        if kind == "swarm":
            owner = owners.SWARM
        elif kind:
            owner = owners.docker_gateway(req.PoolID, address)
        elif address:
            owner = owners.docker_static(req.PoolID, address)
        elif opts.get(MAC_OPTION):
            owner = owners.docker_mac(req.PoolID, opts[MAC_OPTION])
        else:
            owner = owners.docker_anonymous()
        got = self.master.request_address(
            request_model(
                AddressRequest,
                {"poolID": req.PoolID, "address": address, "owner": owner, "kind": kind},
                f"address request in pool {req.PoolID}",
            )
        )
        if not got:
            raise DriverError(f"netmaster returned no address from pool {req.PoolID}", 500)
        return {"Address": got, "Data": {}}

    def release_address(self, req: s.ReleaseAddress) -> dict[str, Any]:
        if req.PoolID.startswith(SWARM_NODE_POOL):
            return {}  # the manager's allocator frees it (its endpoint is gone already)
        try:
            self.master.release_address(
                request_model(
                    AddressRelease,
                    {"poolID": req.PoolID, "address": strip_len(req.Address)},
                    f"address {req.Address} of pool {req.PoolID}",
                )
            )
        except MasterError as e:
            if e.status != 404:
                raise
        return {}
