"""A store watch whose events and end a unit test scripts: put an Event, an exception to
end the watch with, or None to end it quietly."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

from store.base import Event, Watch


class ScriptedWatch(Watch):
    def __init__(self, prefix: str, start: int, prev_kv: bool = True) -> None:
        self.prefix, self.start, self.prev_kv = prefix, start, prev_kv
        self.items: queue.SimpleQueue[Event | BaseException | None] = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self.begun = False  # begin() was called (the stream opened ahead of iteration)

    def __iter__(self) -> Iterator[Event]:
        while (item := self.items.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item

    def cancel(self) -> None:
        self.cancelled.set()
        self.items.put(None)

    def begin(self) -> None:
        self.begun = True
