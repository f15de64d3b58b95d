"""dockerd's container and network events, followed on one stream for the whole agent and
handed to each of its users (the docker sync, the container reporter)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from common.loop import Reconciler

log = logging.getLogger(__name__)

# What any user wants; each picks its own events out of them.
FILTERS = {"type": ["container", "network"], "event": ["start", "connect", "create", "destroy"]}

# An event, or None: the stream has just (re)started, and what happened while no stream was
# followed is unknown.
Subscriber = Callable[[Mapping[str, Any] | None], object]


class DockerEvents(Reconciler):
    """Follows dockerd's event stream on a client of its own (a stream holds its connection)
    made by ``new_client``, again whenever it ends, telling every subscriber of each event."""

    def __init__(self, new_client: Callable[[], Any]) -> None:
        self.new_client = new_client
        self.subscribers: list[Subscriber] = []
        self._stream: Any = None
        super().__init__(
            "dockerd's events",
            self._follow,
            coalesce=0,
            expected=(Exception,),  # dockerd away or restarting
            on_stop=lambda: self._stream is not None and self._stream.close(),
            run_at_start=True,
        )

    def subscribe(self, subscriber: Subscriber) -> None:
        self.subscribers.append(subscriber)

    def _follow(self) -> float | None:
        """One pass: one stream, followed until it ends."""
        client = self.new_client()
        try:
            self._stream = client.events(decode=True, filters=FILTERS)
            self._tell(None)
            for event in self._stream:
                if self.stopped:
                    break
                self._tell(event)
        finally:
            self._stream = None
            with contextlib.suppress(Exception):
                client.close()
        return 0.5  # ended (dockerd restarting, say): follow it again soon

    def _tell(self, event: Mapping[str, Any] | None) -> None:
        for subscriber in self.subscribers:
            try:
                subscriber(event)
            except Exception:  # one user's bug must not deprive the others
                log.exception("dockerd event %s: a subscriber failed", event)
