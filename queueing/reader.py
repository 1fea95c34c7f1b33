"""How a worker takes execute messages from a Redis broker: a reader thread of its own, many at a time.

Celery's consumer takes one message per turn of its event loop (a `BRPOP`, its reply parsed and decoded, the
next `BRPOP` sent), on the worker's main thread, which shares the GIL with the pool's threads and the CPU with
the web process. Under load it fell behind: in a streamed drain 5 messages waited in the list at the median and a
message waited 24 ms from its publish to its claim. The reader takes what waits in one round trip, as many
messages as the pool has free threads (the rest stay for other workers), and hands their ticket ids to the pool.

Nothing changes for what a message promises. The broker has no acknowledgement here either (kombu's Redis
transport runs without `ack_emulation`): a message is gone once popped, and one popped by a worker that then
died is found by its marker's expiry and sent again by the sweeper (`queueing.router`). The claim stays the only
gate. What the reader does not take on itself goes to Celery's consumer, through the queue it reads
(`router.celery_queue`): a message with an ETA or an expiry, one revoked by id, one that is not a plain execute
message, and every message while the worker sends task events (a monitor then sees Celery's requests).

`ExecuteReader`, a step of Celery's consumer, starts the reader on a Redis broker with the threads pool (and
task events off at start), and takes the execute queue away from Celery's consumer meanwhile; on any other
broker or pool Celery's consumer reads both queues, with the lean strategy (`queueing.strategy`).
"""

from __future__ import annotations

import base64
import json
import logging
import threading

import redis
from celery import bootsteps
from celery.concurrency.thread import TaskPool as ThreadsPool

from . import router, shutdown
from .strategy import execute, sends_task_events

log = logging.getLogger("agentos.queue")


class Reader:
    """Pops execute messages from `queue` while the pool has free threads, and submits their ticket ids to it."""

    idle_wait = 1  # seconds a BRPOP blocks, so a stop is seen within as much
    error_pause = 1.0  # seconds between attempts while Redis does not answer

    def __init__(self, *, client: redis.Redis, queue: str, handover: str, submit, threads: int, revoked, eventer):
        self.client, self.queue, self.handover = client, queue, handover
        self.submit, self.revoked, self.eventer = submit, revoked, eventer
        self._free = threads
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Reader:
        self._thread = threading.Thread(target=self._run, name="agentos-reader", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Take nothing more; returns once the thread has ended (at most one BRPOP's wait)."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            if shutdown.draining():  # a draining worker takes nothing new
                self._stop.wait(self.idle_wait)
                continue
            free = self._wait_for_free_thread()
            if not free:
                continue
            try:
                raws = self._take(free)
            except redis.RedisError as error:
                log.warning("reading the execute queue failed: %s; retrying in %.0fs", error, self.error_pause)
                self._stop.wait(self.error_pause)
                continue
            if raws:
                self._dispatch(raws)

    def _wait_for_free_thread(self) -> int:
        with self._changed:
            self._changed.wait_for(lambda: self._free > 0 or self._stop.is_set(), timeout=self.idle_wait)
            return 0 if self._stop.is_set() else self._free

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

    def _dispatch(self, raws: list[bytes]) -> None:
        handed, back = [], []
        celerys_way = sends_task_events(self.eventer)
        for raw in raws:
            ticket_id = None if celerys_way else plain_ticket_id(raw, self.revoked)
            if ticket_id is None:
                handed.append(raw)
            elif not self._submit(ticket_id):
                back.append(raw)
        try:
            if handed:
                self.client.rpush(self.handover, *reversed(handed))  # to the front of Celery's queue, oldest last in
            if back:
                self.client.rpush(self.queue, *reversed(back))  # the pool is shut down: back to the front for another
        except redis.RedisError as error:  # their markers expire; the sweeper sends their tickets again
            log.warning("%d message(s) not passed on: %s", len(handed) + len(back), error)

    def _submit(self, ticket_id: str) -> bool:
        with self._changed:
            self._free -= 1
        try:
            self.submit(execute, ticket_id, self._release)
        except RuntimeError:  # the pool was shut down meanwhile: nothing more can run here
            self._release()
            self._stop.set()
            return False
        return True

    def _release(self) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify()


def plain_ticket_id(raw: bytes, revoked) -> str | None:
    """The ticket id of a plain execute message as kombu's Redis transport stores it (task protocol 2, JSON, no
    ETA, no expiry, not revoked, exactly one argument); None for anything else."""
    try:
        message = json.loads(raw)
        headers, properties = message["headers"], message["properties"]
        if headers.get("task") != router.EXECUTE_TASK or headers.get("eta") or headers.get("expires"):
            return None
        if headers.get("id") in revoked or message.get("content-type") != "application/json":
            return None
        body = message["body"]
        if properties.get("body_encoding") == "base64":
            body = base64.b64decode(body)
        (ticket_id,), keywords, _embed = json.loads(body)
    except (KeyError, TypeError, ValueError):
        return None
    return ticket_id if isinstance(ticket_id, str) and not keywords else None


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
        self.reader = Reader(
            client=router.markers(),
            queue=router.execute_queue(),
            handover=router.celery_queue(),
            submit=c.pool.executor.submit,
            threads=c.pool.limit,
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
