"""The live event stream's publishing half (CONTRACT 10): a run's events go to Redis as the run emits them.

Each run has a channel and a buffer: a sorted set of its events by `event_index`, kept `keep_seconds` after its
last event. An event is added to the buffer before it is published, so a reader that subscribes first and reads
the buffer second misses nothing (`runs.events.tail`). A thread of the process sends whatever has queued in one
pipeline, in the order emitted, a run's queued events as one message (`frames_of` splits it). Redis being down
costs the live view only (the database has the truth); after a failed send, events are dropped for PAUSE seconds.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable

import redis
from django.db import transaction

from agentos_project.core.batching import BatchingThread
from agentos_project.core.conf import current
from agentos_project.core.coordination import deployment_key, redis_connection

log = logging.getLogger("agentos.streams")
BATCH = 1000
UNSTREAMED_SECONDS = 300  # longer than a lease grace: a reclaimed leg still numbers on after the lost one's events


def buffer_key(run_id) -> str:
    return deployment_key(f"run:{run_id}:events")


def channel(run_id) -> str:
    return deployment_key(f"run:{run_id}")


def keep_seconds(*, stream: bool) -> int:
    """How long Redis keeps the buffer of a run submitted with (or without) a stream after its last event: without
    one, at most UNSTREAMED_SECONDS, as only a live watcher or a resume soon after its end reads it."""
    seconds = current().streams.buffer_seconds
    return int(seconds if stream else min(seconds, UNSTREAMED_SECONDS))


def encode(event: dict) -> str:
    """An event as its SSE `data:` line carries it: compact JSON, ASCII only (so no string Redis or a client
    cannot take, whatever the agent produced), its name and index first, so that `head` need not parse it."""
    ordered = {"event": event["event"], "event_index": event["event_index"], **event}
    return json.dumps(ordered, separators=(",", ":"), default=str)


_HEAD = re.compile(r'\{"event":"(\w+)","event_index":(-?\d+)[,}]')


def head(frame: str) -> tuple[str, int]:
    """The name and event_index of an encoded event, read off its start; a frame that does not start so (encoded
    before they came first, still in a buffer) is parsed whole. A stream reads every event it sends this way:
    parsing each whole cost a streamed run of ten events about a tenth of a millisecond of the web's CPU."""
    if matched := _HEAD.match(frame):
        return matched[1], int(matched[2])
    event = json.loads(frame)
    return event["event"], event["event_index"]


class Sender(BatchingThread):
    """Sends events to Redis from a thread of its own, in order, batching what has queued up."""

    name = "agentos-events"
    batch = BATCH
    # After each batch the thread rests 2 ms: a run that emits events in a burst has them go out in a few
    # batches, not one wake-up and one pipeline each; an event that comes after a quiet spell still goes out at once.
    pause = 0.002
    PAUSE = 5.0

    def send(self, run_id, events: Iterable[dict], inbox: str | None = None, keep: int | None = None) -> None:
        """Queue `events` of `run_id` for the buffer and the channel (and `inbox`, the run's `stream_inbox`), the
        buffer kept `keep` seconds after them (`keep_seconds` of a streamed run by default); returns at once."""
        frames = [(event["event_index"], encode(event)) for event in events]
        if frames:
            self.put((str(run_id), inbox, frames, keep))

    def send_on_commit(self, run_id, events: list[dict], inbox: str | None = None, keep: int | None = None) -> None:
        """Send `events` once the current transaction commits: no client sees an event a rollback undid."""
        events = list(events)
        transaction.on_commit(lambda: self.send(run_id, events, inbox, keep))

    def handle(self, items: list) -> None:
        """One pipeline for everything queued: per run, one ZADD of its frames, one EXPIRE and one PUBLISH of its
        frames joined by newlines (a frame is compact JSON, which has none), in the order they were sent; and for
        a run with an inbox, the same frames published there too, after a line with the run's id."""
        if time.monotonic() < self._paused_until:
            return
        by_run: dict[str, tuple[str | None, list[tuple[int, str]], int | None]] = {}
        for run_id, inbox, frames, keep in items:
            by_run.setdefault(run_id, (inbox, [], keep))[1].extend(frames)
        streamed = keep_seconds(stream=True)
        pipeline = redis_connection().pipeline(transaction=False)
        for run_id, (inbox, frames, keep) in by_run.items():
            key = buffer_key(run_id)
            joined = "\n".join(frame for _, frame in frames)
            pipeline.zadd(key, {frame: index for index, frame in frames})
            pipeline.expire(key, keep or streamed)
            pipeline.publish(channel(run_id), joined)
            if inbox:
                pipeline.publish(inbox, f"{run_id}\n{joined}")
        try:
            pipeline.execute()
        except redis.RedisError as error:
            log.warning("live events not sent (%d runs): %s; pausing %ss", len(by_run), error, self.PAUSE)
            self._paused_until = time.monotonic() + self.PAUSE


def inbox(name: str) -> str:
    """The channel of a web process's inbox (`runs.events.hub.Hub`)."""
    return deployment_key(f"inbox:{name}")


def frames_of(message: bytes | str) -> list[bytes | str]:
    """The frames one message on a run's channel carries (one or more, newline-separated)."""
    return message.split(b"\n" if isinstance(message, bytes) else "\n")


sender = Sender()


def last_index(run_id) -> int:
    """The highest event_index Redis holds for `run_id`, -1 when none (or Redis cannot tell)."""
    try:
        top = redis_connection().zrange(buffer_key(run_id), -1, -1, withscores=True)
    except redis.RedisError as error:
        log.warning("run=%s last event index unknown: %s", run_id, error)
        return -1
    return int(top[0][1]) if top else -1
