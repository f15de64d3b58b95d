"""The etcd backend over etcd's JSON gateway (etcd >= 3.4, /v3 API), via etcd3gw.

Requests fail over between endpoints. A transaction is retried on another endpoint only
when connecting failed (it certainly never reached etcd); once sent, a lost answer is
reported as StoreUnavailable rather than risking applying it twice.

The watch is our own loop instead of etcd3gw's (which hangs silently when etcd restarts):
it reads the gateway's stream with a read timeout and reconnects, rotating endpoints,
from the last delivered revision + 1.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import queue
import socket
import sys
import threading
import urllib.parse
import warnings
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from common.http import never_sent
from store.base import (
    KV,
    Compacted,
    Compare,
    Delete,
    Event,
    Lease,
    LeaseNotFound,
    Op,
    Put,
    RangeResult,
    Store,
    StoreError,
    StoreUnavailable,
    TxnResult,
    Watch,
    check_txn,
    prefix_end_bytes,
)


def _import_etcd3gw() -> type:
    """Import etcd3gw without dragging in eventlet.

    etcd3gw imports futurist, which imports eventlet only to detect it. We never use
    eventlet, and loading it (and greenlet) into a threaded process has crashed
    interpreters here; so, unless someone (os-ken) already imported it, futurist is shown
    that it is absent. sys.modules is restored, so a later real import still works.
    """
    blocked = "eventlet" not in sys.modules
    if blocked:
        sys.modules["eventlet"] = None  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
            from etcd3gw.client import Etcd3Client
    finally:
        if blocked and sys.modules.get("eventlet", 0) is None:
            del sys.modules["eventlet"]
    return Etcd3Client


Etcd3Client = _import_etcd3gw()

log = logging.getLogger(__name__)

_TARGET = {"create": "CREATE", "mod": "MOD", "version": "VERSION", "value": "VALUE"}
_TARGET_FIELD = {
    "create": "create_revision",
    "mod": "mod_revision",
    "version": "version",
    "value": "value",
}
_RESULT = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}
_BACKOFF_START, _BACKOFF_MAX = 0.05, 1.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(data: str) -> bytes:
    return base64.b64decode(data)


def _range_keys(prefix: str) -> tuple[bytes, bytes]:
    """etcd's (key, range_end) for every key under ``prefix``."""
    # etcd has no empty key: "\0" up to range_end "\0" means every key.
    return prefix.encode() or b"\0", prefix_end_bytes(prefix)


def _kv(d: dict[str, Any]) -> KV:
    # The gateway omits zero/empty fields and sends int64 as strings.
    return KV(
        key=_unb64(d["key"]).decode("utf-8", errors="surrogateescape"),
        value=_unb64(d.get("value", "")),
        create_revision=int(d.get("create_revision", 0)),
        mod_revision=int(d.get("mod_revision", 0)),
        version=int(d.get("version", 0)),
        lease=int(d.get("lease", 0)),
    )


def _revision(resp: dict[str, Any]) -> int:
    return int(resp.get("header", {}).get("revision", 0))


def _parse_endpoint(endpoint: str, tls: bool) -> tuple[str, str, int]:
    ep = endpoint.strip()
    if "://" not in ep:
        ep = ("https://" if tls else "http://") + ep
    u = urllib.parse.urlsplit(ep)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"bad etcd endpoint {endpoint!r}")
    return u.scheme, u.hostname, u.port or 2379


