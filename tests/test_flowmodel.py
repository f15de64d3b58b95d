"""The incremental flow model against the full compiler: after any sequence of changes it
holds exactly compile_flows() of the same state, its deltas carry the previous flows to the
new ones, and it refuses exactly the states compile_flows refuses, changing nothing."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from datapath_states import E1, E2, NET_A, R1, TUN_H2, cluster, world
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from datapath.flood import flood_group_id
from datapath.flowmodel import Change, FlowModel
from datapath.flows import Flow, FlowDiff, Group, diff
from datapath.pipeline import (
    FORWARD,
    PRIO_FLOOD,
    DesiredState,
    EndpointState,
    NetworkState,
    TunnelState,
    compile_flows,
)
from datapath.policy import GroupState, RuleState

NET_IDS = ("n1", "n2", "n3")
HOSTS = ("h1", "h2", "h3")
EP_IDS = ("e1", "e2", "e3", "e4", "e5", "e6")
REMOTE_IDS = ("r1", "r2", "r3", "r4", "r5", "e1")  # e1: also a local endpoint's ID
OFPORTS = st.integers(1, 60)
# Small pools, so that two objects sometimes claim one key; rarely an invalid value.
MACS = st.sampled_from([f"02:00:00:00:00:{i:02x}" for i in range(1, 41)] + ["01:00:5e:00:00:01"])
IPV4 = st.sampled_from(["", *(f"10.0.0.{i}" for i in range(1, 41)), "fd00::9"])
IPV6 = st.sampled_from(["", *(f"fd00::{i}" for i in range(1, 9))])
NETWORK_OF = st.sampled_from((*NET_IDS, *NET_IDS, *NET_IDS, "n9"))  # n9: never a network
GROUP_IDS = ("t:g1", "t:g2", "t:g3")


def _group_of(network: str) -> st.SearchStrategy[str]:
    """Mostly the group of the endpoint's network (g1 is on n1...), or another, or none;
    g9 is never a group."""
    own = f"t:g{network[1:]}"
    return st.sampled_from(("", own, own, own, *GROUP_IDS, "t:g9"))


def _network_and_group() -> st.SearchStrategy[tuple[str, str]]:
    return NETWORK_OF.flatmap(lambda n: st.tuples(st.just(n), _group_of(n)))


# Rarely a gateway port too big for a conntrack zone, a tag out of range, a bad rule.
GATEWAYS = st.sampled_from([None, *range(1, 61, 3), 0x10000])
# A group's own tag mostly; sometimes one two groups share, 0 (untagged) or a bad one.
TAGS = st.sampled_from([1, 2, 3, 7, 7, 0, (1 << 31) - 1, 1 << 31])
rules = st.sampled_from([None, None, 1, 6, 6, 17, 132]).flatmap(
    lambda protocol: st.builds(
        RuleState,
        direction=st.sampled_from(["in", "out"]),
        priority=st.sampled_from([1, 5, 5, 10, 100] * 5 + [0]),
        action=st.sampled_from(["allow", "deny"]),
        peer_tag=st.sampled_from([0, 0, 1, 2, 7]),
        peer_cidrs=st.sampled_from(
            [(), (), ("10.0.0.0/24",), ("fd00::/64",), ("10.0.0.5/32", "fd00::/8"), ("0.0.0.0/0",)]
        ),
        protocol=st.just(protocol),
        # A port without tcp or udp is refused: rarely.
        port=st.sampled_from([0, 80] if protocol in (6, 17) else [0] * 20 + [80]),
    )
)
groups = st.sampled_from(GROUP_IDS).flatmap(
    lambda g: st.builds(
        GroupState,
        id=st.just(g),
        network_id=st.sampled_from([f"n{g[3:]}"] * 4 + [*NET_IDS, "n9"]),
        tag=st.just(int(g[3:]) * 1000) | TAGS,
        rules=st.lists(rules, max_size=4).map(tuple),
    )
)


SUBNETS = st.sampled_from(["", "10.0.0.0/24", "10.0.0.0/24", "10.0.0.0/16", "10.9.0.0/16"])


@st.composite
def networks(draw: Any) -> NetworkState:
    encap = draw(st.sampled_from(["vxlan", "vxlan", "vxlan", "vlan", "vlan", "gre"]))
    tags = [5000, 5001, 5002, 5003, 1 << 24] if encap != "vlan" else [10, 11, 12, 4095]
    return NetworkState(
        id=draw(st.sampled_from(NET_IDS)),
        tag=draw(st.sampled_from(tags)),
        gateway=draw(IPV4),
        encap=encap,
        gateway_ofport=draw(GATEWAYS),
        # Routing mode: two tenants mostly; rarely none (refused there) or out of range.
        vrf=draw(st.sampled_from([1, 1, 2, 2, 1, 2, 0, 0x4000])),
        subnet=draw(SUBNETS),
        ipv6_subnet=draw(st.sampled_from(["", "", "fd00::/64"])),
    )


endpoints = _network_and_group().flatmap(
    lambda ng: st.builds(
        EndpointState,
        id=st.sampled_from(EP_IDS),
        network_id=st.just(ng[0]),
        ofport=OFPORTS,
        mac=MACS,
        ipv4=IPV4,
        ipv6=IPV6,
        group=st.just(ng[1]),
    )
)
remotes = _network_and_group().flatmap(
    lambda ng: st.builds(
        EndpointState,
        id=st.sampled_from(REMOTE_IDS),
        network_id=st.just(ng[0]),
        host=st.sampled_from(HOSTS),
        mac=MACS,
        ipv4=IPV4,
        ipv6=IPV6,
        group=st.just(ng[1]),
    )
)
tunnels = st.builds(TunnelState, host=st.sampled_from(HOSTS), ofport=OFPORTS)


def _put(items: list[Any], item: Any, key: Callable[[Any], str]) -> None:
    """Replace the item with the same key, or append it."""
    for i, old in enumerate(items):
        if key(old) == key(item):
            items[i] = item
            return
    items.append(item)


def _drop(items: list[Any], name: str, key: Callable[[Any], str]) -> None:
    items[:] = [i for i in items if key(i) != name]


def applied(before: set[Flow] | frozenset[Flow], delta: FlowDiff) -> set[Flow]:
    """The flows a switch holding ``before`` holds after the delta's flow-mods (an ADD
    replaces the flow of the same identity, a strict delete removes it)."""
    table = {f.identity: f for f in before}
    for f in delta.to_delete:
        del table[f.identity]
    for f in delta.to_add:
        table[f.identity] = f
    return set(table.values())


class IncrementalMatchesFullCompile(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = DesiredState()
        self.model = FlowModel()
        self.flows = compile_flows(self.state)
        self.refused = 0

    def step(self, new: DesiredState, change: Change | None = None) -> None:
        """Apply one change to the model (targeted, or the difference to ``new``) and
        check it against the full compile of ``new``."""
        try:
            expected: set[Flow] | None = compile_flows(new)
        except ValueError:
            expected = None
        before = self.model.flows()
        try:
            delta = self.model.apply(change if change is not None else self.model.change_to(new))
        except ValueError as e:
            assert expected is None, f"refused a state compile_flows accepts: {e}"
            assert self.model.flows() == before == self.flows
            assert compile_flows(self.model.state()) == self.flows  # nothing changed
            self.refused += 1
            return
        assert expected is not None, "accepted a state compile_flows refuses"
        assert self.model.flows() == expected
        assert delta == diff(expected, self.flows)
        assert applied(self.flows, delta) == expected
        self.state, self.flows = new, expected

    @initialize(
        nets=st.lists(networks(), max_size=3, unique_by=lambda n: n.id),
        tuns=st.lists(tunnels, max_size=3, unique_by=lambda t: t.host),
        mode=st.sampled_from(["bridge", "bridge", "routing"]),
    )
    def start(self, nets: list[NetworkState], tuns: list[TunnelState], mode: Any) -> None:
        """Usually from a few networks and tunnels, so that endpoints have somewhere to go;
        in bridge mode mostly, in routing mode from the start sometimes."""
        self.step(self._with(lambda s: setattr(s, "fwd_mode", mode)))
        self.step(self._with(lambda s: setattr(s, "networks", nets)))
        self.step(self._with(lambda s: setattr(s, "tunnels", tuns)))

    def _with(self, edit: Callable[[DesiredState], None]) -> DesiredState:
        new = copy.deepcopy(self.state)
        edit(new)
        return new

    @rule(net=networks())
    def put_network(self, net: NetworkState) -> None:
        self.step(
            self._with(lambda s: _put(s.networks, net, lambda n: n.id)),
            Change(networks={net.id: net}),
        )

    @rule(name=st.sampled_from(NET_IDS), with_endpoints=st.booleans())
    def remove_network(self, name: str, with_endpoints: bool) -> None:
        """The agent removes a network with its endpoints and groups; alone, it is refused
        while it has some."""
        gone = [e.id for e in self.state.endpoints if e.network_id == name and with_endpoints]
        groups_gone = [g.id for g in self.state.groups if g.network_id == name and with_endpoints]

        def edit(s: DesiredState) -> None:
            _drop(s.networks, name, lambda n: n.id)
            s.endpoints[:] = [e for e in s.endpoints if e.id not in gone]
            s.groups[:] = [g for g in s.groups if g.id not in groups_gone]

        self.step(
            self._with(edit),
            Change(
                networks={name: None},
                endpoints=dict.fromkeys(gone),
                groups=dict.fromkeys(groups_gone),
            ),
        )

    @rule(group=groups)
    def put_group(self, group: GroupState) -> None:
        self.step(
            self._with(lambda s: _put(s.groups, group, lambda g: g.id)),
            Change(groups={group.id: group}),
        )

    @rule(name=st.sampled_from(GROUP_IDS), tag=TAGS)
    def retag_group(self, name: str, tag: int) -> None:
        """A group's tag changes (0 -> n when the master tags an old group): its members'
        tag flows follow."""
        old = next((g for g in self.state.groups if g.id == name), None)
        if old is None:
            return
        group = GroupState(old.id, old.network_id, tag, old.rules)
        self.put_group(group)

    @rule(name=st.sampled_from(GROUP_IDS), extra=rules)
    def add_rule(self, name: str, extra: RuleState) -> None:
        old = next((g for g in self.state.groups if g.id == name), None)
        if old is None:
            return
        self.put_group(GroupState(old.id, old.network_id, old.tag, (*old.rules, extra)))

    @rule(name=st.sampled_from(GROUP_IDS))
    def remove_group(self, name: str) -> None:
        self.step(
            self._with(lambda s: _drop(s.groups, name, lambda g: g.id)),
            Change(groups={name: None}),
        )

    @rule(ep=endpoints)
    def put_endpoint(self, ep: EndpointState) -> None:
        self.step(
            self._with(lambda s: _put(s.endpoints, ep, lambda e: e.id)),
            Change(endpoints={ep.id: ep}),
        )

    @rule(eps=st.lists(endpoints, min_size=2, max_size=6, unique_by=lambda e: e.id))
    def put_endpoints_one_by_one(self, eps: list[EndpointState]) -> None:
        for ep in eps:
            self.put_endpoint(ep)

    @rule(name=st.sampled_from(EP_IDS))
    def remove_endpoint(self, name: str) -> None:
        self.step(
            self._with(lambda s: _drop(s.endpoints, name, lambda e: e.id)),
            Change(endpoints={name: None}),
        )

    @rule(rep=remotes)
    def put_remote(self, rep: EndpointState) -> None:
        self.step(
            self._with(lambda s: _put(s.remote_endpoints, rep, lambda r: r.id)),
            Change(remotes={rep.id: rep}),
        )

    @rule(name=st.sampled_from(REMOTE_IDS))
    def remove_remote(self, name: str) -> None:
        self.step(
            self._with(lambda s: _drop(s.remote_endpoints, name, lambda r: r.id)),
            Change(remotes={name: None}),
        )

    @rule(tunnel=tunnels)
    def put_tunnel(self, tunnel: TunnelState) -> None:
        self.step(
            self._with(lambda s: _put(s.tunnels, tunnel, lambda t: t.host)),
            Change(tunnels={tunnel.host: tunnel.ofport}),
        )

    @rule(host=st.sampled_from(HOSTS))
    def remove_tunnel(self, host: str) -> None:
        self.step(
            self._with(lambda s: _drop(s.tunnels, host, lambda t: t.host)),
            Change(tunnels={host: None}),
        )

    @rule(uplink=st.none() | OFPORTS)
    def set_uplink(self, uplink: int | None) -> None:
        self.step(self._with(lambda s: setattr(s, "uplink_port", uplink)), Change(uplink=uplink))

    @rule(mode=st.sampled_from(["bridge", "routing"]))
    def set_fwd_mode(self, mode: Any) -> None:
        """Routing mode's model recompiles in full; both ways it agrees with compile_flows."""
        self.step(self._with(lambda s: setattr(s, "fwd_mode", mode)), Change(fwd_mode=mode))

    @rule(mode=st.sampled_from(["proxy", "flood"]))
    def set_arp_mode(self, mode: Any) -> None:
        self.step(self._with(lambda s: setattr(s, "arp_mode", mode)), Change(arp_mode=mode))

    @rule(
        nets=st.lists(networks(), max_size=2),
        eps=st.lists(endpoints, max_size=4),
        reps=st.lists(remotes, max_size=4),
        tuns=st.lists(tunnels, max_size=2),
        grps=st.lists(groups, max_size=2),
        drop_eps=st.lists(st.sampled_from(EP_IDS), max_size=2),
        drop_nets=st.lists(st.sampled_from(NET_IDS), max_size=1),
        duplicate=st.sampled_from([False] * 5 + [True]),
    )
    def several_at_once(
        self,
        nets: list[NetworkState],
        eps: list[EndpointState],
        reps: list[EndpointState],
        tuns: list[TunnelState],
        grps: list[GroupState],
        drop_eps: list[str],
        drop_nets: list[str],
        duplicate: bool,
    ) -> None:
        """One Change of many objects (what set_cluster and resync send), computed by
        change_to; ``duplicate`` lists an object twice, which both refuse."""

        def edit(s: DesiredState) -> None:
            for name in drop_nets:
                _drop(s.networks, name, lambda n: n.id)
            for name in drop_eps:
                _drop(s.endpoints, name, lambda e: e.id)
            for net in nets:
                _put(s.networks, net, lambda n: n.id)
            for ep in eps:
                _put(s.endpoints, ep, lambda e: e.id)
            for rep in reps:
                _put(s.remote_endpoints, rep, lambda r: r.id)
            for t in tuns:
                _put(s.tunnels, t, lambda t: t.host)
            for g in grps:
                _put(s.groups, g, lambda g: g.id)
            if duplicate and s.endpoints:
                s.endpoints.append(s.endpoints[0])

        self.step(self._with(edit))

    @invariant()
    def holds_the_state_it_says(self) -> None:
        assert compile_flows(self.model.state()) == self.flows == self.model.flows()


