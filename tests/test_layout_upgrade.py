"""An agent upgraded across a table renumbering replaces every flow on its first reconcile;
packets must keep reaching the same ports after every single flow-mod of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from datapath_states import (
    BROADCAST,
    E1,
    E2,
    E3,
    E5,
    GW_A_IP,
    GW_A_MAC,
    GW_A_PORT,
    NET_A,
    R1,
    R2,
    R3,
    TUN_H2,
    TUN_H3,
    UPLINK,
    VLAN_C,
    VNI_A,
    VNI_B,
    arp_request,
    cluster,
    flows_only,
    from_tunnel,
    ipv4,
)
from os_ken.ofproto import ofproto_v1_5 as ofp
from os_ken.ofproto import ofproto_v1_5_parser as ofp_parser

from datapath.flows import Entry, Flow, Group, diff
from datapath.ofapp import FlowController
from datapath.pipeline import (
    ARP,
    CLASSIFY,
    CONNTRACK,
    ETH_TYPE_IPV4,
    FORWARD,
    INGRESS,
    OFPVID_PRESENT,
    PIPELINE,
    POLICY,
    EndpointState,
    compile_flows,
    install_order,
    removal_order,
    write_plan,
)
from datapath.tables import ROUTE
from testbed.fakeoftable import walk
from testbed.fakeswitch import FakeSwitch, reconcile

# The layout before issue 7: classify 0, ingress 1, arp 2, policy 3, forward 4. Renumbering
# today's flows this way gives exactly what that compiler produced (checked against it when
# the layout changed): arp's miss went straight to policy, and conntrack and service are new.
_OLD_TABLE = {CLASSIFY.id: 0, INGRESS.id: 1, ARP.id: 2, POLICY.id: 3, FORWARD.id: 4}
_OLD_GOTO = {INGRESS.id: 1, ARP.id: 2, CONNTRACK.id: 3, POLICY.id: 3, FORWARD.id: 4}


def inline_floods(entries: set[Entry]) -> set[Flow]:
    """The flows an agent before flood groups (issue 27) compiled for the same state: each
    flood flow listed its segment's endpoints where it now names its flood group."""
    groups = {e.id: e for e in entries if isinstance(e, Group) and e.kind == "all"}
    old = set()
    for f in flows_only(entries):
        actions: list[Any] = []
        for a in f.actions:
            if a[0] == "group" and a[1] in groups:
                actions += [b for bucket in groups[a[1]].buckets for b in bucket]
            else:
                actions.append(a)
        old.add(Flow(f.table, f.priority, f.match, tuple(actions), f.cookie))
    return old


def old_layout(entries: set[Entry]) -> set[Flow]:
    """The flows an agent before issue 7 compiled for the same state."""
    old = set()
    for f in inline_floods(entries):
        if f.table not in _OLD_TABLE or (f.table == POLICY.id and f != PIPELINE.miss_flow(POLICY)):
            continue  # policy was a table that passed everything on
        actions = tuple(("goto", _OLD_GOTO[a[1]]) if a[0] == "goto" else a for a in f.actions)
        old.add(Flow(_OLD_TABLE[f.table], f.priority, f.match, actions, f.cookie))
    return old


GW = EndpointState("gw", NET_A, GW_A_MAC, GW_A_IP, ofport=GW_A_PORT)
PACKETS: list[dict[str, Any]] = [
    ipv4(E1, E2.mac, E2.ipv4),
    ipv4(E2, E1.mac, E1.ipv4),
    ipv4(E1, BROADCAST, "10.1.0.255"),
    ipv4(E1, R1.mac, R1.ipv4),
    ipv4(E1, GW_A_MAC, "8.8.8.8"),
    ipv4(GW, E1.mac, E1.ipv4, ipv4_src="192.0.2.7"),
    ipv4(E3, BROADCAST, "10.1.0.255"),
    ipv4(E5, R3.mac, R3.ipv4),
    arp_request(E1, E2.ipv4),
    arp_request(E1, R1.ipv4),
    arp_request(E1, GW_A_IP),
    arp_request(E1, E1.ipv4),
    from_tunnel(TUN_H2, VNI_A, R1.mac, E2.mac),
    from_tunnel(TUN_H2, VNI_A, R1.mac, BROADCAST),
    from_tunnel(TUN_H3, VNI_B, R2.mac, BROADCAST),
    {
        "in_port": UPLINK,
        "vlan_vid": OFPVID_PRESENT | VLAN_C,
        "eth_src": R3.mac,
        "eth_dst": E5.mac,
        "eth_type": ETH_TYPE_IPV4,
    },
]


