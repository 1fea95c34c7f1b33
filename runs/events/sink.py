"""A leg's events as the run emits them: numbered, published live, kept for storing."""

from __future__ import annotations

import contextlib
import time

from agents_registry.events import stream_ending

from ..models import Run, RunEvent
from . import publish

CONTENT_EVENTS = {"RunContent", "TeamRunContent"}


class EventSink:
    """Numbers a run's events from `first_index`, publishes them live, and keeps the ones worth storing (all but
    content chunks).

    An event that ends the run's stream (completed, error, cancelled, paused) is held back: it is stored with the
    run's outcome and published only once that commits (`publish_held_on_commit`), so a client never sees an end
    that a rollback undid.
    """

    def __init__(self, run: Run, attempt: int, first_index: int):
        self.run = run
        self.attempt = attempt
        self.next_index = first_index
        self.stored: list[dict] = []
        self.held: list[dict] = []
        self._deferred: list[dict] | None = None  # inside `deferred`: published when it ends well
        self._ending = stream_ending(run.component_type)
        self._keep = publish.keep_seconds(stream=run.stream)

    def emit(self, name: str, fields: dict) -> dict:
        event = {
            "event": name,
            "run_id": str(self.run.run_id),
            "session_id": self.run.session_id,
            "created_at": int(time.time()),
            "event_index": self.next_index,
            **fields,
        }
        self.next_index += 1
        if name not in CONTENT_EVENTS:
            self.stored.append(event)
        if name in self._ending:
            self.held.append(event)
        elif self._deferred is not None:
            self._deferred.append(event)
        else:
            publish.sender.send(self.run.run_id, [event], self.run.stream_inbox, self._keep)
        return event

    @contextlib.contextmanager
    def deferred(self):
        """Events emitted inside are numbered and kept as any, but published only when the block ends without an
        exception: after the write that stores them (a journaled step's), so no client sees what was not kept."""
        self._deferred = []
        try:
            yield
        except BaseException:
            self._deferred = None
            raise
        deferred, self._deferred = self._deferred, None
        if deferred:
            publish.sender.send(self.run.run_id, deferred, self.run.stream_inbox, self._keep)

    def unheld_stored(self) -> list[dict]:
        """The kept events that a write may store before the leg ends: all but the held ones, which go with it."""
        held = {id(event) for event in self.held}
        return [event for event in self.stored if id(event) not in held]

    def forget_stored(self, events: list[dict]) -> None:
        """`events` (of `unheld_stored`) were stored: the leg's record does not store them again."""
        written = {id(event) for event in events}
        self.stored = [event for event in self.stored if id(event) not in written]

    def drop_held(self) -> None:
        """Forget the held events: the leg ends otherwise than they said (a pause that gave way to a cancel). They
        were never published, so their indices are given again when they were the last ones."""
        if not self.held:
            return
        held = [event["event_index"] for event in self.held]
        self.stored = [event for event in self.stored if not any(event is dropped for dropped in self.held)]
        if held == list(range(held[0], self.next_index)):
            self.next_index = held[0]
        self.held = []

    def publish_held_on_commit(self) -> None:
        """Publish the held events once the transaction storing them commits (again if a retry re-stores them)."""
        publish.sender.send_on_commit(self.run.run_id, self.held, self.run.stream_inbox, self._keep)

    def publish_held(self) -> None:
        """Publish the held events now (their transaction has committed)."""
        publish.sender.send(self.run.run_id, self.held, self.run.stream_inbox, self._keep)


def first_event_index(run: Run, *, leg: bool = False) -> int:
    """Where a new leg (or a terminal event written from outside) numbers on from: after the last index stored,
    by a leg's record or by an attempt's journal as it went (`runs.services.journal`), and after the last one
    published, so an attempt that died before storing its events is not overlapped. A run's first leg (`leg`,
    attempt 1) follows no attempt, so neither Redis nor the stored events need be asked."""
    if leg and run.attempt <= 1:
        return run.next_event_index
    stored = RunEvent.objects.filter(run_id=run.run_id).order_by("-event_index").values_list("event_index", flat=True)
    last_stored = stored.first()
    last = max(publish.last_index(run.run_id), -1 if last_stored is None else last_stored)
    return max(run.next_event_index, last + 1)
