"""The etcd backend, over etcd's JSON gateway (etcd >= 3.4, /v3 API): ``store.etcd_gateway``.

Requests fail over between endpoints. A transaction is retried on another endpoint only
when connecting failed (it certainly never reached etcd); once sent, a lost answer is
reported as StoreUnavailable rather than risking applying it twice.

The watch is our own loop: it reads the gateway's stream with a read timeout and
reconnects, rotating endpoints, from the last delivered revision + 1, so it survives etcd
restarts (a stream that simply hangs would not).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import requests

from common.loop import Backoff
from store.base import (
    KV,
    BatchResult,
    Compacted,
    Compare,
    Event,
    Lease,
    LeaseNotFound,
    Op,
    RangeResult,
    Store,
    StoreError,
    StoreUnavailable,
    Txn,
    TxnResult,
    Watch,
    check_txn,
)
from store.batch import check_batch
from store.etcd_gateway import (
    Gateway,
    b64,
    batch_body,
    batch_outcomes,
    decode_kv,
    decode_watch,
    header_revision,
    interrupt,
    messages,
    range_keys,
    txn_body,
)

log = logging.getLogger(__name__)


class EtcdStore(Store):
    """The store in an etcd cluster (the /v3 JSON gateway of etcd >= 3.4)."""

    def __init__(
        self,
        endpoints: list[str],
        ca_cert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        timeout: float = 5.0,
        *,
        watch_timeout: float = 10.0,
        page_size: int = 1000,
    ) -> None:
        self._gateway = Gateway(endpoints, ca_cert=ca_cert, cert=cert, key=key, timeout=timeout)
        self.endpoints = self._gateway.endpoints
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._closed = threading.Event()
        self._keepalives: weakref.WeakValueDictionary[int, Lease] = weakref.WeakValueDictionary()
        self._watches: weakref.WeakSet[_EtcdWatch] = weakref.WeakSet()
        self._watches_lock = threading.Lock()

    def _post(self, path: str, body: dict[str, Any], *, idempotent: bool = True) -> dict[str, Any]:
        if self._closed.is_set():
            raise StoreError("store is closed")
        return self._gateway.post(path, body, idempotent=idempotent)

    # Reads.

    def get(self, key: str) -> KV | None:
        kvs = self._post("/kv/range", {"key": b64(key.encode())}).get("kvs", [])
        return decode_kv(kvs[0]) if kvs else None

    def range(self, prefix: str) -> RangeResult:
        start, end = range_keys(prefix)
        for attempt in range(5):
            kvs: list[KV] = []
            rev = 0
            key = start
            try:
                # Page through at the first page's revision: one consistent snapshot.
                while True:
                    body: dict[str, Any] = {
                        "key": b64(key),
                        "range_end": b64(end),
                        "limit": self._page_size,
                    }
                    if rev:
                        body["revision"] = rev
                    resp = self._post("/kv/range", body)
                    rev = rev or header_revision(resp)
                    page = [decode_kv(d) for d in resp.get("kvs", [])]
                    kvs.extend(page)
                    if not resp.get("more") or not page:
                        return RangeResult(kvs, rev)
                    key = page[-1].key.encode("utf-8", errors="surrogateescape") + b"\0"
            except Compacted:  # the snapshot was compacted between two pages: read afresh
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def revision(self) -> int:
        return header_revision(self._post("/kv/range", {"key": b64(b"\0")}))

    # Writes.

    def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        check_txn(compares, success, failure)
        resp = self._post("/kv/txn", txn_body(compares, success, failure), idempotent=False)
        return TxnResult(bool(resp.get("succeeded", False)), header_revision(resp))

    def txn_batch(self, members: Sequence[Txn]) -> BatchResult:
        """One etcd txn (one round trip, one raft entry) with a nested txn per member."""
        check_batch(members)
        if not members:
            return BatchResult((), self.revision())
        resp = self._post("/kv/txn", batch_body(members), idempotent=False)
        return BatchResult(batch_outcomes(resp, len(members)), header_revision(resp))

    def compact(self, revision: int) -> None:
        with contextlib.suppress(Compacted):  # compacting again is a no-op
            self._post("/kv/compaction", {"revision": revision, "physical": True})

    # Watches.

    def watch(self, prefix: str, start_revision: int, *, prev_kv: bool = True) -> Watch:
        if start_revision <= 0:
            start_revision = self.revision() + 1
        w = _EtcdWatch(self._gateway, prefix, start_revision, self._watch_timeout, prev_kv)
        with self._watches_lock:
            self._watches.add(w)
        return w

    # Leases.

    def lease_grant(self, ttl: int, keepalive: bool = False) -> Lease:
        resp = self._post("/lease/grant", {"TTL": max(int(ttl), 1), "ID": 0})
        if resp.get("error"):
            raise StoreError(f"etcd: lease grant failed: {resp['error']}")
        lease = Lease(int(resp["ID"]), int(resp.get("TTL", ttl)), self)
        if keepalive:
            self._keepalives[lease.id] = lease
            lease.start_keepalive()
        return lease

    def lease_refresh(self, lease_id: int) -> int:
        resp = self._post("/lease/keepalive", {"ID": lease_id})
        if "error" in resp:
            raise StoreUnavailable(f"etcd: lease keepalive failed: {resp['error']}")
        ttl = int(resp.get("result", {}).get("TTL", 0))
        if ttl <= 0:  # an expired or unknown lease comes back without a TTL
            raise LeaseNotFound(f"lease {lease_id:x} not found")
        return ttl

    def lease_revoke(self, lease_id: int) -> None:
        self._post("/lease/revoke", {"ID": lease_id})

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        for lease in list(self._keepalives.values()):
            lease.stop_keepalive()
        with self._watches_lock:
            watches = list(self._watches)
        for w in watches:
            w.cancel()
        self._gateway.close()

    def __enter__(self) -> EtcdStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stop(Exception):
    """The watch is over (cancelled, or a final error was handed to the consumer)."""


class _EtcdWatch(Watch):
    """A watch stream that survives etcd restarts and endpoint failures.

    A reader thread owns the HTTP stream and feeds a queue; iteration drains the queue,
    so ``cancel()`` ends iteration at once whatever the socket is doing.
    """

    def __init__(
        self,
        gateway: Gateway,
        prefix: str,
        start_revision: int,
        read_timeout: float,
        prev_kv: bool = True,
    ) -> None:
        self._gateway = gateway
        self._prefix = prefix
        self._read_timeout = read_timeout
        self._prev_kv = prev_kv
        key, end = range_keys(prefix)
        self._key, self._end = b64(key), b64(end)
        self._next = start_revision  # the first revision not yet handed to the queue
        self._queue: queue.Queue[Event | BaseException | None] = queue.Queue(maxsize=4096)
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._resp: requests.Response | None = None
        self._error: BaseException | None = None
        self._accepted = False  # whether etcd confirmed the current stream's watch

    def begin(self) -> None:
        """Open the stream now (iterating opens it too): etcd then serves it from the
        revision it starts at as that revision is written, with no history to catch up on,
        while the consumer does something else first (a mirror's read)."""
        with self._lock:
            if self._thread is None and not self._cancelled.is_set():
                self._thread = threading.Thread(
                    target=self._run, name=f"etcd-watch:{self._prefix}", daemon=True
                )
                self._thread.start()

    def __iter__(self) -> Iterator[Event]:
        self.begin()
        while not self._cancelled.is_set():
            if self._error is not None:
                raise self._error
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                self._error = item
                raise item
            if self._cancelled.is_set():
                return
            yield item

    def cancel(self) -> None:
        self._cancelled.set()
        # A full queue means the consumer is not blocked; it checks the flag before each event.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        with self._lock:
            resp = self._resp
        if resp is not None:
            interrupt(resp)

    def _push(self, item: Event | BaseException) -> None:
        while not self._cancelled.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stop

    def _run(self) -> None:
        endpoints = self._gateway.endpoints
        idx = self._gateway.current
        # Between reconnects, from the first after a stream worked; jittered, so that the
        # watches of every agent do not all come back in the same instant after an outage.
        backoff = Backoff(0.05, 1.0, jitter=0.5)
        failures = 0
        while not self._cancelled.is_set():
            self._accepted = False
            try:
                self._stream(idx)
                error: Exception | None = None
            except _Stop:
                return
            except Exception as e:  # any failure of the stream: reconnect
                error = e
            if self._cancelled.is_set():
                return
            if self._accepted:  # the stream worked: this is a new outage, back off afresh
                failures = 0
                backoff.reset()
            failures += 1
            # One warning per outage; the rest (idle read timeouts included) is routine.
            level = logging.WARNING if failures == 5 else logging.DEBUG
            log.log(
                level,
                "watch %r on %s ended (%r); resuming at revision %d",
                self._prefix,
                endpoints[idx],
                error,
                self._next,
            )
            idx = (idx + 1) % len(endpoints)
            if self._cancelled.wait(backoff.next()):
                return

    def _stream(self, idx: int) -> None:
        """Run one watch stream on endpoint ``idx`` until it ends or breaks."""
        body = {
            "create_request": {
                "key": self._key,
                "range_end": self._end,
                "start_revision": self._next,
                "progress_notify": True,
            }
        }
        if self._prev_kv:  # etcd reads each event's previous value for it: a Range per event
            body["create_request"]["prev_kv"] = True
        resp = self._gateway.stream(idx, "/watch", body, self._read_timeout)
        with self._lock:
            self._resp = resp
        try:
            if self._cancelled.is_set():
                raise _Stop
            for msg in messages(resp):
                self._handle(msg)
        finally:
            with self._lock:
                self._resp = None
            resp.close()

    def _handle(self, msg: dict[str, Any]) -> None:
        """Handle one message of the stream: queue its events, or end the watch."""
        try:
            decoded = decode_watch(msg)
        except StoreUnavailable:
            raise  # the stream broke: reconnect
        except StoreError as e:  # compacted, or canceled by etcd: final
            self._push(e)
            raise _Stop from None
        if decoded.created:
            self._accepted = True
            return
        if decoded.progress:
            # etcd has sent everything up to it: an idle prefix resumes from there, not from
            # its last event (whose history a compaction may have taken since).
            self._next = max(self._next, decoded.progress + 1)
            return
        last = 0
        for ev in decoded.events:
            if ev.kv.mod_revision < self._next:
                continue  # delivered before a reconnect
            self._push(ev)
            last = max(last, ev.kv.mod_revision)
        # A response always carries whole revisions, so resuming after the last one is exact.
        if last:
            self._next = last + 1
