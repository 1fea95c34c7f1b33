"""How Celery's consumer takes an execute message in: a lean Celery strategy (`Task.Strategy`) for `execute_ticket`.

A plain message's ticket id goes straight to the pool's threads, without Celery's `Request` and tracer: the message
carries the ticket id only, the claim is the only gate and the run's truth is in PostgreSQL. The message is
acknowledged once `worker_execute` returns (acks late), whatever it returned or raised. Anything else keeps
Celery's way: an ETA or an expiry, a revoked id, callbacks, a pool other than threads, and every message while the
worker sends task events. Where the worker's reader runs (`queueing.reader`) this sees only what it passes on.
The fast path keeps no Celery worker state: `celery inspect active` does not list its tasks; `/queue` does.
"""

from __future__ import annotations

import functools
import logging

from celery.concurrency.thread import TaskPool as ThreadsPool
from celery.worker.strategy import default
from django.db import connections

from .worker import worker_execute

log = logging.getLogger("agentos.queue")


def lean(task, app, consumer, **options):
    """The message handler for `task` in `consumer`: the fast path when it applies, else Celery's default."""
    celerys = default(task, app, consumer, **options)
    if not isinstance(consumer.pool, ThreadsPool):
        return celerys
    eventer = consumer.event_dispatcher
    pool = consumer.pool  # its executor's submit is looked up per message: `queueing.reader` counts what it runs
    revoked = consumer.controller.state.revoked
    connection_errors = consumer.connection_errors

    def task_message_handler(message, body, ack, reject, callbacks, **kwargs):
        plain = body is None and not callbacks and not sends_task_events(eventer)
        # Not plain (not JSON, other arguments...): Celery's way tells what is wrong with it.
        ticket_id = plain_ticket_id(message.headers, message.decode, revoked) if plain else None
        if ticket_id is None:
            return celerys(message, body, ack, reject, callbacks, **kwargs)
        pool.executor.submit(execute, ticket_id, functools.partial(ack, log, connection_errors))

    return task_message_handler


def plain_ticket_id(headers: dict, decode, revoked):
    """The one argument of an execute message whose `headers` name no ETA, no expiry and no revoked id, and whose
    body (`decode()`: args, kwargs, embed) has no keywords; else None."""
    if headers.get("eta") or headers.get("expires") or headers.get("id") in revoked:
        return None
    try:
        (ticket_id,), keywords, _embed = decode()
    except (TypeError, ValueError):
        return None
    return None if keywords else ticket_id


def sends_task_events(eventer) -> bool:
    """Whether the worker sends task events now: `-E`, `AGENTOS_TASK_EVENTS`, or Flower's `enable_events`, which
    adds the "task" group to the running dispatcher (asked per message, so a monitor sees from the next one on)."""
    return eventer is not None and eventer.enabled and (not eventer.groups or "task" in eventer.groups)


def execute(ticket_id: str, ack) -> None:
    """Run the ticket on this pool thread, then acknowledge its message (a failure is logged, never retried:
    the ticket's state in the database says what happens next)."""
    try:
        worker_execute(ticket_id=ticket_id)
    except Exception:
        log.exception("ticket=%s execute raised", ticket_id)
    finally:
        try:
            connections.close_all()  # as Celery's Django fix-up: the thread's connections go back to the pool
        finally:
            ack()
