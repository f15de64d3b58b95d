"""What the master answers to a request gunicorn's parser refuses: the API's JSON error with
the right status, whose reason never repeats the raw input. Each case is parsed by gunicorn's
real parser, so the exceptions are the ones a real master meets."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from typing import Any

import pytest
from flask import Flask, request
from gunicorn.config import Config
from gunicorn.http import errors
from gunicorn.http.parser import RequestParser

from master.httperrors import Limits, Refusal, body_errors_as_400, error_response, refusal

SECRET = "s3cr3t-0123456789abcdef0123456789"
AUTH = f"Authorization: Bearer {SECRET}\r\n"


def parse(data: bytes, peer: str = "127.0.0.1") -> BaseException | None:
    """What gunicorn raises reading ``data`` as one request, its body included."""
    parser = RequestParser(Config(), iter([data]), (peer, 40000))
    try:
        req = next(parser)
        req.body.read()
    except Exception as e:
        return e
    return None


def head(*lines: str, first: str = "POST /api/v1/tenants/x HTTP/1.1") -> bytes:
    return (first + "\r\n" + AUTH + "".join(f"{line}\r\n" for line in lines) + "\r\n").encode()


CHUNKED = "Transfer-Encoding: chunked"
S = SECRET
CASES: dict[str, tuple[bytes, int]] = {
    "lower-case method": (f"get / HTTP/1.1\r\n{AUTH}\r\n".encode(), 400),
    "method with a bad character": (f"G{S}# / HTTP/1.1\r\n\r\n".encode(), 400),
    "method too long": (b"ABCDEFGHIJKLMNOPQRSTU / HTTP/1.1\r\n\r\n", 400),
    "request line too long": (b"GET /" + b"a" * 5000 + S.encode() + b" HTTP/1.1\r\n\r\n", 414),
    "two spaces in the request line": (f"GET  /{S} HTTP/1.1\r\n\r\n".encode(), 400),
    "target not ASCII": ("GET /\u00e9 HTTP/1.1\r\n\r\n".encode("latin-1"), 400),
    "no version": (f"GET /{S}\r\n\r\n".encode(), 400),
    "authority form": (f"GET {S}:80 HTTP/1.1\r\n\r\n".encode(), 400),
    "bare LF in the request line": (f"GET /{S} HTTP/1.1\nHost: m\r\n\r\n".encode(), 400),
    "bare LF in the head": (f"GET / HTTP/1.1\r\n{AUTH}Host: m\n\r\n".encode(), 400),
    "version not HTTP/x.y": (f"GET / {S}\r\n\r\n".encode(), 400),
    "HTTP/2.0": (b"GET / HTTP/2.0\r\n\r\n", 505),
    "HTTP/0.9": (b"GET / HTTP/0.9\r\n\r\n", 505),
    "header name not a token": (head(f"Bearer {S}: x"), 400),
    "header line without a colon": (head(f"Authorization Bearer {S}"), 400),
    "control character in a value": (head(f"X-Token: {S}\x01"), 400),
    "Host twice": (head("Host: a", "Host: b"), 400),
    "Content-Type twice": (head("Content-Type: a", "Content-Type: b"), 400),
    "obsolete line folding": (head("X-A: 1", f" {S}"), 400),
    "too many header fields": (head(*(f"X-{i}: {S}" for i in range(101))), 431),
    "header field too long": (head(f"X-Long: {S}" + "a" * 9000), 431),
    "Content-Length not a number": (head(f"Content-Length: {S}"), 400),
    "Content-Length twice": (head("Content-Length: 1", "Content-Length: 2") + b"{}", 400),
    "Content-Length and chunked": (head("Content-Length: 2", CHUNKED) + b"0\r\n\r\n", 400),
    "Transfer-Encoding unknown": (head(f"Transfer-Encoding: {S}"), 501),
    "Transfer-Encoding without chunked": (head("Transfer-Encoding: gzip"), 400),
    "chunked not last": (head("Transfer-Encoding: chunked, gzip"), 400),
    "chunked in HTTP/1.0": (head(CHUNKED, first="POST / HTTP/1.0"), 400),
    "Expect other than 100-continue": (head(f"Expect: {S}"), 417),
    "scheme headers disagree": (head("X-Forwarded-Proto: https", "X-Forwarded-Ssl: off"), 400),
    "chunk size not hexadecimal": (head(CHUNKED) + f"{S}\r\nx\r\n0\r\n\r\n".encode(), 400),
    "chunk without its CRLF": (head(CHUNKED) + f"2\r\n{{}}{S}0\r\n\r\n".encode(), 400),
    "chunk extension not valid": (head(CHUNKED) + f'2;a="{S}\r\n{{}}\r\n0\r\n\r\n'.encode(), 400),
    "chunked body cut off": (head(CHUNKED) + b"20\r\n{}", 400),
    "forbidden header in the trailer": (head(CHUNKED) + f"0\r\n{AUTH}\r\n".encode(), 400),
    "trailer too large": (head(CHUNKED) + f"0\r\nX-A: {S}{'a' * 40000}\r\n\r\n".encode(), 431),
}


@pytest.mark.parametrize("case", CASES)
def test_each_refusal_has_its_status_and_never_repeats_the_input(case: str) -> None:
    data, status = CASES[case]
    exc = parse(data)
    assert exc is not None, "gunicorn took it"
    found = refusal(exc)
    assert found is not None and found.status == status, (exc, found)
    assert SECRET not in found.reason and SECRET[:8] not in found.reason
    assert found.reason and len(found.reason) < 200
    answer = error_response(found)
    assert SECRET.encode() not in answer and len(answer) < 600
    head_bytes, _, body = answer.partition(b"\r\n\r\n")
    lines = head_bytes.decode("latin-1").split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} ")
    assert "Content-Type: application/json" in lines and "Connection: close" in lines
    assert f"Content-Length: {len(body)}" in lines
    assert (
        json.loads(body)
        == found.to_json()
        == {
            "error": f"request: {found.reason}",
            "object": "request",
            "reason": found.reason,
        }
    )


def test_a_request_gunicorn_takes_is_not_refused_here() -> None:
    """The cases above are refused for the reason they name, not for something else."""
    assert parse(head("Content-Length: 2") + b"{}") is None
    assert parse(head(CHUNKED) + b"2\r\n{}\r\n0\r\n\r\n") is None
    assert parse(b"GET /version HTTP/1.1\r\n\r\n") is None  # no Host: gunicorn serves it


def test_a_lower_case_standard_method_is_named_with_its_fix() -> None:
    for method in ("get", "Post", "delete"):
        exc = parse(f"{method} / HTTP/1.1\r\n\r\n".encode())
        found = refusal(exc) if exc is not None else None
        assert found is not None and found.reason == (
            f"method {method} is not valid: methods are case-sensitive; send {method.upper()}"
        )
    found = refusal(errors.InvalidRequestMethod("frobnicate"))
    assert found is not None and "frobnicate" not in found.reason


def test_the_limits_named_are_the_configured_ones() -> None:
    limits = Limits(line=100, fields=3, field_size=50)
    assert refusal(errors.LimitRequestLine(120, 100), limits) == Refusal(
        414, "the request line is longer than 100 bytes"
    )
    fields = refusal(errors.LimitRequestHeaders("limit request headers fields"), limits)
    assert fields is not None and "more than 3 header fields" in fields.reason
    size = refusal(errors.LimitRequestHeaders("limit request headers fields size"), limits)
    assert size is not None and "longer than 50 bytes" in size.reason
    cfg = Config()
    cfg.set("limit_request_line", 200)
    assert Limits.of(cfg).line == 200


def _instance(cls: type[BaseException]) -> BaseException:
    params = [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.default is inspect.Parameter.empty
    ]
    return cls(*(SECRET for _ in params))


def _parse_errors() -> Iterable[type[BaseException]]:
    for _, cls in inspect.getmembers(errors, inspect.isclass):
        # Not the base class itself: it is what a class gunicorn adds later falls back to.
        if (
            issubclass(cls, errors.ParseException | errors.NoMoreData)
            and cls is not errors.ParseException
        ):
            yield cls


@pytest.mark.parametrize("cls", list(_parse_errors()), ids=lambda c: c.__name__)
def test_every_gunicorn_parse_error_is_answered_without_its_input(cls: type[Any]) -> None:
    """Every error class gunicorn's parser has (a new one fails here until it is mapped):
    the client's fault is a 4xx or 501/505, the application's or the configuration's a 500."""
    found = refusal(_instance(cls))
    if cls in (
        errors.InvalidResponseHeader,
        errors.InvalidResponseHeaderName,
        errors.ConfigurationProblem,
    ):
        assert found is None
        return
    assert found is not None and (400 <= found.status < 500 or found.status in (501, 505))
    assert SECRET not in found.reason
    assert found.reason != "the request is not valid HTTP/1.1", f"{cls.__name__} is not mapped"


def test_anything_else_is_not_the_clients_fault() -> None:
    assert refusal(RuntimeError(SECRET)) is None
    assert refusal(OSError(SECRET)) is None


def test_a_chunked_body_gunicorn_cannot_read_is_the_apps_400() -> None:
    app = Flask("t")

    @app.post("/x")
    def x() -> str:
        return str(len(request.get_data()))

    class Broken:
        def read(self, *_: Any) -> bytes:
            raise errors.InvalidChunkSize(SECRET.encode())

        readline = read

    inner = body_errors_as_400(app.wsgi_app)

    def with_a_broken_body(environ: dict[str, Any], start_response: Any) -> Any:
        environ["wsgi.input"] = Broken()
        environ["wsgi.input_terminated"] = True
        return inner(environ, start_response)

    app.wsgi_app = with_a_broken_body  # type: ignore[method-assign]
    r = app.test_client().post("/x", data=b"{}")
    assert r.status_code == 400
    assert "a chunk size is not a hexadecimal number" in r.get_data(as_text=True)
    assert SECRET not in r.get_data(as_text=True)
    app.wsgi_app = inner  # type: ignore[method-assign]
    assert app.test_client().post("/x", data=b"{}").get_data() == b"2"  # a good body passes
