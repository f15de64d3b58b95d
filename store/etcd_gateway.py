"""A thin client of etcd's v3 JSON gateway (etcd >= 3.4): endpoints, failover, the wire format.

It is ours rather than a library's (etcd3gw) because what the store needs from it is the
part such a library leaves out: a transaction is sent to another endpoint only when it
certainly never reached etcd (``common.http.never_sent``); once sent, a lost answer is
StoreUnavailable, never a silent second attempt. Everything else is HTTP POSTs of JSON with
base64 keys and values, and the gateway's errors mapped to the store's exceptions.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
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
    LeaseNotFound,
    Op,
    Put,
    StoreError,
    StoreUnavailable,
    Txn,
    prefix_end_bytes,
)

# etcd 3.4 and later serve the gateway under /v3/ (3.3 under /v3beta/, 3.2 under /v3alpha/).
API_PATH = "/v3/"
DEFAULT_PORT = 2379

_TARGET = {"create": "CREATE", "mod": "MOD", "version": "VERSION", "value": "VALUE"}
_TARGET_FIELD = {
    "create": "create_revision",
    "mod": "mod_revision",
    "version": "version",
    "value": "value",
}
_RESULT = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}
# gRPC status codes the gateway passes on: DeadlineExceeded, Unavailable.
_UNAVAILABLE_CODES = (4, 14)


# ---------------------------------------------------------------- the wire format


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(data: str) -> bytes:
    return base64.b64decode(data)


def range_keys(prefix: str) -> tuple[bytes, bytes]:
    """etcd's (key, range_end) for every key under ``prefix``."""
    # etcd has no empty key: "\0" up to range_end "\0" means every key.
    return prefix.encode() or b"\0", prefix_end_bytes(prefix)


def decode_kv(d: dict[str, Any]) -> KV:
    # The gateway omits zero/empty fields and sends int64 as strings.
    return KV(
        key=unb64(d["key"]).decode("utf-8", errors="surrogateescape"),
        value=unb64(d.get("value", "")),
        create_revision=int(d.get("create_revision", 0)),
        mod_revision=int(d.get("mod_revision", 0)),
        version=int(d.get("version", 0)),
        lease=int(d.get("lease", 0)),
    )


def header_revision(resp: dict[str, Any]) -> int:
    """The store revision an answer was served at."""
    return int(resp.get("header", {}).get("revision", 0))


def _key_range(key: str, prefix: bool) -> dict[str, str]:
    if prefix:
        start, end = range_keys(key)
        return {"key": b64(start), "range_end": b64(end)}
    return {"key": b64(key.encode())}


def encode_compare(c: Compare) -> dict[str, Any]:
    d: dict[str, Any] = _key_range(c.key, c.prefix)
    d["target"] = _TARGET[c.target]
    d["result"] = _RESULT[c.op]
    if c.target == "value":
        d["value"] = b64(bytes(c.value))  # type: ignore[arg-type]
    else:
        d[_TARGET_FIELD[c.target]] = int(c.value)
    return d


def encode_op(op: Op) -> dict[str, Any]:
    if isinstance(op, Put):
        put: dict[str, Any] = {"key": b64(op.key.encode()), "value": b64(bytes(op.value))}
        if op.lease:
            put["lease"] = op.lease
        return {"request_put": put}
    if isinstance(op, Delete):
        return {"request_delete_range": _key_range(op.key, op.prefix)}
    raise TypeError(f"not an op: {op!r}")


def txn_body(
    compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
) -> dict[str, Any]:
    return {
        "compare": [encode_compare(c) for c in compares],
        "success": [encode_op(op) for op in success],
        "failure": [encode_op(op) for op in failure],
    }


def batch_body(members: Sequence[Txn]) -> dict[str, Any]:
    """A batch as one txn with a nested txn per member (etcd >= 3.3): etcd evaluates every
    member's compares, then applies the ops of those whose compares held, at one revision."""
    nested = [{"request_txn": txn_body(t.compares, t.ops, ())} for t in members]
    return {"compare": [], "success": nested, "failure": []}


