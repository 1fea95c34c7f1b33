"""The reader of the execute queue, against the test Redis: what it takes, how many, and what it passes on.

The pool is a real thread pool whose submits `reader.Slots` counts, as in a worker; the run it is given records the
ticket id and holds its thread until the test lets it go, so the tests see exactly how many messages the reader
took and in which order.
"""

from __future__ import annotations

import base64
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis
from celery.events import EventDispatcher
from celery.utils.collections import LimitedSet

from agentos_project.celery import app
from queueing import reader, router
from tests.queueing.conftest import draining_meanwhile
from tests.support.http import free_port
from tests.support.waiting import wait_until

QUEUE = "agentos-reader-test"
HANDOVER = "agentos-reader-test.celery"


class Held:
    """The run the pool's threads are given: records the ticket id, then waits until the test lets it go."""

    def __init__(self) -> None:
        self.taken: list[str] = []
        self.gates: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        self.raising: set[str] = set()

    def run(self, ticket_id: str, ack) -> None:
        gate = threading.Event()
        with self.lock:
            self.taken.append(ticket_id)
            self.gates[ticket_id] = gate
        if ticket_id in self.raising:
            raise RuntimeError("the run raised")
        gate.wait(30)
        ack()

    def release(self, ticket_id: str) -> None:
        self.gates[ticket_id].set()

    def release_all(self) -> None:
        with self.lock:
            for gate in self.gates.values():
                gate.set()


@pytest.fixture
def held():
    held = Held()
    yield held
    held.release_all()


@pytest.fixture
def pool(monkeypatch):
    """The process's slots, fresh, and a factory of counted thread pools."""
    slots = reader.Slots()
    monkeypatch.setattr(reader, "slots", slots)
    executors = []

    def make(threads: int) -> ThreadPoolExecutor:
        executors.append(ThreadPoolExecutor(threads))
        slots.capacity = threads
        slots.count(executors[-1])
        return executors[-1]

    yield make
    for executor in executors:
        executor.shutdown(wait=True, cancel_futures=True)


