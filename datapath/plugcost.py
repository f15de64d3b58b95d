"""Which pair a CNI pod's interface comes from, by what each costs on this host now.

A pod can take a free pool port, whose container end the kernel then moves into the pod's
namespace: about 20 ms whatever the host holds (the move's RCU waits). Or it gets a pair
of its own, its end made in the pod's namespace (no move) and its host end added to the
bridge: one reconfiguration of ovs-vswitchd, which costs a few ms on a quiet switch and
grows with the ports it has (hundreds of ms beside 1,000 ports, userspace datapath).
Neither is cheaper everywhere, so the agent measures both as it goes and takes the one
that costs less now (or what --cni-pair says). The estimates are exponentially weighted
means of what was measured: every port add (a pair of its own, Docker's or a pod's, and
every batch the pool makes) and every pool port's move, starting from the move's prior
(measured here), so that one slow first move does not decide for good.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

MOVE_PRIOR = 0.020  # seconds: the kernel's move of an interface between namespaces, here
WEIGHT = 0.3  # how much the newest measurement counts


@dataclass
class Estimate:
    """One operation's running cost, in seconds."""

    seconds: float
    samples: int = 0
    prior: bool = False  # ``seconds`` is a known cost to start from, not a placeholder

    def update(self, seconds: float) -> None:
        """Fold in a measurement; the first one replaces a placeholder, not a prior (one
        slow first move must not decide for good)."""
        if self.samples == 0 and not self.prior:
            self.seconds = seconds
        else:
            self.seconds += WEIGHT * (seconds - self.seconds)
        self.samples += 1


CHOICES = ("auto", "pool", "own")  # the agent's --cni-pair


def own_pair(port_add: Estimate, move: Estimate, choice: str = "auto") -> bool:
    """Whether a pod gets its own pair: as ``choice`` says ("own", "pool"), or ("auto")
    while a port add is expected to cost less than a pool port's move. With no port add
    measured yet, its own (a switch with no ports is a cheap one to add to)."""
    if choice != "auto":
        return choice == "own"
    return port_add.samples == 0 or port_add.seconds < move.seconds


class PlugCosts:
    """What a port add and a move cost on this host, as measured; thread-safe."""

    def __init__(self, choice: str = "auto", move_prior: float = MOVE_PRIOR) -> None:
        if choice not in CHOICES:
            raise ValueError(f"CNI pair {choice!r}: must be one of {', '.join(CHOICES)}")
        self.choice = choice
        self._lock = threading.Lock()
        self.port_add = Estimate(0.0)
        self.move = Estimate(move_prior, prior=True)

    def added(self, seconds: float) -> None:
        with self._lock:
            self.port_add.update(seconds)

    def moved(self, seconds: float) -> None:
        with self._lock:
            self.move.update(seconds)

    def own_pair(self) -> bool:
        with self._lock:
            return own_pair(self.port_add, self.move, self.choice)

    def state(self) -> dict[str, Any]:
        """For inspect: the estimates (ms) and what a pod gets now."""
        with self._lock:
            return {
                "port_add_ms": round(self.port_add.seconds * 1000, 1),
                "port_adds": self.port_add.samples,
                "move_ms": round(self.move.seconds * 1000, 1),
                "moves": self.move.samples,
                "cni_pair": "own" if own_pair(self.port_add, self.move, self.choice) else "pool",
                "chosen_by": "measured" if self.choice == "auto" else "--cni-pair",
            }
