"""Bearer-token authentication and role-based authorisation of the REST API.

The token file (netmaster --auth-token-file) holds one ``ROLE TOKEN [NAME]`` per line;
blank lines and lines starting with ``#`` are ignored. NAME (optional) is how the logs
name the caller; the token itself is never logged nor echoed in an error. The roles nest:

- ``reader``: every GET (lists, objects, inspect);
- ``agent``: a reader, plus what netplugin does on Docker's behalf: the allocation API
  (``/api/v1/alloc/...``) and network writes (create, rename, delete: ``docker network
  create/rm -d netplugin``);
- ``admin``: everything (tenants, endpoint groups, global settings).

``GET /version``, ``GET /api/v1/leader`` and ``GET /api/v1/openapi.json`` need no token:
they are what health checks and load balancers ask, and say nothing about the cluster's
objects. The decisions (``parse_tokens``, ``required_role``, ``check``) are pure.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from flask import Flask, Response, request

from common.credentials import CredentialError, read_secret_file

from .openapi import API
from .routes import json_response

log = logging.getLogger("netmaster.auth")

Role = Literal["reader", "agent", "admin"]
ROLES: tuple[Role, ...] = ("reader", "agent", "admin")  # each includes those before it
MIN_TOKEN_LENGTH = 16
PUBLIC_ROUTES = frozenset({"/version", f"{API}/leader", f"{API}/openapi.json"})
READS = frozenset({"GET", "HEAD", "OPTIONS"})
REALM = 'Bearer realm="netmaster"'
CALLER_ENVIRON = "netmaster.caller"  # the caller's NAME, for the access log (httplog.py)


class TokenFileError(ValueError):
    """A token file that cannot be used; the message names the line, never a token."""


@dataclass(frozen=True)
class Caller:
    """Who a valid token stands for."""

    role: Role
    name: str


@dataclass(frozen=True)
class _Entry:
    digest: bytes  # sha256 of the token: compare_digest then compares equal lengths
    caller: Caller


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class TokenTable:
    """The tokens netmaster accepts, each with its role."""

    def __init__(self, entries: Iterable[tuple[str, Caller]]) -> None:
        self._entries = tuple(_Entry(_digest(token), caller) for token, caller in entries)

    def __len__(self) -> int:
        return len(self._entries)

    def roles(self) -> dict[Role, int]:
        """How many tokens each role has (for the start-up log)."""
        counts: dict[Role, int] = {}
        for e in self._entries:
            counts[e.caller.role] = counts.get(e.caller.role, 0) + 1
        return counts

    def lookup(self, token: str) -> Caller | None:
        """The caller ``token`` belongs to, or None. Every entry is compared, in constant
        time, so the answer's timing says nothing about which token was near."""
        given = _digest(token)
        found: Caller | None = None
        for e in self._entries:
            if hmac.compare_digest(given, e.digest):
                found = e.caller
        return found


