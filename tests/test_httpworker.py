"""When a request buffered by the master's worker is whole enough to hand to a thread."""

from __future__ import annotations

from master.httpworker import BufferingThreadWorker, request_complete, worker_class

HEAD = b"POST /api/v1/alloc/endpoints HTTP/1.1\r\nHost: m\r\nContent-Length: 5\r\n\r\n"


def test_a_request_is_whole_with_its_head_and_body() -> None:
    assert not request_complete(b"")
    assert not request_complete(b"GET /version HTTP/1.1\r\nHost: m\r\n")
    assert request_complete(b"GET /version HTTP/1.1\r\nHost: m\r\n\r\n")
    assert not request_complete(HEAD)
    assert not request_complete(HEAD + b"1234")
    assert request_complete(HEAD + b"12345")
    assert request_complete(HEAD + b"12345GET /next")  # pipelined: the first is whole


def test_headers_are_read_case_blind_and_oddities_go_to_gunicorn() -> None:
    assert not request_complete(HEAD.replace(b"Content-Length", b"content-LENGTH"))
    assert request_complete(HEAD.replace(b"5", b"five"))  # gunicorn answers 400 at once
    expect = HEAD.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    assert request_complete(expect)  # the client waits for "go on" before its body


def test_chunked_bodies_end_with_the_last_chunk() -> None:
    chunked = b"POST /x HTTP/1.1\r\nHost: m\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert not request_complete(chunked)
    assert not request_complete(chunked + b"5\r\nhello\r\n")
    assert request_complete(chunked + b"5\r\nhello\r\n0\r\n\r\n")


def test_a_huge_request_goes_to_a_thread_as_it_is() -> None:
    assert request_complete(b"x" * 100, max_buffered=100)
    assert not request_complete(b"x" * 99, max_buffered=100)


def test_the_worker_class_carries_its_timeout() -> None:
    cls = worker_class(7.5)
    assert issubclass(cls, BufferingThreadWorker) and cls.request_timeout == 7.5
    assert BufferingThreadWorker.request_timeout == 30.0
