"""Stateful fakes of the datapath agent's effects (datapath.effects): OVSDB, OpenFlow,
iptables, links and the host's ports. They keep what was done so tests assert on outcomes,
not calls."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from datapath.flows import Flow, FlowDiff
from datapath.hostnat import DNAT_CHAIN, GatewayNet, dnat_rules
from datapath.ovs import PortInfo
from datapath.portpool import PoolLink, PoolPort, Shape, container_end, is_pool_port
from datapath.ports import PortConflict, PublishedPort, overlaps
from datapath.veth import CONTAINER_PREFIX, HOST_PREFIX, Into, veth_names


class FakeOvs:
    """Ports of one bridge; add_port_error makes the next add_port(s) fail like OVS does.
    ``transactions`` counts the changes of the database (each one a reconfiguration of
    ovs-vswitchd)."""

    def __init__(self) -> None:
        self.ports: dict[str, PortInfo] = {}
        self.elsewhere: set[str] = set()  # ports of other bridges (another agent's)
        self.next_ofport = 10
        self.bridges: dict[str, dict[str, Any]] = {}
        self.add_port_error: str | None = None
        self.transactions = 0

    def ensure_bridge(
        self, name: str, datapath_type: Any = None, *, controller: str | None = None
    ) -> bool:
        created = name not in self.bridges
        self.bridges[name] = {"datapath_type": datapath_type, "controller": controller}
        return created

    def add_port(
        self,
        bridge: str,
        name: str,
        type: str = "",
        external_ids: Mapping[str, str] | None = None,
        mac: str | None = None,
        options: Mapping[str, str] | None = None,
    ) -> int:
        if self.add_port_error is not None:
            raise RuntimeError(self.add_port_error)
        self.transactions += 1
        if name not in self.ports:
            self.next_ofport += 1
            ofport: int | None = self.next_ofport
        else:  # kept, its settings brought in line (as datapath.ovs does)
            ofport = self.ports[name].ofport
        self.ports[name] = PortInfo(ofport, dict(external_ids or {}), dict(options or {}))
        return self.ports[name].ofport or 0

    def add_ports(
        self, bridge: str, names: list[str], external_ids: Mapping[str, str]
    ) -> dict[str, int]:
        if self.add_port_error is not None:
            raise RuntimeError(self.add_port_error)
        self.transactions += 1
        for name in names:
            self.next_ofport += 1
            self.ports[name] = PortInfo(self.next_ofport, dict(external_ids), {})
        return {n: self.ports[n].ofport or 0 for n in names}

    def ports_elsewhere(self, bridge: str) -> set[str]:
        return set(self.elsewhere)

    def del_port(self, bridge: str, name: str, if_exists: bool = True) -> bool:
        self.transactions += 1
        return self.ports.pop(name, None) is not None

    def del_ports(self, bridge: str, names: list[str]) -> int:
        if not names:
            return 0
        before = self.transactions
        removed = sum(self.del_port(bridge, n) for n in names)
        self.transactions = before + 1  # one transaction for them all
        return removed

    def list_ports(self, bridge: str) -> dict[str, PortInfo]:
        return dict(self.ports)


class FakeController:
    """Records the desired flows after every set_desired (full) and apply (delta)."""

    def __init__(self) -> None:
        self.pushed: list[set[Flow]] = []  # the desired flows after each call
        self.full: list[set[Flow]] = []  # what each set_desired gave
        self.deltas: list[FlowDiff] = []  # what each apply gave
        self.resyncs = 0  # full read-backs asked for
        self.waited: list[int | None] = []  # the generations waited for
        self.switch_down = False  # wait_reconciled times out

    def set_desired(self, flows: Iterable[Flow]) -> int:
        self.full.append(set(flows))
        self.pushed.append(set(flows))
        return len(self.pushed)

    def apply(self, delta: FlowDiff) -> int:
        table = {f.identity: f for f in self.pushed[-1]} if self.pushed else {}
        for f in delta.to_delete:
            del table[f.identity]  # a delta deletes only what is there
        for f in delta.to_add:
            table[f.identity] = f
        self.deltas.append(delta)
        self.pushed.append(set(table.values()))
        return len(self.pushed)

    def resync(self) -> int:
        self.resyncs += 1
        return len(self.pushed)

    def wait_reconciled(self, generation: int | None = None, timeout: float = 10.0) -> Any:
        self.waited.append(generation)
        return None if self.switch_down else object()


class FakeIptables:
    """Our chains; sync() records what it was given and rewrites the DNAT chain."""

    def __init__(self) -> None:
        self.chains: dict[str, list[str]] = {}
        self.synced: list[tuple[list[GatewayNet], list[PublishedPort]]] = []

    def current(self, table: str, chain: str) -> list[str] | None:
        return self.chains.get(chain)

    def sync(self, nets: Sequence[GatewayNet], mappings: Sequence[PublishedPort] = ()) -> bool:
        self.synced.append((list(nets), list(mappings)))
        self.chains[DNAT_CHAIN] = dnat_rules(mappings)
        return True


class FakeHostPorts:
    """The host's ephemeral range, its addresses and the ports its processes hold."""

    def __init__(self, ephemeral: tuple[int, int] = (40000, 40009)) -> None:
        self.ephemeral = ephemeral
        self.in_use: dict[tuple[str, str, int], str] = {}  # (proto, host IP or "", port) -> who
        self.addresses = {"192.0.2.2", "127.0.0.1"}

    def ephemeral_range(self) -> tuple[int, int]:
        return self.ephemeral

    def probe(self, proto: str, host_ip: str, port: int) -> str | None:
        if host_ip and host_ip not in self.addresses:
            raise PortConflict(f"{host_ip} is not an address of this host")
        for (p, ip, n), who in self.in_use.items():
            if (p, n) == (proto, port) and overlaps(ip, host_ip):
                return who
        return None


