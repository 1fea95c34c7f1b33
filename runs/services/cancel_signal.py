"""Cancelling a running run (CONTRACT 9): an intent in Redis that the executing attempt sees, wherever it runs.

`cancel_request` stores the intent (24 h) and announces it on the deployment's cancel channel; the service that
calls it has also marked the run's row (`cancel_requested_at`). Every process that executes runs has one
`Watcher` thread: it hears the announcements, and once a second also looks up the intents of the runs it
executes, in Redis and in PostgreSQL (an announcement lost to a Redis hiccup, or a cancel made while Redis was
down, costs at most that second). The run loop's checkpoints read a local flag, so checking costs nothing. A
run that starts after its intent was stored sees it at once.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time

import redis
from django.db import connection

from agentos_project.core.coordination import deployment_key, redis_connection

from ..selectors import runs_cancel_requested

log = logging.getLogger("agentos.runs")
INTENT_SECONDS = 24 * 3600
POLL_SECONDS = 1.0


def intent_key(run_id) -> str:
    """The Redis key of `run_id`'s cancellation intent (set while it stands)."""
    return deployment_key(f"cancel:{run_id}")


def channel() -> str:
    """The deployment's cancel channel: each message is the id of a run asked to stop."""
    return deployment_key("cancels")


def cancel_request(run_id) -> None:
    """Record that `run_id` must stop, for whichever process executes it; best effort when Redis is down."""
    watcher.notify(str(run_id))
    try:
        pipeline = redis_connection().pipeline(transaction=False)
        pipeline.set(intent_key(run_id), 1, ex=INTENT_SECONDS)
        pipeline.publish(channel(), str(run_id))
        pipeline.execute()
    except redis.RedisError as error:
        log.warning("run=%s cancellation intent not stored: %s", run_id, error)


def cancel_requested(run_id) -> bool:
    try:
        return bool(redis_connection().exists(intent_key(run_id)))
    except redis.RedisError:
        return False


def cancel_clear(run_id) -> None:
    """Forget a cancellation intent (a requeue that asks for it)."""
    with contextlib.suppress(redis.RedisError):
        redis_connection().delete(intent_key(run_id))


class Watcher:
    """The runs this process executes, each with a flag that is set when its cancellation is requested."""

    def __init__(self) -> None:
        self._flags: dict[str, set[threading.Event]] = {}  # one per watch: two attempts of a run may overlap
        self._lock = threading.Lock()
        self.listening = threading.Event()  # subscribed to the cancel channel now
        self._owner_pid: int | None = None
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Stop the watcher's thread (it ends within POLL_SECONDS); its watches see no more announcements."""
        self._stopping.set()

    @contextlib.contextmanager
    def watch(self, run_id, *, look_up: bool = True, wake: threading.Event | None = None):
        """While the block runs, `flag.is_set()` (the yielded flag) says whether `run_id` was asked to stop; a
        cancel sets `wake` too (what the run sleeps on, set by other causes as well).

        A cancel asked before the block began is looked up in Redis; `look_up=False` spares that round trip for a
        caller that reads the run's row (its `cancel_requested_at`, marked before the intent is announced) inside
        the block and sets the flag itself.
        """
        run_id = str(run_id)
        flag = threading.Event()
        watched = {flag} if wake is None else {flag, wake}
        self._ensure_thread()
        with self._lock:
            self._flags.setdefault(run_id, set()).update(watched)
        if look_up and cancel_requested(run_id):
            for event in watched:
                event.set()
        try:
            yield flag
        finally:
            with self._lock:
                flags = self._flags.get(run_id, set())
                flags.difference_update(watched)
                if not flags:
                    self._flags.pop(run_id, None)

    def notify(self, run_id: str) -> None:
        with self._lock:
            flags = list(self._flags.get(run_id, ()))
        for flag in flags:
            flag.set()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._owner_pid == os.getpid():
                return
            self._flags = {}
            self._owner_pid = os.getpid()
        self._stopping = threading.Event()
        atexit.register(self._stopping.set)  # quiet while the process (and perhaps its Redis) shuts down
        threading.Thread(target=self._run, name="agentos-cancel-watcher", daemon=True).start()

    def _run(self) -> None:
        pubsub, failing, polled = None, False, 0.0
        while not self._stopping.is_set():
            try:
                if pubsub is None:
                    pubsub = redis_connection().pubsub(ignore_subscribe_messages=True)
                    pubsub.subscribe(channel())
                    self.listening.set()
                    if failing:
                        log.info("cancellation watcher has Redis again")
                    failing = False
                message = pubsub.get_message(timeout=POLL_SECONDS)
                if message is not None and message["type"] == "message":
                    self.notify(message["data"].decode())
            except redis.RedisError as error:
                if not failing and not self._stopping.is_set():
                    log.warning("cancellation watcher lost Redis: %s; the database is asked meanwhile", error)
                failing = True
                self.listening.clear()
                if pubsub is not None:
                    with contextlib.suppress(redis.RedisError):
                        pubsub.close()
                pubsub = None
                self._stopping.wait(POLL_SECONDS)
            if time.monotonic() - polled >= POLL_SECONDS:
                self._poll()
                polled = time.monotonic()

    def _poll(self) -> None:
        """Find the intents of the runs watched here whose announcement this process missed: in Redis, and in
        PostgreSQL (which has every cancel asked of a running run, Redis down or not)."""
        with self._lock:
            run_ids = [run_id for run_id, flags in self._flags.items() if not all(flag.is_set() for flag in flags)]
        if not run_ids:
            return
        requested: set[str] = set()
        try:
            pipeline = redis_connection().pipeline(transaction=False)
            for run_id in run_ids:
                pipeline.exists(intent_key(run_id))
            requested.update(run_id for run_id, found in zip(run_ids, pipeline.execute(), strict=True) if found)
        except redis.RedisError:
            pass
        try:
            requested.update(runs_cancel_requested(run_ids=run_ids))
        except Exception as error:  # a database that does not answer must not stop the watcher
            log.warning("cancellation watcher cannot ask the database: %s", error)
        finally:
            connection.close()
        for run_id in requested:
            self.notify(run_id)


watcher = Watcher()
