"""The cluster-state key layout. Every key lives under ROOT; names never contain ':' or '/'."""

from __future__ import annotations

ROOT = "/netplugin/"

GLOBAL = ROOT + "global"
TENANTS = ROOT + "tenants/"
NETWORKS = ROOT + "networks/"
GROUPS = ROOT + "groups/"
ENDPOINTS = ROOT + "endpoints/"  # endpoints/<tenant>/<network>/<endpoint id>
ENDPOINT_INDEX = ROOT + "epindex/"  # epindex/<endpoint id> -> endpoints key
POOLS = ROOT + "ipam/pools/"  # ipam/pools/<pool id>
ALLOC = ROOT + "ipam/alloc/"  # ipam/alloc/<pool id>/<address>
OWNERS = ROOT + "ipam/owners/"  # ipam/owners/<owner> -> {pool, address}
TAGS = ROOT + "tags/"  # tags/<vlan|vxlan>/<tag>
HOSTS = ROOT + "hosts/"
POLICIES = ROOT + "policies/"  # policies/<tenant>/<policy>
RULES = ROOT + "rules/"  # rules/<tenant>/<policy>/<rule id>
TENANT_TAGS = ROOT + "tenanttags/"  # tenanttags/<tag> -> the tenant's name
GROUP_TAGS = ROOT + "grouptags/"  # grouptags/<tag> -> the group's id (TENANT:NAME)
NETPROFILES = ROOT + "netprofiles/"  # netprofiles/<tenant>/<profile>
SERVICES = ROOT + "services/"  # services/<tenant>/<service>
SERVICE_TAGS = ROOT + "svctags/"  # svctags/<tag> -> the service's id (TENANT:NAME)
BGPS = ROOT + "bgp/"  # bgp/<hostname>
BGP_SESSIONS = ROOT + "bgpsessions/"  # bgpsessions/<hostname>, under the host's lease
LEADER = ROOT + "master/leader"


def tenant(name: str) -> str:
    return TENANTS + name


def networks_of(tenant_name: str) -> str:
    return f"{NETWORKS}{tenant_name}/"


def network(tenant_name: str, name: str) -> str:
    return f"{NETWORKS}{tenant_name}/{name}"


def groups_of(tenant_name: str) -> str:
    return f"{GROUPS}{tenant_name}/"


def group(tenant_name: str, name: str) -> str:
    return f"{GROUPS}{tenant_name}/{name}"


def policies_of(tenant_name: str) -> str:
    return f"{POLICIES}{tenant_name}/"


def policy(tenant_name: str, name: str) -> str:
    return f"{POLICIES}{tenant_name}/{name}"


def rules_of_tenant(tenant_name: str) -> str:
    return f"{RULES}{tenant_name}/"


def rules_of(tenant_name: str, policy_name: str) -> str:
    return f"{RULES}{tenant_name}/{policy_name}/"


def rule(tenant_name: str, policy_name: str, rule_id: str) -> str:
    return f"{RULES}{tenant_name}/{policy_name}/{rule_id}"


def netprofiles_of(tenant_name: str) -> str:
    return f"{NETPROFILES}{tenant_name}/"


def netprofile(tenant_name: str, name: str) -> str:
    return f"{NETPROFILES}{tenant_name}/{name}"


def services_of(tenant_name: str) -> str:
    return f"{SERVICES}{tenant_name}/"


def service(tenant_name: str, name: str) -> str:
    return f"{SERVICES}{tenant_name}/{name}"


def bgp(hostname: str) -> str:
    """A host's Bgp object (its peering with its router): at most one per host."""
    return BGPS + hostname


def bgp_session(hostname: str) -> str:
    """What the host's BGP speaker reports of its peering, under the host's lease."""
    return BGP_SESSIONS + hostname


def service_tag(value: int) -> str:
    """A service's tag (1..2**27-1): the datapath's select groups of its ports are named by it."""
    return f"{SERVICE_TAGS}{value}"


def tenant_tag(value: int) -> str:
    """A tenant's tag (1..2**14-1, its VRF's number in routing mode)."""
    return f"{TENANT_TAGS}{value}"


def group_tag(value: int) -> str:
    """A group's tag (1..2**31-1, what the datapath marks its endpoints' packets with)."""
    return f"{GROUP_TAGS}{value}"


def endpoints_of(tenant_name: str, network_name: str) -> str:
    return f"{ENDPOINTS}{tenant_name}/{network_name}/"


def endpoint(tenant_name: str, network_name: str, endpoint_id: str) -> str:
    return f"{ENDPOINTS}{tenant_name}/{network_name}/{endpoint_id}"


def endpoint_index(endpoint_id: str) -> str:
    return ENDPOINT_INDEX + endpoint_id


def pool(pool_id: str) -> str:
    return POOLS + pool_id


def allocs_of(pool_id: str) -> str:
    return f"{ALLOC}{pool_id}/"


def alloc(pool_id: str, address: str) -> str:
    return f"{ALLOC}{pool_id}/{address}"


def owner(owner_id: str) -> str:
    return OWNERS + owner_id


def tags_of(encap: str) -> str:
    return f"{TAGS}{encap}/"


def tag(encap: str, value: int) -> str:
    return f"{TAGS}{encap}/{value}"


def host(name: str) -> str:
    """A live agent's registration: JSON {"host", "vtepIP", ...}, attached to its lease."""
    return HOSTS + name


VTEPS = ROOT + "vteps/"


def vtep(name: str) -> str:
    """A host's VTEP address, kept after its registration lapses: peers keep a tunnel to a
    host whose agent is down while it still has endpoints."""
    return VTEPS + name
