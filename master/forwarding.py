"""Leader forwarding: a follower relays each /api/v1/ request to the leader and its answer back.

The decision (``forward_target``) is pure and lives in election.py; this module only acts on it.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import requests
from flask import Response, request
from requests.adapters import HTTPAdapter

from common.http import never_sent, short_reason, tls_reason

from .election import FORWARDED_BY, SERVED_BY, Elector, forward_target
from .errors import Unavailable

# Request headers a follower passes on to the leader, and answer headers it passes back.
# The caller's Authorization goes along: the leader authorises the caller, not the follower.
FORWARD_REQUEST_HEADERS = ("Content-Type", "Accept", "User-Agent", "Authorization")
FORWARD_ANSWER_HEADERS = ("Content-Type", "WWW-Authenticate", SERVED_BY)


def forward_session(
    pool_size: int = 64, tls_ca: str = "", client_cert: tuple[str, str] | None = None
) -> requests.Session:
    """The HTTP session a follower forwards with: no proxy from the environment, no retries;
    an https:// leader's certificate is verified with ``tls_ca`` (else requests' certifi bundle),
    and ``client_cert`` is presented to a leader that requires one."""
    session = requests.Session()
    session.trust_env = False
    if tls_ca:
        session.verify = tls_ca
    if client_cert:
        session.cert = client_cert
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=pool_size, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class Forwarder:
    """Forwards the current Flask request to the leader and relays its answer."""

    def __init__(
        self,
        elector: Elector,
        self_url: str,
        session: Any = None,
        connect_timeout: float = 2.0,
        read_timeout: float = 55.0,  # below gunicorn's worker timeout (60 s)
    ) -> None:
        self.elector = elector
        self.self_url = self_url
        self.session = session if session is not None else forward_session()
        self.timeout = (connect_timeout, read_timeout)

    def to_leader(self) -> Response | None:
        """The leader's answer to the current request; None to serve it here."""
        target = forward_target(
            request.path, FORWARDED_BY in request.headers, self.elector.view(), self.self_url
        )
        return self.forward(target) if target is not None else None

    def forward(self, target: str) -> Response | None:
        """The answer from ``target``; None to serve here (no leader now, or this master leads)."""
        try:
            return self._send(target)
        except requests.RequestException as e:
            error = e
            if never_sent(e):
                # The leader may have just gone: look again once, synchronously.
                fresh = forward_target(request.path, False, self.elector.step(), self.self_url)
                if fresh is None:
                    return None
                if fresh != target:
                    target = fresh
                    try:
                        return self._send(target)
                    except requests.RequestException as e2:
                        error = e2
        tls = isinstance(error, requests.exceptions.SSLError)
        raise Unavailable(
            f"netmaster leader {target}",
            f"unreachable from {self.self_url or 'this master'} "
            f"({tls_reason(error) if tls else short_reason(error)}); retry the request",
        )

    def _send(self, target: str) -> Response:
        headers = {h: request.headers[h] for h in FORWARD_REQUEST_HEADERS if h in request.headers}
        headers[FORWARDED_BY] = self.self_url or "?"
        resp = self.session.request(
            request.method,
            target + request_uri(),
            headers=headers,
            data=request.get_data(cache=True),
            timeout=self.timeout,
            allow_redirects=False,
        )
        answer = Response(resp.content, status=resp.status_code)
        for h in FORWARD_ANSWER_HEADERS:
            if h in resp.headers:
                answer.headers[h] = resp.headers[h]
        answer.headers[FORWARDED_BY] = self.self_url or "?"
        return answer


def mark_served_by(resp: Response, self_url: str) -> Response:
    """Name this master on an answer it served (a relayed answer keeps the leader's name)."""
    if self_url and SERVED_BY not in resp.headers:
        resp.headers[SERVED_BY] = self_url
    return resp


def request_uri() -> str:
    """The request's path and query as the client sent them (percent-escapes kept)."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI") or ""
    if raw.startswith("/"):
        return str(raw)
    query = request.query_string.decode("latin-1")
    return urllib.parse.quote(request.path) + (f"?{query}" if query else "")
