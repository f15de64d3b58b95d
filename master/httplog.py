"""The master's access log (gunicorn's, at --log-level debug) without credentials.

gunicorn's access log names the caller by the user of an HTTP Basic Authorization header
(``%(u)s``): a client that sends its token as ``curl -u "$TOKEN:"`` had the token logged.
Its request line (``%(r)s``) is the raw request target, which in absolute form may carry a
``user:password@``. Here the user is the caller's NAME from the token file (set by auth.py
once the token is valid, else ``-``), the request line loses any userinfo, and the atoms of
credential headers are gone, so no format can print them.
"""

from __future__ import annotations

from typing import Any

from gunicorn.glogging import Logger

from .auth import CALLER_ENVIRON

SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
SECRET_ENVIRON = frozenset(f"http_{h.replace('-', '_')}" for h in SECRET_HEADERS)
URI_ATOMS = ("r", "{raw_uri}e", "{request_uri}e")


def without_userinfo(text: str) -> str:
    """``text`` (a request target, or a request line holding one) with the ``user:password@``
    of an absolute URL taken out: ``GET http://u:p@host/x HTTP/1.1`` -> ``GET http://host/x
    HTTP/1.1``."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text
    end = len(rest)
    for stop in ("/", "?", "#", " "):
        found = rest.find(stop)
        if 0 <= found < end:
            end = found
    authority = rest[:end]
    if "@" not in authority:
        return text
    return f"{scheme}://{authority.rsplit('@', 1)[1]}{rest[end:]}"


def safe_atoms(atoms: dict[str, Any], caller: str | None) -> dict[str, Any]:
    """gunicorn's access-log atoms without credentials: ``u`` is ``caller`` (or ``-``), no
    credential header or its environ variable, no userinfo in the request target."""
    kept: dict[str, Any] = {}
    for key, value in atoms.items():
        name = key[1:-2].lower() if key.startswith("{") else ""
        if key.endswith("}i") and name in SECRET_HEADERS:
            continue
        if key.endswith("}e") and name in SECRET_ENVIRON:
            continue
        kept[key] = value
    kept["u"] = caller or "-"
    for key in URI_ATOMS:
        if isinstance(kept.get(key), str):
            kept[key] = without_userinfo(kept[key])
    return kept


class AccessLogger(Logger):  # type: ignore[misc]
    """gunicorn's logger, whose access log holds no credential."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> Any:
        atoms = super().atoms(resp, req, environ, request_time)
        return safe_atoms(atoms, environ.get(CALLER_ENVIRON))

    def _get_user(self, environ: dict[str, Any]) -> None:
        return None  # gunicorn's: the decoded Basic user, which may be a token
