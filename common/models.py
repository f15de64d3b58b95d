"""The cluster's object model: Contiv's objects with their REST field names, and the bodies
of the allocation API. Shared by the control plane, the agent and netctl; no validation
beyond field types lives here (the control plane's rules are in master/decisions/)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
NAME_RULE = "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
MAX_VLAN = 4094
MAX_VXLAN = 16777215

Name = Annotated[str, Field(min_length=1, max_length=64)]
# An AS number as Contiv sends it (a string of digits), or a JSON number; stored as a string.
AsNumber = Annotated[str, WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "integer"}]})]


class _Model(BaseModel):
    # "key" is Contiv's redundant object key: accepted, ignored, and recomputed on output.
    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    @field_validator("key", mode="before", check_fields=False)
    @classmethod
    def _ignore_key(cls, value: Any) -> None:
        return None

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json")


def group_id(tenant: str, group: str) -> str:
    """TENANT:NAME of an endpoint group ("" for no group), as the datapath names it."""
    return f"{tenant or 'default'}:{group}" if group else ""


class Tenant(_Model):
    key: str | None = Field(default=None, exclude=True)
    tenantName: Name
    defaultNetwork: str = ""

    @property
    def id(self) -> str:
        return self.tenantName

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


class Network(_Model):
    key: str | None = Field(default=None, exclude=True)
    tenantName: Name = "default"
    networkName: Name
    encap: Literal["vlan", "vxlan"] = "vxlan"
    pktTag: int = Field(default=0, ge=0, le=MAX_VXLAN)
    subnet: str = ""
    gateway: str = ""
    ipv6Subnet: str = ""
    ipv6Gateway: str = ""
    nwType: Literal["data", "infra"] = "data"
    # Set by the docker driver for networks created with `docker network create`.
    dockerNetworkID: str = ""
    internal: bool = False

    @property
    def id(self) -> str:
        return f"{self.tenantName}:{self.networkName}"

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


class EndpointGroup(_Model):
    key: str | None = Field(default=None, exclude=True)
    tenantName: Name = "default"
    groupName: Name
    networkName: Name
    ipPool: str = ""
    policies: list[str] = Field(default_factory=list)
    netProfile: str = ""
    extContractsGrps: list[str] = Field(default_factory=list)
    cfgdTag: str = ""

    @property
    def id(self) -> str:
        return f"{self.tenantName}:{self.groupName}"

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


class Policy(_Model):
    """A named set of rules; endpoint groups attach it by name (EndpointGroup.policies)."""

    key: str | None = Field(default=None, exclude=True)
    tenantName: Name = "default"
    policyName: Name

    @property
    def id(self) -> str:
        return f"{self.tenantName}:{self.policyName}"

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


class Rule(_Model):
    """One rule of a policy. An ``in`` rule matches traffic to the groups the policy is
    attached to (``from*`` select the source), an ``out`` rule traffic from them (``to*``
    select the destination). Higher priority wins; at equal priority deny wins.

    As stored (master/validate.normalize_rule): protocol is "", "tcp", "udp", "icmp" or a
    decimal IP protocol number, and the IP fields are canonical CIDRs or ""."""

    key: str | None = Field(default=None, exclude=True)
    tenantName: Name = "default"
    policyName: Name
    ruleId: Name
    direction: Literal["in", "out"] = "in"
    priority: int = Field(default=1, ge=1, le=100)
    fromEndpointGroup: str = ""
    toEndpointGroup: str = ""
    fromNetwork: str = ""
    toNetwork: str = ""
    fromIpAddress: str = ""
    toIpAddress: str = ""
    protocol: str = ""
    port: int = Field(default=0, ge=0, le=65535)
    action: Literal["allow", "deny"] = "allow"

    @field_validator("protocol", mode="before")
    @classmethod
    def _protocol_number(cls, value: Any) -> Any:
        # Contiv sends a string; a JSON number is the same protocol.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @property
    def id(self) -> str:
        return f"{self.tenantName}:{self.policyName}:{self.ruleId}"

    @property
    def policy_id(self) -> str:
        return f"{self.tenantName}:{self.policyName}"

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


class NetProfile(_Model):
    """Contiv's netprofile: what every endpoint of a group that names it may send
    (``bandwidth``, Contiv's "10kbps", "100mbps", "1gbps"; empty: unlimited, with ``burst``
    in KB) and the DSCP its IP packets are marked with (0: left as they are)."""

    key: str | None = Field(default=None, exclude=True)
    tenantName: Name = "default"
    profileName: Name
    bandwidth: str = ""
    burst: int = 0
    DSCP: int = 0

    @property
    def id(self) -> str:
        return f"{self.tenantName}:{self.profileName}"

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


class ServiceLB(_Model):
    """A service VIP on a network, load-balanced over the containers of that network whose
    labels match every selector ("app=web"); ports are "SERVICE:PROVIDER:PROTOCOL"
    ("80:8080:TCP"). ``ipAddress`` is the preferred VIP (empty: one of the network's)."""

    key: str | None = Field(default=None, exclude=True)
    tenantName: Name = "default"
    serviceName: Name
    networkName: Name
    ipAddress: str = ""
    selectors: list[str] = Field(default_factory=list)
    ports: list[str] = Field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.tenantName}:{self.serviceName}"

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


class GlobalSettings(_Model):
    key: str | None = Field(default=None, exclude=True)
    name: Literal["global"] = "global"
    networkInfraType: Literal["default", "aci", "aci-opflex"] = "default"
    vlans: str = "1-4094"
    vxlans: str = "1-10000"
    fwdMode: Literal["bridge", "routing"] = "bridge"
    arpMode: Literal["proxy", "flood"] = "proxy"
    pvtSubnet: str = "172.19.0.0/16"

    def dump(self) -> dict[str, Any]:
        return {"key": "global", **super().dump()}


