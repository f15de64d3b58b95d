"""What the datapath agent does to the world, as small interfaces.

HostDatapath decides; these act. The real implementations are thin and tested against the
real thing in integration/: NetlinkLinks (datapath.veth), Ovs (datapath.ovs), Iptables
(datapath.hostnat), FlowController (datapath.ofapp) and KernelRoutes (datapath.kroutes,
not used by the agent yet). Unit tests hand the agent fakes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from datapath.flows import Flow, FlowDiff
from datapath.hostnat import GatewayNet
from datapath.netns import NetnsInterface, NetnsRoute
from datapath.ovs import PortInfo
from datapath.ports import PublishedPort
from datapath.veth import Into


class Links(Protocol):
    """Kernel network interfaces: endpoint veths and the addresses of gateway ports."""

    def create_veth(self, endpoint_id: str, mac: str, mtu: int) -> tuple[str, str]:
        """Create the endpoint's pair (kept if complete); (host end, container end)."""
        ...

    def create_veth_in_netns(
        self, endpoint_id: str, mac: str, mtu: int, into: Into, tx_offload: bool
    ) -> str:
        """Create the endpoint's pair with its container end made in ``into``'s namespace
        under ``into.name`` (kept if complete: a retry); the host end."""
        ...

    def move_to_netns(self, ifname: str, into: Into) -> None:
        """Move this host's ``ifname`` into ``into``'s namespace as ``into.name`` (down,
        renamed in the move); raises OSError if it cannot."""
        ...

    def delete_veth(self, endpoint_id: str) -> bool:
        """Remove the endpoint's pair; False if it was not there."""
        ...

    def delete_link(self, ifname: str) -> bool:
        """Remove one interface (a veth's peer goes with it); False if it was not there."""
        ...

    def host_veths(self) -> list[str]:
        """The host ends of every endpoint veth on this host."""
        ...

    def isolate_host_end(self, ifname: str) -> None:
        """Keep the host's IP stack off a switch port (idempotent)."""
        ...

    def disable_tx_offload(self, ifname: str) -> None:
        """Make the kernel finish TX checksums on an interface (userspace OVS needs it)."""
        ...

    def switch_tso(self, bridge: str) -> bool:
        """Whether ovs-vswitchd runs with userspace TSO, read from the bridge's internal
        port: it turns on that tap's TX checksumming and TSO only then."""
        ...

    def address_gateway(self, ifname: str, mtu: int, addresses: Sequence[str]) -> None:
        """Wait for a gateway port to appear, set its MTU, bring it up and make its
        addresses ("10.1.0.1/24") be there (idempotent)."""
        ...

    def forward_ipv6(self) -> None:
        """Make the host forward IPv6 (idempotent): the router port's /128s need it."""
        ...


class Ovsdb(Protocol):
    """The bridge and its ports in OVSDB."""

    def ensure_bridge(
        self, name: str, datapath_type: Any = None, *, controller: str | None = None
    ) -> bool:
        """Create the bridge or bring its settings in line (never recreated)."""
        ...

    def add_port(
        self,
        bridge: str,
        name: str,
        type: str = "",
        external_ids: Mapping[str, str] | None = None,
        mac: str | None = None,
        options: Mapping[str, str] | None = None,
    ) -> int:
        """Add the port (kept if it exists); its ofport."""
        ...

    def del_port(self, bridge: str, name: str, if_exists: bool = True) -> bool:
        """Remove the port; False if it was not there."""
        ...

    def del_ports(self, bridge: str, names: list[str]) -> int:
        """Remove whichever of these ports are there, in one transaction; how many were."""
        ...

    def list_ports(self, bridge: str) -> dict[str, PortInfo]:
        """The bridge's ports by name."""
        ...

    def ports_elsewhere(self, bridge: str) -> set[str]:
        """The names of the other bridges' ports."""
        ...


class HostNat(Protocol):
    """The host's iptables chains: NAT, isolation between networks, published ports."""

    def current(self, table: str, chain: str) -> list[str] | None:
        """The rules of one of our chains, None if it does not exist."""
        ...

    def sync(self, nets: Sequence[GatewayNet], mappings: Sequence[PublishedPort] = ()) -> bool:
        """Make our chains hold exactly the rules of these networks and mappings."""
        ...


class OpenFlow(Protocol):
    """The bridge's flows: the controller keeps them equal to the desired set."""

    def set_desired(self, flows: Iterable[Flow]) -> int:
        """Replace the desired flows (read the switch back and diff); the generation."""
        ...

    def apply(self, delta: FlowDiff) -> int:
        """Change some desired flows (only their flow-mods are sent); the generation."""
        ...

    def resync(self) -> int:
        """Read the switch back and diff it against the desired flows; the generation."""
        ...

    def wait_reconciled(self, generation: int | None = None, timeout: float = 10.0) -> Any:
        """Wait until the switch holds (at least) ``generation``; None on timeout."""
        ...


class Netns(Protocol):
    """Interfaces in the network namespaces CNI runtimes make (datapath.netns)."""

    def move_into(
        self,
        ifname: str,
        netns: str,
        name: str,
        addresses: Sequence[str],
        routes: Sequence[tuple[str, str]],
        mac: str = "",
    ) -> None:
        """Move this host's ``ifname`` into ``netns`` as ``name``, up, with ``mac`` (set
        there), addressed and with ``routes`` ((dst, gateway)) via it (an interface already
        there under ``name`` is brought in line, as is the one made there, ``ifname`` "";
        a route the namespace has via another interface is an error)."""
        ...

    def read(self, netns: str, name: str) -> NetnsInterface | None:
        """The interface ``name`` in ``netns`` (None if either is missing)."""
        ...

    def routes(self, netns: str) -> frozenset[NetnsRoute]:
        """The main routing table of ``netns`` (empty if it is missing)."""
        ...

    def remove(self, netns: str, name: str, mac: str = "", home: str = "") -> bool:
        """Delete ``name`` in ``netns`` (if its MAC is ``mac``, when given), or with
        ``home`` move it back to this host's namespace under that name (deleted if it cannot
        be); False if there was nothing of that to remove."""
        ...


class RouteTable(Protocol):
    """The host kernel's routes learned by BGP (datapath.kroutes)."""

    def replace(self, prefix: str, via: str) -> None:
        """Make ``prefix`` route via ``via`` (added, or its next hop changed)."""
        ...

    def delete(self, prefix: str) -> bool:
        """Remove our route to ``prefix``; False if it was not there."""
        ...

    def learned(self) -> dict[str, str]:
        """Our routes now in the table (prefix -> next hop)."""
        ...
