"""The values stored under common.keys, as typed records with their encoding.

Every writer and reader of the cluster state goes through these: the control plane writes
them, the agent mirrors them. The encoding is compact JSON with sorted keys, so the same
record always has the same bytes (a rewrite of an unchanged record can be skipped), and it
reads every record an earlier version wrote.

| key (common.keys)          | record                                        |
|----------------------------|-----------------------------------------------|
| GLOBAL                     | ConfigRecord of GlobalSettings                |
| tenant(name)               | TenantRecord (config + tag)                   |
| tenant_tag(n)              | the owning tenant's name, bytes               |
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
| bgp_session(hostname)      | BgpSessionRecord (the agent's speaker's view) |
| LEADER                     | LeaderRecord                                  |
"""

from __future__ import annotations

import functools
import json
import operator
import re
from typing import Any, Generic, Protocol, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

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


class _Record(BaseModel):
    """A stored record: its fields, their JSON names (camelCase unless aliased) and checks
    are declared once, and it is stored as canonical JSON, a config as the REST API shows it
    ("key" included). It reads what earlier versions wrote: a null field as a missing one, a
    missing field as its default, a number where a string belongs as that string."""

    model_config = ConfigDict(
        frozen=True, populate_by_name=True, alias_generator=to_camel, coerce_numbers_to_str=True
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_missing(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            return {k: v for k, v in data.items() if v is not None}
        return data

    @field_serializer("config", check_fields=False)
    def _config(self, config: Any) -> Any:
        return config.dump()

    def encode(self) -> bytes:
        return encode(self.model_dump(by_alias=True, mode="json"))

    @classmethod
    def decode(cls, value: bytes, what: str = "") -> Self:
        what = what or _what(cls.__name__)
        try:
            return cls.model_validate(_object(value, what))
        except ValidationError as e:
            raise RecordError(f"{what}: {'; '.join(map(_problem, e.errors()))}") from None


@functools.cache
def _what(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()  # NetworkRecord: "network record"


def _problem(error: Any) -> str:
    where = ".".join(map(str, error["loc"]))
    return f"no {where}" if error["type"] == "missing" else f"{where}: {error['msg']}"


# --- configuration objects: {"config": <the object as the REST API shows it>} ---


class ConfigRecord(_Record, Generic[C]):
    """A policy, rule, netprofile, Bgp object or the global settings: only its configuration
    is stored. (A tenant's TenantRecord and an endpoint group's GroupRecord have the same
    "config", so this reads their configs too, as it reads what earlier versions wrote.)"""

    config: C

    @staticmethod
    def decode(model: type[C], value: bytes) -> ConfigRecord[C]:  # type: ignore[override]
        return super(ConfigRecord, ConfigRecord[model]).decode(value, model.__name__)


def encode_config(
    obj: Tenant | EndpointGroup | GlobalSettings | Policy | Rule | NetProfile | Bgp,
) -> bytes:
    return ConfigRecord(config=obj).encode()


def decode_config(model: type[C], value: bytes) -> C:
    return ConfigRecord.decode(model, value).config


class TenantRecord(_Record):
    """A tenant: its configuration, plus the tag the control plane gave it (its VRF's number
    in routing mode; 0 = none yet, a tenant stored before tenants had tags, as
    ``{"config": ...}``). ``decode_config(Tenant, ...)`` reads the config of it."""

    config: Tenant
    tag: int = Field(0, ge=0, strict=True)

    @property
    def id(self) -> str:
        return self.config.id


class GroupRecord(_Record):
    """An endpoint group: its configuration, plus the tag the control plane gave it (what
    the datapath marks its endpoints' packets with; 0 = none yet, a group stored before tags
    existed). ``decode_config(EndpointGroup, ...)`` reads the config of it."""

    config: EndpointGroup
    tag: int = Field(0, ge=0, strict=True)

    @property
    def id(self) -> str:
        return self.config.id


class ServiceRecord(_Record):
    """A service LB: its configuration, the VIP booked for it in its network's IPv4 pool,
    and its tag (its ports' select groups on every host are named by it)."""

    config: ServiceLB
    vip: str = Field(min_length=1, strict=True)
    tag: int = Field(gt=0, strict=True)

    @property
    def id(self) -> str:
        return self.config.id


class NetworkRecord(_Record):
    """A network: its configuration, plus what the control plane chose for it: the tag
    (VNI or VLAN id; the config's pktTag may be 0 = "pick one") and its address pools.
    A record without an encap has its config's."""

    config: Network
    encap: str = Field("", validate_default=True)
    pkt_tag: int = 0
    ipv4_pool: str = ""
    ipv6_pool: str = ""

    @field_validator("encap")
    @classmethod
    def _config_encap(cls, encap: str, info: ValidationInfo) -> str:
        return encap or getattr(info.data.get("config"), "encap", "")

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
        return self.model_copy(update={"config": config})


def encode_endpoint(ep: Endpoint) -> bytes:
    return encode(ep.dump())


def decode_endpoint(value: bytes) -> Endpoint:
    return Endpoint.model_validate(_object(value, "endpoint record"))


# --- address management ---


class PoolRecord(_Record):
    """An address pool: a network's subnet, or a pool Docker reserved (RequestPool) that no
    network owns yet. ``range`` is the sub-pool addresses are handed out from (--ip-range).

    A pool Docker reserved before its network said which pool it means (`docker network
    create -o tenant=T`, `-o network=N`) becomes an alias: ``alias`` names the pool (with
    "@group" for an endpoint group's) that Docker's pool id stands for from then on, and
    that pool lists it in ``aliases`` (deleted with it). An alias holds no addresses.
    Both are stored only when set: the records of pools without aliases keep their bytes.
    """

    cidr: str = Field(strict=True)
    range: str = ""
    network: str = ""  # the owning network's id; "" for a pool only Docker reserved
    gateway: str = ""
    name: str = ""
    # The pool id this docker pool id stands for ("" for a pool of its own).
    alias: str = Field("", exclude_if=operator.not_)
    # The docker pool ids standing for this pool (stored sorted).
    aliases: tuple[StrictStr, ...] = Field((), exclude_if=operator.not_)

    @field_serializer("aliases")
    def _sorted(self, aliases: tuple[str, ...]) -> list[str]:
        return sorted(aliases)


class AllocRecord(_Record):
    """Who holds one address of a pool (see common.owners for the owner names)."""

    owner: str = ""
    # "", "gateway" or "aux": what Docker asked the address for.
    kind: str = Field("", exclude_if=operator.not_)
    network: str = Field("", exclude_if=operator.not_)  # an endpoint address's: its network id
    # A swarm booking (owner common.owners.SWARM): the endpoint of the task using it.
    user: str = Field("", exclude_if=operator.not_)


class OwnerRecord(_Record):
    """The address an owner of a plain address request holds: requests are idempotent by
    owner, so a retried RequestAddress gets the same address."""

    pool: str = ""
    address: str = ""


# --- hosts and masters ---


class HostRecord(_Record):
    """What a host's agent publishes about itself (keys.host under its lease, and keys.vtep
    without one, so peers keep a tunnel to a host whose agent is down)."""

    host: str = ""
    vtep_ip: str = Field("", alias="vtepIP")
    ctrl_ip: str = Field("", alias="ctrlIP")
    datapath: str = ""
    uplink_mtu: int = Field(0, alias="uplinkMTU")
    vlan_if: str = ""


class BgpSessionRecord(_Record):
    """What a host's BGP speaker reports (keys.bgp_session, under the host's lease, so it
    goes with the agent): the neighbor's session state, the prefixes the host announces,
    and the routes it learned (prefix -> next hop)."""

    neighbor: str = ""
    state: str = ""
    announced: tuple[str, ...] = ()
    learned: dict[str, str] = Field(default_factory=dict)


class LeaderRecord(_Record):
    """The value of keys.LEADER (its JSON: ``model_dump()``), plus the lease and revision it
    was read with."""

    id: str
    url: str
    since: str
    lease: int = Field(0, exclude=True)
    mod_revision: int = Field(0, exclude=True)

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
    fields = {f: str(data.get(f) or "") for f in ("id", "url", "since")}
    return LeaderRecord(**fields, lease=kv.lease, mod_revision=kv.mod_revision)


def encode_leader(master_id: str, url: str, since: str) -> bytes:
    return json.dumps({"id": master_id, "url": url, "since": since}, sort_keys=True).encode()