@pytest.fixture
def start_reader(redis_db, held):
    readers = []

    def start(executor, *, revoked=(), eventer=None, client=redis_db) -> reader.Reader:
        readers.append(
            reader.Reader(
                client=client, queue=QUEUE, handover=HANDOVER, executor=executor, revoked=revoked, eventer=eventer,
                run=held.run,
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


def next_first(redis_db, key: str) -> list[str]:
    return [raw.decode() for raw in reversed(redis_db.lrange(key, 0, -1))]


def with_headers(message: str, **headers) -> str:
    decoded = json.loads(message)
    decoded["headers"].update(headers)
    return json.dumps(decoded)


def test_the_reader_takes_the_oldest_messages_as_many_as_the_pool_has_free_threads(redis_db, pool, held, start_reader):
    push(redis_db, *(router.task_message(f"t{n}") for n in range(5)))

    start_reader(pool(3))

    wait_until(lambda: len(held.taken) == 3, timeout=5, what="three messages taken")
    assert held.taken == ["t0", "t1", "t2"]
    assert redis_db.llen(QUEUE) == 2  # left for other workers
    held.release("t0")
    wait_until(lambda: len(held.taken) == 4, timeout=5, what="a fourth message once a thread is free")
    assert (held.taken[3], redis_db.llen(QUEUE)) == ("t3", 1)


def test_a_message_that_comes_later_is_taken_as_it_comes(redis_db, pool, held, start_reader):
    start_reader(pool(2))
    push(redis_db, router.task_message("late"))

    wait_until(lambda: held.taken == ["late"], timeout=5, what="the message taken from the blocking pop")
    assert redis_db.llen(QUEUE) == 0


def test_threads_busy_with_celerys_own_tasks_are_not_free(redis_db, pool, held, start_reader):
    executor = pool(1)
    celerys_task = threading.Event()
    executor.submit(celerys_task.wait, 30)  # as Celery's consumer submits a task with an ETA when it is due
    start_reader(executor)
    push(redis_db, router.task_message("waits"))

    threading.Event().wait(1.5)
    assert (held.taken, redis_db.llen(QUEUE)) == ([], 1)
    celerys_task.set()
    wait_until(lambda: held.taken == ["waits"], timeout=5, what="the message taken once the thread is free")


def test_a_run_that_raises_frees_its_thread(redis_db, pool, held, start_reader):
    held.raising.add("raises")
    push(redis_db, router.task_message("raises"), router.task_message("next"))

    start_reader(pool(1))

    wait_until(lambda: held.taken == ["raises", "next"], timeout=5, what="the next message taken")


def test_the_count_of_busy_threads_outlives_a_reader(redis_db, pool, held, start_reader):
    """A consumer restart stops its reader and starts another: the runs of the first still hold their threads."""
    executor = pool(1)
    first = start_reader(executor)
    push(redis_db, router.task_message("long"))
    wait_until(lambda: held.taken == ["long"], timeout=5, what="the first reader's run")
    first.stop()

    start_reader(executor)
    push(redis_db, router.task_message("after-restart"))
    threading.Event().wait(1.5)
    assert (held.taken, redis_db.llen(QUEUE)) == (["long"], 1)
    held.release("long")
    wait_until(lambda: held.taken == ["long", "after-restart"], timeout=5, what="the message taken by the second")


def test_what_is_not_a_plain_execute_message_goes_to_celerys_queue_behind_what_waits_there(
    redis_db, pool, held, start_reader
):
    plain = router.task_message("plain")
    eta = with_headers(router.task_message("eta"), eta="2026-12-02T00:00:00+00:00")
    expiring = with_headers(router.task_message("expiring"), expires="2026-12-02T00:00:00+00:00")
    revoked = router.task_message("revoked")
    other_task = with_headers(router.task_message("other"), task="some.other_task")
    not_json = "{not json"
    odd_shape = json.dumps({"headers": [], "properties": {}, "body": ""})
    redis_db.lpush(HANDOVER, "already there")
    push(redis_db, eta, plain, expiring, revoked, other_task, not_json, odd_shape)

    start_reader(pool(8), revoked=LimitedSet(data=[json.loads(revoked)["headers"]["id"]]))

    wait_until(lambda: redis_db.llen(HANDOVER) == 7, timeout=5, what="six messages passed on")
    assert held.taken == ["plain"]
    assert next_first(redis_db, HANDOVER) == ["already there", eta, expiring, revoked, other_task, not_json, odd_shape]


def test_celerys_own_message_is_plain(redis_db):
    router.send_through_celery([("through-celery", None)])
    [raw] = redis_db.lrange(router.execute_queue(), 0, -1)

    assert reader.plain_ticket_id(raw, revoked=()) == "through-celery"
    assert reader.plain_ticket_id(router.task_message("ours"), revoked=()) == "ours"
    body = json.loads(raw)
    body["body"] = base64.b64encode(json.dumps([["a", "b"], {}, {}]).encode()).decode()
    assert reader.plain_ticket_id(json.dumps(body), revoked=()) is None  # two arguments
    body["body"] = base64.b64encode(json.dumps([["a"], {"k": 1}, {}]).encode()).decode()
    assert reader.plain_ticket_id(json.dumps(body), revoked=()) is None  # keywords


def test_while_the_worker_sends_task_events_messages_go_to_celery_as_fast_as_it_takes_them(
    redis_db, pool, held, start_reader
):
    messages = [router.task_message(f"watched-{n}") for n in range(3)]
    redis_db.lpush(HANDOVER, "not yet taken by Celery")
    push(redis_db, *messages)
    with app.connection_for_write() as connection:
        eventer = EventDispatcher(connection, enabled=True)
        start_reader(pool(2), eventer=eventer)

        threading.Event().wait(1.5)
        assert (redis_db.llen(QUEUE), redis_db.llen(HANDOVER)) == (3, 1)
        redis_db.delete(HANDOVER)  # Celery's consumer took it

        wait_until(lambda: redis_db.llen(HANDOVER) == 2, timeout=5, what="as many passed on as threads are free")
        threading.Event().wait(0.5)
        assert (next_first(redis_db, HANDOVER), redis_db.llen(QUEUE)) == (messages[:2], 1)
        eventer.close()
    assert held.taken == []


def test_a_pool_shut_down_meanwhile_puts_the_message_back_at_the_front_and_stops_the_reader(
    redis_db, pool, held, start_reader
):
    executor = pool(1)
    executor.shutdown()
    first, second = router.task_message("first"), router.task_message("second")
    push(redis_db, first)
    one = start_reader(executor)
    wait_until(lambda: not one.is_alive(), timeout=5, what="the reader to stop")
    push(redis_db, second)

    assert next_first(redis_db, QUEUE) == [first, second]
    assert held.taken == []


def test_a_draining_worker_takes_nothing(redis_db, pool, held, start_reader):
    with draining_meanwhile():
        start_reader(pool(2))
        push(redis_db, router.task_message("during-drain"))
        threading.Event().wait(1.5)
        assert (held.taken, redis_db.llen(QUEUE)) == ([], 1)


def test_a_redis_that_does_not_answer_is_retried_and_the_reader_still_stops(pool, start_reader, caplog):
    down = redis.Redis(port=free_port(), socket_connect_timeout=0.2, socket_timeout=0.2)

    one = start_reader(pool(2), client=down)

    wait_until(lambda: "reading the execute queue failed" in caplog.text, timeout=5, what="the failure logged")
    wait_until(lambda: caplog.text.count("reading the execute queue failed") >= 2, timeout=15, what="a retry")
    assert one.is_alive()
    one.stop(timeout=3)
    assert not one.is_alive()
