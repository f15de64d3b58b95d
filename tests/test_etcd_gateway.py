"""The etcd JSON-gateway client over a scripted session: failover, the never-sent rule, the
wire format, error mapping and TLS settings. The real gateway is in integration/."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import pytest
import requests
import urllib3

from store.base import (
    KV,
    Compacted,
    Compare,
    Delete,
    Event,
    LeaseNotFound,
    Put,
    StoreError,
    StoreUnavailable,
)
from store.etcd_gateway import (
    API_PATH,
    EndpointsUnavailable,
    Gateway,
    base_url,
    decode_kv,
    decode_watch,
    encode_compare,
    encode_op,
    error_from,
    header_revision,
    messages,
    range_keys,
    tls_session,
    txn_body,
)

A, B, C = "http://etcd-a:2379", "http://etcd-b:2379", "http://etcd-c:2379"


def b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def answer(status: int, body: object, chunks: list[bytes] | None = None) -> requests.Response:
    """A real requests.Response with this status and (JSON or raw) body."""
    r = requests.Response()
    r.status_code = status
    r.reason = HTTPStatus(status).phrase
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r.raw = _Chunks(chunks) if chunks is not None else io.BytesIO(data)
    return r


class _Chunks:
    """A raw stream that hands out the given chunks one read at a time."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    def read(self, *_: object, **__: object) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


def _retries_exhausted(reason: Exception) -> urllib3.exceptions.MaxRetryError:
    return urllib3.exceptions.MaxRetryError(None, "/", reason)  # type: ignore[arg-type]


def refused() -> requests.ConnectionError:
    """What requests raises when nothing listens: the request never left this host."""
    conn: Any = None
    reason = urllib3.exceptions.NewConnectionError(conn, "[Errno 111] Connection refused")
    return requests.ConnectionError(_retries_exhausted(reason))


def connect_timeout() -> requests.ConnectTimeout:
    reason = urllib3.exceptions.ConnectTimeoutError("timed out connecting")
    return requests.ConnectTimeout(_retries_exhausted(reason))


def reset_after_sending() -> requests.ConnectionError:
    """The connection broke after the request was written: etcd may have applied it."""
    return requests.ConnectionError(
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104))
    )


def read_timeout() -> requests.ReadTimeout:
    return requests.ReadTimeout("read timed out")


@dataclass
class Call:
    url: str
    body: dict[str, Any]
    timeout: Any
    stream: bool


class FakeSession(requests.Session):
    """The transport under the gateway: outcomes scripted per endpoint, calls recorded."""

    def __init__(self, **script: list[requests.Response | Exception]) -> None:
        super().__init__()
        self.script = {url: list(outcomes) for url, outcomes in script.items()}
        self.calls: list[Call] = []
        self.closed = False

    def post(self, url: Any, data: Any = None, **kw: Any) -> Any:  # type: ignore[override]
        url = str(url)
        self.calls.append(Call(url, json.loads(data), kw.get("timeout"), kw.get("stream", False)))
        endpoint = url.split(API_PATH)[0]
        outcome = self.script[endpoint].pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        outcome.url = url
        return outcome

    def close(self) -> None:
        self.closed = True

    def endpoints_called(self) -> list[str]:
        return [c.url.split(API_PATH)[0] for c in self.calls]


OK = {"header": {"revision": "7"}}


def gateway(session: FakeSession, *endpoints: str) -> Gateway:
    return Gateway(list(endpoints or (A, B, C)), session=session, timeout=3.0)


# ---------------------------------------------------------------- failover


def test_requests_go_to_the_api_path_with_connect_and_read_timeouts() -> None:
    s = FakeSession(**{A: [answer(200, OK)]})
    assert gateway(s).post("/kv/range", {"key": "AA=="}) == OK
    assert s.calls == [Call(f"{A}/v3/kv/range", {"key": "AA=="}, (2.0, 3.0), False)]


@pytest.mark.parametrize("failure", [refused, connect_timeout, read_timeout, reset_after_sending])
def test_a_read_fails_over_whatever_the_failure(failure: Any) -> None:
    s = FakeSession(**{A: [failure()], B: [answer(200, OK)]})
    gw = gateway(s)
    assert gw.post("/kv/range", {}) == OK
    assert s.endpoints_called() == [A, B]


def test_the_endpoint_that_answered_is_asked_first_next_time() -> None:
    s = FakeSession(**{A: [refused()], B: [answer(200, OK), answer(200, OK)]})
    gw = gateway(s)
    gw.post("/kv/range", {})
    gw.post("/kv/range", {})
    assert s.endpoints_called() == [A, B, B]
    assert gw.current == 1