IncrementalMatchesFullCompile.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_incremental_matches_the_full_compile = IncrementalMatchesFullCompile.TestCase


def test_the_shared_states_build_up_one_change_at_a_time() -> None:
    for state in (world(), cluster(), cluster("flood")):
        model, flows = FlowModel(), compile_flows(DesiredState())
        target = copy.deepcopy(state)
        for net in target.networks:
            flows = applied(flows, model.apply(Change(networks={net.id: net})))
        for t in target.tunnels:
            flows = applied(flows, model.apply(Change(tunnels={t.host: t.ofport})))
        model.apply(Change(uplink=target.uplink_port, arp_mode=target.arp_mode))
        flows = set(model.flows())
        for ep in target.endpoints:
            flows = applied(flows, model.apply(Change(endpoints={ep.id: ep})))
        for rep in target.remote_endpoints:
            flows = applied(flows, model.apply(Change(remotes={rep.id: rep})))
        assert flows == set(model.flows()) == compile_flows(state)


def test_a_refused_change_names_the_object_and_changes_nothing() -> None:
    model = FlowModel()
    model.replace(cluster())
    model.apply(Change(groups={"t:a": GroupState("t:a", NET_A, 5)}))
    before = model.flows()
    with pytest.raises(ValueError, match="group t:b: network nope is unknown"):
        model.apply(Change(groups={"t:b": GroupState("t:b", "nope", 6)}))
    with pytest.raises(ValueError, match="group t:a and group t:b share tag 5"):
        model.apply(Change(groups={"t:b": GroupState("t:b", NET_A, 5)}))
    with pytest.raises(ValueError, match="group t:b: in rule at priority 0: priority 0 is out"):
        model.apply(
            Change(groups={"t:b": GroupState("t:b", NET_A, 6, (RuleState("in", 0, "allow"),))})
        )
    clash = EndpointState("x", NET_A, E2.mac, ofport=77)
    with pytest.raises(ValueError, match="endpoint ep2 and endpoint x both use MAC"):
        model.apply(Change(endpoints={"x": clash}))
    with pytest.raises(ValueError, match="endpoint ep1 and tunnel to host h9 both use ofport 1"):
        model.apply(Change(tunnels={"h9": E1.ofport}))
    with pytest.raises(ValueError, match=f"endpoint ep1: network {NET_A} is unknown"):
        model.apply(Change(networks={NET_A: None}))
    gone = {e.id: None for e in model.endpoints.values() if e.network_id == NET_A}
    with pytest.raises(ValueError, match=f"group t:a: network {NET_A} is unknown"):
        model.apply(Change(networks={NET_A: None}, endpoints=gone))
    with pytest.raises(ValueError, match="share VNI 5000"):
        model.apply(Change(networks={"twin": NetworkState("twin", 5000)}))
    assert model.flows() == before and compile_flows(model.state()) == before


