"""Which pair a CNI pod's interface comes from, by what each costs on this host now.

A pod can take a free pool port, whose container end the kernel then moves into the pod's
namespace: about 20 ms whatever the host holds (the move's RCU waits). Or it gets a pair
of its own, its end made in the pod's namespace (no move) and its host end added to the
bridge: one reconfiguration of ovs-vswitchd, which costs a few ms on a quiet switch and
grows with the ports it has (hundreds of ms beside 1,000 ports, userspace datapath).
Neither is cheaper everywhere, so the agent measures both as it goes and takes the one
that costs less now (or what --cni-pair says). The estimates are (lower) medians of the
latest measurements: every port add (a pair of its own, Docker's or a pod's, and every batch the
pool makes) and every pool port's move, the move's starting from its prior (measured here),
so that one slow first move does not decide for good. A median, not a mean: on a busy host
one add in a few takes several times the others (measured: the weighted mean reached 54 ms
where adds took 15 and sent pods to 40 ms moves), and one sample must not flip the choice
while a real change in cost does within a few. A port add's cost
depends on the ports the switch has: one measured on a switch that has since shrunk to
less than half is stale, so the next pod gets its own pair, which measures it again.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MOVE_PRIOR = 0.020  # seconds: the kernel's move of an interface between namespaces, here
WINDOW = 7  # the latest measurements an estimate is the median of


@dataclass
class Estimate:
    """One operation's running cost, in seconds (the lower median of the latest
    measurements: of two, the smaller, so that one slow one beside an ordinary one does
    not decide), and how many switch ports there were at its last measurement."""

    seconds: float
    samples: int = 0
    prior: bool = False  # ``seconds`` is a known cost to start from, not a placeholder
    ports: int = 0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)

    def __post_init__(self) -> None:
        if self.prior:
            self.recent.append(self.seconds)

    def update(self, seconds: float, ports: int = 0) -> None:
        """Fold in a measurement; the first one replaces a placeholder, not a prior (one
        slow first move must not decide for good), and one on a switch that has shrunk to
        less than half replaces what was measured on the larger one."""
        if (self.samples == 0 and not self.prior) or shrunk(self.ports, ports):
            self.recent.clear()
        self.recent.append(seconds)
        self.seconds = statistics.median_low(self.recent)
        self.samples += 1
        self.ports = ports


def shrunk(then: int, now: int) -> bool:
    """Whether the switch has less than half the ports it had when a port add was last
    measured: a port add costs ovs-vswitchd less on a smaller switch, so that measurement
    says too much (and while pods take pool ports nothing measures it again)."""
    return now < then / 2


CHOICES = ("auto", "pool", "own")  # the agent's --cni-pair


def own_pair(port_add: Estimate, move: Estimate, choice: str = "auto", ports: int = 0) -> bool:
    """Whether a pod gets its own pair: as ``choice`` says ("own", "pool"), or ("auto")
    while a port add is expected to cost less than a pool port's move, on a switch of
    ``ports`` ports now. With no port add measured yet, or one measured on a switch twice
    the size, its own (the add measures it again)."""
    if choice != "auto":
        return choice == "own"
    if port_add.samples == 0 or shrunk(port_add.ports, ports):
        return True
    return port_add.seconds < move.seconds


class PlugCosts:
    """What a port add and a move cost on this host, as measured; thread-safe."""

    def __init__(
        self,
        choice: str = "auto",
        move_prior: float = MOVE_PRIOR,
        ports: Callable[[], int] = lambda: 0,
    ) -> None:
        if choice not in CHOICES:
            raise ValueError(f"CNI pair {choice!r}: must be one of {', '.join(CHOICES)}")
        self.choice = choice
        self.ports = ports  # the switch's endpoint ports now (datapath.endpointports sets it)
        self._lock = threading.Lock()
        self.port_add = Estimate(0.0)
        self.move = Estimate(move_prior, prior=True)

    def added(self, seconds: float) -> None:
        ports = self.ports()
        with self._lock:
            self.port_add.update(seconds, ports)

    def moved(self, seconds: float) -> None:
        with self._lock:
            self.move.update(seconds)

    def own_pair(self) -> bool:
        ports = self.ports()
        with self._lock:
            return own_pair(self.port_add, self.move, self.choice, ports)

    def state(self) -> dict[str, Any]:
        """For inspect: the estimates (ms) and what a pod gets now."""
        ports = self.ports()
        with self._lock:
            own = own_pair(self.port_add, self.move, self.choice, ports)
            return {
                "port_add_ms": round(self.port_add.seconds * 1000, 1),
                "port_adds": self.port_add.samples,
                "port_add_ports": self.port_add.ports,
                "ports": ports,
                "move_ms": round(self.move.seconds * 1000, 1),
                "moves": self.move.samples,
                "cni_pair": "own" if own else "pool",
                "chosen_by": "measured" if self.choice == "auto" else "--cni-pair",
            }
