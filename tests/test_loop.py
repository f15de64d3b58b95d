"""common.loop: the one background loop (Reconciler) and its Backoff, driven by events."""

from __future__ import annotations

import threading

import pytest

from common.loop import Backoff, Reconciler, jittered

WAIT = 10.0  # only a bound on a hung test: nothing here depends on timing


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(0.5, 3.0)
    assert [b.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    b.reset()
    assert b.next() == 0.5


def test_a_poke_runs_a_pass_and_stop_ends_the_thread() -> None:
    ran = threading.Event()
    loop = Reconciler("t", lambda: ran.set(), coalesce=0).start()
    assert not loop.passes
    loop.poke()
    assert ran.wait(WAIT)
    loop.stop()
    loop.join(WAIT)
    assert not loop._thread.is_alive() and loop.stopped


def test_a_failing_pass_is_retried_until_it_succeeds() -> None:
    tries: list[int] = []
    done = threading.Event()

    def flaky() -> None:
        tries.append(1)
        if len(tries) < 3:
            raise OSError("away")
        done.set()

    loop = Reconciler("t", flaky, coalesce=0, backoff=Backoff(0, 0), run_at_start=True).start()
    assert done.wait(WAIT)
    loop.stop()
    loop.join(WAIT)
    assert (loop.failures, loop.passes) == (2, 1)


def test_a_pass_that_asks_to_run_again_runs_without_a_poke() -> None:
    left = [3]
    done = threading.Event()

    def step() -> float | None:
        left[0] -= 1
        if left[0]:
            return 0.0
        done.set()
        return None

    loop = Reconciler("t", step, coalesce=0, run_at_start=True).start()
    assert done.wait(WAIT)
    loop.stop()
    assert left == [0]


def test_stop_cuts_a_blocking_pass_short_through_on_stop() -> None:
    unblock, entered = threading.Event(), threading.Event()

    def blocking() -> None:
        entered.set()
        unblock.wait()

    loop = Reconciler("t", blocking, coalesce=0, on_stop=unblock.set, run_at_start=True)
    loop.start()
    assert entered.wait(WAIT)
    loop.stop()
    loop.join(WAIT)
    assert not loop._thread.is_alive() and loop.passes == 1


def test_backoff_jitter_cuts_each_delay_by_a_random_part_of_it() -> None:
    draws = iter([0.0, 1.0, 0.5])
    b = Backoff(1.0, 8.0, jitter=0.5, rand=lambda: next(draws))
    # 1 uncut, 2 cut by half, 4 cut by a quarter: the doubling itself is not jittered
    assert [b.next() for _ in range(3)] == [1.0, 1.0, 3.0]
    assert jittered(2.0, 0.0, lambda: 1.0) == 2.0


def test_backoff_jitter_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        Backoff(jitter=1.5)
