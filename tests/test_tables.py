"""The pipeline declaration: its graph is checked when declared, and every compiled flow is
held to it."""

from __future__ import annotations

import pytest
from datapath_states import (
    BROADCAST,
    E1,
    E2,
    E3,
    GW_A_PORT,
    R1,
    TUN_H2,
    VNI_A,
    arp_request,
    cluster,
    flows_only,
    from_tunnel,
    ipv4,
    world,
)

from datapath.flows import Flow, flow
from datapath.pipeline import compile_flows
from datapath.tables import (
    ARP,
    CLASSIFY,
    CONNTRACK,
    DROP,
    FORWARD,
    INGRESS,
    PIPELINE,
    POLICY,
    POLICY_IN,
    SERVICE,
    SRC_GROUP,
    Pipeline,
    TableSpec,
)
from testbed.fakeoftable import walk

A = TableSpec("a", 0, "first", next_tables=("b", "c"), match=frozenset({"in_port"}))
B = TableSpec("b", 1, "second", miss="c", next_tables=("c",), recirculate=("b",), meters=True)
C = TableSpec("c", 2, "last", groups=True)
SMALL = Pipeline((A, B, C))


def test_a_declared_jump_is_allowed_and_an_undeclared_one_refused() -> None:
    assert A.goto(C) == ("goto", 2)
    with pytest.raises(ValueError, match=r"table b may not go to table a"):
        B.goto(A)
    SMALL.check(flow(0, 5, [("goto", 2)], in_port=1))
    chain = Pipeline((TableSpec("a", 0, "x", next_tables=("b",)), B, C))
    skip = flow(0, 5, [("goto", 2)])
    with pytest.raises(ValueError, match=r"table a: goto table c is not declared: table=0"):
        chain.check(skip)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (flow(0, 5, [("goto", 1)], eth_dst="02:00:00:00:00:01"), "match field.*eth_dst"),
        (flow(1, 5, [("ct", False, 1, 0)]), "ct recirculation to table a is not declared"),
        (flow(1, 5, [("ct", False, 1, 7)]), "ct recirculation to undeclared table 7"),
        (flow(0, 5, [("meter", 1), ("goto", 1)]), "meters are not declared"),
        (flow(1, 5, [("group", 1)]), "groups are not declared"),
        (flow(1, 0, []), "its miss is declared as c"),
        (flow(2, 0, [("output", 1)]), "its miss is declared as drop"),
        (flow(9, 5, []), "no table 9 in the pipeline"),
    ],
)
def test_a_flow_its_table_does_not_declare_is_refused(bad: Flow, why: str) -> None:
    with pytest.raises(ValueError, match=why) as err:
        SMALL.check(bad)
    assert str(bad) in str(err.value)  # the message names the flow


def test_declared_meters_groups_and_recirculation_pass() -> None:
    SMALL.check(flow(1, 5, [("meter", 3), ("ct", True, 1, 1), ("goto", 2)]))
    SMALL.check(flow(2, 5, [("group", 4)]))
    assert SMALL.miss_flow(B) == flow(1, 0, [("goto", 2)])
    assert SMALL.miss_flow(C) == flow(2, 0)


@pytest.mark.parametrize(
    ("tables", "why"),
    [
        ((A, C, B), "ascend"),
        ((TableSpec("a", 1, "x"),), "ascend from 0"),
        ((A, TableSpec("a", 1, "dup"), C), "share a name"),
        ((TableSpec("a", 0, "x", next_tables=("a",)),), "next table a is not a later table"),
        ((TableSpec("a", 0, "x", next_tables=("z",)),), "next table z is not a later table"),
        ((TableSpec("a", 0, "x", recirculate=("z",)),), "recirculates to unknown table z"),
        ((TableSpec("a", 0, "x", miss="b"), TableSpec("b", 1, "y")), "miss b is not one of"),
        ((TableSpec("a", 0, "x"), TableSpec("b", 1, "y")), "no table leads to b"),
    ],
)
def test_a_bad_declaration_is_refused(tables: tuple[TableSpec, ...], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        Pipeline(tables)


def test_the_compiler_refuses_a_flow_its_table_does_not_declare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A compiler bug that jumps from classify past arp: the declaration catches it.
    import datapath.pipeline as pipeline

    def skip_to_forward(port: object, qos: object = None) -> list[Flow]:
        return [flow(CLASSIFY.id, 100, [("goto", FORWARD.id)], in_port=1)]

    monkeypatch.setattr(pipeline, "_classify", skip_to_forward)
    with pytest.raises(ValueError, match=r"table classify: goto table forward is not declared"):
        compile_flows(world())


def test_what_other_hosts_send_skips_ingress_as_declared() -> None:
    flows = compile_flows(cluster())
    arrival = walk(flows, from_tunnel(TUN_H2, VNI_A, R1.mac, E1.mac))
    assert arrival.outputs == [E1.ofport]
    assert INGRESS.id not in arrival.tables and arrival.tables[:2] == [CLASSIFY.id, ARP.id]
    assert "arp" in CLASSIFY.next_tables
    local = walk(flows, ipv4(E1, R1.mac, R1.ipv4))
    assert local.tables[:3] == [CLASSIFY.id, INGRESS.id, ARP.id]


def test_the_pipeline_drops_only_at_its_ends() -> None:
    # Every table between classify/ingress and forward passes what it does not match on.
    assert [t.name for t in PIPELINE if t.miss == DROP] == ["classify", "ingress", "forward"]


def test_ip_of_a_tracked_network_goes_through_conntrack_and_every_policy_table() -> None:
    flows = compile_flows(cluster())
    assert [f for f in flows_only(flows) if f.table == SERVICE.id] == [PIPELINE.miss_flow(SERVICE)]
    pkt = ipv4(E1, E2.mac, E2.ipv4)
    result = walk(flows, pkt)
    # Every table in order, but routing mode's route table (issue 25), which bridge mode
    # never enters.
    assert result.tables == [t.id for t in PIPELINE if t.name != "route"]
    assert result.committed == [GW_A_PORT]  # in the zone of net A: its gateway port
    sent = result.sent(E2.ofport)
    assert {k: v for k, v in sent.items() if not k.startswith("ct_")} == {**pkt, "tunnel_id": 0}
    assert CONNTRACK.id < SERVICE.id < POLICY.id < SRC_GROUP.id < POLICY_IN.id < FORWARD.id
    assert CONNTRACK.recirculate == ("service", "conntrack") and SERVICE.groups
    assert CLASSIFY.meters and FORWARD.meters


def test_arp_and_a_network_without_a_zone_pass_untracked() -> None:
    flows = compile_flows(cluster())
    arp = walk(flows, arp_request(E1, "10.1.0.77"))  # nobody's: flooded
    assert arp.committed == [] and POLICY.id in arp.tables and SRC_GROUP.id not in arp.tables
    no_zone = walk(flows, ipv4(E3, BROADCAST, "10.1.0.255"))  # net B has no gateway port
    assert no_zone.tables == [
        t.id for t in (CLASSIFY, INGRESS, ARP, CONNTRACK, SERVICE, POLICY, FORWARD)
    ]
    assert no_zone.committed == []
