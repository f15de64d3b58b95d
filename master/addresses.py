"""A per-process cache of pool allocators, kept honest by the store's compare-and-swap.

The store is the truth: an address is allocated iff its alloc key exists. The cache only
chooses candidates quickly. Threads of one process never pick the same candidate, because
claiming marks it under the pool's lock. A candidate another process took makes the txn
fail; it stays marked and the caller retries. Releases made by other processes are picked
up by reloading the pool when it looks exhausted or a static request looks taken.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from common import keys
from common.records import AllocRecord, PoolRecord
from ipam import Allocator, parse_address
from ipam.errors import AddressInUse, IpamError, PoolExhausted
from store import KV, Compare, Store

from .decisions.pools import pool_spec
from .errors import BadRequest, Conflict
from .txn import HotCache, Retry, TxnStore, absent, unchanged

IPAddr = ipaddress.IPv4Address | ipaddress.IPv6Address


def pool_record(kv: KV) -> PoolRecord:
    """How the hot cache parses a pool key (one parse for every user of the key)."""
    return PoolRecord.decode(kv.value)


@dataclass
class _Entry:
    revision: int  # mod_revision of the pool key this allocator was built for
    allocator: Allocator
    lock: threading.Lock


class PoolCache:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def _entry(self, pool_id: str, pool_kv: KV) -> _Entry:
        with self._lock:
            entry = self._entries.get(pool_id)
            if entry is None or entry.revision != pool_kv.mod_revision:
                entry = self._load(pool_id, pool_kv)
                self._entries[pool_id] = entry
            return entry

    def _load(self, pool_id: str, pool_kv: KV) -> _Entry:
        allocator = Allocator(pool_spec(pool_id, PoolRecord.decode(pool_kv.value)))
        prefix = keys.allocs_of(pool_id)
        for kv in self._store.range(prefix).kvs:
            allocator.mark(ipaddress.ip_address(kv.key[len(prefix) :]))
        return _Entry(pool_kv.mod_revision, allocator, threading.Lock())

    def _reload(self, pool_id: str, pool_kv: KV, old: _Entry) -> None:
        fresh = self._load(pool_id, pool_kv)
        # Keep the cursor so a reload does not hand out just-released addresses first.
        fresh.allocator.cursor = old.allocator.cursor
        old.allocator = fresh.allocator

    def claim(
        self,
        pool_id: str,
        pool_kv: KV,
        static: IPAddr | None = None,
        within: tuple[int, int] | None = None,
    ) -> IPAddr:
        """Choose an address (``static`` if given) and hold it in this process's cache."""
        entry = self._entry(pool_id, pool_kv)
        with entry.lock:
            if static is not None:
                try:
                    entry.allocator.reserve(static)
                except AddressInUse:
                    if self._store.get(keys.alloc(pool_id, str(static))) is not None:
                        raise
                    self._reload(pool_id, pool_kv, entry)
                    entry.allocator.reserve(static)
                return static
            try:
                return entry.allocator.allocate(within)
            except PoolExhausted:
                self._reload(pool_id, pool_kv, entry)
                return entry.allocator.allocate(within)

    def refresh(self, pool_id: str) -> None:
        """Catch up with every address other writers took, after losing a race to one."""
        pool_kv = self._store.get(keys.pool(pool_id))
        with self._lock:
            entry = self._entries.get(pool_id)
        if pool_kv is None or entry is None:
            self.forget(pool_id)
            return
        if entry.revision != pool_kv.mod_revision:
            self.forget(pool_id)  # the pool itself changed: rebuild on next use
            return
        prefix = keys.allocs_of(pool_id)
        taken = [
            ipaddress.ip_address(kv.key[len(prefix) :]) for kv in self._store.range(prefix).kvs
        ]
        with entry.lock:
            # Merge, not replace: this process's in-flight claims must stay held.
            for address in taken:
                entry.allocator.mark(address)

    def unclaim(self, pool_id: str, address: IPAddr) -> None:
        """Forget a claim whose transaction did not commit (the address is still free)."""
        self.released(pool_id, address)

    def released(self, pool_id: str, address: IPAddr) -> None:
        with self._lock:
            entry = self._entries.get(pool_id)
        if entry is not None:
            with entry.lock:
                entry.allocator.release(address)

    def forget(self, pool_id: str) -> None:
        with self._lock:
            self._entries.pop(pool_id, None)


@dataclass
class Claims:
    """The addresses one txn attempt takes, held in the PoolCache until it commits or fails.

    Each claim adds its compares (the pool unchanged, the address still free). After the
    txn: ``settle`` if it failed, ``undo`` if it was never sent.
    """

    txn: TxnStore
    hot: HotCache
    cache: PoolCache
    obj: str  # what is being allocated, for messages
    requester: str = ""  # the owner name the addresses go to, if known
    held: list[tuple[str, IPAddr]] = field(default_factory=list)

    def claim(
        self,
        pool_id: str,
        static: str,
        within: tuple[int, int] | None,
        compares: list[Compare],
        fresh: bool = True,
    ) -> IPAddr:
        hit = self.hot.get(keys.pool(pool_id), fresh, pool_record)
        if hit is None:
            raise Retry  # the network is being rewritten
        pkv = hit[0]
        try:
            addr = parse_address(static, "address") if static else None
            got = self.cache.claim(pool_id, pkv, addr, within)
        except AddressInUse as e:
            akv = self.txn.get(keys.alloc(pool_id, str(e.address)))
            who = AllocRecord.decode(akv.value).owner if akv else "?"
            if self.requester and who == self.requester:
                raise Retry from None  # held by this very request's earlier attempt
            raise Conflict(
                self.obj, f"address {e.address} is already in use in pool {pool_id} (by {who})"
            ) from None
        except PoolExhausted as e:
            raise Conflict(self.obj, str(e)) from None
        except IpamError as e:
            raise BadRequest(self.obj, str(e)) from None
        self.held.append((pool_id, got))
        compares += [unchanged(pkv), absent(keys.alloc(pool_id, str(got)))]
        return got

    def undo(self) -> None:
        for pid, addr in self.held:
            self.cache.unclaim(pid, addr)

    def settle(self, statics: Mapping[str, str]) -> None:
        """After a failed txn: keep claims another writer really took, drop the others.

        ``statics``: the address asked for in each pool ("" for the next free one).
        """
        for pid, addr in self.held:
            akv = self.txn.get(keys.alloc(pid, str(addr)))
            if akv is None:
                self.cache.unclaim(pid, addr)
            elif not statics.get(pid):
                # Another writer is allocating from this pool too: stepping past one address
                # at a time would chase it; re-read what it took (one range read).
                self.cache.refresh(pid)
            else:
                who = AllocRecord.decode(akv.value).owner
                if who == self.requester:
                    continue  # our own earlier attempt committed: the retry will find it
                raise Conflict(
                    self.obj, f"address {addr} is already in use in pool {pid} (by {who})"
                )
