"""store.etcd's watch client against a scripted gateway: what it asks etcd for, and where it
resumes after progress notifications (no etcd: tests/test_etcd_gateway.py's fakes)."""

from __future__ import annotations

import json
from typing import Any

from store.etcd import _EtcdWatch
from store.etcd_gateway import decode_watch
from tests.test_etcd_gateway import A, FakeSession, answer, b64, gateway


def _watch(session: FakeSession, start: int = 5, prev_kv: bool = True) -> _EtcdWatch:
    return _EtcdWatch(gateway(session, A), "/p/", start, 1.0, prev_kv)


def _stream(*msgs: dict[str, Any]) -> Any:
    return answer(200, b"", chunks=[b"".join(json.dumps(m).encode() + b"\n" for m in msgs)])


def _put(key: str, rev: int) -> dict[str, Any]:
    return {"kv": {"key": b64(key), "value": b64("v"), "mod_revision": str(rev)}}


def test_prev_kv_is_asked_for_only_when_wanted() -> None:
    for prev_kv in (True, False):
        s = FakeSession(**{A: [_stream({"result": {"created": True}})]})
        _watch(s, prev_kv=prev_kv)._stream(0)
        create = s.calls[0].body["create_request"]
        assert create.get("prev_kv", False) is prev_kv
        assert create["progress_notify"] is True and create["start_revision"] == 5


def test_a_progress_notification_is_only_a_revision() -> None:
    msg = decode_watch({"result": {"header": {"revision": "42"}}})
    assert (msg.created, msg.events, msg.progress) == (False, [], 42)
    created = decode_watch({"result": {"header": {"revision": "42"}, "created": True}})
    assert created.progress == 0  # the stream's first message names no progress
    events = decode_watch({"result": {"header": {"revision": "42"}, "events": [_put("/p/a", 9)]}})
    assert events.progress == 0


def test_the_resume_revision_moves_on_with_progress_notifications() -> None:
    w = _watch(FakeSession(**{A: []}))
    w._handle({"result": {"header": {"revision": "3"}, "created": True}})
    assert w._next == 5  # etcd's revision when the watch was created says nothing of it
    w._handle({"result": {"header": {"revision": "40"}}})
    assert w._next == 41  # everything up to 40 was sent: an idle prefix resumes after it
    w._handle({"result": {"header": {"revision": "30"}}})
    assert w._next == 41  # never back
    w._handle({"result": {"header": {"revision": "50"}, "events": [_put("/p/a", 45)]}})
    assert w._next == 46
    assert w._queue.get_nowait().kv.mod_revision == 45


def test_a_resumed_stream_starts_after_the_last_progress_notification() -> None:
    s = FakeSession(
        **{
            A: [
                _stream({"result": {"created": True}}, {"result": {"header": {"revision": "77"}}}),
                _stream({"result": {"created": True}}),
            ]
        }
    )
    w = _watch(s)
    w._stream(0)
    w._stream(0)
    assert [c.body["create_request"]["start_revision"] for c in s.calls] == [5, 78]
