"""What the master answers when gunicorn cannot parse a request: the API's JSON error, not
gunicorn's HTML page.

gunicorn refuses a malformed request (a lower-case method, a request line over 4094 bytes, a
header over 8190, ...) before the Flask app runs, and writes its own HTML page whose text
repeats the bad input. ``refusal`` turns each of its parse errors
into a status and a reason in the API's words; ``error_response`` writes them as the API's
``{"error", "object", "reason"}``; ``body_errors_as_400`` does the same for the errors that
gunicorn raises while the app reads a chunked body. A reason never repeats what the client
sent, except a standard method or header name: a malformed line may hold a token, and the
reason is logged too.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from gunicorn.http import errors
from werkzeug.exceptions import BadRequest

OBJECT = "request"
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
# Header names a reason may repeat (upper case, as gunicorn reports them).
KNOWN_HEADERS = frozenset(
    {
        "ACCEPT",
        "ACCEPT-ENCODING",
        "AUTHORIZATION",
        "CONNECTION",
        "CONTENT-LENGTH",
        "CONTENT-TYPE",
        "COOKIE",
        "EXPECT",
        "HOST",
        "TE",
        "TRAILER",
        "TRANSFER-ENCODING",
        "USER-AGENT",
    }
)
BARE_LF = "bare LF as line terminator"  # gunicorn's own words, not the client's
REQUEST_LINE = "the request line is not 'METHOD /path HTTP/1.1' (single spaces, printable ASCII)"
CHUNKED = "the chunked body is not valid"


@dataclass(frozen=True)
class Limits:
    """gunicorn's limits on a request's head (its limit_request_* settings)."""

    line: int = 4094
    fields: int = 100
    field_size: int = 8190

    @classmethod
    def of(cls, cfg: Any) -> Limits:
        return cls(cfg.limit_request_line, cfg.limit_request_fields, cfg.limit_request_field_size)


@dataclass(frozen=True)
class Refusal:
    """The answer to a request gunicorn refused."""

    status: int
    reason: str

    @property
    def status_line(self) -> str:
        return f"{self.status} {HTTPStatus(self.status).phrase}"

    def to_json(self) -> dict[str, str]:
        return {"error": f"{OBJECT}: {self.reason}", "object": OBJECT, "reason": self.reason}


# The refusals that depend on the error's class alone, in the order they are tried.
_BY_CLASS: tuple[tuple[type | tuple[type, ...], int, str], ...] = (
    (
        errors.ObsoleteFolding,
        400,
        "a header line starts with a space or tab (line folding is obsolete)",
    ),
    (errors.ExpectationFailed, 417, "the Expect header may only be '100-continue'"),
    (errors.UnsupportedTransferCoding, 501, "the Transfer-Encoding may only be 'chunked'"),
    (errors.InvalidChunkSize, 400, f"{CHUNKED}: a chunk size is not a hexadecimal number"),
    (
        errors.ChunkMissingTerminator,
        400,
        f"{CHUNKED}: a chunk does not end with CRLF where its size says",
    ),
    (errors.InvalidChunkExtension, 400, f"{CHUNKED}: a chunk extension is not valid"),
    (errors.NoMoreData, 400, "the request ended before its body was whole"),
    (
        errors.InvalidSchemeHeaders,
        400,
        "the X-Forwarded-Proto, X-Forwarded-Protocol and X-Forwarded-Ssl headers disagree",
    ),
    (
        (errors.InvalidProxyLine, errors.InvalidProxyHeader),
        400,
        "the PROXY protocol header is not valid",
    ),
    (errors.ForbiddenProxyRequest, 400, "the PROXY protocol is not accepted from this address"),
    (errors.InvalidH2CPreface, 400, "the HTTP/2 connection preface is not valid"),
    (ssl.SSLError, 400, "the TLS connection failed"),
    (errors.ParseException, 400, "the request is not valid HTTP/1.1"),
)


def refusal(exc: BaseException, limits: Limits = Limits()) -> Refusal | None:
    """The client's fault that ``exc`` (raised by gunicorn parsing a request) stands for, or
    None when it is not the client's (an internal error, answered 500)."""
    if isinstance(exc, errors.InvalidResponseHeader | errors.InvalidResponseHeaderName):
        return None  # the application sent a bad header
    if isinstance(exc, errors.LimitRequestLine):
        return Refusal(414, f"the request line is longer than {limits.line} bytes")
    if isinstance(exc, errors.LimitRequestHeaders):
        return Refusal(431, _too_large(exc.msg, limits))
    if isinstance(exc, errors.InvalidRequestMethod):
        return Refusal(400, _method(exc.method))
    if isinstance(exc, errors.InvalidHTTPVersion):
        return _version(exc.version)
    if isinstance(exc, errors.InvalidRequestLine):
        return Refusal(400, _bare_lf() if exc.req == BARE_LF else REQUEST_LINE)
    if isinstance(exc, errors.InvalidHeaderName):
        return Refusal(400, _header_name(exc.hdr))
    if isinstance(exc, errors.InvalidHeader):
        return Refusal(400, _header(exc.hdr, exc.req is not None))
    if isinstance(exc, errors.ConfigurationProblem):
        return None
    for kind, status, reason in _BY_CLASS:
        if isinstance(exc, kind):
            return Refusal(status, reason)
    return None


