"""Which pair a CNI pod gets (datapath.plugcost): the one that costs less, as measured."""

from __future__ import annotations

import pytest

from datapath.plugcost import MOVE_PRIOR, WINDOW, Estimate, PlugCosts, own_pair, shrunk


def test_the_first_measurement_replaces_a_placeholder_and_the_estimate_is_a_median() -> None:
    e = Estimate(0.0)
    e.update(0.030)
    assert (e.seconds, e.samples) == (0.030, 1)
    e.update(0.010)
    assert e.seconds == 0.010  # of two, the smaller
    e.update(0.012)
    assert e.seconds == 0.012
    for _ in range(WINDOW):
        e.update(0.050)
    assert e.seconds == 0.050  # it follows the host, within half a window


def test_a_slow_one_among_ordinary_ones_does_not_flip_the_choice() -> None:
    """A busy host: one port add in a few takes several times the others. The pods keep
    their own pairs (a mean of these went to 54 ms and sent them to 40 ms moves)."""
    c = PlugCosts()
    for seconds in (0.015, 0.090, 0.014, 0.016, 0.015, 0.120, 0.014):
        c.added(seconds)
        assert c.own_pair(), seconds
    assert c.port_add.seconds == 0.015


def test_one_slow_first_move_does_not_decide_for_good() -> None:
    """A move of 200 ms (a loaded host at start) against the 20 ms prior changes nothing; a
    second one does, and a few ordinary moves bring it back below a 60 ms port add."""
    c = PlugCosts()
    c.added(0.060)
    c.moved(0.200)
    assert c.move.seconds == MOVE_PRIOR and not c.own_pair()  # one is not enough
    c.moved(0.180)
    assert c.move.seconds == 0.180 and c.own_pair()  # two of three: for now
    for _ in range(2):
        c.moved(0.022)
    assert c.move.seconds == 0.022 and not c.own_pair()


@pytest.mark.parametrize(
    ("port_add", "move", "own"),
    [
        (Estimate(0.0), Estimate(MOVE_PRIOR), True),  # nothing measured: a quiet switch
        (Estimate(0.008, 3), Estimate(MOVE_PRIOR), True),  # quiet: a port add is cheap
        (Estimate(0.170, 3), Estimate(MOVE_PRIOR), False),  # 1,000 ports: the move is
        (Estimate(0.025, 3), Estimate(0.030, 2), True),  # a slow kernel's move
        (Estimate(0.030, 3), Estimate(0.030, 2), False),  # a tie keeps the pool's
    ],
)
def test_a_pod_gets_its_own_pair_only_while_a_port_add_costs_less_than_a_move(
    port_add: Estimate, move: Estimate, own: bool
) -> None:
    assert own_pair(port_add, move) is own


def test_the_choice_follows_the_switch_as_it_fills_and_empties() -> None:
    c = PlugCosts()
    assert c.own_pair() and c.state()["cni_pair"] == "own"
    c.added(0.200)  # a batch beside many ports
    assert not c.own_pair()
    c.moved(0.020)  # = the prior
    for _ in range(10):
        c.added(0.005)  # the ports went away
    assert c.own_pair()
    assert c.state() == {
        "port_add_ms": pytest.approx(c.port_add.seconds * 1000, abs=0.05),
        "port_adds": 11,
        "port_add_ports": 0,
        "ports": 0,
        "move_ms": 20.0,
        "moves": 1,
        "cni_pair": "own",
        "chosen_by": "measured",
    }


@pytest.mark.parametrize(("choice", "own"), [("own", True), ("pool", False)])
def test_cni_pair_overrides_what_was_measured(choice: str, own: bool) -> None:
    c = PlugCosts(choice)
    c.added(0.500 if own else 0.001)  # would choose the other
    assert c.own_pair() is own
    assert (c.state()["cni_pair"], c.state()["chosen_by"]) == (choice, "--cni-pair")


def test_an_unknown_cni_pair_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="CNI pair 'both': must be one of auto, pool, own"):
        PlugCosts("both")


def test_a_port_add_measured_on_a_larger_switch_is_measured_again_once_it_shrank() -> None:
    """Beside 1,000 ports a port add cost 280 ms, so pods took pool ports, and nothing
    measured a port add again; once the switch has less than half those ports, the next
    pod gets its own pair, and its add's cost replaces the old one."""
    ports = [1016]
    c = PlugCosts(ports=lambda: ports[0])
    c.added(0.280)
    assert not c.own_pair() and c.state()["port_add_ports"] == 1016
    ports[0] = 600
    assert not c.own_pair()  # still more than half
    ports[0] = 16
    assert c.own_pair() and c.state()["cni_pair"] == "own"
    c.added(0.012)
    assert c.port_add.seconds == 0.012 and c.own_pair()  # replaced, not blended
    ports[0] = 1016
    c.added(0.290)  # grown again: kept with the others (each own pair's add measures it)
    assert c.port_add.seconds == 0.012
    c.added(0.300)
    assert c.port_add.seconds == 0.290 and not c.own_pair()


@pytest.mark.parametrize(("then", "now", "stale"), [(1016, 16, True), (1016, 508, False),
                                                    (16, 1016, False), (0, 0, False)])  # fmt: skip
def test_a_switch_has_shrunk_below_half(then: int, now: int, stale: bool) -> None:
    assert shrunk(then, now) is stale
