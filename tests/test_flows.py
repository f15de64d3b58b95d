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
    assert flow(30, 5, [("ct", 1, "9", "40")]).actions == (("ct", True, 9, 40),)
    assert flow(30, 5, [("ct", 0, 9, None)]).actions == (("ct", False, 9, None),)
    assert flow(30, 5, [("ct", False, 0, 0)]).actions == (("ct", False, 0, 0),)  # may go back
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
