"""Swarm mode's network calls (the driver's half; the IPAM's is in plugin/ipam_driver.py):
the manager's allocator allocates and frees a swarm network (AllocateNetwork, FreeNetwork,
on the leader's plugin), and each node plugs the network the manager named
(CreateNetwork). See docs/DESIGN.md, "Swarm mode"."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from common.models import NAME_RE, Network

from . import schemas as s
from .ipam_driver import IpamDriver
from .master_client import MasterClient, MasterError
from .options import DriverError, NetworkRef, option_ref

log = logging.getLogger(__name__)

# AllocateNetwork's answer for a network netplugin refused: the reason, for every node.
REFUSED_OPTION = "netplugin.refused"
REFUSALS = (400, 404, 409)  # the request's fault, not the master's or the network's


class SwarmNetworks(IpamDriver):
    """The network driver's swarm calls; plugin.driver.Driver provides what it uses of a
    driver: the networks it knows, making a cluster network, and asking dockerd."""

    _networks: dict[str, NetworkRef]

    def _make_network(
        self, req: s.CreateNetwork, generic: dict[str, Any], internal: bool
    ) -> NetworkRef:
        raise NotImplementedError

    def _ask_docker(self, network_id: str) -> str | None:
        raise NotImplementedError

    def allocate_network(self, req: s.AllocateNetwork) -> dict[str, Any]:
        """A swarm network (`docker network create --scope swarm` on a manager): made in the
        cluster as CreateNetwork makes a docker network, or the existing one `-o network=`
        names. The answer becomes every node's CreateNetwork options: the -o options, and
        the cluster network's tenant and name, so that nodes need no lookup. A new leader
        replays it with that answer: the network is found again."""
        if not self.swarm:
            raise DriverError("AllocateNetwork: this agent is not in swarm mode (NETPLUGIN_SWARM)")
        generic = {str(k): str(v) for k, v in (req.Options or {}).items()}
        generic.pop(REFUSED_OPTION, None)  # a replay tries again
        try:
            ref = self._allocate(req, generic)
        except (DriverError, MasterError) as e:
            if e.status not in REFUSALS:
                raise  # the master away: swarm tries the allocation again
            # Swarm shows an allocation's failure only in the manager's log, and keeps the
            # network: it is allocated with the refusal instead, which every node's
            # CreateNetwork repeats, so `docker service ps` shows it on each task (and
            # `docker network inspect` among the options).
            log.warning("swarm network %s refused: %s", req.NetworkID, e)
            return {"Options": {**generic, REFUSED_OPTION: str(e)}}
        self._networks[req.NetworkID] = ref
        return {"Options": {**generic, **_ref_options(ref)}}

    def _allocate(self, req: s.AllocateNetwork, generic: dict[str, str]) -> NetworkRef:
        ref = option_ref(generic) or self._made_for(req.NetworkID)
        as_created = s.CreateNetwork(
            NetworkID=req.NetworkID, IPv4Data=req.IPv4Data, IPv6Data=req.IPv6Data
        )
        if ref is None:
            name = generic.get("name") or self._swarm_name(req.NetworkID)
            return self._make_network(as_created, {**generic, "name": name}, False)
        self._make_network(as_created, {**generic, **_ref_options(ref)}, False)
        return ref

    def _swarm_name(self, network_id: str) -> str:
        """The swarm network's name, asked of this manager's dockerd (it stores the network
        before allocating it); its ID's start if dockerd does not say within 5 s."""
        deadline = time.monotonic() + 5.0
        while True:
            docker = self._ask_docker(network_id)
            if docker and NAME_RE.match(docker):
                return docker
            if docker or time.monotonic() >= deadline:
                why = f"its name {docker!r} is not" if docker else "dockerd did not give"
                log.warning(
                    "swarm network %s: %s a netplugin network name; it is %s in netctl",
                    network_id,
                    why,
                    network_id[:12],
                )
                return network_id[:12]
            time.sleep(0.2)

    def _made_for(self, network_id: str) -> NetworkRef | None:
        """The cluster network made for docker network ``network_id``, if any."""
        for n in self.master.list_networks():
            if n.dockerNetworkID == network_id:
                return NetworkRef(n.tenantName, n.networkName)
        return None

    def _swarm_network(self, network_id: str, generic: dict[str, Any]) -> NetworkRef:
        """A node's CreateNetwork: the cluster network (and endpoint group) the manager's
        answer names, which must exist."""
        if generic.get(REFUSED_OPTION):
            raise DriverError(
                f"netplugin refused this swarm network when it was created: "
                f"{generic[REFUSED_OPTION]}; remove it (docker network rm) and create it again"
            )
        ref = option_ref(generic) or self._made_for(network_id)
        if ref is None:
            raise DriverError(
                f"swarm network {network_id} is not known to netmaster (allocated while the "
                "manager's netplugin was not in swarm mode?); remove it and create it again"
            )
        self._cluster_network(ref.tenant, ref.name)
        if ref.group:
            self._cluster_group(ref.tenant, ref.group, ref.name, "-o")
        return ref

    def free_network(self, req: s.FreeNetwork) -> dict[str, Any]:
        """`docker network rm` of a swarm network: the cluster network made for it goes (one
        it was bound to, `-o network=`, stays)."""
        if not self.swarm:
            return {}  # only swarm frees networks; a docker network is deleted at DeleteNetwork
        self._networks.pop(req.NetworkID, None)
        ref = self._made_for(req.NetworkID)
        if ref is None:
            return {}
        try:
            self.master.delete_network(ref.tenant, ref.name)
        except MasterError as e:
            if e.status == 409:
                # Swarm frees a network while its last tasks' containers may still be
                # stopping on their hosts: the sweep (SwarmSweep) deletes it once they are.
                log.info("swarm network %s freed; %s:%s goes with its last endpoint: %s",
                         req.NetworkID, ref.tenant, ref.name, e)  # fmt: skip
            elif e.status != 404:
                raise
        return {}