def _standing(n: int, networks: int) -> DesiredState:
    """``n`` local endpoints over ``networks`` VXLAN networks, as many remote endpoints on
    two other hosts."""
    nets = [
        NetworkState(f"n{i}", 5000 + i, gateway=f"10.{i}.0.1", gateway_ofport=1000 + i)
        for i in range(networks)
    ]

    def mac(kind: int, j: int) -> str:
        return f"02:00:{kind:02x}:00:{j >> 8:02x}:{j & 0xFF:02x}"

    eps = [
        EndpointState(
            f"e{j}", f"n{j % networks}", mac(1, j), f"10.{j % networks}.1.{j}", ofport=2000 + j
        )
        for j in range(n)
    ]
    reps = [
        EndpointState(f"r{j}", f"n{j % networks}", mac(2, j), host=f"h{2 + j % 2}")
        for j in range(n)
    ]
    return DesiredState(nets, eps, reps, [TunnelState("h2", TUN_H2), TunnelState("h3", 51)])


@pytest.mark.parametrize("standing", [0, 10, 250])
def test_one_more_endpoint_touches_a_bounded_number_of_flows_and_units(standing: int) -> None:
    """Counts, not time: the flows an endpoint changes, and the units recompiled for it,
    do not grow with the endpoints already on the host (here in other networks too)."""
    model = FlowModel()
    model.replace(_standing(standing, networks=10))
    one = EndpointState("new", "n3", "02:00:09:00:00:01", "10.3.9.9", ofport=9999)
    added = model.apply(Change(endpoints={"new": one}))
    assert model.last_units == 2  # its own, and its network's (floods, classify, gateway)
    removed = model.apply(Change(endpoints={"new": None}))
    assert model.last_units == 2
    # Its own 6 flows (classify, 2 ingress, ARP, ARP exception, forward) and its segment's
    # flood group, modified in place: the segment's flood flows name the group, whatever
    # its endpoints, so they are not rewritten.
    flood = flood_group_id(model.networks["n3"].segment)
    for delta, verb in ((added, "to_add"), (removed, "to_delete")):
        entries = getattr(delta, verb)
        flows = [f for f in entries if isinstance(f, Flow)]
        assert len(flows) == 6 and all(
            f.table != FORWARD.id or f.priority != PRIO_FLOOD for f in flows
        )
        groups = [g for g in delta.to_add if isinstance(g, Group)]
        assert [g.id for g in groups] == [flood] and len(delta.to_add | delta.to_delete) == 7
    (grown,) = [g for g in added.to_add if isinstance(g, Group)]
    (shrunk,) = [g for g in removed.to_add if isinstance(g, Group)]
    assert (("output", 9999),) in grown.buckets and (("output", 9999),) not in shrunk.buckets
    assert len(grown.buckets) == len(shrunk.buckets) + 1
    remote = EndpointState("rnew", "n3", "02:00:09:00:00:02", "10.3.9.10", host="h2")
    moved = model.apply(Change(remotes={"rnew": remote}))
    # Its 2 flows, and the local origin's flood flow if its host is new to the segment.
    assert len(moved.to_add) + len(moved.to_delete) <= 2 + 1


