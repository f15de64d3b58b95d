"""Docker's IPAM calls (RequestPool, RequestAddress and their releases) on the master's
allocation API, and the look-up of an existing cluster network the network driver shares."""

from __future__ import annotations

from typing import Any

from common import owners
from common.models import AddressRelease, AddressRequest, PoolRequest
from common.records import NetworkRecord

from . import schemas as s
from .master_client import MasterClient, MasterError
from .options import GATEWAY_REQUEST, MAC_OPTION, DriverError, request_model, strip_len


class IpamDriver:
    def __init__(self, master: MasterClient) -> None:
        self.master = master

    def request_pool(self, req: s.RequestPool) -> dict[str, Any]:
        opts = req.Options or {}
        if req.SubPool and not req.Pool:
            raise DriverError("a sub-pool (--ip-range) needs a pool (--subnet)")
        space = opts.get("tenant") or "default"
        if opts.get("network"):
            return self._network_pool(space, opts["network"], req)
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
        return {"PoolID": got.pool_id, "Pool": got.pool, "Data": got.data}

    def _cluster_network(self, tenant: str, name: str) -> NetworkRecord:
        """An existing cluster network's config and oper state, or a clear refusal."""
        try:
            return self.master.inspect_network(tenant, name)
        except MasterError as e:
            if e.status == 404:
                raise DriverError(
                    f"network {tenant}:{name} does not exist in netmaster; "
                    "create it first (netctl net create)",
                    404,
                ) from None
            raise

    def _network_pool(self, tenant: str, name: str, req: s.RequestPool) -> dict[str, Any]:
        """`--ipam-opt network=NAME`: the pool the cluster network already has."""
        record = self._cluster_network(tenant, name)
        pool_id = record.pool(6 if req.V6 else 4)
        subnet = record.config.ipv6Subnet if req.V6 else record.config.subnet
        if not pool_id or (req.Pool and req.Pool != subnet):
            family = "IPv6" if req.V6 else "IPv4"
            raise DriverError(
                f"network {tenant}:{name} has {family} subnet {subnet or 'none'}, "
                f"not {req.Pool or 'a default one'}"
            )
        return {"PoolID": pool_id, "Pool": subnet, "Data": {}}

    def release_pool(self, req: s.ReleasePool) -> dict[str, Any]:
        try:
            self.master.release_pool(req.PoolID)
        except MasterError as e:
            if e.status != 404:
                raise
        return {}

    def request_address(self, req: s.RequestAddress) -> dict[str, Any]:
        opts = req.Options or {}
        address = strip_len(req.Address)
        kind = "gateway" if opts.get("RequestAddressType") == GATEWAY_REQUEST else ""
        # The owner makes a retried request get the same address: derive it from what
        # identifies the request, and fall back to a fresh one only when nothing does.
        if kind:
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