def parse_tokens(text: str, source: str = "token file") -> TokenTable:
    """The table a token file describes; a TokenFileError names the line that is wrong."""
    entries: list[tuple[str, Caller]] = []
    seen: dict[bytes, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{source} line {number}"
        fields = line.split()
        if len(fields) not in (2, 3):
            raise TokenFileError(f"{where}: expected 'ROLE TOKEN [NAME]'")
        role, token = fields[0], fields[1]
        if role not in ROLES:
            raise TokenFileError(
                f"{where}: unknown role {role!r}; the roles are {', '.join(ROLES)}"
            )
        if len(token) < MIN_TOKEN_LENGTH:
            raise TokenFileError(
                f"{where}: the token is shorter than {MIN_TOKEN_LENGTH} characters; "
                "make one with: openssl rand -hex 32"
            )
        digest = _digest(token)
        if digest in seen:
            raise TokenFileError(f"{where}: the same token as line {seen[digest]}")
        seen[digest] = number
        name = fields[2] if len(fields) == 3 else f"{role}@line{number}"
        entries.append((token, Caller(role, name)))  # type: ignore[arg-type]
    if not entries:
        raise TokenFileError(f"{source}: no tokens (one 'ROLE TOKEN [NAME]' per line)")
    return TokenTable(entries)


def load_tokens(path: str) -> TokenTable:
    """Read and parse the token file at ``path``; warns when others may read it."""
    try:
        text, mode = read_secret_file(path)
    except CredentialError as e:
        raise TokenFileError(str(e)) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("token file %s may be read by other users: chmod 600 it", path)
    return parse_tokens(text, f"token file {path}")


def required_role(method: str, rule: str | None) -> Role | None:
    """The least role that may call ``method`` on the route ``rule`` (a Flask rule such as
    "/api/v1/networks/<key>"; None for a path no route matches); None: no token needed."""
    read = method.upper() in READS
    if read and rule in PUBLIC_ROUTES:
        return None
    if read or rule is None:  # no route: any caller may learn that it is a 404 or 405
        return "reader"
    if rule.startswith((f"{API}/alloc/", f"{API}/networks/")):
        return "agent"
    if method.upper() == "DELETE" and rule == f"{API}/endpointGroups/<key>":
        return "agent"  # `docker network rm` of a group's docker network (refused with endpoints)
    return "admin"


def allows(role: Role, needed: Role) -> bool:
    return ROLES.index(role) >= ROLES.index(needed)


@dataclass(frozen=True)
class Refusal:
    """An answer of 401 or 403 in the API's error shape."""

    status: int
    obj: str
    reason: str
    challenge: str  # the WWW-Authenticate header
    caller: Caller | None = None  # who was refused (a 403), for the log

    def to_json(self) -> dict[str, str]:
        return {"error": f"{self.obj}: {self.reason}", "object": self.obj, "reason": self.reason}


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header; "" for another scheme."""
    if header is None or not header.strip():
        return None
    scheme, _, token = header.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def check(
    table: TokenTable, method: str, rule: str | None, path: str, header: str | None
) -> Caller | Refusal | None:
    """The caller a request may proceed as (None: a public route), or why it may not."""
    needed = required_role(method, rule)
    if needed is None:
        return None
    obj = f"{method} {path}"
    token = bearer_token(header)
    if token is None:
        return Refusal(
            401,
            obj,
            "authentication required: send 'Authorization: Bearer TOKEN' "
            "(netctl and netplugin: --auth-token-file)",
            REALM,
        )
    if not token:
        return Refusal(
            401,
            obj,
            "the Authorization header must be 'Bearer TOKEN'",
            f'{REALM}, error="invalid_request"',
        )
    caller = table.lookup(token)
    if caller is None:
        return Refusal(401, obj, "the bearer token is not valid", f'{REALM}, error="invalid_token"')
    if not allows(caller.role, needed):
        return Refusal(
            403,
            obj,
            f"role {caller.role} may not call {method} {rule}: it needs role {needed}",
            f'{REALM}, error="insufficient_scope"',
            caller,
        )
    return caller


def install(app: Flask, table: TokenTable) -> None:
    """Check every request against ``table`` before anything else handles it (forwarding
    included: the leader checks the forwarded Authorization header again)."""

    @app.before_request
    def authenticate() -> Response | None:
        rule = request.url_rule.rule if request.url_rule is not None else None
        found = check(
            table, request.method, rule, request.path, request.headers.get("Authorization")
        )
        caller = found.caller if isinstance(found, Refusal) else found
        if caller is not None:
            request.environ[CALLER_ENVIRON] = caller.name
        if not isinstance(found, Refusal):
            return None
        who = f"{found.caller.name} at " if found.caller is not None else ""
        log.info(
            "refused %s %s (%s%s): %s",
            request.method,
            request.path,
            who,
            request.remote_addr,
            found.reason,
        )
        resp = json_response(found.to_json(), found.status)
        resp.headers["WWW-Authenticate"] = found.challenge
        return resp