@pytest.mark.parametrize("failure", [refused, connect_timeout])
def test_a_txn_moves_on_when_it_certainly_never_reached_etcd(failure: Any) -> None:
    s = FakeSession(**{A: [failure()], B: [failure()], C: [answer(200, OK)]})
    assert gateway(s).post("/kv/txn", {}, idempotent=False) == OK
    assert s.endpoints_called() == [A, B, C]


@pytest.mark.parametrize("failure", [read_timeout, reset_after_sending])
def test_a_txn_that_may_have_reached_etcd_is_never_sent_again(failure: Any) -> None:
    s = FakeSession(**{A: [failure()], B: [answer(200, OK)]})
    with pytest.raises(StoreUnavailable, match="outcome unknown"):
        gateway(s).post("/kv/txn", {}, idempotent=False)
    assert s.endpoints_called() == [A]


def test_a_txn_refused_as_unavailable_is_not_sent_elsewhere() -> None:
    s = FakeSession(**{A: [answer(503, {"error": "no leader", "code": 14})], B: []})
    with pytest.raises(StoreUnavailable, match="no leader"):
        gateway(s).post("/kv/txn", {}, idempotent=False)
    assert s.endpoints_called() == [A]


def test_a_read_refused_as_unavailable_tries_the_next_endpoint() -> None:
    s = FakeSession(**{A: [answer(503, b"Service Unavailable")], B: [answer(200, OK)]})
    assert gateway(s).post("/kv/range", {}) == OK
    assert s.endpoints_called() == [A, B]


def test_every_endpoint_down_names_them_all() -> None:
    s = FakeSession(**{A: [refused()], B: [read_timeout()], C: [refused()]})
    with pytest.raises(StoreUnavailable) as info:
        gateway(s).post("/kv/range", {})
    assert all(ep in str(info.value) for ep in (A, B, C)), info.value


def test_every_endpoint_down_keeps_each_ones_failure() -> None:
    # A start-up check tells "down" from "TLS refused" by these, not by the text.
    failures = [refused(), read_timeout(), answer(503, b"Service Unavailable")]
    s = FakeSession(**{A: [failures[0]], B: [failures[1]], C: [failures[2]]})
    with pytest.raises(EndpointsUnavailable) as info:
        gateway(s).post("/kv/range", {})
    assert [ep for ep, _ in info.value.failures] == [A, B, C]
    assert info.value.failures[0][1] is failures[0]
    assert info.value.failures[1][1] is failures[1]
    assert isinstance(info.value.failures[2][1], StoreUnavailable)


def test_an_error_that_is_not_an_outage_is_raised_at_once() -> None:
    s = FakeSession(**{A: [answer(400, {"error": "too many operations", "code": 3})], B: []})
    with pytest.raises(StoreError) as info:
        gateway(s).post("/kv/range", {})
    assert type(info.value) is StoreError
    assert s.endpoints_called() == [A]


def test_a_bad_answer_is_a_store_error() -> None:
    s = FakeSession(**{A: [answer(200, b"<html>")]})
    with pytest.raises(StoreError, match="bad answer"):
        gateway(s).post("/kv/range", {})


def test_a_closed_gateway_sends_nothing() -> None:
    s = FakeSession(**{A: []})
    gw = gateway(s, A)
    gw.close()
    assert s.closed
    with pytest.raises(StoreError, match="closed"):
        gw.post("/kv/range", {})
    assert s.calls == []


def test_a_stream_is_opened_on_the_endpoint_asked_for() -> None:
    s = FakeSession(**{B: [answer(200, b'{"result":{"created":true}}\n')]})
    resp = gateway(s).stream(1, "/watch", {"create_request": {}}, read_timeout=10.0)
    assert s.calls == [Call(f"{B}/v3/watch", {"create_request": {}}, (2.0, 10.0), True)]
    assert list(messages(resp)) == [{"result": {"created": True}}]


def test_a_refused_stream_raises_the_mapped_error() -> None:
    s = FakeSession(**{A: [answer(503, {"error": "etcdserver: no leader", "code": 14})]})
    with pytest.raises(StoreUnavailable):
        gateway(s).stream(0, "/watch", {}, read_timeout=1.0)