def batch_outcomes(resp: dict[str, Any], members: int) -> tuple[bool, ...]:
    """Each member's outcome in the answer to ``batch_body`` (the gateway omits a false
    ``succeeded``)."""
    answers = resp.get("responses", [])
    if len(answers) != members or not all("response_txn" in a for a in answers):
        raise StoreError(f"etcd: a batch of {members} txns got {len(answers)} answers")
    return tuple(bool(a["response_txn"].get("succeeded", False)) for a in answers)


@dataclass(frozen=True, slots=True)
class WatchMessage:
    created: bool  # etcd accepted the watch (the first message of a stream)
    events: list[Event]
    # A progress notification's revision (0 for any other message): the watch has been
    # sent every event up to it, so a resumed watch may start after it.
    progress: int = 0


def decode_watch(msg: dict[str, Any]) -> WatchMessage:
    """One message of a watch stream.

    Raises StoreUnavailable when the stream broke (reconnecting may help), Compacted when
    the history asked for is gone, and StoreError when etcd canceled the watch.
    """
    if "error" in msg:
        raise StoreUnavailable(f"etcd watch stream error: {msg['error']}")
    res = msg.get("result", {})
    compact = int(res.get("compact_revision", 0))
    if compact:
        # etcd keeps revision ``compact``; everything before it is gone.
        raise Compacted(compact - 1)
    if res.get("canceled"):
        raise StoreError(f"etcd canceled the watch: {res.get('cancel_reason', '')}")
    events = []
    for ev in res.get("events", []):
        prev = ev.get("prev_kv")
        prev_value = unb64(prev.get("value", "")) if prev is not None else None
        kind = "delete" if ev.get("type") == "DELETE" else "put"
        events.append(Event(kind, decode_kv(ev["kv"]), prev_value))
    created = bool(res.get("created"))
    # As clientv3's IsProgressNotify: no events, not created, canceled or compacted.
    progress = 0 if events or created else header_revision(res)
    return WatchMessage(created, events, progress)


def error_from(resp: requests.Response, revision: int = 0) -> StoreError:
    """Map an error answer of the gateway to a store exception.

    ``revision`` is the one the request asked for, if any: etcd names no revision when it
    refuses one that has been compacted away.
    """
    try:
        body = resp.json()
        if not isinstance(body, dict):
            raise ValueError(body)
        msg = str(body.get("error") or body.get("message") or resp.text)
        code = body.get("code")
    except ValueError:
        msg, code = resp.text.strip() or resp.reason, None
    if "lease not found" in msg:
        return LeaseNotFound(msg)
    if "revision has been compacted" in msg:
        return Compacted(revision)
    # gRPC Unavailable / DeadlineExceeded, or a gateway that cannot reach its etcd.
    if code in _UNAVAILABLE_CODES or resp.status_code in (502, 503, 504):
        return StoreUnavailable(f"{resp.url}: {msg}")
    return StoreError(f"etcd: {msg}")


def base_url(endpoint: str, tls: bool) -> str:
    """``scheme://host:port`` of one endpoint; a bare ``host[:port]`` gets https with TLS."""
    ep = endpoint.strip()
    if "://" not in ep:
        ep = ("https://" if tls else "http://") + ep
    u = urllib.parse.urlsplit(ep)
    try:
        port = u.port or DEFAULT_PORT
    except ValueError:
        port = 0
    if u.scheme not in ("http", "https") or not u.hostname or not port:
        raise ValueError(f"bad etcd endpoint {endpoint!r}")
    host = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
    return f"{u.scheme}://{host}:{port}"


def tls_session(ca_cert: str | None, cert: str | None, key: str | None) -> requests.Session:
    """A session for the cluster store: TLS as given, and no proxy from the environment."""
    session = requests.Session()
    # A cluster store must not be routed through an HTTP proxy from the environment.
    session.trust_env = False
    if ca_cert:
        session.verify = ca_cert
    if cert:
        session.cert = (cert, key) if key else cert
    return session


# ---------------------------------------------------------------- the client


class EndpointsUnavailable(StoreUnavailable):
    """No endpoint answered a request; ``failures`` holds each one's (endpoint, exception).

    The exceptions say why: a start-up check tells an etcd that is down (which may come
    back) from a TLS problem (which retrying never fixes) with them.
    """

    def __init__(self, message: str, failures: Sequence[tuple[str, BaseException]]) -> None:
        super().__init__(message)
        self.failures = tuple(failures)


