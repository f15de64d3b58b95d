"""What the flow controller wants on the switch and what it knows the switch holds: the
pure bookkeeping behind datapath.ofapp.FlowController, which does the I/O.

The desired flows are kept by identity (table, priority, match). set_desired() replaces
them all; apply() changes some. The controller's *model of the switch* is what a full
reconcile found and wrote on the current connection, plus every incremental send since.
While it is known and holds, a change needs only the flow-mods of the identities it
touched, computed against the model: no flow-stats read. It is forgotten (and the next
job is a full read-and-diff reconcile) on a new connection, after an error reply or a
failed send, and on resync().
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from datapath.flows import Entry, FlowDiff, Identity, diff, index_by_identity, replaced

Flow = Entry  # a flow, meter or group: each kept by its identity


@dataclass(frozen=True)
class ReconcileStats:
    """What one reconcile found and changed."""

    connection: int  # sequence number of the switch connection it ran on (1 = first)
    dpid: int
    generation: int  # the set_desired()/apply() generation it applied
    desired: int
    found: int  # our flows on the switch before it (incremental: as the model says)
    added: int  # missing or changed flows sent as ADD (changed ones are also in replaced)
    replaced: int
    deleted: int
    seconds: float
    errors: tuple[str, ...] = ()
    full: bool = True  # read the switch's flows and diffed; False: sent a delta


@dataclass(frozen=True)
class Job:
    """One round of work for the reconcile worker."""

    generation: int
    full: frozenset[Flow] | None = None  # read the switch and diff against these
    delta: FlowDiff | None = None  # or send these flow-mods (diffed against the model)
    replaced: int = 0
    found: int = 0  # the model's size before the delta
    desired: int = 0  # how many flows are desired in all, for a delta's stats
    present: frozenset[Identity] = frozenset()  # touched identities the switch holds


class SwitchBook:
    """The desired flows, the model of the switch, and the identities changed since the
    last job. Not thread-safe: FlowController holds its lock around every call."""

    def __init__(self) -> None:
        self.desired: dict[Identity, Flow] = {}
        self.generation = 0
        self.primed = False  # set_desired() was called: until then, never touch the switch
        self._model: dict[Identity, Flow] | None = None
        self._model_connection = 0
        self._touched: set[Identity] = set()
        self._resync = False
        self._handed_out = 0  # the generation of the last job

    def set_desired(self, flows: Iterable[Flow]) -> int:
        """Replace every desired flow; the next job is a full reconcile. Raises ValueError
        if two flows share one identity."""
        self.desired = index_by_identity(flows)
        self.primed = True
        self._resync = True
        self._touched.clear()
        self.generation += 1
        return self.generation

    def apply(self, delta: FlowDiff) -> int:
        """Delete the identities of delta.to_delete, then add (or replace) delta.to_add."""
        adds = index_by_identity(delta.to_add)
        for f in delta.to_delete:
            self.desired.pop(f.identity, None)
            self._touched.add(f.identity)
        self.desired.update(adds)
        self._touched.update(adds)
        self.generation += 1
        return self.generation

    def resync(self) -> int:
        """The next job reads the switch and diffs (a full reconcile); its generation."""
        self._resync = True
        self.generation += 1
        return self.generation

    def forget(self) -> None:
        """The switch may hold anything now (an error reply, a failed send)."""
        self._model = None

    @property
    def known(self) -> bool:
        return self._model is not None

    def next_job(self, connection: int) -> Job | None:
        """What to do on this connection now, or None when the switch is up to date (or
        must not be touched yet)."""
        if not self.primed:
            return None
        if self._resync or self._model is None or self._model_connection != connection:
            self._resync = False
            self._touched.clear()
            self._handed_out = self.generation
            return Job(self.generation, full=frozenset(self.desired.values()))
        if self._handed_out == self.generation:
            return None
        self._handed_out = self.generation
        model = self._model
        want = [self.desired[i] for i in self._touched if i in self.desired]
        have = [model[i] for i in self._touched if i in model]
        self._touched.clear()
        delta = diff(want, have)
        return Job(
            self.generation,
            delta=delta,
            replaced=len(replaced(delta, have)),
            found=len(model),
            desired=len(self.desired),
            present=frozenset(e.identity for e in have),
        )

    def done(self, job: Job, connection: int, clean: bool) -> None:
        """The job's flow-mods were all sent and the barrier answered; ``clean``: without
        an error reply. The model follows what the switch now holds."""
        if not clean:
            self._model = None
        elif job.full is not None:
            self._model = {f.identity: f for f in job.full}
            self._model_connection = connection
        elif job.delta is not None and self._model is not None:
            for f in job.delta.to_delete:
                self._model.pop(f.identity, None)
            for f in job.delta.to_add:
                self._model[f.identity] = f
