"""The bearer token a client of the netmaster (netplugin, netctl) presents.

It comes from a file (``--auth-token-file``) or from an environment variable, never from
the command line, where ``ps`` shows it to every user. A client token file holds the token
alone, on one line; lines starting with ``#`` are ignored. Errors name the file, never
the token.
"""

from __future__ import annotations

import os

AGENT_TOKEN_ENV = "NETPLUGIN_AUTH_TOKEN"  # netplugin's token itself, when no --auth-token-file


class CredentialError(ValueError):
    """A token file that cannot be used."""


def parse_token(text: str, source: str) -> str:
    """The one token in a client token file's ``text``."""
    lines = [ln.strip() for ln in text.splitlines()]
    found = [ln for ln in lines if ln and not ln.startswith("#")]
    if not found:
        raise CredentialError(f"{source}: no token in it")
    if len(found) > 1 or len(found[0].split()) > 1:
        raise CredentialError(
            f"{source}: expected the token alone on one line (netmaster's 'ROLE TOKEN' "
            "lines belong in its own --auth-token-file)"
        )
    return found[0]


def read_secret_file(path: str) -> tuple[str, int]:
    """A token file's text and its mode bits (netmaster warns when others may read it)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), os.fstat(f.fileno()).st_mode
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise CredentialError(f"token file {path}: cannot read it: {reason}") from None


def read_token_file(path: str) -> str:
    return parse_token(read_secret_file(path)[0], f"token file {path}")


def client_cert(cert: str, key: str) -> tuple[str, str] | None:
    """The client certificate to present (--tls-cert, --tls-key), or None; both or neither."""
    if bool(cert) != bool(key):
        raise CredentialError("--tls-cert and --tls-key go together: give both or neither")
    return (cert, key) if cert else None


def client_token(token_file: str, env_token: str) -> str:
    """The token to send: from ``token_file`` when given, else ``env_token`` ("" = none)."""
    if token_file:
        return read_token_file(token_file)
    return env_token.strip()


def bearer(token: str) -> dict[str, str]:
    """The request headers that present ``token`` (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}
