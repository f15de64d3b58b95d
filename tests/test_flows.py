"""Flows as canonical values and the reconcile diff."""

from __future__ import annotations

from typing import Any

import pytest

from datapath.flows import COOKIE, Flow, diff, flow, replaced


def test_flow_is_canonical() -> None:
    a = flow(1, 5, [("goto", 2), ("output", 3)], eth_dst="AA:BB:CC:00:00:01", in_port=3)
    b = flow(1, 5, [("output", 3), ("goto", 2)], in_port=3, eth_dst="aa:bb:cc:00:00:01")
    assert a == b and hash(a) == hash(b)
    assert a.cookie == COOKIE
    assert flow(0, 1, metadata=(5, (1 << 64) - 1)).match == (("metadata", 5),)
    assert flow(0, 1, metadata=(0x1FF, 0xFF)).match == (("metadata", (0xFF, 0xFF)),)
    assert flow(0, 1, ipv6_src="fe80::/10").match == (("ipv6_src", ("fe80::", "ffc0::")),)
    assert flow(0, 1, ipv4_dst="10.1.2.3/32").match == (("ipv4_dst", "10.1.2.3"),)
    assert flow(0, 1, [("drop",)]).actions == ()
    with pytest.raises(ValueError, match="must go forward"):
        flow(2, 1, [("goto", 1)])
    with pytest.raises(ValueError, match="not a MAC"):
        flow(0, 1, eth_dst="zz")


F1 = flow(0, 10, [("goto", 1)], in_port=1)
F2 = flow(0, 10, [("goto", 1)], in_port=2)
F3 = flow(1, 10, [("output", 1)], eth_dst="02:00:00:00:00:01")


def test_diff_is_empty_when_equal() -> None:
    assert diff({F1, F2}, {F1, F2}) == (frozenset(), frozenset())


def test_diff_adds_missing_and_deletes_stale() -> None:
    to_add, to_delete = diff({F1, F3}, {F1, F2})
    assert to_add == {F3}
    assert to_delete == {F2}


def test_diff_replaces_a_changed_flow_by_add_only() -> None:
    changed = flow(1, 10, [("output", 2)], eth_dst="02:00:00:00:00:01")
    result = diff({F1, changed}, {F1, F3})
    assert result.to_add == {changed}
    assert result.to_delete == frozenset()  # a strict delete would remove the new one too
    assert replaced(result, {F1, F3}) == {changed}
    recookied = Flow(F1.table, F1.priority, F1.match, F1.actions, COOKIE | 1)
    assert diff({recookied}, {F1}).to_add == {recookied}


def test_diff_refuses_two_desired_flows_with_one_identity() -> None:
    other = flow(0, 10, [("goto", 2)], in_port=1)
    with pytest.raises(ValueError, match="one identity"):
        diff({F1, other}, set())