def _wire(packet: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The packet as the next hop sees it: conntrack state and registers stay behind."""
    return tuple(sorted((k, v) for k, v in packet.items() if not k.startswith(("ct_", "reg"))))


def where(flows: set[Flow]) -> list[list[tuple[int, tuple[tuple[str, Any], ...]]]]:
    """Where each packet goes: its ports, each with the packet as it left."""
    result = []
    for pkt in PACKETS:
        w = walk(flows, pkt)
        result.append(sorted((o, _wire(p)) for o, p in zip(w.outputs, w.packets, strict=True)))
    return result


def watcher(expected: list[Any]) -> tuple[list[int], Callable[[set[Flow]], None]]:
    """A flow-mod hook that counts the states where some packet goes elsewhere."""
    broken: list[int] = []
    step = [0]

    def check(flows: set[Flow]) -> None:
        step[0] += 1
        if where(flows) != expected:
            broken.append(step[0])

    return broken, check


def test_the_old_and_new_layouts_forward_alike_and_share_no_table_but_classify() -> None:
    new = compile_flows(cluster())
    old = old_layout(new)
    assert where(old) == where(new)
    assert {f.table for f in old} & {t.id for t in PIPELINE} == {CLASSIFY.id}
    assert all(len(w) > 0 for w in where(new)[:5])  # the packets do go somewhere


def test_upgrade_reconcile_keeps_every_packet_on_its_path_at_every_flow_mod() -> None:
    new = compile_flows(cluster())
    old = old_layout(new)
    broken, check = watcher(where(new))
    switch = FakeSwitch(FlowController(), old, after_flow_mod=check)
    stats = reconcile(switch, new)
    assert switch.flows == new and not stats.errors
    assert broken == []
    # Every flow of the old layout went: the classify ones replaced in place, the others
    # deleted after the adds, once nothing led to them any more.
    assert stats.found == len(old) and stats.deleted == len(old - {f for f in old if f.table == 0})
    commands = [m.command for m in switch.flow_mods]
    first_delete = commands.index(ofp.OFPFC_DELETE_STRICT)
    assert set(commands[:first_delete]) == {ofp.OFPFC_ADD}
    assert set(commands[first_delete:]) == {ofp.OFPFC_DELETE_STRICT}


def test_deleting_first_would_have_dropped_packets_mid_upgrade() -> None:
    """Why write_plan defers the old tables' deletes: the order before it loses packets."""
    new = compile_flows(cluster())
    old = old_layout(new)
    flow_diff = diff(new, old)
    table: dict[Any, Entry] = {f.identity: f for f in old}
    table.update((g.identity, g) for g in new if isinstance(g, Group))  # written first
    expected = where(new)
    broken = 0
    for f in removal_order(flow_diff.to_delete):
        del table[f.identity]
        broken += where(set(table.values())) != expected
    for f in install_order(flows_only(flow_diff.to_add)):
        table[f.identity] = f
        broken += where(set(table.values())) != expected
    assert set(table.values()) == new and broken > 0
    plan = write_plan(flow_diff, PIPELINE)
    assert plan.delete_first == () and set(plan.delete_last) == flow_diff.to_delete


def test_a_reconcile_within_one_layout_deletes_before_adding() -> None:
    """Stale flows of current tables still go first: traffic stops entering before its
    path goes."""
    state = cluster()
    before = compile_flows(state)
    state.endpoints = [replace(e, ofport=77) if e == E2 else e for e in state.endpoints]
    after = compile_flows(state)
    plan = write_plan(diff(after, before), PIPELINE)
    assert plan.delete_first and plan.add and plan.delete_last == ()
    assert [f.table for f in plan.delete_first] == sorted(f.table for f in plan.delete_first)


def test_an_agent_from_before_flood_groups_keeps_every_packet_on_its_path() -> None:
    """Its flood flows listed the endpoints: the groups are written first, then each flood
    flow is replaced in place by one naming its group (nothing is deleted)."""
    new = compile_flows(cluster())
    old = inline_floods(new)
    assert where(old) == where(new) and old != flows_only(new)
    broken, check = watcher(where(new))
    switch = FakeSwitch(FlowController(), old, after_flow_mod=check)
    stats = reconcile(switch, new)
    assert switch.flows == new and not stats.errors and broken == []
    groups = [m for m in switch.flow_mods if isinstance(m, ofp_parser.OFPGroupMod)]
    assert len(groups) == len(new - flows_only(new)) and switch.flow_mods[: len(groups)] == groups
    assert stats.deleted == 0 and stats.replaced == len(old - new)


def test_an_agent_from_before_the_route_table_only_adds_its_miss_flow() -> None:
    """Routing mode's table (issue 25) took a free id and nothing in bridge mode goes to
    it: the upgrade is one flow-mod, and no packet changes its path."""
    new = compile_flows(cluster())
    before = new - {PIPELINE.miss_flow(ROUTE)}
    assert where(before) == where(new)
    broken, check = watcher(where(new))
    switch = FakeSwitch(FlowController(), before, after_flow_mod=check)
    stats = reconcile(switch, new)
    assert switch.flows == new and not stats.errors and broken == []
    assert [m.command for m in switch.flow_mods] == [ofp.OFPFC_ADD]