def test_a_tunnel_change_recompiles_only_what_goes_through_it() -> None:
    model = FlowModel()
    model.replace(cluster())
    before = model.flows()
    delta = model.apply(Change(tunnels={"h2": 77}))
    expected = compile_flows(model.state())
    assert applied(before, delta) == expected
    # R1 (net A) and R3 (VLAN net C, not through a tunnel) are on h2: net A's units change.
    # R1 (VNI net A) and R3 (VLAN net C) are on h2: their units and their networks'.
    assert model.last_units == 4
    assert all(isinstance(f, Flow) and ("output", 77) in f.actions for f in delta.to_add)
    through_h2 = {f for f in before if isinstance(f, Flow) and ("output", TUN_H2) in f.actions}
    assert through_h2 and not through_h2 & expected
    assert R1.host == "h2" and len(delta.to_add) == 2  # R1's forward flow, net A's flood
    assert all(isinstance(f, Flow) for f in delta.to_add)  # no flood group goes to a host


# ---------------------------------------------------------------- policy costs (issue 10)


def _grouped(n: int, networks: int, rules: int) -> DesiredState:
    """_standing with a group per network holding ``rules`` in rules, every endpoint in
    its network's group."""
    state = _standing(n, networks)
    state.endpoints = [replace(e, group=f"t:{e.network_id}") for e in state.endpoints]
    state.remote_endpoints = [
        replace(r, group=f"t:{r.network_id}", ipv4=f"10.{j % networks}.2.{j % 250}")
        for j, r in enumerate(state.remote_endpoints)
    ]
    state.groups = [GroupState(f"t:n{i}", f"n{i}", i + 1, _rules(rules)) for i in range(networks)]
    return state


