"""The live event stream's reading half: SSE that tails a run's events, on any web replica (CONTRACT 10).

A stream first subscribes to its run's channel on the process's hub (`runs.events.hub`) and only then reads the
run's buffer (`runs.events.publish`), so each event reaches it by one way or both; `event_index` drops the second
copy, so a stream never repeats or skips an event. A stream waiting on a quiet run holds no thread and no database
connection: at each keepalive it rereads the buffer (covering a pub/sub gap) and asks PostgreSQL, through a small
shared pool, whether the run ended without it hearing so; if it did, the stored events finish the stream. Events
within a leg are numbered without gaps, so a stream that receives an event past the next index it expects (one
lost in a pub/sub gap) rereads the buffer first.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator

import redis
import redis.asyncio
from django.db import DatabaseError

from agentos_project.core.conf import current
from agentos_project.core.streaming import Ending
from agents_registry.events import stream_ending

from ..models import STREAM_ENDED
from ..selectors import run_status, run_stored_events
from . import publish
from .backlog import FELL_BEHIND, Backlog
from .history import in_database
from .hub import hub

log = logging.getLogger("agentos.streams")
KEEPALIVE = ": keepalive\n\n"
ENDED_GRACE = 0.2


def frame(name: str, data: str) -> str:
    return f"event: {name}\ndata: {data}\n\n"


def meta_frame(name: str, fields: dict) -> str:
    return frame(name, json.dumps({"event": name, **fields}))


def fell_behind_frame(tail: Tail) -> str:
    """The last frame of a stream whose client fell behind: what happened and where to resume from."""
    return meta_frame(
        "error",
        {
            "run_id": tail.run_id,
            "error": "Stream closed: the client fell behind the run's events. Resume it (POST /runs/<run_id>/resume "
            "under the component's path) with last_event_index set to the last event_index received.",
            "last_event_index": tail.last,
        },
    )


@dataclasses.dataclass
class Tail:
    """What a stream has sent: the last index, and whether the run's stream-ending event was among it.

    A run's history may hold several ending events: a pause that was continued, an error or a cancel that was
    requeued. Only one numbered from `floor` on ends the stream: `floor` is where the run's current leg numbers
    from (its `next_event_index` when the stream began), so an ending event below it ended an earlier leg and
    the stream goes on past it. `ceiling`, when given, is the index no event sent reaches: a replay sends the
    run's history as it stood when the request read the run, not a leg that began after."""

    run_id: str
    kind: str
    last: int = -1
    floor: int = 0
    ceiling: int | None = None
    ended: bool = False

    def __post_init__(self) -> None:
        self._ending = stream_ending(self.kind)

    def take(self, raw: bytes | str) -> str | None:
        """The SSE frame of an event not sent yet; None for one already sent (or after the end)."""
        data = raw.decode() if isinstance(raw, bytes) else raw
        name, index = publish.head(data)
        if self.ended or index <= self.last or (self.ceiling is not None and index >= self.ceiling):
            return None
        self.last = index
        self.ended = name in self._ending and index >= self.floor
        return frame(name, data)

    def take_all(self, raws) -> list[str]:
        return [sse for sse in map(self.take, raws) if sse is not None]

    def skips_to(self, raw: bytes | str) -> bool:
        """Whether the event `raw` comes after one this stream has not had (within a leg, indices have no gaps)."""
        data = raw.decode() if isinstance(raw, bytes) else raw
        return not self.ended and publish.head(data)[1] > self.last + 1


