"""Who holds an address: the owner names written in AllocRecord.owner and keys.owner().

Five kinds of holder, one spelling each:
- the network's own gateway address, held for as long as the network exists;
- a service LB's VIP, held for as long as the service exists;
- an endpoint, which holds its addresses until it is deleted;
- a plain address request (Docker's RequestAddress), idempotent by its owner name: the
  driver derives the name from what identifies the request, so a retry gets the same
  address. Such an address may be adopted by the endpoint Docker creates next;
- the swarm managers' allocator (swarm mode): a task's or a service VIP's address, booked
  by the leader and used, not owned, by the endpoint a node creates for the task
  (AllocRecord.user). The allocator's release frees it.
"""

from __future__ import annotations

import uuid

NETWORK_GATEWAY = "gateway"
SWARM = "swarm"
_ENDPOINT = "ep:"
_SERVICE = "svc:"


def endpoint(endpoint_id: str) -> str:
    """The owner name of an endpoint's addresses."""
    return _ENDPOINT + endpoint_id


def endpoint_of(owner: str) -> str | None:
    """The endpoint ID an owner name stands for, or None if it is not an endpoint."""
    return owner[len(_ENDPOINT) :] if owner.startswith(_ENDPOINT) else None


def service(service_id: str) -> str:
    """The owner name of a service LB's VIP (``service_id``: TENANT:NAME)."""
    return _SERVICE + service_id


def service_of(owner: str) -> str | None:
    """The service id an owner name stands for, or None if it is not a service."""
    return owner[len(_SERVICE) :] if owner.startswith(_SERVICE) else None


def is_request(owner: str) -> bool:
    """Whether ``owner`` is a plain address request (no endpoint, gateway or service)."""
    return (
        bool(owner)
        and owner != NETWORK_GATEWAY
        and owner != SWARM
        and endpoint_of(owner) is None
        and service_of(owner) is None
    )


# --- plain address requests, as the Docker driver names them ---


def docker_gateway(pool_id: str, address: str) -> str:
    """Docker asking for a network's gateway address."""
    return f"gw:{pool_id}:{address}"


def docker_static(pool_id: str, address: str) -> str:
    """Docker asking for one given address (--ip, --aux-address)."""
    return f"addr:{pool_id}:{address}"


def docker_mac(pool_id: str, mac: str) -> str:
    """Docker asking for any address for an interface with a known MAC."""
    return f"mac:{pool_id}:{mac}"


def docker_anonymous() -> str:
    """Docker asking for any address with nothing to identify the request: a fresh name."""
    return f"req:{uuid.uuid4()}"
