"""Service LBs and netprofiles in the datapath, with packets walked through the compiled
flows (the fake table models select groups and conntrack NAT): a connection to a VIP reaches
a provider on this host or another, its replies come from the VIP, established packets stay
with their provider, a provider reaches its own VIP (hairpin), policies judge the real
provider; an endpoint's netprofile meters and marks what it sends. The incremental model
agrees with the full compile, and a provider joining touches only its network's services."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from datapath_states import E1, E2, GW_A_PORT, NET_A, R1, TUN_H2, VNI_A, arp_request, cluster, ipv4

from datapath.flowmodel import Change, FlowModel
from datapath.flows import Group, Meter
from datapath.pipeline import DesiredState, EndpointState, compile_flows
from datapath.policy import GroupState, RuleState
from datapath.qos import QosState
from datapath.services import (
    ProviderState,
    ServicePortState,
    ServiceState,
    hairpin_zone,
    vip_mac,
)
from testbed.fakeoftable import CT_SNAT, FakeConntrack, walk

VIP = "10.1.0.100"
LOCAL = ProviderState(E2.ipv4 or "", E2.mac)
REMOTE = ProviderState(R1.ipv4 or "", R1.mac)
WEB = ServiceState("t:web", NET_A, VIP, 3, (ServicePortState(6, 80, 8080),), (LOCAL, REMOTE))
GROUP_ID = 3 * 16


def with_services(*services: ServiceState, groups: list[GroupState] | None = None) -> DesiredState:
    state = cluster()
    state.services = list(services)
    state.groups = groups or []
    return state


def tcp(src: EndpointState, dst_ip: str, sport: int, dport: int, **over: Any) -> dict[str, Any]:
    return ipv4(src, over.pop("dst_mac", vip_mac(VIP)), dst_ip, ip_proto=6, tcp_src=sport,
                tcp_dst=dport, **over)  # fmt: skip


def pick(provider: ProviderState) -> Any:
    """A bucket chooser: the bucket of ``provider``."""

    def choose(g: Group, _headers: Any) -> int:
        ips = [dict((a[1], a[2]) for a in b if a[0] == "set_field")["eth_dst"] for b in g.buckets]
        return ips.index(provider.mac)

    return choose


def test_the_switch_answers_arp_for_the_vip() -> None:
    flows = compile_flows(with_services(WEB))
    answer = walk(flows, arp_request(E1, VIP))
    sent = answer.sent(E1.ofport)
    assert (sent["arp_op"], sent["arp_sha"], sent["eth_src"]) == (2, vip_mac(VIP), vip_mac(VIP))


def test_a_connection_reaches_a_local_provider_and_its_replies_come_from_the_vip() -> None:
    flows = compile_flows(with_services(WEB))
    ct = FakeConntrack()
    syn = tcp(E1, VIP, 40000, 80)
    there = walk(flows, syn, conntrack=ct, choose=pick(LOCAL))
    got = there.sent(E2.ofport)
    assert (got["ipv4_dst"], got["tcp_dst"], got["eth_dst"]) == (E2.ipv4, 8080, E2.mac)
    assert GW_A_PORT in there.committed  # the network's zone: bound, then judged and committed
    reply = tcp(E2, E1.ipv4 or "", 8080, 40000, dst_mac=E1.mac)
    back = walk(flows, reply, conntrack=ct).sent(E1.ofport)
    assert (back["ipv4_src"], back["tcp_src"], back["eth_src"]) == (VIP, 80, vip_mac(VIP))
    assert back["ct_state"] & CT_SNAT
    # The next packet of the connection is DNATed to the same provider, whatever the group.
    again = walk(flows, syn, conntrack=ct, choose=pick(REMOTE)).sent(E2.ofport)
    assert (again["ipv4_dst"], again["eth_dst"]) == (E2.ipv4, E2.mac)


def test_a_connection_reaches_a_provider_on_another_host_through_its_tunnel() -> None:
    flows = compile_flows(with_services(WEB))
    there = walk(flows, tcp(E1, VIP, 40001, 80), conntrack=FakeConntrack(), choose=pick(REMOTE))
    got = there.sent(TUN_H2)
    assert (got["ipv4_dst"], got["tcp_dst"], got["eth_dst"], got["tunnel_id"]) == (
        R1.ipv4,
        8080,
        R1.mac,
        VNI_A,
    )


def test_connections_spread_over_the_providers() -> None:
    flows = compile_flows(with_services(WEB))
    ct = FakeConntrack()
    where = [
        frozenset(walk(flows, tcp(E1, VIP, 30000 + i, 80), conntrack=ct).ports) for i in range(200)
    ]
    local, remote = where.count(frozenset({E2.ofport})), where.count(frozenset({TUN_H2}))
    assert local + remote == 200 and min(local, remote) >= 60


def _where_flows_go(flows: Any, proto: int, n: int) -> list[frozenset[int]]:
    """Where n new flows from E1 to VIP:53 leave, each from a new source port."""
    l4 = {6: "tcp", 17: "udp"}[proto]
    ct = FakeConntrack()
    out = []
    for i in range(n):
        pkt = ipv4(E1, vip_mac(VIP), VIP, ip_proto=proto, **{f"{l4}_src": 20000 + i})
        out.append(frozenset(walk(flows, {**pkt, f"{l4}_dst": 53}, conntrack=ct).ports))
    return out


@pytest.mark.parametrize("proto", [6, 17], ids=["tcp", "udp"])
def test_one_clients_flows_spread_over_the_providers(proto: int) -> None:
    """Each new flow from one client, with a fresh source port, takes a provider by its
    5-tuple: UDP as well as TCP (OVS's default selection leaves UDP ports out)."""
    svc = replace(WEB, ports=(ServicePortState(proto, 53, 5353),))
    flows = compile_flows(with_services(svc))
    selects = {e.selection for e in flows if isinstance(e, Group) and e.kind == "select"}
    assert selects == {("dp_hash", 0)}
    where = _where_flows_go(flows, proto, 100)
    local, remote = where.count(frozenset({E2.ofport})), where.count(frozenset({TUN_H2}))
    assert local + remote == 100 and min(local, remote) >= 30


def test_a_group_without_the_selection_method_keeps_a_clients_udp_on_one_provider() -> None:
    """Why the groups name their selection method: what OVS does without one."""
    svc = replace(WEB, ports=(ServicePortState(17, 53, 5353),))
    flows = {
        replace(e, selection=("", 0)) if isinstance(e, Group) else e
        for e in compile_flows(with_services(svc))
    }
    assert len(set(_where_flows_go(flows, 17, 100))) == 1


def test_only_the_services_ports_and_new_connections_meet_the_group() -> None:
    flows = compile_flows(with_services(WEB))
    other_port = walk(flows, tcp(E1, VIP, 40000, 81), conntrack=FakeConntrack())
    assert other_port.outputs == []  # nobody has the VIP: a port it does not serve goes nowhere
    empty = replace(WEB, providers=())
    none = walk(compile_flows(with_services(empty)), tcp(E1, VIP, 40000, 80))
    assert none.outputs == []  # no provider: the group has no bucket


def test_hairpin_a_provider_reaches_its_own_vip() -> None:
    flows = compile_flows(with_services(WEB))
    ct = FakeConntrack()
    out = walk(flows, tcp(E2, VIP, 45000, 80), conntrack=ct, choose=pick(LOCAL))
    got = out.sent(E2.ofport)  # back out of the port it came in on, from the VIP
    assert (got["ipv4_src"], got["ipv4_dst"], got["tcp_dst"]) == (VIP, E2.ipv4, 8080)
    assert got["eth_src"] == vip_mac(VIP) and got["eth_dst"] == E2.mac
    assert hairpin_zone(GW_A_PORT) in out.committed
    answer = tcp(E2, VIP, 8080, got["tcp_src"], dst_mac=vip_mac(VIP))
    back = walk(flows, answer, conntrack=ct).sent(E2.ofport)
    assert (back["ipv4_src"], back["tcp_src"], back["ipv4_dst"], back["tcp_dst"]) == (
        VIP,
        80,
        E2.ipv4,
        45000,
    )
    assert (back["eth_src"], back["eth_dst"]) == (vip_mac(VIP), E2.mac)
    nxt = walk(flows, tcp(E2, VIP, 45000, 80), conntrack=ct).sent(E2.ofport)
    assert (nxt["ipv4_src"], nxt["tcp_dst"]) == (VIP, 8080)  # established: the same way


def test_policies_judge_the_real_provider_behind_the_vip() -> None:
    deny = RuleState("in", 10, "deny", protocol=6, port=8080)
    groups = [GroupState("t:db", NET_A, 7, (deny,)), GroupState("t:app", NET_A, 8)]
    state = with_services(WEB, groups=groups)
    state.endpoints = [replace(e, group="t:db") if e.id == E2.id else e for e in state.endpoints]
    flows = compile_flows(state)
    blocked = walk(flows, tcp(E1, VIP, 40000, 80), conntrack=FakeConntrack(), choose=pick(LOCAL))
    assert blocked.outputs == []
    direct = walk(flows, tcp(E1, E2.ipv4 or "", 40000, 8080, dst_mac=E2.mac))
    assert direct.outputs == []  # the same rule, without the VIP


def test_the_model_agrees_and_a_provider_joining_touches_only_its_networks_services() -> None:
    model = FlowModel()
    model.replace(with_services(replace(WEB, providers=(REMOTE,))))
    assert model.flows() == compile_flows(model.state())
    joined = replace(WEB, providers=(LOCAL, REMOTE))
    delta = model.apply(Change(services={WEB.id: joined}))
    assert model.last_units == 1
    assert model.flows() == compile_flows(model.state())
    changed = {e for e in delta.to_add if isinstance(e, Group)}
    assert [g.id for g in changed] == [GROUP_ID] and len(changed.pop().buckets) == 2
    model.apply(Change(services={WEB.id: None}))
    assert not [e for e in model.flows() if isinstance(e, Group) and e.kind == "select"]
    assert model.flows() == compile_flows(model.state())


def test_a_service_changed_live_sends_new_connections_to_its_new_providers_and_ports() -> None:
    """README: a service created again with new selectors (so new providers) and ports
    changes at once, on the same VIP; the agent applies it as one change of the model."""
    model = FlowModel()
    model.replace(with_services(replace(WEB, providers=(LOCAL,))))
    ports = (ServicePortState(6, 80, 9090), ServicePortState(17, 53, 5353))
    model.apply(Change(services={WEB.id: replace(WEB, ports=ports, providers=(REMOTE,))}))
    flows = model.flows()
    assert flows == compile_flows(model.state())
    to_tcp = walk(flows, tcp(E1, VIP, 40000, 80), conntrack=FakeConntrack())
    assert to_tcp.ports == {TUN_H2}  # the old, local provider is out
    assert (to_tcp.sent(TUN_H2)["ipv4_dst"], to_tcp.sent(TUN_H2)["tcp_dst"]) == (R1.ipv4, 9090)
    udp = ipv4(E1, vip_mac(VIP), VIP, ip_proto=17, udp_src=20000, udp_dst=53)
    to_udp = walk(flows, udp, conntrack=FakeConntrack()).sent(TUN_H2)
    assert (to_udp["ipv4_dst"], to_udp["udp_dst"]) == (R1.ipv4, 5353)


# --- netprofiles ---

GOLD = QosState(rate_kbps=10_000, burst_kbit=0, dscp=46)


def profiled(qos: QosState | None) -> DesiredState:
    state = cluster()
    state.groups = [GroupState("t:front", NET_A, 5, qos=qos)]
    state.endpoints = [replace(e, group="t:front") if e.id == E1.id else e for e in state.endpoints]
    return state


def test_a_netprofile_meters_and_marks_what_its_endpoints_send() -> None:
    flows = compile_flows(profiled(GOLD))
    meters = [e for e in flows if isinstance(e, Meter)]
    assert meters == [Meter(E1.ofport, 10_000, 2_500)]  # a quarter of the rate by default
    sent = walk(flows, ipv4(E1, E2.mac, E2.ipv4 or ""))
    assert sent.meters == [E1.ofport] and sent.sent(E2.ofport)["ip_dscp"] == 46
    v6 = walk(flows, {**ipv4(E1, E2.mac, ""), "eth_type": 0x86DD, "ipv6_src": E1.ipv6,
                      "ipv6_dst": "fd00::2", "ipv4_src": None, "ipv4_dst": None})  # fmt: skip
    assert v6.meters == [E1.ofport] and v6.sent(E2.ofport)["ip_dscp"] == 46  # IPv6 too
    arp = walk(flows, arp_request(E1, E2.ipv4 or ""))
    assert arp.meters == [E1.ofport]  # metered, not marked
    other = walk(flows, ipv4(E2, E1.mac, E1.ipv4 or ""))
    assert other.meters == [] and "ip_dscp" not in other.sent(E1.ofport)


@pytest.mark.parametrize(
    ("rate", "burst", "meter_burst"),
    [
        (10_000, 0, 2_500),  # a quarter of the rate
        (4_000, 0, 1_000),
        (1_000, 0, 500),  # README: at least 500 kbit
        (100, 0, 500),
        (100, 80, 80),  # the profile's own burst (-s), floor or not
    ],
)
def test_the_default_burst_is_a_quarter_of_the_rate_and_at_least_500_kbit(
    rate: int, burst: int, meter_burst: int
) -> None:
    flows = compile_flows(profiled(QosState(rate_kbps=rate, burst_kbit=burst)))
    assert [e for e in flows if isinstance(e, Meter)] == [Meter(E1.ofport, rate, meter_burst)]


def test_changing_a_profile_changes_its_members_meters_in_place() -> None:
    model = FlowModel()
    model.replace(profiled(GOLD))
    group = model.groups["t:front"]
    slower = replace(GOLD, rate_kbps=1_000, burst_kbit=800, dscp=0)
    delta = model.apply(Change(groups={"t:front": replace(group, qos=slower)}))
    assert Meter(E1.ofport, 1_000, 800) in delta.to_add
    assert model.flows() == compile_flows(model.state())
    delta = model.apply(Change(groups={"t:front": replace(group, qos=None)}))
    assert Meter(E1.ofport, 1_000, 800) in delta.to_delete
    assert not [e for e in model.flows() if isinstance(e, Meter)]
    assert model.flows() == compile_flows(model.state())
