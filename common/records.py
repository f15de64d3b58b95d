"""The values stored under common.keys, as typed records with their encoding.

Every writer and reader of the cluster state goes through these: the control plane writes
them, the agent mirrors them. The encoding is compact JSON with sorted keys, so the same
record always has the same bytes (a rewrite of an unchanged record can be skipped), and it
reads every record an earlier version wrote.

| key (common.keys)          | record                                        |
|----------------------------|-----------------------------------------------|
| GLOBAL                     | ConfigRecord of GlobalSettings                |
| tenant(name)               | ConfigRecord of Tenant                        |
| network(tenant, name)      | NetworkRecord (config + tag and pools)        |
| group(tenant, name)        | GroupRecord (config + tag)                    |
| group_tag(n)               | the owning group's id (TENANT:NAME), bytes    |
| policy(tenant, name)       | ConfigRecord of Policy                        |
| rule(tenant, policy, id)   | ConfigRecord of Rule                          |
| netprofile(tenant, name)   | ConfigRecord of NetProfile                    |
| bgp(hostname)              | ConfigRecord of Bgp                           |
| service(tenant, name)      | ServiceRecord (config + VIP and tag)          |
| service_tag(n)             | the owning service's id (TENANT:NAME), bytes  |
| endpoint(t, n, id)         | Endpoint                                      |
| endpoint_index(id)         | the endpoint's key, as bytes                  |
| tag(encap, n)              | the owning network's id (TENANT:NAME), bytes  |
| pool(pool id)              | PoolRecord (or a docker pool id's alias)      |
| alloc(pool id, address)    | AllocRecord (who holds the address)           |
| owner(owner)               | OwnerRecord (which address an owner holds)    |
| host(name), vtep(name)     | HostRecord                                    |
| LEADER                     | LeaderRecord                                  |
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from .models import (
    Bgp,
    Endpoint,
    EndpointGroup,
    GlobalSettings,
    NetProfile,
    Network,
    Policy,
    Rule,
    ServiceLB,
    Tenant,
)

C = TypeVar("C", Tenant, Network, EndpointGroup, GlobalSettings, Policy, Rule, NetProfile, Bgp)


class KVLike(Protocol):
    """What a store entry offers (store.KV): the records need no store to be read."""

    key: str
    value: bytes
    mod_revision: int
    lease: int


class RecordError(ValueError):
    """A stored value that is not the record its key promises."""


def encode(value: Any) -> bytes:
    """The canonical bytes of a JSON value: compact, keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def decode(value: bytes, what: str = "record") -> Any:
    try:
        return json.loads(value)
    except (ValueError, UnicodeDecodeError) as e:
        raise RecordError(f"{what}: not JSON ({e})") from None


def _object(value: bytes, what: str) -> dict[str, Any]:
    data = decode(value, what)
    if not isinstance(data, dict):
        raise RecordError(f"{what}: not a JSON object")
    return data


# --- configuration objects: {"config": <the object as the REST API shows it>} ---


@dataclass(frozen=True)
class ConfigRecord(Generic[C]):
    """A tenant, policy, rule or the global settings: only its configuration is stored.
    (An endpoint group's GroupRecord has the same "config", so this reads its config too.)"""

    config: C

    def encode(self) -> bytes:
        return encode({"config": self.config.dump()})

    @staticmethod
    def decode(model: type[C], value: bytes) -> ConfigRecord[C]:
        data = _object(value, model.__name__)
        return ConfigRecord(model.model_validate(data.get("config")))


def encode_config(
    obj: Tenant | EndpointGroup | GlobalSettings | Policy | Rule | NetProfile | Bgp,
) -> bytes:
    return ConfigRecord(obj).encode()


def decode_config(model: type[C], value: bytes) -> C:
    return ConfigRecord.decode(model, value).config


