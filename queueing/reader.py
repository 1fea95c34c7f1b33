"""How a worker takes execute messages from a Redis broker: a reader thread of its own, many at a time.

The reader takes what waits in one round trip, as many messages as the pool has free threads (counted per process
over consumer restarts: `slots`), and hands their ticket ids to the pool. A popped message is gone (this broker
has no acknowledgement); one lost with its worker is sent again by the sweeper (`queueing.router`), and the claim
stays the only gate. What the reader does not take on itself it passes to Celery's consumer (`router.celery_queue`):
an ETA or an expiry, a revoked id, a message that is not plain, and every message while the worker sends task
events. `ExecuteReader`, a consumer step, starts it on a Redis broker with the threads pool and task events off;
elsewhere Celery's consumer reads both queues through `queueing.message_handler`.
"""

from __future__ import annotations

import base64
import json
import logging
import threading

import redis
from celery import bootsteps
from celery.concurrency.thread import TaskPool as ThreadsPool

from . import message_handler, router, shutdown
from .message_handler import execute, sends_task_events

log = logging.getLogger("agentos.queue")


class Slots:
    """The pool's threads in use in this process: each submit to the pool's executor counts one until its work is done
    (or cancelled), the reader's runs and the tasks Celery's consumer runs alike, over consumer restarts."""

    def __init__(self) -> None:
        self.capacity = 0
        self._busy = 0
        self._changed = threading.Condition()

    def count(self, executor) -> None:
        """Count the submits to `executor` from now on (once per executor)."""
        if getattr(executor, "_agentos_slots", None) is self:
            return
        submit = executor.submit

        def counted(function, /, *args, **kwargs):
            with self._changed:
                self._busy += 1
            try:
                future = submit(function, *args, **kwargs)
            except BaseException:
                self._done(None)
                raise
            future.add_done_callback(self._done)
            return future

        executor.submit, executor._agentos_slots = counted, self

    def _done(self, _future) -> None:
        with self._changed:
            self._busy -= 1
            self._changed.notify_all()

    def wait_free(self, timeout: float) -> int:
        """How many threads are free, waiting up to `timeout` for one when none is."""
        with self._changed:
            self._changed.wait_for(lambda: self._busy < self.capacity, timeout=timeout)
            return max(0, self.capacity - self._busy)

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()


slots = Slots()


class Reader:
    """Pops execute messages from `queue` while the pool has free threads (`slots`), and submits their ticket ids to
    `executor` (whose submits `slots` counts)."""

    idle_wait = 1  # seconds a BRPOP blocks, so a stop is seen within as much
    error_pause = 1.0  # seconds between attempts while Redis does not answer

    def __init__(self, *, client: redis.Redis, queue: str, handover: str, executor, revoked, eventer, run=execute):
        self.client, self.queue, self.handover = client, queue, handover
        self.executor, self.revoked, self.eventer, self.run = executor, revoked, eventer, run
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Reader:
        self._thread = threading.Thread(target=self._run, name="agentos-reader", daemon=True)
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        """Whether the reader's thread runs: from `start` until it stopped (`stop`, or a pool shut down meanwhile)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Take nothing more; returns once the thread has ended (at most one BRPOP's wait)."""
        self._stop.set()
        slots.wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._read_once()
            except redis.RedisError as error:
                log.warning("reading the execute queue failed: %s; retrying in %.0fs", error, self.error_pause)
                self._stop.wait(self.error_pause)
            except Exception:  # never let one read end the thread: nobody else reads the queue
                log.exception("reading the execute queue failed; retrying in %.0fs", self.error_pause)
                self._stop.wait(self.error_pause)

    def _read_once(self) -> None:
        if shutdown.draining():  # a draining worker takes nothing new
            self._stop.wait(self.idle_wait)
            return
        free = slots.wait_free(self.idle_wait)
        if not free or self._stop.is_set():
            return
        if sends_task_events(self.eventer):
            # Every message takes Celery's way: move as many as it could run now, and only once it has taken the
            # ones moved before, so the queue is not emptied into Celery's.
            if self.client.llen(self.handover):
                self._stop.wait(self.idle_wait / 10)
                return
            self._pass_on(self._take(free))
            return
        raws = self._take(free)
        handed = []
        for taken, raw in enumerate(raws):
            ticket_id = plain_ticket_id(raw, self.revoked)
            if ticket_id is None:
                handed.append(raw)
            elif not self._submit(ticket_id):  # this one and the rest go back to the front, in order
                self.client.rpush(self.queue, *reversed(raws[taken:]))
                break
        self._pass_on(handed)

    def _take(self, most: int) -> list[bytes]:
        """Up to `most` messages, oldest first: what waits now, in one atomic round trip; else the first to come
        within `idle_wait`. (LRANGE and LTRIM in MULTI rather than RPOP's count, which needs Redis 6.2.)"""
        pipeline = self.client.pipeline(transaction=True)
        pipeline.lrange(self.queue, -most, -1)
        pipeline.ltrim(self.queue, 0, -most - 1)
        waiting, _ = pipeline.execute()
        if waiting:
            return waiting[::-1]
        popped = self.client.brpop([self.queue], timeout=self.idle_wait)
        return [popped[1]] if popped else []

    def _pass_on(self, raws: list[bytes]) -> None:
        """To Celery's queue, behind what waits there (oldest first, as they came)."""
        if raws:
            self.client.lpush(self.handover, *raws)

    def _submit(self, ticket_id: str) -> bool:
        try:
            self.executor.submit(self.run, ticket_id, _nothing)
        except RuntimeError:  # the pool was shut down meanwhile: nothing more can run here
            self._stop.set()
            return False
        return True