def test_stream_messages_are_split_on_lines_across_chunks() -> None:
    resp = answer(200, b"", chunks=[b'{"a":', b'1}\n\n{"b"', b':2}\n{"c":3}\n'])
    assert list(messages(resp)) == [{"a": 1}, {"b": 2}, {"c": 3}]


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, {"error": "etcdserver: requested lease not found", "code": 5}, LeaseNotFound),
        (400, {"error": "mvcc: required revision has been compacted", "code": 11}, Compacted),
        (503, {"error": "etcdserver: request timed out", "code": 14}, StoreUnavailable),
        (500, {"error": "context deadline exceeded", "code": 4}, StoreUnavailable),
        (502, b"Bad Gateway", StoreUnavailable),
        (504, b"", StoreUnavailable),
        (400, {"message": "etcdserver: too many operations in txn request", "code": 3}, StoreError),
        (400, b"not json at all", StoreError),
        (400, b'["a list"]', StoreError),
    ],
)
def test_error_mapping(status: int, body: object, expected: type[StoreError]) -> None:
    resp = answer(status, body)
    resp.url = f"{A}/v3/kv/range"
    err = error_from(resp, revision=12)
    assert type(err) is expected
    if isinstance(err, Compacted):
        assert err.compact_revision == 12  # etcd names none: the one the request asked for
    elif isinstance(body, dict):
        assert str(body.get("error") or body["message"]) in str(err)


def test_a_compacted_revision_names_the_revision_asked_for() -> None:
    s = FakeSession(**{A: [answer(400, {"error": "mvcc: required revision has been compacted"})]})
    with pytest.raises(Compacted) as info:
        gateway(s).post("/kv/range", {"key": "AA==", "revision": 42})
    assert info.value.compact_revision == 42


# ---------------------------------------------------------------- the wire format


def test_range_end_covers_exactly_the_prefix() -> None:
    assert range_keys("/netplugin/") == (b"/netplugin/", b"/netplugin0")
    assert range_keys("") == (b"\0", b"\0")  # every key
    assert range_keys("é") == ("é".encode(), b"\xc3\xaa")
    assert range_keys("a\U0010ffff") == ("a\U0010ffff".encode(), b"a\xf4\x8f\xbf\xc0")


def test_puts_and_deletes_are_base64() -> None:
    assert encode_op(Put("/k", b"\x00v")) == {
        "request_put": {"key": b64("/k"), "value": b64(b"\x00v")}
    }
    assert encode_op(Put("/k", b"", lease=0x1F)) == {
        "request_put": {"key": b64("/k"), "value": "", "lease": 0x1F}
    }
    assert encode_op(Delete("/k")) == {"request_delete_range": {"key": b64("/k")}}
    assert encode_op(Delete("/p/", prefix=True)) == {
        "request_delete_range": {"key": b64("/p/"), "range_end": b64("/p0")}
    }
    with pytest.raises(TypeError):
        encode_op("put")  # type: ignore[arg-type]


def test_compares_name_their_target_field() -> None:
    assert encode_compare(Compare("/k", "create", "==", 0)) == {
        "key": b64("/k"),
        "target": "CREATE",
        "result": "EQUAL",
        "create_revision": 0,
    }
    assert encode_compare(Compare("/p/", "mod", "<", 9, prefix=True)) == {
        "key": b64("/p/"),
        "range_end": b64("/p0"),
        "target": "MOD",
        "result": "LESS",
        "mod_revision": 9,
    }
    assert encode_compare(Compare("/k", "version", ">", 2))["version"] == 2
    assert encode_compare(Compare("/k", "value", "!=", b"x")) == {
        "key": b64("/k"),
        "target": "VALUE",
        "result": "NOT_EQUAL",
        "value": b64("x"),
    }


def test_a_txn_body_keeps_the_order_of_its_parts() -> None:
    body = txn_body([Compare("/a", "mod", "==", 3)], [Put("/a", b"1"), Delete("/b")], [])
    assert body == {
        "compare": [encode_compare(Compare("/a", "mod", "==", 3))],
        "success": [encode_op(Put("/a", b"1")), encode_op(Delete("/b"))],
        "failure": [],
    }
    assert json.loads(json.dumps(body)) == body  # plain JSON


def test_kvs_decode_omitted_fields_and_int64_strings() -> None:
    assert decode_kv({"key": b64("/k")}) == KV("/k", b"", 0, 0, 0, 0)
    d = {
        "key": b64("/k"),
        "value": b64(b"v"),
        "create_revision": "5",
        "mod_revision": "8",
        "version": "3",
        "lease": "7587868412449126417",
    }
    assert decode_kv(d) == KV("/k", b"v", 5, 8, 3, 7587868412449126417)
    # A key that is not UTF-8 survives the round trip.
    key = decode_kv({"key": b64(b"/\xff")}).key
    assert key.encode("utf-8", errors="surrogateescape") == b"/\xff"
    assert header_revision({"header": {"revision": "12"}}) == 12
    assert header_revision({}) == 0


