"""`/resume` (CONTRACT 10): attach again to a run's stream, from after the last event the client has.

- a live run: a `catch_up` frame with the number missed, the missed events, `subscribed`, then live events;
- a run whose stream ended (finished or paused): a `replay` frame and the events above the index, from the Redis
  buffer, or once it expired from the stored events (a run submitted without streaming: none, and a message);
- an unknown run: an `error` frame.

A run with several legs has an ending event per leg; its stream ends at the last one: a replay sends every event
the run had when the request read it, a live stream goes on past the ends of earlier legs (`tail.Tail`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

import redis

from ..models import STREAM_ENDED, Run
from . import publish
from .history import with_stored
from .hub import hub
from .tail import Tail, follow, follow_database, meta_frame

log = logging.getLogger("agentos.streams")


@dataclasses.dataclass(frozen=True)
class Target:
    """The run a resume attaches to, as the database had it when the request came."""

    run_id: str
    kind: str
    status: str
    stream: bool
    next_event_index: int  # where the run's next leg (or its end) numbers from: every earlier leg's events are below

    @classmethod
    def of(cls, run: Run) -> Target:
        return cls(str(run.run_id), run.component_type, run.status, run.stream, run.next_event_index)


async def resume_frames(run_id: str, target: Target | None, *, after: int) -> AsyncIterator[str]:
    """`/resume` (CONTRACT 10): catch_up + subscribed + live for a live run; a replay of the buffer, or of the
    stored events when the buffer has gone, for one whose stream has ended; an error frame for an unknown run."""
    if target is None:
        yield meta_frame("error", {"error": f"Run {run_id} not found in buffer or database"})
        return
    if target.status in STREAM_ENDED:
        async for sse in _replay(target, after):
            yield sse
        return
    tail = Tail(target.run_id, target.kind, last=after, floor=target.next_event_index)
    try:
        async for sse in _resume_live(target, tail):
            yield sse
    except (redis.RedisError, OSError, TimeoutError) as error:
        if tail.ended:
            return
        log.warning("run=%s resumed without Redis (%s): following the database", target.run_id, error)
        async for sse in follow_database(tail):
            yield sse


async def _resume_live(target: Target, tail: Tail) -> AsyncIterator[str]:
    after = tail.last
    async with hub().listening(publish.channel(target.run_id)) as queue:
        buffered = await hub().buffered(target.run_id, after)
        total = buffered.total if buffered else 0
        frames = tail.take_all(await with_stored(target.run_id, after, buffered))
        yield meta_frame(
            "catch_up",
            {
                "run_id": target.run_id,
                "status": "running",
                "missed_events": len(frames),
                "current_event_count": total,
                "message": f"Catching up on {len(frames)} missed events.",
            },
        )
        for sse in frames:
            yield sse
        if tail.ended:
            return
        yield meta_frame(
            "subscribed",
            {
                "run_id": target.run_id,
                "status": "running",
                "current_event_count": total,
                "message": f"Subscribed to {target.kind} run. Receiving live events.",
            },
        )
        async for sse in follow(tail, queue):
            yield sse


async def _replay(target: Target, after: int) -> AsyncIterator[str]:
    buffered = None
    with contextlib.suppress(redis.RedisError, OSError):
        buffered = await hub().buffered(target.run_id, after)
    history = target.next_event_index  # the events the run had: a replay ends with them, at its latest end
    tail = Tail(target.run_id, target.kind, last=after, floor=history, ceiling=history)
    status = target.status
    if buffered is not None:
        frames = tail.take_all(await with_stored(target.run_id, after, buffered))
        message = f"Run {status}. Replaying {len(frames)} missed events (of {buffered.total} total)."
        extra = {"total_buffered": buffered.total, "last_event_index_requested": after}
    elif target.stream:
        frames = tail.take_all(await with_stored(target.run_id, after, None))
        message, extra = "Run completed. Replaying stored events from database.", {}
    else:
        frames = []
        message = f"Run {status} with no stored events: a run submitted without streaming keeps only its final output."
        extra = {}
    yield meta_frame(
        "replay", {"run_id": target.run_id, "status": status, "total_events": len(frames), **extra, "message": message}
    )
    for sse in frames:
        yield sse
