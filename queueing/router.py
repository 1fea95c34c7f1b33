"""The session router's publishing half: a ticket gets a broker message only when it may run.

`tickets` decides *whether* a ticket may run (it is its session's head, or unordered); this module sends
the message, after the deciding transaction commits, carrying the ticket id and nothing else.

Each published message leaves a marker in Redis (next to the broker's queue when the broker is Redis) that the
worker removes when the message arrives. A claimable ticket without a marker has no live message: its publish
failed (broker down), the broker lost it (Redis flushed or restarted), or its worker died between handing the
session on and claiming it. The sweeper finds those with `without_message` and publishes them again. A marker
expires after twice the lease grace (at least 10 s): a message lost in a way its marker cannot see (prefetched
by a worker that then died) costs that delay, not the run; a message that merely waits longer in a busy broker
gets a harmless duplicate.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable

import redis
from django.db import transaction

from agentos_project.celery import app
from agentos_project.conf import current
from agentos_project.coordination import redis_client
from agentos_project.offthread import OffThread

log = logging.getLogger("agentos.queue")
MARKER = "agentos:message:{}"
EXECUTE_TASK = "agentos.execute_ticket"


def markers() -> redis.Redis:
    """Where the markers live: the broker's Redis when the broker is Redis, else REDIS_URL."""
    services = current().services
    broker = services.celery_broker_url
    return redis_client(broker if broker.startswith(("redis://", "rediss://", "unix://")) else services.redis_url)


def publish(ticket_id, *, countdown: float | None = None) -> bool:
    """Send the execute message for `ticket_id` now and mark it live; False (and a log line) if the broker refused."""
    return publish_many([(ticket_id, countdown)]) == 1


def publish_many(items: list[tuple[object, float | None]]) -> int:
    """Send the execute messages of `items` (ticket id, countdown) in one pipeline of the broker's, their markers set
    first in one round trip; returns how many went out: all, or none when the broker refused (their markers are
    taken back, so the sweeper sends them later; a message of the batch that did go out meanwhile only makes a
    harmless duplicate). Marking first means a worker that takes a message at once never finds its marker
    missing and then sees it appear, which would hide a later loss of that ticket's message.

    The messages go to the queue itself (the anonymous exchange, routing key = queue), which the worker consumes
    either way, and which spares kombu's Redis transport a lookup of the exchange's bindings per message.
    """
    _mark(items, live=True)
    queue = app.conf.task_default_queue
    try:
        with app.producer_or_acquire() as producer, producer.batch(max_size=2 * len(items)):
            for ticket_id, countdown in items:
                app.send_task(
                    EXECUTE_TASK,
                    args=[str(ticket_id)],
                    countdown=countdown or None,
                    retry=False,
                    producer=producer,
                    exchange="",
                    routing_key=queue,
                )
    except Exception as error:  # the broker is down or refused: the sweeper re-dispatches later
        log.warning("dispatch failed ticket=%s error=%s (%d in the batch)", items[0][0], error, len(items))
        _mark(items, live=False)
        return 0
    return len(items)


def _mark(items: list[tuple[object, float | None]], *, live: bool) -> None:
    grace = max(10, 2 * current().queue.lock_grace_seconds)
    try:
        pipeline = markers().pipeline(transaction=False)
        for ticket_id, countdown in items:
            if live:
                pipeline.set(MARKER.format(ticket_id), 1, ex=int(grace + (countdown or 0)) + 1)
            else:
                pipeline.delete(MARKER.format(ticket_id))
        pipeline.execute()
    except redis.RedisError as error:  # without their markers, a duplicate of these messages may follow
        log.warning("markers not %s for %d message(s) error=%s", "set" if live else "taken back", len(items), error)


class Publisher(OffThread):
    """Sends, on a thread of its own, the messages that transactions asked for on commit, as many at a time as
    have queued up (one broker connection, one marker round trip).

    So a slow or absent broker never holds a request (an accept answers 202 as soon as its rows commit) or a
    worker thread. After a refused publish, messages are dropped for BROKER_PAUSE seconds instead of each
    waiting out a connection timeout; their tickets stay claimable without a marker, and the sweeper sends
    them once the broker is back.
    """

    name = "agentos-publisher"
    batch = 100
    BROKER_PAUSE = 5.0

    def submit(self, ticket_id, countdown: float | None) -> None:
        self.put((ticket_id, countdown))

    def handle(self, items: list) -> None:
        if time.monotonic() < self._paused_until:
            ids = " ".join(str(ticket_id) for ticket_id, _ in items)
            log.info("dispatch skipped ticket=%s: broker refused recently; the sweeper will send it", ids)
        elif publish_many(items) < len(items):
            self._paused_until = time.monotonic() + self.BROKER_PAUSE


publisher = Publisher()


def on_commit(ticket_id, *, countdown: float | None = None) -> None:
    """Publish `ticket_id` once the current transaction commits (at once when there is none), off this thread."""
    transaction.on_commit(lambda: publisher.submit(ticket_id, countdown))


class Consumed(OffThread):
    """Takes the markers of arrived messages away, from a thread of its own, many in one round trip."""

    name = "agentos-consumed"
    batch = 500

    def handle(self, items: list) -> None:
        with contextlib.suppress(redis.RedisError):
            markers().delete(*(MARKER.format(ticket_id) for ticket_id in items))


consumed_markers = Consumed()


def consumed(ticket_id) -> None:
    """The message for `ticket_id` arrived: its marker goes (best effort, soon: a marker that outlives its message
    a moment only delays the sweeper's re-publish by as much)."""
    consumed_markers.put(ticket_id)


def without_message(ticket_ids: Iterable) -> list:
    """Those of `ticket_ids` that have no live message. Empty when Redis cannot tell (it is down)."""
    ticket_ids = list(ticket_ids)
    if not ticket_ids:
        return []
    try:
        pipeline = markers().pipeline(transaction=False)
        for ticket_id in ticket_ids:
            pipeline.exists(MARKER.format(ticket_id))
        live = pipeline.execute()
    except redis.RedisError:
        return []
    return [ticket_id for ticket_id, exists in zip(ticket_ids, live, strict=True) if not exists]