class FakeLinks:
    """The host's interfaces by name, and what was done to them; the port pool's too
    (datapath.portpool.PoolLinks): a container end Docker moved away is not in ``links``
    until it comes back."""

    def __init__(self) -> None:
        self.links: set[str] = set()
        # Host end -> where its container end was made (Into) and its TX checksumming.
        self.made_in: dict[str, tuple[Into, bool]] = {}
        self.moved: dict[str, Into] = {}  # container ends moved out, and where
        self.move_error: OSError | None = None
        self.serving: dict[str, str] = {}  # pool host end -> the endpoint (its record)
        self.claimed: dict[str, tuple[str, Shape]] = {}  # pool host end -> (ep, its shape)
        # What the pool changed on links (MTU, TX checksumming): each is a link change
        # ovs-vswitchd hears of; a port of the right shape is taken without any.
        self.link_changes: list[tuple[str, str]] = []
        self.checksum_off: set[str] = set()  # pool container ends with TX checksumming off
        self.claim_error: OSError | None = None
        self.isolated: list[str] = []
        self.offloaded: list[str] = []
        self.addressed: list[str] = []  # gateway ports, in the order they were addressed
        self.gateways: dict[str, tuple[int, tuple[str, ...]]] = {}  # name -> (MTU, addresses)
        self.isolate_error: OSError | None = None
        self.delete_error: OSError | None = None  # what deleting a link raises
        self.tso = False  # what switch_tso reports: ovs-vswitchd's userspace TSO
        self.ipv6_forwarding = False

    def create_veth(self, endpoint_id: str, mac: str, mtu: int) -> tuple[str, str]:
        host, container = veth_names(endpoint_id)
        self.links.update({host, container})
        return host, container

    def create_veth_in_netns(
        self, endpoint_id: str, mac: str, mtu: int, into: Into, tx_offload: bool
    ) -> str:
        """The host end here; the container end in ``made_in`` (not in ``links``)."""
        host = veth_names(endpoint_id)[0]
        self.links.add(host)
        self.made_in[host] = (into, tx_offload)
        return host

    def move_to_netns(self, ifname: str, into: Into) -> None:
        """Out of ``links``, into ``moved``; ``move_error`` raised instead, if set."""
        if self.move_error is not None:
            raise self.move_error
        if ifname not in self.links:
            raise OSError(19, f"interface {ifname} is not on this host")
        self.links.discard(ifname)
        self.moved[ifname] = into

    def delete_veth(self, endpoint_id: str) -> bool:
        return self.delete_link(veth_names(endpoint_id)[0])

    def delete_link(self, ifname: str) -> bool:
        if self.delete_error is not None:
            raise self.delete_error
        found = ifname in self.links
        self.links.discard(ifname)
        self.made_in.pop(ifname, None)
        self.serving.pop(ifname, None)
        if ifname.startswith(HOST_PREFIX):
            self.links.discard(
                CONTAINER_PREFIX + ifname[len(HOST_PREFIX) :]
            )  # its peer goes with it
        elif is_pool_port(ifname):
            self.links.discard(container_end(ifname))
        return found

    # --- the port pool's (datapath.portpool.PoolLinks) ---

    def create_pool_veth(self, host: str, container: str, shape: Shape) -> None:
        self.links.update({host, container})
        if shape.offloads_off:
            self.checksum_off.add(container)

    def claim(self, port: PoolPort, endpoint_id: str, shape: Shape) -> None:
        if self.claim_error is not None:
            raise self.claim_error
        if not {port.host, port.container} <= self.links:
            raise OSError(f"pool port {port.host}: its pair is not whole in this namespace")
        if port.offloads_off != shape.offloads_off:
            self.link_changes.append((port.container, "tx-checksumming"))
            if shape.offloads_off:
                self.checksum_off.add(port.container)
            else:
                self.checksum_off.discard(port.container)
        if port.mtu != shape.mtu:
            self.link_changes += [(port.container, "mtu"), (port.host, "mtu")]
        self.serving[port.host] = endpoint_id
        self.claimed[port.host] = (endpoint_id, shape)

    def release(self, port: PoolPort) -> bool:
        self.serving.pop(port.host, None)
        if port.host not in self.links:
            return False
        return port.container in self.links

    def discard(self, host: str) -> None:
        self.delete_link(host)

    def survey(self) -> dict[str, PoolLink]:
        return {
            h: PoolLink(self.serving.get(h, ""), container_end(h) in self.links)
            for h in self.links
            if is_pool_port(h)
        }

    def host_veths(self) -> list[str]:
        return sorted(n for n in self.links if n.startswith(HOST_PREFIX))

    def isolate_host_end(self, ifname: str) -> None:
        if self.isolate_error is not None:
            raise self.isolate_error
        self.isolated.append(ifname)

    def disable_tx_offload(self, ifname: str) -> None:
        self.offloaded.append(ifname)

    def switch_tso(self, bridge: str) -> bool:
        return self.tso

    def address_gateway(self, ifname: str, mtu: int, addresses: Sequence[str]) -> None:
        self.addressed.append(ifname)
        self.gateways[ifname] = (mtu, tuple(addresses))

    def forward_ipv6(self) -> None:
        self.ipv6_forwarding = True


class FakeRouteTable:
    """The kernel's learned routes (datapath.effects.RouteTable); ``fail`` makes every call
    raise, as a netlink error would."""

    def __init__(self) -> None:
        self.routes: dict[str, str] = {}
        self.fail: str | None = None

    def replace(self, prefix: str, via: str) -> None:
        if self.fail is not None:
            raise OSError(self.fail)
        self.routes[prefix] = via

    def delete(self, prefix: str) -> bool:
        if self.fail is not None:
            raise OSError(self.fail)
        return self.routes.pop(prefix, None) is not None

    def learned(self) -> dict[str, str]:
        if self.fail is not None:
            raise OSError(self.fail)
        return dict(self.routes)
