"""The one HTTP transport to a netmaster, shared by the agent's client (plugin.master_client)
and netctl's (netctl.client).

It owns what every call has in common: the base URL, the session and the timeouts; the JSON
decoding; the MasterError built from the master's {"error","object","reason"} body or from a
failure to reach it; and the retry policy. The front ends keep their typed methods, and
word in their own way a request that got no answer (``NoAnswer``): the agent's words reach
Docker users, netctl's reach a shell.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import requests

from .credentials import bearer
from .http import short_reason, tls_reason
from .loop import Backoff

API = "/api/v1"
# With a leader callable, calls are retried this long: beyond a leader failover (the
# default lease TTL of 10 s, plus 2 s).
LEADER_DEADLINE = 20.0
MAX_BACKOFF = 0.5
# Answers that mean "try again, maybe elsewhere": the master could not reach the leader or
# the store, or a proxy in between failed.
TRANSIENT = (502, 503, 504)
UNREACHABLE = 503  # the status of a MasterError for a request that got no answer
BAD_ANSWER = 502  # ... and for an answer that is not what the API promises


class MasterError(Exception):
    """The master refused a request, could not be reached, or answered nonsense.

    ``status`` is the HTTP status (the master's, UNREACHABLE or BAD_ANSWER). A refusal
    carries the master's ``obj`` and ``reason``; a failure to reach it, the ``url`` tried.
    """

    def __init__(
        self, message: str, status: int = 500, *, url: str = "", obj: str = "", reason: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.url = url
        self.obj = obj
        self.reason = reason


@dataclass(frozen=True)
class NoAnswer:
    """A request that got no answer from the master at ``url``.

    ``stage`` is where it failed: "connect" (refused, unresolvable, timed out connecting),
    "tls" (the handshake failed: an unverifiable certificate, no TLS there), "answer"
    (connected, but no reply within ``timeout`` seconds) or "request" (anything else
    requests gave up on). ``reason`` says why in a few words ("connection refused").
    """

    url: str
    stage: Literal["connect", "tls", "answer", "request"]
    reason: str
    timeout: float


Wording = Callable[[NoAnswer], str]


def normalize_url(url: str, scheme: str = "http") -> str:
    """Accept "host:port" (with ``scheme``) as well as a full URL; drop trailing slashes."""
    url = url.strip()
    if not url:
        raise ValueError("empty netmaster URL")
    if "://" not in url:
        url = f"{scheme}://{url}"
    return url.rstrip("/")


def no_answer(url: str, e: requests.RequestException, timeout: float) -> NoAnswer:
    """What a requests exception says about a request to the master at ``url``."""
    if isinstance(e, requests.exceptions.SSLError):
        return NoAnswer(url, "tls", tls_reason(e), timeout)
    if isinstance(e, requests.ConnectTimeout):
        return NoAnswer(url, "connect", f"timed out connecting after {timeout:g}s", timeout)
    if isinstance(e, requests.Timeout):
        return NoAnswer(url, "answer", f"no answer within {timeout:g}s", timeout)
    if isinstance(e, requests.ConnectionError):
        return NoAnswer(url, "connect", short_reason(e), timeout)
    return NoAnswer(url, "request", short_reason(e), timeout)


def refusal(resp: requests.Response, method: str, path: str) -> MasterError:
    """The error an answer of status >= 400 stands for: the master's own words when it sent
    its {"error","object","reason"} body, else the status and the start of the text."""
    try:
        data = resp.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), str) and data["error"]:
        return MasterError(
            data["error"],
            resp.status_code,
            obj=str(data.get("object") or ""),
            reason=str(data.get("reason") or ""),
        )
    text = (resp.text or "").strip().replace("\n", " ")[:200]
    what = f"{resp.status_code} {resp.reason or ''}".strip()
    return MasterError(
        f"{method} {path}: netmaster answered {what}" + (f": {text}" if text else ""),
        resp.status_code,
    )


def decode(resp: requests.Response, base: str, method: str, path: str) -> Any:
    """The JSON body of a success (None when empty), or the MasterError it stands for."""
    if resp.status_code >= 400:
        raise refusal(resp, method, path)
    text = (resp.text or "").strip()
    if text in ("", "null"):
        return None
    try:
        return resp.json()
    except ValueError:
        raise MasterError(
            f"{method} {path}: netmaster at {base} answered with non-JSON content", BAD_ANSWER
        ) from None


class MasterTransport:
    """Sends requests to a netmaster and applies the retry policy.

    Without ``leader``, a call makes at most ``retries`` attempts on ``base_url``, retrying
    a request that got no answer and a 5xx (a quick, clear failure when the master is down).
    With ``leader`` (the current leader's URL, or None), calls go to the leader, found again
    after a request got no answer or a 502/503/504, and are retried with backoff capped at
    MAX_BACKOFF until ``deadline`` seconds have passed (default LEADER_DEADLINE), which
    outlasts a leader failover; other 5xx answers keep the ``retries`` limit.

    Retrying is for idempotent calls only; every call of the master's allocation API is
    (addresses by owner, endpoints by endpoint ID, networks and pools by key).

    ``tls_ca`` verifies an https:// master's certificate (default: requests' certifi bundle),
    ``client_cert`` (certificate file, key file) is presented to a master that requires
    one, and ``token`` is sent as ``Authorization: Bearer`` on every call.
    """

    def __init__(
        self,
        base_url: str,
        wording: Wording,
        *,
        timeout: float,
        retries: int = 1,
        backoff: float = 0.2,
        session: requests.Session | None = None,
        leader: Callable[[], str | None] | None = None,
        deadline: float | None = None,
        tls_ca: str = "",
        token: str = "",
        client_cert: tuple[str, str] | None = None,
    ) -> None:
        self.base_url = normalize_url(base_url, "https" if tls_ca else "http")
        self.wording = wording
        self.timeout = timeout
        self.retries = max(1, retries)
        self.backoff = backoff
        self.session = session if session is not None else requests.Session()
        self.leader = leader
        self.deadline = deadline if deadline is not None else (LEADER_DEADLINE if leader else None)
        self._target: str | None = None  # the resolved master URL; None: resolve again
        self._tls: dict[str, Any] = {"verify": tls_ca} if tls_ca else {}
        if client_cert:
            self._tls["cert"] = client_cert
        self._headers = bearer(token)

    def current_url(self) -> str:
        """The master URL calls go to: the leader when known, else ``base_url``."""
        url = self._target
        if url is None:
            found = None
            if self.leader is not None:
                try:
                    found = self.leader()
                    found = normalize_url(found) if found else None
                except Exception:
                    found = None
            url = self._target = found or self.base_url
        return url

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        """Send ``method path`` (path from the root: API + "/networks") and return the decoded
        JSON answer; every failure raises MasterError."""
        if self.deadline is not None:
            return self._call_until(time.monotonic() + self.deadline, method, path, body, params)
        last: MasterError | None = None
        delays = Backoff(self.backoff, float("inf"))
        for attempt in range(self.retries):
            if attempt:
                time.sleep(delays.next())
            try:
                resp = self._send(self.base_url, method, path, body, params, self.timeout)
            except MasterError as e:
                last = e
                continue
            if resp.status_code >= 500:
                last = refusal(resp, method, path)
                continue
            return decode(resp, self.base_url, method, path)
        assert last is not None
        raise last

    def _call_until(
        self,
        deadline: float,
        method: str,
        path: str,
        body: Any,
        params: dict[str, str] | None,
    ) -> Any:
        delays = Backoff(self.backoff or 0.05, MAX_BACKOFF)
        failures = 0  # other 5xx answers: a bug, not a failover; keep the attempt limit
        while True:
            base = self.current_url()
            timeout = min(self.timeout, max(deadline - time.monotonic(), 0.5))
            try:
                resp = self._send(base, method, path, body, params, timeout)
            except MasterError as e:
                last = e
                self._target = None
            else:
                if resp.status_code in TRANSIENT:
                    last = refusal(resp, method, path)
                    self._target = None
                elif resp.status_code >= 500:
                    last = refusal(resp, method, path)
                    failures += 1
                    if failures >= self.retries:
                        raise last
                else:
                    return decode(resp, base, method, path)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise last
            time.sleep(min(delays.next(), remaining))

    def _send(
        self,
        base: str,
        method: str,
        path: str,
        body: Any,
        params: dict[str, str] | None,
        timeout: float,
    ) -> requests.Response:
        """One request; a MasterError (status UNREACHABLE) if it got no answer."""
        kwargs: dict[str, Any] = {"json": body, "timeout": timeout, **self._tls}
        if params:
            kwargs["params"] = params
        if self._headers:
            kwargs["headers"] = self._headers
        try:
            return self.session.request(method, f"{base}{path}", **kwargs)
        except requests.RequestException as e:
            failure = no_answer(base, e, timeout)
            raise MasterError(
                self.wording(failure), UNREACHABLE, url=base, reason=failure.reason
            ) from None
