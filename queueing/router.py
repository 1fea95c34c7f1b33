"""The session router's publishing half: a ticket gets a broker message only when it may run.

`tickets` decides *whether* a ticket may run (its session's head, or unordered); this module sends the message,
after the deciding transaction commits, carrying the ticket id and nothing else. Each message leaves a marker in
Redis that the worker removes once it has tried the claim: a claimable ticket without one has no live message (a
failed publish, a lost message, a worker that died mid hand-off), and the sweeper publishes it again
(`without_message`). A marker expires after twice the lease grace (at least 10 s): a message lost unseen costs
that delay, not the run; one that merely waits longer gets a harmless duplicate.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable

import redis
from celery import current_app
from django.db import transaction

from agentos_project.core.batching import BatchingThread
from agentos_project.core.conf import current
from agentos_project.core.coordination import redis_client

log = logging.getLogger("agentos.queue")
MARKER = "agentos:message:{}"
EXECUTE_TASK = "agentos.execute_ticket"


def execute_queue() -> str:
    """The queue of execute messages: a worker's `queueing.reader` reads it on a Redis broker, else Celery."""
    return current_app.conf.task_default_queue


def celery_queue() -> str:
    """The queue Celery's consumer of a worker reads in any case: messages with a countdown (Celery holds them until
    their ETA), and those the reader passes on to it."""
    return f"{current_app.conf.task_default_queue}.celery"


def markers() -> redis.Redis:
    """Where the markers live: the broker's Redis when the broker is Redis, else REDIS_URL."""
    services = current().services
    broker = services.celery_broker_url
    return redis_client(broker if broker.startswith(("redis://", "rediss://", "unix://")) else services.redis_url)


def publish(ticket_id, *, countdown: float | None = None) -> bool:
    """Send the execute message for `ticket_id` now and mark it live; False (and a log line) if the broker refused."""
    return publish_many([(ticket_id, countdown)]) == 1


def publish_many(items: list[tuple[object, float | None]]) -> int:
    """Send the execute messages of `items` (ticket id, countdown), each ticket marked live first; returns how
    many went out. Those the broker refused are unmarked (best effort), so the sweeper sends them later; a message
    of the batch that did go out meanwhile only makes a harmless duplicate. Marking first means a worker that
    takes a message at once never finds its marker missing and then sees it appear, which would hide a later loss.

    With a Redis broker (the markers' Redis), the markers and the messages without a countdown go in one pipeline,
    the messages written straight into the queue's list (`task_message`). Messages with a countdown, and every
    message for another broker, go through Celery's send_task, in one kombu publish batch.
    """
    now = [ticket_id for ticket_id, countdown in items if not countdown] if redis_broker() else []
    later = [(ticket_id, countdown) for ticket_id, countdown in items if countdown] if now else items
    try:
        pipeline = markers().pipeline(transaction=False)
        _add_marks(pipeline, items)
        if now:  # the markers' Redis is the broker's: one round trip for the markers and the messages
            pipeline.lpush(execute_queue(), *(task_message(ticket_id) for ticket_id in now))
        pipeline.execute()
    except redis.RedisError as error:
        if now:
            log.warning("dispatch failed ticket=%s error=%s (%d in the batch)", items[0][0], error, len(items))
            _unmark(items)
            return 0
        log.warning("markers not set for %d message(s) error=%s", len(items), error)  # a duplicate may follow
    try:
        if later:
            send_through_celery(later)
    except Exception as error:  # the broker is down or refused: the sweeper re-dispatches later
        log.warning("dispatch failed ticket=%s error=%s (%d in the batch)", later[0][0], error, len(later))
        _unmark(later)
        return len(items) - len(later)
    return len(items)


def redis_broker() -> bool:
    return current().services.celery_broker_url.startswith(("redis://", "rediss://", "unix://"))


def send_through_celery(items: list[tuple[object, float | None]]) -> None:
    """Send the execute messages of `items` (ticket id, countdown) through Celery's send_task, unmarked (the markers
    are `publish_many`'s), in one kombu publish batch: a message with a countdown to `celery_queue`, the rest to
    `execute_queue` (Celery sends to a direct queue through the anonymous exchange, routing key = the queue)."""
    with current_app.producer_or_acquire() as producer, producer.batch(max_size=2 * len(items)):
        for ticket_id, countdown in items:
            current_app.send_task(
                EXECUTE_TASK,
                args=[str(ticket_id)],
                countdown=countdown or None,
                retry=False,
                producer=producer,
                queue=celery_queue() if countdown else execute_queue(),
            )


_HOST = socket.gethostname()
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def task_message(ticket_id) -> str:
    """The execute message for `ticket_id` exactly as Celery (task protocol 2) and kombu's Redis transport put it in
    the queue's list, made without their per-message machinery. `tests/queueing/test_router.py` holds it against
    the message Celery makes."""
    task_id, tag = str(uuid.uuid4()), str(uuid.uuid4())
    args = [str(ticket_id)]
    body = base64.b64encode(json.dumps([args, {}, _EMBED]).encode()).decode()
    headers = {
        "lang": "py",
        "task": EXECUTE_TASK,
        "id": task_id,
        "shadow": None,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr(args),
        "kwargsrepr": "{}",
        "origin": f"gen{os.getpid()}@{_HOST}",
        "ignore_result": None,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    properties = {
        "correlation_id": task_id,
        "reply_to": current_app.thread_oid,
        "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": execute_queue()},
        "priority": 0,
        "body_encoding": "base64",
        "delivery_tag": tag,
    }
    message = {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": properties,
    }
    return json.dumps(message)


def _add_marks(pipeline, items: list[tuple[object, float | None]]) -> None:
    grace = max(10, 2 * current().queue.lock_grace_seconds)
    for ticket_id, countdown in items:
        pipeline.set(MARKER.format(ticket_id), 1, ex=int(grace + (countdown or 0)) + 1)


def _unmark(items: list[tuple[object, float | None]]) -> None:
    with contextlib.suppress(redis.RedisError):  # else a duplicate may follow: harmless
        markers().delete(*(MARKER.format(ticket_id) for ticket_id, _ in items))


class Publisher(BatchingThread):
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


class Consumed(BatchingThread):
    """Takes the markers of arrived messages away, from a thread of its own, many in one round trip."""

    name = "agentos-consumed"
    batch = 500
    pause = 0.05  # a marker that outlives its message by as much only delays the sweeper's re-publish by as much

    def handle(self, items: list) -> None:
        with contextlib.suppress(redis.RedisError):
            markers().delete(*(MARKER.format(ticket_id) for ticket_id in items))


consumed_markers = Consumed()


def consumed(ticket_id) -> None:
    """The message for `ticket_id` arrived and its claim was tried: its marker goes (best effort, soon: a marker that
    outlives its message a moment only delays the sweeper's re-publish by as much)."""
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