def _error(resp: requests.Response) -> StoreError:
    """Map an etcd gateway error answer to a store exception."""
    try:
        body = resp.json()
        msg = str(body.get("error") or body.get("message") or resp.text)
        code = body.get("code")
    except ValueError:
        msg, code = resp.text.strip() or resp.reason, None
    if "lease not found" in msg:
        return LeaseNotFound(msg)
    # gRPC Unavailable / DeadlineExceeded, or a gateway that cannot reach its etcd.
    if code in (4, 14) or resp.status_code in (502, 503, 504):
        return StoreUnavailable(f"{resp.url}: {msg}")
    return StoreError(f"etcd: {msg}")


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
        tls = bool(ca_cert or cert)
        parsed = [
            _parse_endpoint(part, tls) for ep in endpoints for part in ep.split(",") if part.strip()
        ]
        if not parsed:
            raise ValueError("no etcd endpoint given")
        self._timeout = timeout
        self._connect_timeout = min(timeout, 2.0)
        self._watch_timeout = watch_timeout
        self._page_size = page_size
        self._session = requests.Session()
        # A cluster store must not be routed through an HTTP proxy from the environment.
        self._session.trust_env = False
        adapter = HTTPAdapter(pool_connections=len(parsed), pool_maxsize=64)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        if ca_cert:
            self._session.verify = ca_cert
        if cert:
            self._session.cert = (cert, key) if key else cert
        self._clients = [
            Etcd3Client(
                host=host,
                port=port,
                protocol=scheme,
                timeout=timeout,
                api_path="/v3/",
                session=self._session,
            )
            for scheme, host, port in parsed
        ]
        self.endpoints = [c.base_url for c in self._clients]
        self._current = 0  # the endpoint that answered last
        self._closed = threading.Event()
        self._keepalives: weakref.WeakValueDictionary[int, Lease] = weakref.WeakValueDictionary()
        self._watches: weakref.WeakSet[_EtcdWatch] = weakref.WeakSet()
        self._watches_lock = threading.Lock()

    # Requests.

    def _post(self, path: str, body: dict[str, Any], *, idempotent: bool = True) -> dict[str, Any]:
        """POST to the first endpoint that answers, starting from the last good one."""
        if self._closed.is_set():
            raise StoreError("store is closed")
        errors = []
        first = self._current
        for i in range(len(self._clients)):
            idx = (first + i) % len(self._clients)
            client = self._clients[idx]
            try:
                resp = self._session.post(
                    client.get_url(path),
                    data=json.dumps(body),
                    timeout=(self._connect_timeout, self._timeout),
                )
            except requests.RequestException as e:
                if not idempotent and not never_sent(e):
                    raise StoreUnavailable(
                        f"etcd at {client.base_url} failed during {path}; outcome unknown: {e}"
                    ) from e
                errors.append(f"{client.base_url}: {e}")
                continue
            if resp.status_code == 200:
                self._current = idx
                try:
                    return resp.json()  # type: ignore[no-any-return]
                except ValueError as e:
                    raise StoreError(f"etcd at {client.base_url}: bad answer to {path}") from e
            err = _error(resp)
            if isinstance(err, StoreUnavailable) and idempotent:
                errors.append(str(err))
                continue
            raise err
        raise StoreUnavailable(
            f"no etcd endpoint available ({', '.join(self.endpoints)}): {'; '.join(errors)}"
        )

    # Reads.

    def get(self, key: str) -> KV | None:
        kvs = self._post("/kv/range", {"key": _b64(key.encode())}).get("kvs", [])
        return _kv(kvs[0]) if kvs else None

    def range(self, prefix: str) -> RangeResult:
        start, end = _range_keys(prefix)
        for attempt in range(5):
            kvs: list[KV] = []
            rev = 0
            key = start
            try:
                # Page through at the first page's revision: one consistent snapshot.
                while True:
                    body: dict[str, Any] = {
                        "key": _b64(key),
                        "range_end": _b64(end),
                        "limit": self._page_size,
                    }
                    if rev:
                        body["revision"] = rev
                    resp = self._post("/kv/range", body)
                    rev = rev or _revision(resp)
                    page = [_kv(d) for d in resp.get("kvs", [])]
                    kvs.extend(page)
                    if not resp.get("more") or not page:
                        return RangeResult(kvs, rev)
                    key = page[-1].key.encode("utf-8", errors="surrogateescape") + b"\0"
            except StoreError as e:
                if "compacted" not in str(e) or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def revision(self) -> int:
        return _revision(self._post("/kv/range", {"key": _b64(b"\0")}))

    # Writes.

    def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        check_txn(compares, success, failure)
        body = {
            "compare": [self._compare(c) for c in compares],
            "success": [self._op(op) for op in success],
            "failure": [self._op(op) for op in failure],
        }
        resp = self._post("/kv/txn", body, idempotent=False)
        return TxnResult(bool(resp.get("succeeded", False)), _revision(resp))

    @staticmethod
    def _compare(c: Compare) -> dict[str, Any]:
        if c.prefix:
            key, end = _range_keys(c.key)
            d: dict[str, Any] = {"key": _b64(key), "range_end": _b64(end)}
        else:
            d = {"key": _b64(c.key.encode())}
        d["target"] = _TARGET[c.target]
        d["result"] = _RESULT[c.op]
        if c.target == "value":
            d["value"] = _b64(bytes(c.value))  # type: ignore[arg-type]
        else:
            d[_TARGET_FIELD[c.target]] = int(c.value)
        return d

    @staticmethod
    def _op(op: Op) -> dict[str, Any]:
        if isinstance(op, Put):
            put: dict[str, Any] = {"key": _b64(op.key.encode()), "value": _b64(bytes(op.value))}
            if op.lease:
                put["lease"] = op.lease
            return {"request_put": put}
        if isinstance(op, Delete):
            if op.prefix:
                key, end = _range_keys(op.key)
                return {"request_delete_range": {"key": _b64(key), "range_end": _b64(end)}}
            return {"request_delete_range": {"key": _b64(op.key.encode())}}
        raise TypeError(f"not an op: {op!r}")

    def compact(self, revision: int) -> None:
        try:
            self._post("/kv/compaction", {"revision": revision, "physical": True})
        except StoreError as e:
            if "compacted" not in str(e):  # compacting again is a no-op
                raise

    # Watches.

    def watch(self, prefix: str, start_revision: int) -> Watch:
        if start_revision <= 0:
            start_revision = self.revision() + 1
        w = _EtcdWatch(self, prefix, start_revision)
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
        self._session.close()

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

    def __init__(self, store: EtcdStore, prefix: str, start_revision: int) -> None:
        self._store = store
        self._prefix = prefix
        key, end = _range_keys(prefix)
        self._key, self._end = _b64(key), _b64(end)
        self._next = start_revision  # the first revision not yet handed to the queue
        self._queue: queue.Queue[Event | BaseException | None] = queue.Queue(maxsize=4096)
        self._cancelled = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._resp: requests.Response | None = None
        self._error: BaseException | None = None
        self._accepted = False  # whether etcd confirmed the current stream's watch

    def __iter__(self) -> Iterator[Event]:
        with self._lock:
            if self._thread is None and not self._cancelled.is_set():
                self._thread = threading.Thread(
                    target=self._run, name=f"etcd-watch:{self._prefix}", daemon=True
                )
                self._thread.start()
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
            _shutdown(resp)

    def _push(self, item: Event | BaseException) -> None:
        while not self._cancelled.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stop

    def _run(self) -> None:
        clients = self._store._clients
        idx = self._store._current
        backoff = _BACKOFF_START
        failures = 0
        while not self._cancelled.is_set():
            client = clients[idx]
            self._accepted = False
            try:
                self._stream(client)
                error: Exception | None = None
            except _Stop:
                return
            except Exception as e:  # any failure of the stream: reconnect
                error = e
            if self._cancelled.is_set():
                return
            if self._accepted:  # the stream worked: this is a new outage, back off afresh
                backoff, failures = _BACKOFF_START, 0
            failures += 1
            # One warning per outage; the rest (idle read timeouts included) is routine.
            level = logging.WARNING if failures == 5 else logging.DEBUG
            log.log(
                level,
                "watch %r on %s ended (%r); resuming at revision %d",
                self._prefix,
                client.base_url,
                error,
                self._next,
            )
            idx = (idx + 1) % len(clients)
            if self._cancelled.wait(backoff):
                return
            backoff = min(backoff * 2, _BACKOFF_MAX)

    def _stream(self, client: Etcd3Client) -> None:
        """Run one watch stream until it ends or breaks."""
        store = self._store
        body = {
            "create_request": {
                "key": self._key,
                "range_end": self._end,
                "start_revision": self._next,
                "prev_kv": True,
                "progress_notify": True,
            }
        }
        resp = store._session.post(
            client.get_url("/watch"),
            data=json.dumps(body),
            stream=True,
            timeout=(store._connect_timeout, store._watch_timeout),
        )
        with self._lock:
            self._resp = resp
        try:
            if self._cancelled.is_set():
                raise _Stop
            if resp.status_code != 200:
                raise _error(resp)
            buf = b""
            for chunk in resp.iter_content(chunk_size=None):
                buf += chunk
                # The gateway writes one JSON message per line.
                while (nl := buf.find(b"\n")) >= 0:
                    line, buf = buf[:nl], buf[nl + 1 :]
                    if line.strip():
                        self._handle(json.loads(line))
        finally:
            with self._lock:
                self._resp = None
            resp.close()

    def _handle(self, msg: dict[str, Any]) -> None:
        """Handle one message of the stream: queue its events, or end the watch."""
        if "error" in msg:
            raise StoreUnavailable(f"etcd watch stream error: {msg['error']}")
        res = msg.get("result", {})
        compact = int(res.get("compact_revision", 0))
        if compact:
            # etcd keeps revision ``compact``; everything before it is gone.
            self._push(Compacted(compact - 1))
            raise _Stop
        if res.get("canceled"):
            self._push(StoreError(f"etcd canceled the watch: {res.get('cancel_reason', '')}"))
            raise _Stop
        if res.get("created"):
            self._accepted = True
            return
        last = 0
        for ev in res.get("events", []):
            kv = _kv(ev["kv"])
            if kv.mod_revision < self._next:
                continue  # delivered before a reconnect
            prev = ev.get("prev_kv")
            prev_value = _unb64(prev.get("value", "")) if prev is not None else None
            kind = "delete" if ev.get("type") == "DELETE" else "put"
            self._push(Event(kind, kv, prev_value))
            last = max(last, kv.mod_revision)
        # A response always carries whole revisions, so resuming after the last one is exact.
        if last:
            self._next = last + 1


def _shutdown(resp: requests.Response) -> None:
    """Wake a thread blocked reading ``resp`` (closing alone does not interrupt a recv)."""
    try:
        sock = resp.raw._fp.fp.raw._sock
        sock.shutdown(socket.SHUT_RDWR)
    except (AttributeError, OSError):
        pass  # already closed, or a transport without a socket: the read timeout ends it
