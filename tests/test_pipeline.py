"""The pipeline compiler: its properties, and the desired states it refuses."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest
from datapath_states import (
    E1,
    E2,
    GW_A_IP,
    GW_A_PORT,
    NET_A,
    NETWORK_A,
    TUN_H2,
    VNI_A,
    cluster,
    flows_only,
    ipv4,
    world,
)

from datapath.flood import FLOOD_PARTS
from datapath.flows import Flow, Group, diff, flow
from datapath.pipeline import (
    CONNTRACK,
    FORWARD,
    PIPELINE,
    POLICY,
    PRIO_RULE,
    SEGMENT_MASK,
    SERVICE,
    DesiredState,
    EndpointState,
    NetworkState,
    TunnelState,
    compile_flows,
    install_order,
    removal_order,
    static_flows,
)
from datapath.policy import GroupState, RuleState
from datapath.ports import PublishedPort
from datapath.tables import DST_GROUP, POLICY_IN, POLICY_OUT, SRC_GROUP
from testbed.fakeoftable import CT_ESTABLISHED, CT_INVALID, CT_NEW, CT_RELATED, CT_TRACKED, walk

UNNAT = ("nat", "", None, None, None, None, ())


@pytest.fixture(scope="module")
def flows() -> set[Flow]:
    return flows_only(compile_flows(world()))


def test_one_more_endpoint_changes_a_bounded_number_of_flows() -> None:
    def state(n: int) -> DesiredState:
        eps = [
            EndpointState(
                f"e{i}", NET_A, f"02:00:00:01:{i >> 8:02x}:{i & 0xFF:02x}", ofport=100 + i
            )
            for i in range(n)
        ]
        remotes = [
            EndpointState(f"r{i}", NET_A, f"02:00:00:02:{i >> 8:02x}:{i & 0xFF:02x}", host="h2")
            for i in range(n)
        ]
        nets = [NETWORK_A]
        return DesiredState(nets, eps, remotes, [TunnelState("h2", TUN_H2)])

    for n in (10, 200):
        d = diff(compile_flows(state(n + 1)), compile_flows(state(n)))
        # Its own flows plus the segment's floods: the same count however big the network.
        assert len(d.to_add) <= 8 and not d.to_delete, (n, len(d.to_add))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.tunnels.append(TunnelState("h2", 70)), "host h2 has two tunnels"),
        (lambda s: s.tunnels.append(TunnelState("h9", E1.ofport)), "both use ofport 1"),
        (
            lambda s: s.remote_endpoints.append(
                EndpointState("rx", NET_A, E2.mac, "10.1.0.99", host="h3")
            ),
            "endpoint ep2 and endpoint rx on host h3 both use MAC",
        ),
        (
            lambda s: s.networks.append(NetworkState("x", 9, encap="gre")),
            "network x: encap 'gre' is neither vxlan nor vlan",
        ),
        # Two networks on one VNI or VLAN would both classify what arrives with it.
        (lambda s: s.networks.append(NetworkState("x", VNI_A)), "share VNI 5000"),
        (lambda s: s.networks.append(NetworkState("x", 300, encap="vlan")), "share VLAN 300"),
        (lambda s: s.networks.append(s.networks[0]), f"network {NET_A} is listed twice"),
        (
            lambda s: s.remote_endpoints.append(EndpointState("rx", NET_A, "02:00:00:00:09:09")),
            "endpoint rx: another host's endpoint without its host",
        ),
    ],
)
def test_bad_cluster_state_is_refused_with_the_object_named(mutate: Any, message: str) -> None:
    state = cluster()
    mutate(state)
    with pytest.raises(ValueError, match=message):
        compile_flows(state)


def test_cluster_state_round_trips_through_json_form() -> None:
    assert DesiredState.from_dict(cluster().to_dict()) == cluster()


def test_pipeline_is_ordered_and_every_table_has_a_miss_flow(flows: set[Flow]) -> None:
    ids = [t.id for t in PIPELINE]
    assert ids == sorted(set(ids))
    assert PIPELINE[-1].miss == "drop"
    for spec in PIPELINE:
        (miss,) = [f for f in flows if f.table == spec.id and f.priority == 0]
        assert miss.match == ()


def test_compile_is_deterministic() -> None:
    first = compile_flows(world())
    state = world()
    rng = random.Random(7)
    for _ in range(5):
        rng.shuffle(state.networks)
        rng.shuffle(state.endpoints)
        assert compile_flows(state) == first
    first_flows = flows_only(first)
    assert install_order(first_flows) == install_order(flows_only(compile_flows(world())))
    assert [f.table for f in install_order(first_flows)] == sorted(
        (f.table for f in first_flows), reverse=True
    )
    assert [f.table for f in removal_order(first_flows)] == sorted(f.table for f in first_flows)


def test_flow_count_is_linear_in_endpoints_and_networks() -> None:
    def count(n_networks: int, per_network: int) -> int:
        networks = [
            NetworkState(f"n{i}", i + 1, gateway_ofport=1000 + i) for i in range(n_networks)
        ]
        eps = [
            EndpointState(
                f"e{i}-{j}",
                f"n{i}",
                f"02:00:00:{i:02x}:{j // 256:02x}:{j % 256:02x}",
                ofport=i * 100 + j + 1,
            )
            for i in range(n_networks)
            for j in range(per_network)
        ]
        entries = compile_flows(DesiredState(networks, eps))
        groups = [e for e in entries if isinstance(e, Group)]  # its flood groups
        assert len(groups) <= n_networks * (1 + FLOOD_PARTS)
        return len(entries) - len(groups)

    per_endpoint = (count(1, 200) - count(1, 100)) // 100
    assert per_endpoint <= 10
    assert count(1, 300) - count(1, 200) == count(1, 200) - count(1, 100) == 100 * per_endpoint
    per_network = count(2, 10) - count(1, 10) - 10 * per_endpoint
    assert count(10, 30) == count(0, 0) + 10 * per_network + 300 * per_endpoint


def test_state_round_trips_through_json_form() -> None:
    assert DesiredState.from_dict(world().to_dict()) == world()
    published = (PublishedPort("tcp", "", 8080, 80, E1.ipv4), PublishedPort("udp", "", 53, 53))
    state = dataclasses.replace(
        world(), endpoints=[dataclasses.replace(E1, port_mappings=published)]
    )
    assert DesiredState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def _add_ep(**kw: Any) -> Any:
    endpoint = EndpointState(
        **{"id": "x", "network_id": NET_A, "ofport": 7, "mac": "02:0:0:0:0:77", **kw}
    )
    return lambda s: s.endpoints.append(endpoint)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_add_ep(network_id="nope"), "network nope is unknown"),
        (_add_ep(ofport=0), "endpoint x: ofport 0 is not a valid switch port"),
        (_add_ep(id=E2.id), "endpoint ep2 is listed twice"),
        (_add_ep(ofport=2), "endpoint ep2 and endpoint x both use ofport 2"),
        (lambda s: s.networks.append(NetworkState("c", VNI_A)), "share VNI 5000"),
        (_add_ep(mac="01:00:5e:00:00:01"), "endpoint x: MAC 01:00:5e:00:00:01 is a multicast"),
        (_add_ep(mac=E1.mac), "both use MAC"),
        (_add_ep(ipv4=GW_A_IP), "gateway and endpoint x both use IP 10.1.0.254"),
        (_add_ep(ipv4="fd00::7"), "endpoint x: 'fd00::7' is not an IPv4"),
    ],
)
def test_bad_state_is_refused_with_the_object_named(mutate: Any, message: str) -> None:
    state = world()
    mutate(state)
    with pytest.raises(ValueError, match=message):
        compile_flows(state)


# ---------------------------------------------------------------- conntrack (issue 10)


def test_the_policy_tables_sit_between_policy_and_forward_in_free_ids() -> None:
    ids = [t.id for t in PIPELINE]
    assert [SRC_GROUP.id, DST_GROUP.id, POLICY_OUT.id, POLICY_IN.id] == [52, 54, 56, 58]
    assert ids.index(POLICY.id) + 5 == ids.index(FORWARD.id)
    assert not {1, 2, 3, 4} & set(ids[1:])  # the layout before issue 7 used 0-4: retired
    assert POLICY.next_tables == ("src_group", "forward") and POLICY.miss == "forward"
    chain = [(SRC_GROUP, DST_GROUP), (DST_GROUP, POLICY_OUT), (POLICY_OUT, POLICY_IN)]
    for spec, then in chain:
        assert spec.next_tables == (then.name,) and spec.miss == then.name
    assert POLICY_IN.next_tables == ("forward",) and POLICY_IN.miss == "forward"


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        # The gate may not skip the rules for new connections, nor the rules each other.
        (flow(POLICY.id, 80, [("goto", POLICY_IN.id)], ct_state=(0x21, 0x21)), "goto table pol"),
        (flow(SRC_GROUP.id, 5, [("goto", FORWARD.id)]), "goto table forward is not declared"),
        (flow(DST_GROUP.id, 5, [("goto", POLICY_IN.id)]), "goto table policy_in is not decl"),
        (flow(POLICY_OUT.id, 5, [("goto", FORWARD.id)]), "goto table forward is not declared"),
        (flow(POLICY_IN.id, 5, [("ct", True, 7, SERVICE.id)]), "ct recirculation to table se"),
        (flow(SRC_GROUP.id, 5, [], tcp_dst=80), "match field.*tcp_dst"),
        (flow(POLICY.id, 5, [], ipv4_src="10.0.0.1"), "match field.*ipv4_src"),
    ],
)
def test_a_flow_that_jumps_past_the_policy_tables_is_refused(bad: Flow, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        PIPELINE.check(bad)


def test_each_tracked_network_has_ct_and_a_default_allow_in_its_zone() -> None:
    flows = flows_only(compile_flows(cluster()))  # only net A has a gateway port: a zone
    ct = {f for f in flows if f.table == CONNTRACK.id and f.priority == PRIO_RULE}
    assert ct == {
        flow(CONNTRACK.id, PRIO_RULE, [("ct", False, GW_A_PORT, SERVICE.id, [UNNAT])], **m)
        for m in (
            {"metadata": (NETWORK_A.segment, SEGMENT_MASK), "eth_type": e} for e in (0x0800, 0x86DD)
        )
    }
    default = {f for f in flows if f.table == POLICY_IN.id and f.priority > 0}
    assert default == {
        flow(POLICY_IN.id, 1, [("ct", True, GW_A_PORT, None), ("goto", FORWARD.id)], **m)
        for m in (
            {"metadata": (NETWORK_A.segment, SEGMENT_MASK), "eth_type": e} for e in (0x0800, 0x86DD)
        )
    }
    # Per tracked network 4 flows; the misses, the gate (4), the ND bypass (5) and the
    # hairpin's way back (1) once.
    tracking = {f for f in flows if f.table in (CONNTRACK.id, POLICY.id, POLICY_IN.id)}
    assert tracking - set(static_flows()) == ct | default
    assert len(set(static_flows()) - {PIPELINE.miss_flow(t) for t in PIPELINE}) == 4 + 5 + 1


@pytest.mark.parametrize(
    ("ct_state", "outcome"),
    [
        (CT_TRACKED | CT_NEW, "rules"),
        (CT_TRACKED | CT_ESTABLISHED, "forward"),
        (CT_TRACKED | CT_RELATED, "forward"),
        (CT_TRACKED | CT_NEW | CT_RELATED, "forward"),  # an ICMP error of a connection
        (CT_TRACKED | CT_ESTABLISHED | CT_RELATED, "forward"),
        (CT_TRACKED | CT_INVALID, "drop"),
        (CT_TRACKED | CT_NEW | CT_INVALID, "drop"),
    ],
)
def test_the_conntrack_gate(ct_state: int, outcome: str) -> None:
    result = walk(compile_flows(world()), ipv4(E1, E2.mac, E2.ipv4), ct_state=ct_state)
    assert (POLICY.id in result.tables) and (CONNTRACK.id in result.tables)
    assert (SRC_GROUP.id in result.tables) == (outcome == "rules")
    assert result.outputs == ([] if outcome == "drop" else [E2.ofport])
    assert result.committed == ([GW_A_PORT] if outcome == "rules" else [])


def test_neighbour_discovery_stays_out_of_conntrack() -> None:
    flows = compile_flows(world())
    solicit = {
        "in_port": E1.ofport,
        "eth_src": E1.mac,
        "eth_dst": "33:33:ff:00:00:02",
        "eth_type": 0x86DD,
        "ipv6_src": "fd00::1",
        "ipv6_dst": "ff02::1:ff00:2",
        "ip_proto": 58,
        "icmpv6_type": 135,
    }
    result = walk(flows, solicit, ct_state=CT_TRACKED | CT_INVALID)  # were it tracked: dropped
    assert result.committed == [] and SRC_GROUP.id not in result.tables
    assert {E2.ofport, GW_A_PORT} <= result.ports
    echo = walk(flows, {**solicit, "icmpv6_type": 128}, ct_state=CT_TRACKED | CT_INVALID)
    assert echo.outputs == []  # other ICMPv6 is tracked


def test_a_gateway_port_that_does_not_fit_a_ct_zone_is_refused() -> None:
    state = world()
    state.networks[0] = dataclasses.replace(state.networks[0], gateway_ofport=0x10000)
    with pytest.raises(ValueError, match="network net-a: gateway port 65536 is its conntrack zone"):
        compile_flows(state)


# ---------------------------------------------------------------- groups (issue 10)


def _with_group(**kw: Any) -> Any:
    fields = {"id": "t:a", "network_id": NET_A, "tag": 5, "rules": (), **kw}
    return lambda s: s.groups.append(GroupState(**fields))


def _with_rule(**kw: Any) -> Any:
    fields = {"direction": "in", "priority": 1, "action": "allow", **kw}
    return _with_group(rules=(RuleState(**fields),))


def _twice(first: Any, second: Any) -> Any:
    return lambda s: (first(s), second(s))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_with_group(network_id="nope"), "group t:a: network nope is unknown"),
        (_twice(_with_group(), _with_group(id="t:b")), "group t:a and group t:b share tag 5"),
        (_twice(_with_group(), _with_group(tag=6)), "group t:a is listed twice"),
        (_with_group(tag=1 << 31), "group t:a: tag 2147483648 is out of 0-2147483647"),
        (_with_group(tag=-1), "group t:a: tag -1 is out of"),
        (_with_group(id=""), "group '': the ID must be a non-empty string"),
        (_with_rule(direction="both"), "t:a: both rule at priority 1: direction 'both' is not"),
        (_with_rule(priority=0), "in rule at priority 0: priority 0 is out of 1-100"),
        (_with_rule(priority=101), "priority 101 is out of 1-100"),
        (_with_rule(action="reject"), "action 'reject' is not allow or deny"),
        (_with_rule(peer_tag=1 << 31), "peer tag 2147483648 is out of"),
        (_with_rule(peer_cidrs=("10.0.0.1/24",)), "'10.0.0.1/24' is not a CIDR"),
        (_with_rule(peer_cidrs=("fd00::/129",)), "'fd00::/129' is not a CIDR"),
        (_with_rule(protocol=256), "protocol 256 is out of 0-255"),
        (_with_rule(protocol=6, port=70000), "port 70000 is out of 0-65535"),
        (_with_rule(protocol=1, port=80), "port 80 needs protocol tcp \\(6\\) or udp \\(17\\)"),
        (_with_rule(port=80), "port 80 needs protocol tcp"),
    ],
)
def test_a_bad_group_is_refused_with_the_group_and_the_field_named(
    mutate: Any, message: str
) -> None:
    state = world()
    mutate(state)
    with pytest.raises(ValueError, match=message):
        compile_flows(state)


def test_groups_and_endpoint_groups_round_trip_through_json() -> None:
    state = world()
    state.endpoints[0] = dataclasses.replace(state.endpoints[0], group="t:a")
    rules = (
        RuleState("in", 10, "allow", peer_tag=7, protocol=6, port=80),
        RuleState("out", 1, "deny", peer_cidrs=("10.9.0.0/16", "fd00:9::/48"), protocol=1),
    )
    state.groups = [GroupState("t:a", NET_A, 5, rules), GroupState("t:b", NET_A, 0)]
    again = DesiredState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state and compile_flows(again) == compile_flows(state)
    assert DesiredState.from_dict({}).groups == []