SWARM_ID_LEN = 25  # swarm's object ids (docker's own network ids have 64 characters)


def freed_networks(networks: Iterable[Network], swarm_ids: Collection[str]) -> list[NetworkRef]:
    """The cluster networks made for swarm networks (a swarm id as their docker network id)
    that swarm no longer has. ``networks`` must be read before ``swarm_ids``: a network
    made in between (AllocateNetwork runs once swarm stores the network) is not judged."""
    return [
        NetworkRef(n.tenantName, n.networkName)
        for n in networks
        if len(n.dockerNetworkID) == SWARM_ID_LEN and n.dockerNetworkID not in swarm_ids
    ]


class SwarmSweep:
    """Deletes the cluster networks of removed swarm networks that FreeNetwork could not
    delete yet (their endpoints were still going), or never saw (the manager's plugin was
    down then). Only on a manager, whose dockerd lists the swarm's networks."""

    def __init__(
        self, master: MasterClient, swarm_networks: Callable[[], Collection[str] | None]
    ) -> None:
        self.master = master
        self.swarm_networks = swarm_networks  # None: this dockerd is not a swarm manager

    def sweep(self) -> None:
        networks = self.master.list_networks()
        swarm_ids = self.swarm_networks()
        if swarm_ids is None:
            return
        for ref in freed_networks(networks, swarm_ids):
            try:
                self.master.delete_network(ref.tenant, ref.name)
            except MasterError as e:
                if e.status not in (404, 409):  # gone, or endpoints still going: next pass
                    raise
                continue
            log.info("network %s:%s deleted: its swarm network is gone", ref.tenant, ref.name)


def _ref_options(ref: NetworkRef) -> dict[str, str]:
    """The -o options naming a cluster network (and endpoint group)."""
    named = {"tenant": ref.tenant, "network": ref.name}
    return {**named, "group": ref.group} if ref.group else named