class Gateway:
    """The JSON gateways of one etcd cluster, reached through one HTTP session.

    ``endpoints`` may hold comma-separated lists. ``timeout`` bounds each read; connecting
    gives up after at most 2 s, so a dead endpoint is passed over quickly.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        ca_cert: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        timeout: float = 5.0,
        session: requests.Session | None = None,
    ) -> None:
        tls = bool(ca_cert or cert)
        self.endpoints = [
            base_url(part, tls) for ep in endpoints for part in ep.split(",") if part.strip()
        ]
        if not self.endpoints:
            raise ValueError("no etcd endpoint given")
        self.timeout = timeout
        self.connect_timeout = min(timeout, 2.0)
        if session is None:
            session = tls_session(ca_cert, cert, key)
            adapter = HTTPAdapter(pool_connections=len(self.endpoints), pool_maxsize=64)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        self.session = session
        self.current = 0  # the endpoint that answered last: requests start there
        self._closed = threading.Event()

    def url(self, index: int, path: str) -> str:
        return self.endpoints[index] + API_PATH + path.lstrip("/")

    def post(self, path: str, body: dict[str, Any], *, idempotent: bool = True) -> dict[str, Any]:
        """POST to the first endpoint that answers, starting from the last good one.

        A request that is not ``idempotent`` moves on to another endpoint only when it
        certainly never reached the last one; otherwise its outcome is unknown, and that
        is reported as StoreUnavailable.
        """
        if self._closed.is_set():
            raise StoreError("store is closed")
        errors: list[str] = []
        failures: list[tuple[str, BaseException]] = []
        first = self.current
        for i in range(len(self.endpoints)):
            idx = (first + i) % len(self.endpoints)
            endpoint = self.endpoints[idx]
            try:
                resp = self.session.post(
                    self.url(idx, path),
                    data=json.dumps(body),
                    timeout=(self.connect_timeout, self.timeout),
                )
            except requests.RequestException as e:
                if not idempotent and not never_sent(e):
                    raise StoreUnavailable(
                        f"etcd at {endpoint} failed during {path}; outcome unknown: {e}"
                    ) from e
                errors.append(f"{endpoint}: {e}")
                failures.append((endpoint, e))
                continue
            if resp.status_code == 200:
                self.current = idx
                try:
                    return resp.json()  # type: ignore[no-any-return]
                except ValueError as e:
                    raise StoreError(f"etcd at {endpoint}: bad answer to {path}") from e
            err = error_from(resp, int(body.get("revision", 0)))
            if isinstance(err, StoreUnavailable) and idempotent:
                errors.append(str(err))
                failures.append((endpoint, err))
                continue
            raise err
        raise EndpointsUnavailable(
            f"no etcd endpoint available ({', '.join(self.endpoints)}): {'; '.join(errors)}",
            failures,
        )

    def stream(
        self, index: int, path: str, body: dict[str, Any], read_timeout: float
    ) -> requests.Response:
        """Open a streaming POST on one endpoint (a watch); raises the mapped error if refused."""
        resp = self.session.post(
            self.url(index, path),
            data=json.dumps(body),
            stream=True,
            timeout=(self.connect_timeout, read_timeout),
        )
        if resp.status_code != 200:
            try:
                raise error_from(resp)
            finally:
                resp.close()
        return resp

    def close(self) -> None:
        self._closed.set()
        self.session.close()


def messages(resp: requests.Response) -> Iterator[dict[str, Any]]:
    """The JSON messages of a stream: the gateway writes one per line."""
    buf = b""
    for chunk in resp.iter_content(chunk_size=None):
        buf += chunk
        while (nl := buf.find(b"\n")) >= 0:
            line, buf = buf[:nl], buf[nl + 1 :]
            if line.strip():
                yield json.loads(line)


def interrupt(resp: requests.Response) -> None:
    """Wake a thread blocked reading ``resp`` (closing alone does not interrupt a recv)."""
    with contextlib.suppress(AttributeError, OSError):
        # Already closed, or a transport without a socket: the read timeout ends it.
        resp.raw._fp.fp.raw._sock.shutdown(socket.SHUT_RDWR)
