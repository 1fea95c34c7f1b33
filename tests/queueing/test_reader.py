"""The reader of the execute queue, against the test Redis: what it takes, how many, and what it passes on.

The pool is the seam: `submit` records the ticket ids a pool thread would run and holds each thread until the test
lets it go, so the tests see exactly how many messages the reader took and in which order.
"""

from __future__ import annotations

import base64
import json
import threading

import pytest
import redis
from celery.events import EventDispatcher
from celery.utils.collections import LimitedSet

from agentos_project.celery import app
from queueing import reader, router, shutdown
from queueing.strategy import execute
from tests.conftest import free_port, wait_until

QUEUE = "agentos-reader-test"
HANDOVER = "agentos-reader-test.celery"


class Pool:
    """Threads the test lets go one at a time: `taken` lists the ticket ids in the order they were submitted."""

    def __init__(self, refuse: bool = False) -> None:
        self.taken: list[str] = []
        self.releases: list = []
        self.refuse = refuse
        self.lock = threading.Lock()

    def submit(self, function, ticket_id, release) -> None:
        assert function is execute
        if self.refuse:
            raise RuntimeError("cannot schedule new futures after shutdown")
        with self.lock:
            self.taken.append(ticket_id)
            self.releases.append(release)

    def release_one(self) -> None:
        with self.lock:
            release = self.releases.pop(0)
        release()


@pytest.fixture
def start_reader(redis_db):
    readers = []

    def start(pool: Pool, *, threads: int, revoked=(), eventer=None, client=redis_db) -> reader.Reader:
        readers.append(
            reader.Reader(
                client=client, queue=QUEUE, handover=HANDOVER, submit=pool.submit, threads=threads,
                revoked=revoked, eventer=eventer,
            ).start()
        )  # fmt: skip
        return readers[-1]

    yield start
    for one in readers:
        one.stop()


def push(redis_db, *messages: str) -> None:
    """Publish as the broker's producers do: LPUSH, so the oldest is at the right end, where BRPOP takes."""
    for message in messages:
        redis_db.lpush(QUEUE, message)


def with_headers(message: str, **headers) -> str:
    decoded = json.loads(message)
    decoded["headers"].update(headers)
    return json.dumps(decoded)


def test_the_reader_takes_the_oldest_messages_as_many_as_the_pool_has_free_threads(redis_db, start_reader):
    pool = Pool()
    push(redis_db, *(router.task_message(f"t{n}") for n in range(5)))

    start_reader(pool, threads=3)

    wait_until(lambda: len(pool.taken) == 3, timeout=5, what="three messages taken")
    assert pool.taken == ["t0", "t1", "t2"]
    assert redis_db.llen(QUEUE) == 2  # left for other workers
    pool.release_one()
    wait_until(lambda: len(pool.taken) == 4, timeout=5, what="a fourth message once a thread is free")
    assert (pool.taken[3], redis_db.llen(QUEUE)) == ("t3", 1)


def test_a_message_that_comes_later_is_taken_as_it_comes(redis_db, start_reader):
    pool = Pool()
    start_reader(pool, threads=2)
    push(redis_db, router.task_message("late"))

    wait_until(lambda: pool.taken == ["late"], timeout=5, what="the message taken from the blocking pop")
    assert redis_db.llen(QUEUE) == 0


def test_what_is_not_a_plain_execute_message_goes_to_the_front_of_celerys_queue(redis_db, start_reader):
    pool = Pool()
    plain = router.task_message("plain")
    eta = with_headers(router.task_message("eta"), eta="2026-12-02T00:00:00+00:00")
    expiring = with_headers(router.task_message("expiring"), expires="2026-12-02T00:00:00+00:00")
    revoked = router.task_message("revoked")
    other_task = with_headers(router.task_message("other"), task="some.other_task")
    not_json = "{not json"
    redis_db.lpush(HANDOVER, "already there")
    push(redis_db, eta, plain, expiring, revoked, other_task, not_json)

    start_reader(pool, threads=8, revoked=LimitedSet(data=[json.loads(revoked)["headers"]["id"]]))

    wait_until(lambda: redis_db.llen(HANDOVER) == 6, timeout=5, what="five messages passed on")
    assert pool.taken == ["plain"]
    taken_next_first = [raw.decode() for raw in reversed(redis_db.lrange(HANDOVER, 0, -1))]
    assert taken_next_first == [eta, expiring, revoked, other_task, not_json, "already there"]


def test_celerys_own_message_is_plain(redis_db):
    router._send_tasks([("through-celery", None)])
    [raw] = redis_db.lrange(router.execute_queue(), 0, -1)

    assert reader.plain_ticket_id(raw, revoked=()) == "through-celery"
    assert reader.plain_ticket_id(router.task_message("ours"), revoked=()) == "ours"
    body = json.loads(raw)
    body["body"] = base64.b64encode(json.dumps([["a", "b"], {}, {}]).encode()).decode()
    assert reader.plain_ticket_id(json.dumps(body), revoked=()) is None  # two arguments
    body["body"] = base64.b64encode(json.dumps([["a"], {"k": 1}, {}]).encode()).decode()
    assert reader.plain_ticket_id(json.dumps(body), revoked=()) is None  # keywords


def test_while_the_worker_sends_task_events_every_message_goes_to_celery(redis_db, start_reader):
    pool = Pool()
    with app.connection_for_write() as connection:
        eventer = EventDispatcher(connection, enabled=True)
        push(redis_db, router.task_message("watched"))

        start_reader(pool, threads=2, eventer=eventer)

        wait_until(lambda: redis_db.llen(HANDOVER) == 1, timeout=5, what="the message passed on")
        eventer.close()
    assert pool.taken == []


def test_a_pool_shut_down_meanwhile_puts_the_message_back_at_the_front_and_stops_the_reader(redis_db, start_reader):
    pool = Pool(refuse=True)
    first, second = router.task_message("first"), router.task_message("second")
    push(redis_db, first)
    one = start_reader(pool, threads=1)
    wait_until(lambda: not one._thread.is_alive(), timeout=5, what="the reader to stop")
    push(redis_db, second)

    assert [raw.decode() for raw in redis_db.lrange(QUEUE, 0, -1)] == [second, first]
    assert pool.taken == []


def test_a_draining_worker_takes_nothing(redis_db, start_reader):
    pool = Pool()
    shutdown._State.draining.set()
    try:
        start_reader(pool, threads=2)
        push(redis_db, router.task_message("during-drain"))
        threading.Event().wait(1.5)
        assert (pool.taken, redis_db.llen(QUEUE)) == ([], 1)
    finally:
        shutdown._State.draining.clear()


def test_a_redis_that_does_not_answer_is_retried_and_the_reader_still_stops(start_reader, caplog):
    pool = Pool()
    down = redis.Redis(port=free_port(), socket_connect_timeout=0.2, socket_timeout=0.2)

    one = start_reader(pool, threads=2, client=down)

    wait_until(lambda: "reading the execute queue failed" in caplog.text, timeout=5, what="the failure logged")
    one.stop(timeout=3)
    assert not one._thread.is_alive()