async def follow(tail: Tail, queue: Backlog) -> AsyncIterator[str]:
    """Live frames until the run's stream ends; a keepalive whenever nothing was sent for the keepalive time.

    What has come by the time the stream is served goes out as one chunk (one write to the socket, not one per
    event: on a loopback connection each write costs the web process and the client a full trip through TCP).
    The chunk that ends the run's stream is an `Ending`, which the response sends as the end of its body; so is
    the `error` frame of a client that fell behind (`Backlog`)."""
    keepalive = current().streams.keepalive_seconds
    loop = asyncio.get_running_loop()
    last_sent = loop.time()
    while not tail.ended:
        try:
            raw = queue.get_nowait()  # what came meanwhile, with no waiting machinery at all
        except asyncio.QueueEmpty:
            try:
                async with asyncio.timeout_at(last_sent + keepalive):  # no task per wait, unlike wait_for
                    raw = await queue.get()
            except TimeoutError:
                raw = None
        if raw is FELL_BEHIND:
            yield Ending(fell_behind_frame(tail))
            return
        frames = await _frames(tail, raw)
        while not tail.ended and not queue.empty() and not queue.overflowed:
            frames += await _frames(tail, queue.get_nowait())
        if not frames and loop.time() - last_sent >= keepalive:
            frames = [KEEPALIVE]
        if frames:
            yield Ending("".join(frames)) if tail.ended else "".join(frames)
            last_sent = loop.time()


async def _frames(tail: Tail, raw: bytes | None) -> list[str]:
    """The frames `raw` (one message of the run's events) adds; after silence (None) or a pub/sub gap (RESYNC),
    what the stream may have missed."""
    if not raw:
        return await _catch_up(tail)
    events = publish.frames_of(raw)
    frames = await _buffered_frames(tail) if tail.skips_to(events[0]) else []  # one got lost (a pub/sub gap)
    return frames + tail.take_all(events)


async def _catch_up(tail: Tail) -> list[str]:
    """After silence or a pub/sub gap: what the buffer has above `tail.last`, else, if the run ended without
    the stream hearing it, its stored events. A database that does not answer leaves the stream waiting."""
    if frames := await _buffered_frames(tail):
        return frames
    try:
        if await in_database(run_status, run_id=tail.run_id) not in STREAM_ENDED:
            return []
        await asyncio.sleep(ENDED_GRACE)  # its last chunks and end may still be on their way to Redis
        if frames := await _buffered_frames(tail):
            return frames
        stored = await in_database(run_stored_events, run_id=tail.run_id, after=tail.last)
    except DatabaseError as error:
        log.warning("run=%s stream cannot ask the database: %s", tail.run_id, error)
        return []
    frames = tail.take_all(publish.encode(event) for event in stored)
    tail.ended = True
    return frames


async def _buffered_frames(tail: Tail) -> list[str]:
    try:
        buffered = await hub().buffered(tail.run_id, tail.last)
    except (redis.RedisError, OSError):
        return []
    return tail.take_all(buffered.events) if buffered else []


async def run_tail(
    run_id, kind: str, *, after: int = -1, fresh: bool = False, inbox: str | None = None
) -> AsyncIterator[str]:
    """The run's events above `after` as SSE, live, until its stream ends (a submit with stream=true).

    `fresh`: the run was queued by this very request (a submit, a continue), so it has not ended unseen: what it
    published is in the buffer, and the database need not be asked first whether it ended (if its buffer was lost,
    the first quiet keepalive time asks). `inbox`: the run was accepted naming this process's inbox, so all its
    events come there, and neither a subscription nor a first read of the buffer is needed."""
    tail = Tail(str(run_id), kind, last=after)
    try:
        if inbox is not None and inbox == hub().inbox:
            with hub().from_inbox(str(run_id)) as queue:
                async for sse in follow(tail, queue):
                    yield sse
            return
        async with hub().listening(publish.channel(run_id)) as queue:
            for sse in await (_buffered_frames(tail) if fresh else _catch_up(tail)):
                yield sse
            async for sse in follow(tail, queue):
                yield sse
    except (redis.RedisError, OSError, TimeoutError) as error:
        if tail.ended:
            return
        log.warning("run=%s stream without Redis (%s): following the database", run_id, error)
        async for sse in follow_database(tail):
            yield sse


async def follow_database(tail: Tail) -> AsyncIterator[str]:
    """Without Redis: the stored events once the run's stream has ended, keepalives meanwhile."""
    keepalive = current().streams.keepalive_seconds
    quiet = 0.0
    while not tail.ended:
        if frames := await _catch_up(tail):
            for sse in frames:
                yield sse
            continue
        await asyncio.sleep(1.0)
        quiet += 1.0
        if quiet >= keepalive:
            quiet = 0.0
            yield KEEPALIVE