def test_meters_groups_and_conntrack_are_canonical() -> None:
    a = flow(0, 5, [("output", 3), ("meter", "7"), ("goto", 10)], in_port=3)
    assert a.actions == (("meter", 7), ("output", 3), ("goto", 10))  # the meter comes first
    assert flow(30, 5, [("ct", 1, "9", "40")]).actions == (("ct", True, 9, 40, ()),)
    assert flow(30, 5, [("ct", 0, 9, None, [])]).actions == (("ct", False, 9, None, ()),)
    assert flow(30, 5, [("ct", False, 0, 0)]).actions == (("ct", False, 0, 0, ()),)  # may go back
    assert flow(40, 5, [("group", 0)]).actions == (("group", 0),)


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        ([("meter", 1), ("meter", 2)], "meter given twice"),
        ([("meter", 0)], "meter id 0 is out of"),
        ([("group", 0xFFFFFFFF)], "group id 4294967295 is out of"),
        ([("ct", True, 70000, None)], "ct zone 70000 is out of"),
        ([("ct", True, 1, 255)], "ct recirculation to table 255"),
    ],
)
def test_bad_meters_groups_and_conntrack_are_refused(actions: list[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        flow(0, 5, actions)


REG6_ZONE = ("reg", "reg6", 0, 16)
IP4, IP6 = 0x0800, 0x86DD
DNAT = ("nat", "dst", "10.77.0.3", None, 8080, None, ())


def test_ct_nested_actions_and_register_zones_are_canonical() -> None:
    a = flow(
        30,
        5,
        [
            (
                "ct",
                True,
                ("reg", "reg6", "0", "16"),
                40,
                [
                    ("set_field", "ct_mark", "7"),
                    ("nat", "dst", "10.77.0.3", "10.77.0.3", 80, 80, []),
                ],
            )
        ],
        eth_type=0x0800,
    )
    assert a.actions == (
        (
            "ct",
            True,
            REG6_ZONE,
            40,
            (("set_field", "ct_mark", 7), ("nat", "dst", "10.77.0.3", None, 80, None, ())),
        ),
    )
    # Nested order is kept: it is what OVS does.
    b = flow(30, 5, [("ct", 1, 3, None, [DNAT, ("set_field", "ct_label", 1 << 100)])], eth_type=IP4)
    assert b.actions[0][4] == (DNAT, ("set_field", "ct_label", 1 << 100))
    v6 = ("nat", "src", "FD00::0001", "fd00::00ff", 1024, 2048, ("random", "persistent"))
    assert flow(30, 5, [("ct", True, 3, None, [v6])], eth_type=IP6).actions[0][4] == (
        ("nat", "src", "fd00::1", "fd00::ff", 1024, 2048, ("persistent", "random")),
    )
    # A plain nat (un-NAT the replies) needs no commit.
    unnat = ("nat", "", None, None, None, None, ())
    assert flow(30, 5, [("ct", False, 3, 40, [unnat])], eth_type=IP6).actions[0][4] == (unnat,)


def test_a_nat_needs_a_match_on_its_ip_version() -> None:
    """OVS refuses it otherwise (OFPBAC_MATCH_INCONSISTENT)."""
    unnat = ("nat", "", None, None, None, None, ())
    for nat, eth_type in ((DNAT, IP6), (DNAT, None), (unnat, 0x0806), (unnat, None)):
        with pytest.raises(ValueError, match="needs a match on eth_type"):
            flow(
                30,
                5,
                [("ct", True, 3, None, [nat])],
                **({"eth_type": eth_type} if eth_type else {}),
            )
    v6 = ("nat", "dst", "fd00::3", None, None, None, ())
    with pytest.raises(ValueError, match="needs a match on eth_type 0x86dd"):
        flow(30, 5, [("ct", True, 3, None, [v6])], eth_type=IP4)


def test_registers_conj_id_and_ct_label_canonicalise_like_ovs() -> None:
    assert flow(0, 1, reg5=(7, 0xFFFFFFFF)).match == (("reg5", 7),)
    assert flow(0, 1, reg5=(1 << 31, 1 << 31)).match == (("reg5", (1 << 31, 1 << 31)),)
    assert flow(0, 1, reg15=(0x1FF, 0xF0)).match == (("reg15", (0xF0, 0xF0)),)
    assert flow(0, 1, conj_id=(9, 0xFFFFFFFF)).match == (("conj_id", 9),)
    full_label = (1 << 128) - 1
    assert flow(0, 1, ct_label=(5, full_label)).match == (("ct_label", 5),)
    assert flow(0, 1, ct_label=(1 << 64, 1 << 64)).match == (("ct_label", (1 << 64, 1 << 64)),)
    assert flow(0, 1, [("set_field", "reg6", "12")]).actions == (("set_field", "reg6", 12),)
    with pytest.raises(ValueError, match="reg5: 0x100000000 does not fit in 32 bits"):
        flow(0, 1, reg5=1 << 32)
    with pytest.raises(ValueError, match="does not fit"):
        flow(0, 1, [("set_field", "reg0", -1)])


@pytest.mark.parametrize(
    ("ct", "message"),
    [
        (("ct", True, ("reg", "reg16", 0, 16), None), "expected an int or"),
        (("ct", True, ("reg", "reg6", 0, 17), None), "16 bits of a register"),
        (("ct", True, ("reg", "reg6", 4, 12), None), "16 bits of a register"),
        (("ct", True, ("reg", "reg6", 17, 16), None), "16 bits of a register"),
        (("ct", True, ("metadata", "reg6", 0, 16), None), "expected an int or"),
        (("ct", True, 1, None, [("set_field", "reg5", 1)]), "may only set_field ct_mark"),
        (("ct", True, 1, None, [("output", 1)]), "may only set_field ct_mark"),
        (("ct", True, 1, None, [("set_field", "ct_mark", (1, 1))]), "no mask"),
        (("ct", False, 1, None, [("set_field", "ct_mark", 1)]), "needs commit"),
        (("ct", False, 1, None, [DNAT]), "needs commit"),
        (("ct", True, 1, None, [DNAT, DNAT]), "one nat per ct"),
        (("ct", True, 1, None, [("nat", "up", "10.0.0.1", None, None, None, ())]), "kind"),
        (("ct", True, 1, None, [("nat", "", "10.0.0.1", None, None, None, ())]), "plain nat"),
        (("ct", True, 1, None, [("nat", "dst", None, None, 80, None, ())]), "needs an address"),
        (("ct", True, 1, None, [("nat", "dst", "10.0.0.2", "10.0.0.1", None, None, ())]), "range"),
        (("ct", True, 1, None, [("nat", "dst", "10.0.0.2", "fd00::1", None, None, ())]), "range"),
        (("ct", True, 1, None, [("nat", "dst", "10.0.0.2", None, 0, None, ())]), "port 0"),
        (("ct", True, 1, None, [("nat", "dst", "10.0.0.2", None, 90, 80, ())]), "port range"),
        (("ct", True, 1, None, [("nat", "src", "10.0.0.2", None, None, None, "random")]), "tuple"),
        (
            (
                "ct",
                True,
                1,
                None,
                [("nat", "src", "10.0.0.2", None, None, None, ("random", "hash"))],
            ),
            "random or hash",
        ),
        (
            ("ct", True, 1, None, [("nat", "dst", "10.0.0", None, None, None, ())]),
            "does not appear",
        ),
        (("ct", True, 1), "ct is"),
    ],
)
def test_bad_conntrack_actions_are_refused(ct: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        flow(30, 5, [ct], eth_type=IP4)
