"""Tags the master gives objects (endpoint groups, tenants): the record carries its ``tag``
and an index key per tag names the holder; both are written in one txn that compares the
index key absent. Also the backfill for records stored before they had tags."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from store import Put

from .txn import TxnStore, absent, retrying, tail, unchanged


@dataclass(frozen=True)
class Tags:
    """The tags of one kind: its records under ``records``, its index keys ``key(tag)``
    under ``index``, and ``choose(holder, used)``, the decision of which tag is next."""

    what: str  # names a holder in errors: "endpoint group", "tenant"
    records: str
    index: str
    key: Callable[[int], str]
    record: Any  # the record type: decode(value), .id, .tag, model_copy
    choose: Callable[[str, set[int]], int]

    def free(self, txn: TxnStore, holder: str) -> int:
        """The tag ``holder`` would get now (its txn compares ``key(tag)`` absent)."""
        used, _ = txn.range(self.index)
        return self.choose(holder, {int(t) for kv in used if (t := tail(kv)).isdigit()})

    def backfill(self, txn: TxnStore) -> int:
        """Give a tag to every record stored before its kind had tags, one txn each (the
        master does this at start); returns how many it tagged."""
        kvs, _ = txn.range(self.records)
        untagged = [kv.key for kv in kvs if not self.record.decode(kv.value).tag]
        return sum(retrying(f"{self.what} {k}", partial(self._tag, txn, k)) for k in untagged)

    def _tag(self, txn: TxnStore, key: str) -> bool:
        old = txn.get(key)
        if old is None:
            return False
        rec = self.record.decode(old.value)
        if rec.tag:
            return False
        tag = self.free(txn, rec.id)
        txn.commit(
            [unchanged(old), absent(self.key(tag))],
            [
                Put(self.key(tag), rec.id.encode()),
                Put(key, rec.model_copy(update={"tag": tag}).encode()),
            ],
        )
        return True