def _too_large(msg: str, limits: Limits) -> str:
    if msg == "limit request headers fields":
        return f"the request has more than {limits.fields} header fields"
    if msg == "limit request headers fields size":
        return f"a header field is longer than {limits.field_size} bytes"
    if msg == "limit request trailer section size":
        return "the chunked body's trailer section is too large"
    return (
        f"the request's header section is too large (at most {limits.fields} fields of "
        f"{limits.field_size} bytes)"
    )


def _method(method: object) -> str:
    rule = "a method is a standard one in upper case (GET, POST, PUT, PATCH, DELETE)"
    text = method if isinstance(method, str) else ""
    if text.upper() in METHODS and text != text.upper():
        return f"method {text} is not valid: methods are case-sensitive; send {text.upper()}"
    return f"the method is not valid: {rule}"


def _version(version: object) -> Refusal:
    if isinstance(version, tuple) and all(isinstance(n, int) for n in version):
        shown = ".".join(str(n) for n in version)
        return Refusal(505, f"HTTP/{shown} is not supported: send HTTP/1.1 (or HTTP/1.0)")
    return Refusal(400, "the HTTP version is not valid: send HTTP/1.1 (or HTTP/1.0)")


def _bare_lf() -> str:
    return "a line of the request's head ends with a bare LF: lines end with CRLF"


def _shown(name: object) -> str | None:
    """A header name a reason may repeat (None: one the client made up, shown to nobody)."""
    if isinstance(name, str) and name.upper() in KNOWN_HEADERS:
        return "-".join(part.capitalize() for part in name.split("-"))
    return None


def _header_name(name: object) -> str:
    shown = _shown(name)
    if shown is not None:  # valid in the head, not in a chunked body's trailer
        return f"header {shown} is not allowed in the trailer of a chunked body"
    return "a header name is not valid: names are letters, digits and !#$%&'*+-.^_`|~"


def _header(header: object, with_request: bool) -> str:
    if header == BARE_LF:
        return _bare_lf()
    if header == "CONTENT-LENGTH":
        return (
            "the Content-Length header is not valid: one decimal number, given once, "
            "and not beside Transfer-Encoding"
        )
    if header == "TRANSFER-ENCODING":
        return (
            "the Transfer-Encoding header is not valid: it ends with 'chunked', is given "
            "once, and only in HTTP/1.1"
        )
    shown = _shown(header)
    if shown is not None and with_request:  # gunicorn names the request when one repeats
        return f"header {shown} is given more than once"
    if shown is not None:
        return f"the value of header {shown} holds a control character"
    return "a header line is not valid: each is 'Name: value', without control characters"


def error_response(refused: Refusal) -> bytes:
    """The whole HTTP answer to a refused request; the connection closes after it."""
    body = json.dumps(refused.to_json()).encode()
    head = (
        f"HTTP/1.1 {refused.status_line}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


INTERNAL = Refusal(500, "internal error while reading the request")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def body_errors_as_400(app: WsgiApp) -> WsgiApp:
    """``app``, except that a chunked body gunicorn cannot read (raised while the app reads
    it) is the app's 400 (werkzeug's BadRequest, whose description is the reason), not a
    500 with gunicorn's message."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        stream = environ.get("wsgi.input")
        if stream is not None:
            environ["wsgi.input"] = _CheckedInput(stream)
        return app(environ, start_response)

    return wrapped


class _CheckedInput:
    """gunicorn's request body, whose read errors are werkzeug's BadRequest."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def read(self, size: int | None = None) -> bytes:
        return self._checked(self._stream.read, size)

    def readline(self, size: int | None = None) -> bytes:
        return self._checked(self._stream.readline, size)

    def readlines(self, hint: int | None = None) -> list[bytes]:
        return self._checked(self._stream.readlines, hint)

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def _checked(self, read: Callable[[Any], Any], arg: Any) -> Any:
        try:
            return read(arg)
        except (errors.ParseException, errors.NoMoreData) as e:
            found = refusal(e)
            if found is None:
                raise
            raise BadRequest(found.reason) from None