def _nothing() -> None:
    """The message's acknowledgement: none on this broker (a popped message is gone); the slot is freed by `slots`."""


def plain_ticket_id(raw: bytes, revoked) -> str | None:
    """The ticket id of a plain execute message as kombu's Redis transport stores it (task protocol 2, JSON; the
    rest as `message_handler.plain_ticket_id`); None for anything else."""
    try:
        message = json.loads(raw)
        headers, properties, body = message["headers"], message["properties"], message["body"]
        if headers.get("task") != router.EXECUTE_TASK or message.get("content-type") != "application/json":
            return None
        if properties.get("body_encoding") == "base64":
            body = base64.b64decode(body)
        ticket_id = message_handler.plain_ticket_id(headers, lambda: json.loads(body), revoked)
    except Exception:  # noqa: BLE001 - whatever is wrong with it, Celery's way tells (and rejects it)
        return None
    return ticket_id if isinstance(ticket_id, str) else None


class ExecuteReader(bootsteps.StartStopStep):
    """The consumer's step that reads the execute queue with a `Reader` where it can, and has Celery's consumer
    read `router.celery_queue` in any case (messages with an ETA go there)."""

    requires = ("celery.worker.consumer.tasks:Tasks", "celery.worker.consumer.events:Events")
    label = "agentos reader"

    def __init__(self, c, **kwargs):
        self.reader: Reader | None = None
        super().__init__(c, **kwargs)

    def start(self, c):
        c.add_task_queue(router.celery_queue())
        if not self._reads(c):
            c.add_task_queue(router.execute_queue())  # read by Celery's consumer, also after a restart with a reader
            return
        c.cancel_task_queue(router.execute_queue())
        slots.capacity = c.pool.limit
        slots.count(c.pool.executor)
        self.reader = Reader(
            client=router.markers(),
            queue=router.execute_queue(),
            handover=router.celery_queue(),
            executor=c.pool.executor,
            revoked=c.controller.state.revoked,
            eventer=c.event_dispatcher,
        ).start()
        log.info("reading %s with the agentos reader (%d threads)", router.execute_queue(), c.pool.limit)

    def stop(self, c):
        if self.reader is not None:
            self.reader.stop()
            self.reader = None

    shutdown = stop

    @staticmethod
    def _reads(c) -> bool:
        return router.redis_broker() and isinstance(c.pool, ThreadsPool) and not sends_task_events(c.event_dispatcher)
