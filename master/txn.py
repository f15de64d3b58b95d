"""Compare-and-swap plumbing: every read-modify-write of the cluster state is one txn.

An operation reads what it needs at some revision, decides with pure code
(master/decisions), then commits with compares that fail if anything it relied on
changed. ``retrying`` then runs it again on fresh reads. A refused request therefore
changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from common import keys
from common.loop import Backoff
from store import KV, Compare, Delete, Op, Put, Store, StoreError, StoreUnavailable, TxnResult

from .errors import BadRequest, Conflict, NotFound, Unavailable
from .groupcommit import GroupCommit
from .metrics import txn_conflict, txn_retried

MAX_ATTEMPTS = 64
T = TypeVar("T")
P = TypeVar("P")


class Retry(Exception):
    """A compare failed: the state moved under us; decide again."""


def retrying(obj: str, attempt: Callable[[], T]) -> T:
    """Run ``attempt`` until it stops raising Retry, with a short backoff.

    Store errors that escape ``attempt`` become Unavailable naming ``obj``.
    """
    delays = Backoff(0.001, 0.05)
    for _ in range(MAX_ATTEMPTS):
        try:
            return attempt()
        except Retry:
            txn_retried()
            time.sleep(delays.next())
        except StoreUnavailable as e:
            raise Unavailable(obj, f"cluster store unavailable: {e}") from None
        except StoreError as e:
            raise Unavailable(obj, f"cluster store error: {e}") from None
    txn_conflict()
    raise Conflict(obj, "too many concurrent updates; retry the request")


def retrying_hot(obj: str, attempt: Callable[[bool], T]) -> T:
    """``retrying`` for the hot path: ``attempt(fresh)`` first runs on cached records
    (``fresh=False``), which its txn's compares check. What that try cannot settle is
    decided again on fresh reads: a failed compare or a record not in the cache (Retry),
    and a refusal, which must never rest on a stale record."""
    tries = 0

    def run() -> T:
        nonlocal tries
        fresh = tries > 0
        tries += 1
        try:
            return attempt(fresh)
        except (BadRequest, NotFound, Conflict):
            if fresh:
                raise
            raise Retry from None

    return retrying(obj, run)


# --- compares: the guards, checked by the store in the same txn as the write ---


def unchanged(kv: KV) -> Compare:
    return Compare(kv.key, "mod", "==", kv.mod_revision)


def absent(key: str) -> Compare:
    return Compare(key, "create", "==", 0)


def none_under(prefix: str) -> Compare:
    return Compare(prefix, "create", "==", 0, prefix=True)


def untouched_since(prefix: str, revision: int) -> Compare:
    """No key under ``prefix`` was created or modified after ``revision``."""
    return Compare(prefix, "mod", "<", revision + 1, prefix=True)


class TxnStore:
    """The store as the control plane uses it: reads and commits, errors mapped.

    With ``group``, the allocation hot path's txns (``txn``, and ``commit`` with
    ``grouped=True``) are committed in batches with the other threads' (groupcommit.py).
    """

    def __init__(self, store: Store, group: GroupCommit | None = None) -> None:
        self.store = store
        self.group = group

    def get(self, key: str) -> KV | None:
        try:
            return self.store.get(key)
        except StoreError as e:
            raise Unavailable("cluster store", str(e)) from None

    def range(self, prefix: str) -> tuple[list[KV], int]:
        try:
            rr = self.store.range(prefix)
        except StoreError as e:
            raise Unavailable("cluster store", str(e)) from None
        return rr.kvs, rr.revision

    def txn(self, compares: Sequence[Compare], ops: Sequence[Op]) -> TxnResult:
        """The raw txn, for callers that must undo something when it fails; grouped."""
        if self.group is not None:
            return self.group.txn(compares, ops)
        return self.store.txn(compares, ops)

    def commit(self, compares: Sequence[Compare], ops: Sequence[Op], grouped: bool = False) -> int:
        """Commit, or raise Retry if a compare failed; returns the new revision."""
        res = self.txn(compares, ops) if grouped else self.store.txn(compares, ops)
        if not res.succeeded:
            raise Retry
        return res.revision

    def without_overlaps(self, ops: list[Op]) -> list[Op]:
        """etcd refuses a txn that deletes a key it also puts: drop such deletes.

        A prefix delete that covers a put becomes deletes of the prefix's other keys.
        """
        puts = {op.key for op in ops if isinstance(op, Put)}
        out: list[Op] = []
        for op in ops:
            if isinstance(op, Delete):
                if op.prefix and any(k.startswith(op.key) for k in puts):
                    out += [Delete(kv.key) for kv in self.range(op.key)[0] if kv.key not in puts]
                    continue
                if not op.prefix and op.key in puts:
                    continue
            out.append(op)
        return out


class HotCache:
    """Hot-path records (networks, groups, pools) by key, parsed.

    Used optimistically: every txn that relies on an entry compares its mod_revision, and
    a retry re-reads it fresh.
    """

    def __init__(self, txn: TxnStore) -> None:
        self._txn = txn
        self._entries: dict[str, tuple[KV, Any]] = {}

    def get(self, key: str, fresh: bool, parse: Callable[[KV], P]) -> tuple[KV, P] | None:
        if not fresh and (hit := self._entries.get(key)) is not None:
            return hit
        kv = self._txn.get(key)
        if kv is None:
            self._entries.pop(key, None)
            return None
        entry = (kv, parse(kv))
        self._entries[key] = entry
        return entry


# --- reading names back from keys ---


def tail(kv: KV) -> str:
    """The last segment of a key: a tenant, network, group or endpoint name, a tag."""
    return kv.key.rsplit("/", 1)[1]


def network_id(kv: KV) -> str:
    """TENANT:NAME of a keys.network key."""
    tenant, name = kv.key[len(keys.NETWORKS) :].split("/", 1)
    return f"{tenant}:{name}"


def pool_id(kv: KV) -> str:
    """The pool id of a keys.pool key."""
    return kv.key[len(keys.POOLS) :]
