"""Which transactions may be committed together as one batch (``Store.txn_batch``): pure.

Two txns are independent when neither writes a key (or a range, for a prefix delete) that
the other writes or compares. A batch of independent txns has the outcome of committing
them one by one in any order: each txn's compares read only keys that no other member
writes, so it sees the same values before the batch as after any of the others, and no
two members write the same key. That is what lets a backend check every member's compares
against the state before the batch (etcd evaluates all the compares of a nested txn first)
and still give each member the outcome it would have had alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from store.base import Delete, Put, StoreError, Txn, check_txn

# etcd refuses a txn with more than --max-txn-ops (default 128) ops at one level; a batch
# is one op per member there.
MAX_BATCH = 64

Span = tuple[str, bool]  # a key, and whether it stands for every key under it


def reads(t: Txn) -> list[Span]:
    """The keys and ranges ``t``'s compares look at."""
    return [(c.key, c.prefix) for c in t.compares]


def writes(t: Txn) -> list[Span]:
    """The keys and ranges ``t``'s ops change."""
    out: list[Span] = []
    for op in t.ops:
        if isinstance(op, Put):
            out.append((op.key, False))
        elif isinstance(op, Delete):
            out.append((op.key, op.prefix))
        else:
            raise TypeError(f"not an op: {op!r}")
    return out


@dataclass
class Spans:
    """A set of keys and prefixes, asked whether a key or a prefix overlaps it."""

    keys: set[str] = field(default_factory=set)
    prefixes: list[str] = field(default_factory=list)

    def add(self, spans: Iterable[Span]) -> None:
        for key, prefix in spans:
            if prefix:
                self.prefixes.append(key)
            else:
                self.keys.add(key)

    def overlaps(self, span: Span) -> bool:
        key, prefix = span
        if any(key.startswith(p) for p in self.prefixes):
            return True
        if not prefix:
            return key in self.keys
        return any(p.startswith(key) for p in self.prefixes) or any(
            k.startswith(key) for k in self.keys
        )

    def overlaps_any(self, spans: Iterable[Span]) -> bool:
        return any(self.overlaps(s) for s in spans)


def split_batch(members: Sequence[Txn], limit: int = MAX_BATCH) -> tuple[list[int], list[int]]:
    """The members (by index, in order) that go into one batch, and those that must wait.

    Greedy in order: a member joins when it is independent of every member already in,
    and at most ``limit`` join. The first member always joins, so a queue drained by
    repeated splits makes progress, and a member that waits is first in line next time.
    """
    seen_reads, seen_writes = Spans(), Spans()
    taken: list[int] = []
    waiting: list[int] = []
    for i, t in enumerate(members):
        r, w = reads(t), writes(t)
        if len(taken) >= limit or (
            seen_writes.overlaps_any(w) or seen_reads.overlaps_any(w) or seen_writes.overlaps_any(r)
        ):
            waiting.append(i)
            continue
        taken.append(i)
        seen_reads.add(r)
        seen_writes.add(w)
    return taken, waiting


def check_batch(members: Sequence[Txn]) -> None:
    """Reject a batch a backend cannot commit as one: a member that ``check_txn`` rejects,
    members that are not independent, or more than MAX_BATCH members (StoreError)."""
    if len(members) > MAX_BATCH:
        raise StoreError(f"a batch holds at most {MAX_BATCH} txns, got {len(members)}")
    for t in members:
        check_txn(t.compares, t.ops, ())
    _, waiting = split_batch(members)
    if waiting:
        raise StoreError(
            f"txn {waiting[0]} of the batch writes a key another member writes or compares"
        )