@dataclass(frozen=True)
class GroupRecord:
    """An endpoint group: its configuration, plus the tag the control plane gave it (what
    the datapath marks its endpoints' packets with; 0 = none yet, a group stored before tags
    existed). ``decode_config(EndpointGroup, ...)`` reads the config of it."""

    config: EndpointGroup
    tag: int = 0

    @property
    def id(self) -> str:
        return self.config.id

    def encode(self) -> bytes:
        return encode({"config": self.config.dump(), "tag": self.tag})

    @classmethod
    def decode(cls, value: bytes) -> GroupRecord:
        data = _object(value, "endpoint group record")
        tag = data.get("tag") or 0
        if not isinstance(tag, int) or isinstance(tag, bool) or tag < 0:
            raise RecordError(f"endpoint group record: tag {tag!r} is not a tag")
        return cls(EndpointGroup.model_validate(data.get("config")), tag)


@dataclass(frozen=True)
class ServiceRecord:
    """A service LB: its configuration, the VIP booked for it in its network's IPv4 pool,
    and its tag (its ports' select groups on every host are named by it)."""

    config: ServiceLB
    vip: str
    tag: int

    @property
    def id(self) -> str:
        return self.config.id

    def encode(self) -> bytes:
        return encode({"config": self.config.dump(), "vip": self.vip, "tag": self.tag})

    @classmethod
    def decode(cls, value: bytes) -> ServiceRecord:
        data = _object(value, "service record")
        tag = data.get("tag")
        if not isinstance(tag, int) or isinstance(tag, bool) or tag <= 0:
            raise RecordError(f"service record: tag {tag!r} is not a tag")
        if not isinstance(data.get("vip"), str) or not data["vip"]:
            raise RecordError("service record: no VIP")
        return cls(ServiceLB.model_validate(data.get("config")), data["vip"], tag)


@dataclass(frozen=True)
class NetworkRecord:
    """A network: its configuration, plus what the control plane chose for it: the tag
    (VNI or VLAN id; the config's pktTag may be 0 = "pick one") and its address pools."""

    config: Network
    encap: str
    pkt_tag: int
    ipv4_pool: str = ""
    ipv6_pool: str = ""

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def pools(self) -> tuple[str, ...]:
        """The pool ids this network owns (IPv4 first)."""
        return tuple(p for p in (self.ipv4_pool, self.ipv6_pool) if p)

    def pool(self, version: int) -> str:
        return self.ipv4_pool if version == 4 else self.ipv6_pool

    def with_config(self, config: Network) -> NetworkRecord:
        return replace(self, config=config)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config.dump(),
            "encap": self.encap,
            "pktTag": self.pkt_tag,
            "ipv4Pool": self.ipv4_pool,
            "ipv6Pool": self.ipv6_pool,
        }

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NetworkRecord:
        config = Network.model_validate(data.get("config"))
        return cls(
            config=config,
            encap=str(data.get("encap") or config.encap),
            pkt_tag=int(data.get("pktTag") or 0),
            ipv4_pool=str(data.get("ipv4Pool") or ""),
            ipv6_pool=str(data.get("ipv6Pool") or ""),
        )

    @classmethod
    def decode(cls, value: bytes) -> NetworkRecord:
        return cls.from_json(_object(value, "network record"))


def encode_endpoint(ep: Endpoint) -> bytes:
    return encode(ep.dump())


def decode_endpoint(value: bytes) -> Endpoint:
    return Endpoint.model_validate(_object(value, "endpoint record"))


# --- address management ---


