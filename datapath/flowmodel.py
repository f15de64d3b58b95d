"""The host's flows kept incrementally: a change recompiles only the flows it touches.

Flows are pure functions of the desired state (datapath.pipeline), partitioned by what they
depend on. Each *unit* owns a set of flows:

    ("net", id)       what arrives for the network from other hosts, the segment's floods
                      and flood group, its gateway port's flows and its conntrack: the
                      network, its local ports, the hosts with endpoints in it and their
                      tunnels (or uplink)
    ("ep", id)        a local endpoint's port flows and group tags: the endpoint, its
                      network, the ARP mode, its group's tag and network
    ("remote", id)    another host's endpoint: it, its network, the way to its host, the
                      ARP mode, its group's tag and network
    ("group", id)     an endpoint group's rule flows: the group (tag, rules), its network's
                      zone
    ("svc", net id)   the flows and select groups of a network's service LBs: the network
                      and its services (with their providers), never which are local
    ("static", "")    each table's miss flow, the conntrack gate: nothing
    ("routed", "")    routing mode (datapath.routing): every flow, compiled in full

Routing mode is not incremental yet: while the model's fwd_mode is "routing", every change
recompiles the whole state with compile_flows into the one "routed" unit (the other units
are empty), so it is exactly the full compile, and a change costs a full compile. Units
per VRF (its floods and conntrack span every network of a tenant) are left for when the
agent feeds routing mode.

A unit's "flows" are entries: flows, and the meters (an endpoint's, in its unit) and groups
(a network's services' select groups in its "svc" unit, its segment's flood group in its
"net" unit) they name.

The host's flows are the union of the units' sets. A Change (datapath.change: objects put
or removed) marks the units that depend on what changed, recompiles them, and the
difference between their old and new sets is the delta, a FlowDiff with
datapath.flows.diff's meaning: what to add (new or changed) and what to delete (identity no
longer wanted). One more endpoint touches its own unit and its network's, and changes its
own flows and its segment's flood group (whose buckets are the segment's endpoints): not
O(host), and no flood flow. A group's rules touch its unit alone, whatever its endpoints
(only a new tag, or a group going, touches its members).

Validation is incremental too: each object claims the keys it uses (datapath.desired), and
a change withdraws and re-adds only the claims of what it touches. A change that would
make the state invalid raises ValueError naming the object, and leaves the model as it was.
compile_flows(model.state()) == model.flows() always holds: compile_flows stays the full
path (resync) and the oracle of the tests.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from datapath.change import Change, Journal, Keep, by_key, changes, index_member
from datapath.desired import (
    ArpMode,
    Claim,
    Claims,
    DesiredState,
    EndpointState,
    FwdMode,
    NetworkState,
    RemotePort,
    SegmentPort,
    TunnelState,
    check_network,
    endpoint_claims,
    endpoint_port,
    gateway_port,
    group_claims,
    network_claims,
    port_claims,
    reaches,
    remote_owner,
    remote_port,
    service_claims,
    tunnel_claims,
    uplink_claims,
)
from datapath.flows import Entry, FlowDiff, Identity
from datapath.pipeline import (
    PIPELINE,
    compile_flows,
    endpoint_qos,
    endpoint_tags,
    flood_out,
    group_flows,
    network_flows,
    network_services,
    port_flows,
    remote_flows,
    static_flows,
    to_host,
)
from datapath.policy import GroupState
from datapath.services import ServiceState

Flow = Entry  # what a unit holds: flows, meters and groups

__all__ = ["Change", "FlowModel", "Unit", "by_key", "changes"]  # the agent's names

Unit = tuple[str, str]
STATIC: Unit = ("static", "")
ROUTED: Unit = ("routed", "")
_EMPTY: frozenset[Flow] = frozenset()


class FlowModel:
    """A host's desired state and its flows, changed by Change and kept by unit."""

    def __init__(self) -> None:
        self.networks: dict[str, NetworkState] = {}
        self.endpoints: dict[str, EndpointState] = {}
        self.remotes: dict[str, EndpointState] = {}
        self.tunnels: dict[str, int] = {}
        self.uplink: int | None = None
        self.fabric: int | None = None  # routing mode with BGP: the router port
        self.arp_mode: ArpMode = "proxy"
        self.fwd_mode: FwdMode = "bridge"
        self.groups: dict[str, GroupState] = {}
        self.services: dict[str, ServiceState] = {}
        self._claims = Claims()
        self._held: dict[tuple[str, str], list[Claim]] = {}  # object -> its claims
        self._gateways: dict[str, SegmentPort] = {}  # network id -> its gateway port
        self._ports: dict[str, SegmentPort] = {}  # local endpoint id -> its port
        self._remote_ports: dict[str, RemotePort] = {}  # remotes of local networks
        self._eps_of: dict[str, set[str]] = {}  # network id -> its local endpoints
        self._remotes_of: dict[str, set[str]] = {}  # network id -> its remote endpoints
        self._remotes_on: dict[str, set[str]] = {}  # host -> its endpoints
        self._hosts_in: dict[str, Counter[str]] = {}  # network id -> host -> endpoints
        self._groups_of: dict[str, set[str]] = {}  # network id -> its groups
        self._services_of: dict[str, set[str]] = {}  # network id -> its services
        self._members: dict[str, set[Unit]] = {}  # group id -> the units naming it
        static = frozenset(static_flows())
        self._units: dict[Unit, frozenset[Flow]] = {STATIC: static}
        self._count: Counter[Flow] = Counter(static)
        self._by_identity: dict[Identity, Flow] = {f.identity: f for f in static}
        self.last_units = 0  # how many units the last change recompiled

    # -- reading

    def flows(self) -> frozenset[Flow]:
        """Every flow of the host."""
        return frozenset(self._count)

    def state(self) -> DesiredState:
        """The model as a DesiredState (compile_flows of it gives flows())."""
        return DesiredState(
            networks=list(self.networks.values()),
            endpoints=list(self.endpoints.values()),
            remote_endpoints=list(self.remotes.values()),
            tunnels=[TunnelState(h, p) for h, p in self.tunnels.items()],
            uplink_port=self.uplink,
            fabric_port=self.fabric,
            arp_mode=self.arp_mode,
            groups=list(self.groups.values()),
            services=list(self.services.values()),
            fwd_mode=self.fwd_mode,
        )

    def change_to(self, state: DesiredState) -> Change:
        """The Change that makes the model hold ``state`` (O(state): no flow is compiled)."""
        networks = by_key(state.networks, lambda n: n.id, "network {} is listed twice")
        endpoints = by_key(state.endpoints, lambda e: e.id, "endpoint {} is listed twice")
        remotes = by_key(state.remote_endpoints, lambda r: r.id, "endpoint {} is listed twice")
        tunnels = by_key(state.tunnels, lambda t: t.host, "host {} has two tunnels")
        groups = by_key(state.groups, lambda g: g.id, "group {} is listed twice")
        services = by_key(state.services, lambda s: s.id, "service {} is listed twice")
        return Change(
            networks=changes(self.networks, networks),
            endpoints=changes(self.endpoints, endpoints),
            remotes=changes(self.remotes, remotes),
            tunnels=changes(self.tunnels, {h: t.ofport for h, t in tunnels.items()}),
            uplink=state.uplink_port,
            fabric=state.fabric_port,
            arp_mode=state.arp_mode,
            groups=changes(self.groups, groups),
            services=changes(self.services, services),
            fwd_mode=state.fwd_mode,
        )

    # -- changing

    def replace(self, state: DesiredState) -> FlowDiff:
        """Make the model hold ``state``; the delta."""
        return self.apply(self.change_to(state))

    def apply(self, change: Change) -> FlowDiff:
        """Apply a change; the flows to add and delete. Raises ValueError (and changes
        nothing) if the state would be invalid."""
        journal = Journal()
        try:
            dirty = self._mutate(change, journal)
            self._claims.check()
            if self.fwd_mode == "routing":
                # Not incremental yet (see the module's docstring): one unit, in full.
                new = dict.fromkeys(self._units, _EMPTY)
                new[ROUTED] = frozenset(compile_flows(self.state()))
            else:
                new = {unit: self._compile(unit) for unit in dirty}
            delta, gone = self._delta(new)
        except BaseException:
            journal.undo()
            raise
        self._install(new, delta, gone)
        self.last_units = len(new)
        return delta

    def _mutate(self, change: Change, journal: Journal) -> set[Unit]:
        nets = {k: v for k, v in change.networks.items() if self.networks.get(k) != v}
        eps = {k: v for k, v in change.endpoints.items() if self.endpoints.get(k) != v}
        rems = {k: v for k, v in change.remotes.items() if self.remotes.get(k) != v}
        tuns = {k: v for k, v in change.tunnels.items() if self.tunnels.get(k) != v}
        grps = {k: v for k, v in change.groups.items() if self.groups.get(k) != v}
        svcs = {k: v for k, v in change.services.items() if self.services.get(k) != v}
        for key, value in (
            *nets.items(),
            *eps.items(),
            *rems.items(),
            *grps.items(),
            *svcs.items(),
        ):
            if value is not None and value.id != key:
                raise ValueError(f"{key}: the object put there is {value.id}")
        uplink = change.uplink if not isinstance(change.uplink, Keep) else self.uplink
        fabric = change.fabric if not isinstance(change.fabric, Keep) else self.fabric
        mode = change.arp_mode or self.arp_mode
        fwd_mode = change.fwd_mode or self.fwd_mode
        dirty: set[Unit] = set()
        if fwd_mode != self.fwd_mode:
            # Every unit changes hands between the modes; networks are checked again.
            dirty.update({STATIC, ROUTED})
            dirty.update(("group", g) for g in self.groups)
            dirty.update(("svcnet", n) for n in self._services_of)
            nets = {**self.networks, **nets}
        if (uplink, mode, fwd_mode, fabric) != self._settings():
            # Rare, and most flows depend on them: recompile everything.
            dirty.update(self._units)
            dirty.update(("net", n) for n in self.networks)
            dirty.update(("ep", e) for e in self.endpoints)
            dirty.update(("remote", r) for r in self.remotes)
        # The claims of what changes, and of what depends on a changed network, are
        # withdrawn under the old state and made again under the new one.
        local = set(eps)
        remote = set(rems)
        groups = set(grps)
        services = set(svcs)
        for n in nets:
            local |= self._eps_of.get(n, set())
            remote |= self._remotes_of.get(n, set())
            groups |= self._groups_of.get(n, set())
            services |= self._services_of.get(n, set())
        objects = [
            *(("net", n) for n in nets),
            *(("ep", e) for e in sorted(local)),
            *(("remote", r) for r in sorted(remote)),
            *(("group", g) for g in sorted(groups)),
            *(("svc", v) for v in sorted(services)),
            *(("tunnel", h) for h in tuns),
            *([("uplink", "")] if uplink != self.uplink else []),
            *([("fabric", "")] if fabric != self.fabric else []),
        ]
        for obj in objects:
            self._withdraw(obj, journal)
        for n, net in nets.items():
            journal.put(self.networks, n, net)
            dirty.add(("net", n))
            if self._services_of.get(n) or ("svcnet", n) in self._units:
                dirty.add(("svcnet", n))
        for e, ep in eps.items():
            old = self.endpoints.get(e)
            journal.put(self.endpoints, e, ep)
            for version, add in ((old, False), (ep, True)):
                if version is not None:
                    self._reindex(journal, self._eps_of, version.network_id, e, add)
                    dirty.add(("net", version.network_id))
                    if version.group:
                        self._reindex(journal, self._members, version.group, ("ep", e), add)
        for r, rep in rems.items():
            self._put_remote(r, rep, journal, dirty)
        for g, grp in grps.items():
            old_group = self.groups.get(g)
            journal.put(self.groups, g, grp)
            for version, add in ((old_group, False), (grp, True)):
                if version is not None:
                    self._reindex(journal, self._groups_of, version.network_id, g, add)
            if _tagging(old_group) != _tagging(grp):  # what its members' tag flows say
                dirty.update(self._members.get(g, ()))
        for v, svc in svcs.items():
            old_svc = self.services.get(v)
            journal.put(self.services, v, svc)
            for version, add in ((old_svc, False), (svc, True)):
                if version is not None:
                    self._reindex(journal, self._services_of, version.network_id, v, add)
                    dirty.add(("svcnet", version.network_id))
        for h, ofport in tuns.items():
            journal.put(self.tunnels, h, ofport)
            for rid in self._remotes_on.get(h, ()):
                dirty.update({("remote", rid), ("net", self.remotes[rid].network_id)})
        old = self.uplink, self.arp_mode, self.fwd_mode, self.fabric
        self.uplink, self.arp_mode, self.fwd_mode, self.fabric = uplink, mode, fwd_mode, fabric

        def restore() -> None:
            self.uplink, self.arp_mode, self.fwd_mode, self.fabric = old

        journal.steps.append(restore)
        for obj in objects:
            self._claim(obj, journal)
        dirty.update(("ep", e) for e in local)
        dirty.update(("remote", r) for r in remote)
        dirty.update(("group", g) for g in groups)
        return dirty

    def _put_remote(
        self, r: str, rep: EndpointState | None, journal: Journal, dirty: set[Unit]
    ) -> None:
        old = self.remotes.get(r)
        journal.put(self.remotes, r, rep)
        for version, add in ((old, False), (rep, True)):
            if version is None:
                continue
            self._reindex(journal, self._remotes_of, version.network_id, r, add)
            self._reindex(journal, self._remotes_on, version.host, r, add)
            if version.group:
                self._reindex(journal, self._members, version.group, ("remote", r), add)
            hosts = self._hosts_in.get(version.network_id, Counter())
            before = hosts[version.host] > 0
            hosts = (
                hosts + Counter({version.host: 1}) if add else hosts - Counter({version.host: 1})
            )
            journal.put(self._hosts_in, version.network_id, hosts or None)
            if before != (hosts[version.host] > 0):
                dirty.add(("net", version.network_id))  # the hosts its floods reach changed

    def _reindex(
        self, journal: Journal, table: dict[str, set[Any]], key: str, member: Any, add: bool
    ) -> None:
        index_member(table, key, member, add)
        journal.steps.append(lambda: index_member(table, key, member, not add))

    def _withdraw(self, obj: tuple[str, str], journal: Journal) -> None:
        held = self._held.get(obj)
        if held is None:
            return
        self._claims.remove(held)
        journal.steps.append(lambda: self._claims.add(held))
        journal.put(self._held, obj, None)

    def _claim(self, obj: tuple[str, str], journal: Journal) -> None:
        """Work out what an object uses under the current state, and claim it."""
        kind, key = obj
        claims: list[Claim] = []
        if kind == "net":
            net = self.networks.get(key)
            gateway = None
            if net is not None:
                check_network(net, self.fwd_mode)
                gateway = gateway_port(net)
                claims = network_claims(net, gateway)
            journal.put(self._gateways, key, gateway)
        elif kind == "ep":
            ep = self.endpoints.get(key)
            port = None
            if ep is not None:
                net = self.networks.get(ep.network_id)
                if net is None:
                    raise ValueError(f"endpoint {ep.id}: network {ep.network_id} is unknown")
                port = endpoint_port(ep, net)
                claims = endpoint_claims(ep.id, port.owner) + port_claims(port)
            journal.put(self._ports, key, port)
        elif kind == "remote":
            rep = self.remotes.get(key)
            remote = None
            if rep is not None:
                claims = endpoint_claims(rep.id, remote_owner(rep))
                net = self.networks.get(rep.network_id)
                if net is not None:
                    remote, addresses = remote_port(rep, net)
                    claims += addresses
            journal.put(self._remote_ports, key, remote)
        elif kind == "group":
            if key in self.groups:
                claims = group_claims(self.groups[key], self.networks)
        elif kind == "svc":
            if key in self.services:
                claims = service_claims(self.services[key], self.networks)
        elif kind == "tunnel":
            if key in self.tunnels:
                claims = tunnel_claims(TunnelState(key, self.tunnels[key]))
        elif kind == "fabric":
            if self.fabric is not None:
                claims = uplink_claims(self.fabric, "fabric port")
        elif self.uplink is not None:
            claims = uplink_claims(self.uplink)
        if claims:
            self._claims.add(claims)
            journal.steps.append(lambda: self._claims.remove(claims))
            journal.put(self._held, obj, claims)

    def _settings(self) -> tuple[int | None, ArpMode, FwdMode, int | None]:
        return self.uplink, self.arp_mode, self.fwd_mode, self.fabric

    # -- compiling

    def _compile(self, unit: Unit) -> frozenset[Flow]:
        kind, key = unit
        flows: Iterable[Flow] = ()
        if kind == "net" and key in self.networks:
            net = self.networks[key]
            gateway = self._gateways.get(key)
            ports = [self._ports[e] for e in self._eps_of.get(key, ())]
            if gateway is not None:
                ports.append(gateway)
            ports.sort(key=lambda p: p.ofport)
            hosts = [
                h for h in self._hosts_in.get(key, {}) if reaches(net, h, self.tunnels, self.uplink)
            ]
            out = flood_out(net, hosts, self.tunnels, self.uplink)
            flows = [*network_flows(net, ports, out, self.uplink)]
            if gateway is not None:
                flows += port_flows(gateway, self.arp_mode)
        elif kind == "ep" and key in self._ports:
            port = self._ports[key]
            net = self.networks[self.endpoints[key].network_id]
            tags = endpoint_tags(net, port.mac, port.group, self.groups, True)
            qos = endpoint_qos(port, net, self.groups)
            flows = [*port_flows(port, self.arp_mode, qos), *tags]
        elif kind == "remote" and key in self._remote_ports:
            remote = self._remote_ports[key]
            net, host = remote.network, remote.host
            if reaches(net, host, self.tunnels, self.uplink):
                to = to_host(net, host, self.tunnels, self.uplink)
                flows = [
                    *remote_flows(remote, to, self.arp_mode),
                    *endpoint_tags(net, remote.mac, remote.group, self.groups, False),
                ]
        elif kind == "group" and key in self.groups:
            group = self.groups[key]
            flows = group_flows(group, self.networks.get(group.network_id))
        elif kind == "svcnet" and key in self.networks:
            on_net = sorted(self._services_of.get(key, ()))
            flows = network_services(self.networks[key], [self.services[v] for v in on_net])
        elif kind == "static":
            return frozenset(static_flows())
        result = frozenset(flows)
        PIPELINE.check_all(result)
        return result

    def _delta(self, new: Mapping[Unit, frozenset[Flow]]) -> tuple[FlowDiff, set[Flow]]:
        """What the union of the units gains and loses (the delta, and every flow that
        goes, replaced ones included); refuses two flows of one identity."""
        leaving: Counter[Flow] = Counter()
        entering: Counter[Flow] = Counter()
        for unit, flows in new.items():
            old = self._units.get(unit, _EMPTY)
            leaving.update(old - flows)
            entering.update(flows - old)
        count = self._count
        gone = {f for f, n in leaving.items() if count[f] - n + entering[f] == 0}
        added = {f for f, n in entering.items() if count[f] == 0 and n > leaving[f]}
        added_ids: dict[Identity, Flow] = {}
        for f in added:
            other = added_ids.setdefault(f.identity, f)
            held = self._by_identity.get(f.identity)
            if other is f and held is not None and held not in gone:
                other = held
            if other is not f:
                raise ValueError(f"two flows with one identity:\n  {other}\n  {f}")
        to_delete = frozenset(f for f in gone if f.identity not in added_ids)
        return FlowDiff(frozenset(added), to_delete), gone

    def _install(
        self, new: Mapping[Unit, frozenset[Flow]], delta: FlowDiff, gone: set[Flow]
    ) -> None:
        for unit, flows in new.items():
            old = self._units.get(unit, _EMPTY)
            self._count.subtract(old - flows)
            self._count.update(flows - old)
            if flows:
                self._units[unit] = flows
            else:
                self._units.pop(unit, None)
        for f in gone:
            del self._count[f]
            if self._by_identity.get(f.identity) == f:
                del self._by_identity[f.identity]
        for f in delta.to_add:
            self._by_identity[f.identity] = f


def _tagging(group: GroupState | None) -> tuple[object, ...] | None:
    """What a group's members' flows depend on: its tag flows and netprofile."""
    return None if group is None else (group.tag, group.network_id, group.qos)