def _rules(n: int, base: int = 0) -> tuple[RuleState, ...]:
    return tuple(
        RuleState("in" if i % 2 else "out", 1 + i % 100, "allow", protocol=6, port=1000 + base + i)
        for i in range(n)
    )


def _cost(model: FlowModel, change: Change) -> int:
    delta = model.apply(change)
    return len(delta.to_add) + len(delta.to_delete)


@pytest.mark.parametrize("standing", [0, 10, 250])
def test_one_more_grouped_endpoint_costs_its_usual_flows_and_two_tags(
    standing: int,
) -> None:
    model = FlowModel()
    model.replace(_grouped(standing, networks=10, rules=20))
    costs = {}
    for name, group in (("plain", None), ("grouped", "t:n3")):
        for v6 in (None, "fd00::3:9"):
            one = EndpointState("new", "n3", "02:00:09:00:00:01", "10.3.9.9", v6, group, 9999)
            costs[name, v6 is not None] = _cost(model, Change(endpoints={"new": one}))
            assert model.last_units == 2  # its own, and its network's
            assert _cost(model, Change(endpoints={"new": None})) == costs[name, v6 is not None]
    assert costs["plain", False] == 6 + 1  # its flows and its segment's flood group
    # src and dst tag, by MAC: the same for one address family or two
    assert costs["grouped", False] == costs["plain", False] + 2
    assert costs["grouped", True] == costs["plain", True] + 2
    remote = EndpointState("rnew", "n3", "02:00:09:00:00:02", "10.3.9.10", "", "t:n3", host="h2")
    assert _cost(model, Change(remotes={"rnew": remote})) <= 2 + 1 + 2