@dataclass(frozen=True)
class PoolRecord:
    """An address pool: a network's subnet, or a pool Docker reserved (RequestPool) that no
    network owns yet. ``range`` is the sub-pool addresses are handed out from (--ip-range).

    A pool Docker reserved before its network said which pool it means (`docker network
    create -o tenant=T`, `-o network=N`) becomes an alias: ``alias`` names the pool (with
    "@group" for an endpoint group's) that Docker's pool id stands for from then on, and
    that pool lists it in ``aliases`` (deleted with it). An alias holds no addresses.
    """

    cidr: str
    range: str = ""
    network: str = ""  # the owning network's id; "" for a pool only Docker reserved
    gateway: str = ""
    name: str = ""
    alias: str = ""  # the pool id this docker pool id stands for ("" for a pool of its own)
    aliases: tuple[str, ...] = ()  # the docker pool ids standing for this pool

    def encode(self) -> bytes:
        data: dict[str, Any] = {
            "cidr": self.cidr,
            "range": self.range,
            "network": self.network,
            "gateway": self.gateway,
            "name": self.name,
        }
        # Only when set: the records of pools without aliases keep the bytes they had.
        if self.alias:
            data["alias"] = self.alias
        if self.aliases:
            data["aliases"] = sorted(self.aliases)
        return encode(data)

    @classmethod
    def decode(cls, value: bytes) -> PoolRecord:
        data = _object(value, "pool record")
        if not isinstance(data.get("cidr"), str):
            raise RecordError("pool record: no cidr")
        aliases = data.get("aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise RecordError("pool record: aliases is not a list of pool ids")
        return cls(
            cidr=data["cidr"],
            range=str(data.get("range") or ""),
            network=str(data.get("network") or ""),
            gateway=str(data.get("gateway") or ""),
            name=str(data.get("name") or ""),
            alias=str(data.get("alias") or ""),
            aliases=tuple(aliases),
        )


@dataclass(frozen=True)
class AllocRecord:
    """Who holds one address of a pool (see common.owners for the owner names)."""

    owner: str
    kind: str = ""  # "", "gateway" or "aux": what Docker asked the address for
    network: str = ""  # for endpoint addresses: the endpoint's network id

    def encode(self) -> bytes:
        data = {"owner": self.owner}
        if self.kind:
            data["kind"] = self.kind
        if self.network:
            data["network"] = self.network
        return encode(data)

    @classmethod
    def decode(cls, value: bytes) -> AllocRecord:
        data = _object(value, "address record")
        return cls(
            owner=str(data.get("owner") or ""),
            kind=str(data.get("kind") or ""),
            network=str(data.get("network") or ""),
        )


@dataclass(frozen=True)
class OwnerRecord:
    """The address an owner of a plain address request holds: requests are idempotent by
    owner, so a retried RequestAddress gets the same address."""

    pool: str
    address: str

    def encode(self) -> bytes:
        return encode({"pool": self.pool, "address": self.address})

    @classmethod
    def decode(cls, value: bytes) -> OwnerRecord:
        data = _object(value, "owner record")
        return cls(pool=str(data.get("pool") or ""), address=str(data.get("address") or ""))


# --- hosts and masters ---


@dataclass(frozen=True)
class HostRecord:
    """What a host's agent publishes about itself (keys.host under its lease, and keys.vtep
    without one, so peers keep a tunnel to a host whose agent is down)."""

    host: str
    vtep_ip: str = ""
    ctrl_ip: str = ""
    datapath: str = ""
    uplink_mtu: int = 0
    vlan_if: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "vtepIP": self.vtep_ip,
            "ctrlIP": self.ctrl_ip,
            "datapath": self.datapath,
            "uplinkMTU": self.uplink_mtu,
            "vlanIf": self.vlan_if,
        }

    def encode(self) -> bytes:
        return encode(self.to_json())

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostRecord:
        return cls(
            host=str(data.get("host") or ""),
            vtep_ip=str(data.get("vtepIP") or ""),
            ctrl_ip=str(data.get("ctrlIP") or ""),
            datapath=str(data.get("datapath") or ""),
            uplink_mtu=int(data.get("uplinkMTU") or 0),
            vlan_if=str(data.get("vlanIf") or ""),
        )

    @classmethod
    def decode(cls, value: bytes) -> HostRecord:
        return cls.from_json(_object(value, "host record"))


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    """The value of keys.LEADER, plus the lease and revision it was read with."""

    id: str
    url: str
    since: str
    lease: int = 0
    mod_revision: int = 0

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "url": self.url, "since": self.since}

    def encode(self) -> bytes:
        return encode_leader(self.id, self.url, self.since)


def parse_leader(kv: KVLike | None) -> LeaderRecord | None:
    """The leader record in ``kv``; a malformed value still counts as a record (with no URL):
    some master holds the key, and it must expire or be replaced before anyone else leads."""
    if kv is None:
        return None
    try:
        data: Any = json.loads(kv.value)
    except (ValueError, UnicodeDecodeError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    return LeaderRecord(
        id=str(data.get("id") or ""),
        url=str(data.get("url") or ""),
        since=str(data.get("since") or ""),
        lease=kv.lease,
        mod_revision=kv.mod_revision,
    )


def encode_leader(master_id: str, url: str, since: str) -> bytes:
    return json.dumps({"id": master_id, "url": url, "since": since}, sort_keys=True).encode()