class Bgp(_Model):
    """Contiv's Bgp: how one host (``hostname``, the key) peers with its top-of-rack router
    in routing mode. ``routerip`` is the host's own address on the router's link with its
    prefix length ("50.1.1.1/24"), ``as`` the host's AS number, ``neighbor`` the router's
    address and ``neighbor-as`` its AS. ``routeripv6`` (ours, optional) is the host's IPv6
    address on that link ("2001:db8::1/64"): the next hop of its containers' /128s. Contiv
    sends the AS numbers as strings; a JSON number is taken too. As stored
    (master/decisions/bgp.normalize_bgp) every field is canonical: the CIDRs as ipaddress
    spells them, the AS numbers in decimal."""

    # Only Contiv's names in a body ("as", "neighbor-as"), never the Python ones.
    model_config = ConfigDict(populate_by_name=False)

    key: str | None = Field(default=None, exclude=True)
    hostname: str = Field(min_length=1, max_length=253)
    routerip: str = ""
    routeripv6: str = ""
    as_: AsNumber = Field(default="", alias="as")
    neighbor_as: AsNumber = Field(default="", alias="neighbor-as")
    neighbor: str = ""

    @field_validator("as_", "neighbor_as", mode="before")
    @classmethod
    def _as_number(cls, value: Any) -> Any:
        # Contiv sends a string; a JSON number is the same AS.
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return value

    @property
    def id(self) -> str:
        return self.hostname

    def dump(self) -> dict[str, Any]:
        out = {"key": self.id, **super().dump()}
        if not self.routeripv6:  # Contiv's shape, unless the IPv6 extension is used
            del out["routeripv6"]
        return out


class Endpoint(_Model):
    """Read-only endpoint record; created through the allocation API."""

    key: str | None = Field(default=None, exclude=True)
    endpointID: str
    tenantName: str
    networkName: str
    groupName: str = ""
    host: str = ""
    ipAddress: str = ""
    ipv6Address: str = ""
    macAddress: str = ""
    containerID: str = ""
    containerName: str = ""
    ipv4Pool: str = ""
    ipv6Pool: str = ""
    # The container's docker labels, as its host's agent reported them (service selectors).
    labels: dict[str, str] = Field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.endpointID

    @property
    def network_id(self) -> str:
        """TENANT:NAME of the endpoint's network."""
        return f"{self.tenantName or 'default'}:{self.networkName}"

    @property
    def group_id(self) -> str:
        """TENANT:NAME of the endpoint's group ("" outside one)."""
        return group_id(self.tenantName, self.groupName)

    def dump(self) -> dict[str, Any]:
        return {"key": self.id, **super().dump()}


# --- allocation API request bodies (plugins -> master) ---

ENDPOINT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
MAC_RE = re.compile(r"^[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}$")


class EndpointRequest(_Model):
    endpointID: str
    tenantName: Name = "default"
    networkName: Name
    groupName: str = ""
    host: str = ""
    ipAddress: str = ""  # a static request (no prefix length), or empty for dynamic
    ipv6Address: str = ""
    macAddress: str = ""
    containerID: str = ""
    containerName: str = ""
    labels: dict[str, str] = Field(default_factory=dict)  # known at creation for CNI pods
    # Docker asks for the address (RequestAddress) before creating the endpoint: with this
    # set, a static address held by a plain IPAM owner is handed over to the endpoint.
    adoptAddress: bool = False
    # Swarm mode: the address was booked by the swarm manager's allocator; the endpoint
    # uses that booking and is refused without one.
    swarmTask: bool = False

    @field_validator("endpointID")
    @classmethod
    def _eid(cls, v: str) -> str:
        if not ENDPOINT_ID_RE.match(v):
            raise ValueError("must be 1-128 letters, digits, '_', '.' or '-'")
        return v

    @field_validator("macAddress")
    @classmethod
    def _mac(cls, v: str) -> str:
        # Every agent programs flows with it: a bad one would break them all.
        if v and not MAC_RE.match(v):
            raise ValueError("must be a MAC address like 02:42:0a:01:00:05 (or empty)")
        if v and int(v[:2], 16) & 1:
            raise ValueError(f"{v} is a multicast address; an endpoint needs a unicast one")
        return v


class EndpointContainer(_Model):
    """What an agent learnt from its dockerd of the container an endpoint belongs to."""

    containerID: str = ""
    containerName: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class AddressRequest(_Model):
    poolID: str
    address: str = ""  # static request, or empty for the next free address
    owner: str  # idempotency key: a retried request with the same owner gets the same address
    # "swarm": the swarm allocator's (books, or finds its booking of ``address`` again);
    # owner must then be common.owners.SWARM.
    kind: Literal["", "gateway", "aux", "swarm"] = ""


class AddressRelease(_Model):
    poolID: str
    address: str


class PoolRequest(_Model):
    addressSpace: str = ""
    pool: str = ""
    subPool: str = ""
    v6: bool = False
    options: dict[str, str] = Field(default_factory=dict)


class PoolBinding(_Model):
    """A docker network's pool id (RequestPool's) bound, at CreateNetwork, to the pool of the
    network its -o options made or name: one booking per address."""

    poolID: str
    tenantName: str
    networkName: str
    groupName: str = ""
    dockerNetworkID: str = ""  # the docker network binding it (its network's, if it made it)


def docker_name(tenant_name: str, name: str) -> str:
    """How a network or group appears in docker: its name, or name/tenant outside default."""
    return name if tenant_name == "default" else f"{name}/{tenant_name}"