@pytest.mark.parametrize("standing", [0, 10, 250])
def test_one_more_rule_costs_at_most_two_flows_per_group_that_attaches_it(standing: int) -> None:
    model = FlowModel()
    model.replace(_grouped(standing, networks=10, rules=20))
    groups = {g.id: g for g in model.groups.values()}
    extra = RuleState("in", 50, "deny", peer_tag=4, protocol=17)

    def with_rules(ids: list[str], more: tuple[RuleState, ...]) -> Change:
        return Change(groups={g: replace(groups[g], rules=(*groups[g].rules, *more)) for g in ids})

    assert _cost(model, with_rules(["t:n3"], (extra,))) == 2  # v4 and v6
    assert model.last_units == 1
    # The same rule in a policy that two more groups attach (n3 has it already: unchanged).
    assert _cost(model, with_rules(["t:n3", "t:n4", "t:n5"], (extra,))) == 2 * 2
    assert model.last_units == 2
    # One flow per peer CIDR: two v4 and a v6 one.
    cidrs = RuleState("out", 9, "allow", peer_cidrs=("10.9.0.0/16", "10.8.0.0/16", "fd00:9::/48"))
    assert _cost(model, with_rules(["t:n6"], (cidrs,))) == 3
    # Attaching a policy of 10 rules: at most 2 flows a rule.
    assert _cost(model, with_rules(["t:n7"], _rules(10, base=500))) == 2 * 10
    assert model.last_units == 1
    assert compile_flows(model.state()) == model.flows()


def test_a_groups_tag_touches_its_members_and_its_network_touches_it() -> None:
    model = FlowModel()
    model.replace(_grouped(40, networks=4, rules=3))  # 10 local and 10 remote endpoints each
    group = model.groups["t:n1"]
    before = model.flows()
    model.apply(Change(groups={"t:n1": replace(group, tag=99)}))
    members = 10 + 10
    assert model.last_units == 1 + members
    assert len(before - model.flows()) == 2 * members + 2 * 3  # tags, and each rule's 2
    model.apply(Change(groups={"t:n1": replace(group, tag=99, rules=())}))
    assert model.last_units == 1  # the tag stayed: only the group's own unit
    net = model.networks["n2"]
    model.apply(Change(networks={"n2": replace(net, gateway_ofport=3000)}))  # a new zone
    assert model.last_units == 1 + members + 1  # the network, its endpoints and its group
    assert compile_flows(model.state()) == model.flows()