def test_watch_messages() -> None:
    assert decode_watch({"result": {"created": True}}).created
    put = {"kv": {"key": b64("/k"), "value": b64("2"), "mod_revision": "9", "version": "2"}}
    put["prev_kv"] = {"key": b64("/k"), "value": b64("1")}
    delete = {"type": "DELETE", "kv": {"key": b64("/j"), "mod_revision": "9"}}
    msg = decode_watch({"result": {"events": [put, delete]}})
    assert not msg.created
    assert msg.events == [
        Event("put", KV("/k", b"2", 0, 9, 2), b"1"),
        Event("delete", KV("/j", b"", 0, 9, 0), None),
    ]
    with pytest.raises(Compacted) as info:
        decode_watch({"result": {"compact_revision": "20", "canceled": True}})
    assert info.value.compact_revision == 19  # etcd keeps revision 20
    with pytest.raises(StoreError, match="too large") as canceled:
        decode_watch({"result": {"canceled": True, "cancel_reason": "too large"}})
    assert type(canceled.value) is StoreError
    with pytest.raises(StoreUnavailable):
        decode_watch({"error": {"grpc_code": 14, "message": "transport is closing"}})


# ---------------------------------------------------------------- endpoints and TLS


def test_endpoint_spellings() -> None:
    assert base_url("etcd-a", tls=False) == "http://etcd-a:2379"
    assert base_url(" etcd-a:4001 ", tls=False) == "http://etcd-a:4001"
    assert base_url("etcd-a", tls=True) == "https://etcd-a:2379"
    assert base_url("http://etcd-a", tls=True) == "http://etcd-a:2379"  # an explicit scheme wins
    assert base_url("https://etcd-a:1/", tls=False) == "https://etcd-a:1"
    assert base_url("http://[::1]:2379", tls=False) == "http://[::1]:2379"
    for bad in ("ftp://etcd-a", "http://", "etcd-a:port"):
        with pytest.raises(ValueError, match="bad etcd endpoint"):
            base_url(bad, tls=False)


def test_endpoints_may_be_comma_separated() -> None:
    gw = Gateway(["etcd-a,etcd-b:1", " ", "http://etcd-c"])
    assert gw.endpoints == ["http://etcd-a:2379", "http://etcd-b:1", "http://etcd-c:2379"]
    with pytest.raises(ValueError, match="no etcd endpoint"):
        Gateway([" ", ","])


def test_tls_session_settings() -> None:
    gw = Gateway(["etcd-a"], ca_cert="/ca.pem", cert="/c.pem", key="/k.pem")
    assert gw.endpoints == ["https://etcd-a:2379"]
    assert gw.session.verify == "/ca.pem"
    assert gw.session.cert == ("/c.pem", "/k.pem")
    assert gw.session.trust_env is False  # no proxy from the environment
    # A certificate file that holds its key too.
    assert Gateway(["etcd-a"], cert="/both.pem").session.cert == "/both.pem"
    # A CA alone is TLS without a client certificate.
    ca_only = Gateway(["etcd-a"], ca_cert="/ca.pem")
    assert ca_only.endpoints == ["https://etcd-a:2379"]
    assert ca_only.session.cert is None


def test_without_tls_the_system_defaults_stay() -> None:
    gw = Gateway(["etcd-a", "etcd-b"])
    assert gw.session.verify is True
    assert gw.session.cert is None
    assert gw.session.trust_env is False
    # One connection pool per endpoint, shared by http and https, and room for the watches.
    adapter = gw.session.get_adapter("https://etcd-a:2379/")
    assert adapter is gw.session.get_adapter("http://etcd-b:2379/")
    assert isinstance(adapter, requests.adapters.HTTPAdapter)
    assert adapter.poolmanager.connection_pool_kw["maxsize"] == 64


def test_tls_settings_are_what_every_request_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither a CA bundle nor a proxy from the environment replaces what was given.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/env/ca.pem")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/env/ca.pem")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    url = "https://etcd-a:2379/v3/kv/range"
    tls = tls_session("/ca.pem", "/c.pem", "/k.pem")
    settings = tls.merge_environment_settings(url, {}, None, None, None)
    assert settings == {
        "verify": "/ca.pem",
        "cert": ("/c.pem", "/k.pem"),
        "proxies": {},
        "stream": False,
    }
    plain = tls_session(None, None, None).merge_environment_settings(url, {}, None, None, None)
    assert plain["verify"] is True and plain["cert"] is None and plain["proxies"] == {}


def test_a_key_without_a_certificate_is_not_sent() -> None:
    # The start-up check refuses this combination (common.etcd_tls.file_problem).
    assert tls_session("/ca.pem", None, "/k.pem").cert is None
