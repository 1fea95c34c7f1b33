"""The pooled PostgreSQL backend: connections closed by one request thread are reused by the next."""

import gc
import os
import threading
import time

import psycopg2
import pytest
from django.db import connection, connections, transaction

from agentos_project.core.postgres.base import DatabaseWrapper, release_connection, warm
from agentos_project.core.postgres.pool import ConnectionPool, PoolExhausted, Waiter, pool_for, reserved
from tests.support.database import terminate_backend
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def on_a_new_thread(work):
    """Run `work` as a request would under ASGI: on a thread of its own, closing its connection at the end; its
    result, or the exception it raised."""
    result, errors = [], []

    def run():
        try:
            result.append(work())
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_closed_connection_is_reused_by_the_next_thread():
    assert on_a_new_thread(backend_pid) == on_a_new_thread(backend_pid)


def test_a_connection_killed_while_idle_is_replaced_not_handed_out():
    first = on_a_new_thread(backend_pid)
    terminate_backend(first)

    second = on_a_new_thread(backend_pid)

    assert second != first


def test_a_connection_on_a_descriptor_above_1023_is_reused():
    """A worker holding thousands of runs has that many descriptors open: the idle check must not refuse them."""
    held = []
    try:
        while not held or held[-1] < 1024:
            held.append(os.open(os.devnull, os.O_RDONLY))
        first = on_a_new_thread(backend_pid)
        second = on_a_new_thread(backend_pid)
    finally:
        for descriptor in held:
            os.close(descriptor)

    assert second == first


def test_a_thread_about_to_wait_gives_back_its_connection_and_its_wrapper():
    def work():
        pid = backend_pid()
        release_connection()
        released = connections.all(initialized_only=True)
        return pid, released, backend_pid()

    pid, released, pid_after = on_a_new_thread(work)

    assert released == []
    assert pid_after == pid, "the connection went back to the pool, and came out of it again"


def test_a_thread_inside_a_transaction_keeps_its_connection_when_it_would_wait():
    def work():
        with transaction.atomic():
            pid, wrapper = backend_pid(), connections["default"]
            release_connection()
            return pid, connections["default"] is wrapper, wrapper.connection is not None, backend_pid()

    pid, same_wrapper, connected, pid_after = on_a_new_thread(work)

    assert (same_wrapper, connected, pid_after) == (True, True, pid)


def test_a_connection_left_inside_a_transaction_is_not_pooled():
    def leave_transaction_open():
        connection.set_autocommit(False)
        return backend_pid()

    first = on_a_new_thread(leave_transaction_open)

    assert on_a_new_thread(backend_pid) != first


def capped(room: int, timeout: float = 0.3):
    """The default database's pool, capped at `room` connections more than are open now, for the test."""
    pool = pool_for(connection.get_connection_params())
    pool.clear()  # idle ones would be handed out without counting against the cap
    saved = (pool.size, pool.timeout)
    pool.size, pool.timeout = pool.open + room, timeout
    return pool, saved


def holding(count: int, release: threading.Event) -> list[threading.Thread]:
    """`count` threads that each open a connection and keep it until `release` is set."""
    opened = threading.Barrier(count + 1)

    def hold():
        try:
            backend_pid()
            opened.wait()
            release.wait(10)
        finally:
            connection.close()

    threads = [threading.Thread(target=hold) for _ in range(count)]
    for thread in threads:
        thread.start()
    opened.wait(10)
    return threads


def test_the_cap_makes_a_thread_wait_then_refuses_and_the_heartbeat_still_connects():
    pool, saved = capped(2)
    release = threading.Event()
    threads = holding(2, release)
    try:
        with pytest.raises(PoolExhausted):
            on_a_new_thread(backend_pid)
        assert pool.waiting == 0  # the one that gave up left the queue: nothing is handed to it later

        def as_heartbeat():
            reserved()
            return backend_pid()

        assert on_a_new_thread(as_heartbeat) > 0
    finally:
        release.set()
        for thread in threads:
            thread.join()
        pool.size, pool.timeout = saved
    assert on_a_new_thread(backend_pid) > 0


def test_a_line_that_moves_is_waited_in_longer_than_the_timeout():
    """Twelve threads for one connection, each holding it 0.1 s: the last waits about 1.1 s, beyond the 0.3 s
    timeout, and is served, since the line moved all along (a worker's thousand claims arriving at once)."""
    pool, saved = capped(1, timeout=0.3)
    waited, refused = [], []

    def in_turn():
        started = time.monotonic()
        try:
            backend_pid()
            waited.append(time.monotonic() - started)
            time.sleep(0.1)
        except PoolExhausted:
            refused.append(time.monotonic() - started)
        finally:
            connection.close()

    try:
        threads = [threading.Thread(target=in_turn) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        pool.size, pool.timeout = saved

    assert refused == []
    assert max(waited) > 0.9


def test_a_waiting_thread_gets_the_connection_another_closes():
    pool, saved = capped(1, timeout=5)
    release = threading.Event()
    threads = holding(1, release)
    try:
        threading.Timer(0.2, release.set).start()
        started = time.monotonic()
        assert on_a_new_thread(backend_pid) > 0
        assert time.monotonic() - started >= 0.15
    finally:
        release.set()
        for thread in threads:
            thread.join()
        pool.size, pool.timeout = saved


def started(work) -> threading.Thread:
    """`work` on a thread of its own, already started, that closes its connection at the end (as a request's)."""

    def run():
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def noting(into: list, name: str):
    """Work that takes a connection, then notes `name` in `into`."""
    return lambda: (backend_pid(), into.append(name))


def queued_behind(pool, holder, waiter) -> list[threading.Thread]:
    """`holder` started and holding the pool's one place, then `waiter` started and waiting in line for it."""
    first = started(holder)
    wait_until(lambda: pool.open == pool.size, timeout=5, interval=0.001, what="the pool to be full")
    second = started(waiter)
    wait_until(lambda: pool.waiting == 1, timeout=5, interval=0.001, what="a waiter")
    return [first, second]


def test_a_thread_that_gives_its_connection_back_and_needs_one_again_queues_behind_the_waiting_ones():
    pool, saved = capped(1, timeout=5)
    order, again = [], threading.Event()

    def holder():
        backend_pid()
        again.wait(5)
        connection.close()  # the waiting thread's, at once
        backend_pid()  # so this waits for it
        order.append("holder, again")

    try:
        threads = queued_behind(pool, holder, noting(order, "waiter"))
        again.set()
        for thread in threads:
            thread.join(10)
    finally:
        pool.size, pool.timeout = saved
    assert order == ["waiter", "holder, again"]
    assert pool.waiting == 0


def test_waiting_threads_are_served_in_the_order_they_came():
    pool, saved = capped(1, timeout=5)
    release, order = threading.Event(), []
    threads = holding(1, release)
    try:
        for count, name in enumerate(("first", "second", "third"), start=1):
            threads.append(started(noting(order, name)))
            wait_until(lambda count=count: pool.waiting == count, timeout=5, interval=0.001, what="the waiters")
        release.set()
        for thread in threads:
            thread.join(10)
    finally:
        release.set()
        pool.size, pool.timeout = saved
    assert order == ["first", "second", "third"]


def test_the_heartbeat_connects_at_once_while_other_threads_wait_in_line():
    pool, saved = capped(1, timeout=5)
    release, got = threading.Event(), []
    threads = holding(1, release)

    def as_heartbeat():
        reserved()
        return backend_pid()

    try:
        threads.append(started(lambda: got.append(backend_pid())))
        wait_until(lambda: pool.waiting == 1, timeout=5, interval=0.001, what="a waiter")
        started_at = time.monotonic()
        assert on_a_new_thread(as_heartbeat) > 0
        assert time.monotonic() - started_at < 1.0
        assert got == []  # still in line: the heartbeat's connection was one beyond the cap
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
        pool.size, pool.timeout = saved
    assert len(got) == 1


def test_a_place_freed_by_a_connection_too_dirty_to_keep_goes_to_the_waiting_thread():
    pool, saved = capped(1, timeout=5)
    leave, pids = threading.Event(), []

    def holder():
        connection.set_autocommit(False)  # closed inside a transaction: not kept, its place freed
        pids.append(backend_pid())
        leave.wait(5)

    try:
        threads = queued_behind(pool, holder, lambda: pids.append(backend_pid()))
        leave.set()
        for thread in threads:
            thread.join(10)
    finally:
        pool.size, pool.timeout = saved
    assert len(pids) == 2 and pids[0] != pids[1]  # a new connection, opened in the freed place
    assert pool.waiting == 0


@pytest.mark.parametrize("served_first", [False, True])
def test_a_thread_interrupted_while_waiting_leaves_the_line_and_what_it_was_given(monkeypatch, served_first):
    pool = ConnectionPool(size=1, timeout=5)
    assert pool.take() is None  # the one place, taken (its connection would be opened now)

    def interrupted(waiter, timeout):
        if served_first:
            pool.discard()  # the place comes free and is served to this waiter just before the interrupt
        raise KeyboardInterrupt

    monkeypatch.setattr(Waiter, "wait", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pool.take()

    assert (pool.waiting, pool.open) == (0, 0 if served_first else 1)
    if not served_first:
        pool.discard()
    assert pool.take() is None  # the place is free again, and nobody gone is served it
    assert pool.open == 1


def test_a_connection_dropped_without_closing_frees_its_place():
    pool = pool_for(connection.get_connection_params())
    pool.clear()
    before = pool.open
    assert pool.take() is None  # no idle one: a place is made for a new connection, as get_new_connection does
    raw = psycopg2.connect(**connection.get_connection_params())
    pool.count(raw)
    assert pool.open == before + 1

    del raw
    gc.collect()

    assert pool.open == before


def test_a_connection_that_cannot_be_opened_gives_its_place_back():
    params = {**connection.get_connection_params(), "port": 1}  # nothing listens there
    wrapper = DatabaseWrapper({**connection.settings_dict, "POOL_SIZE": 1, "POOL_TIMEOUT": 0.2})

    for _ in range(2):  # had the first try kept its place, the second would wait out the cap (PoolExhausted)
        with pytest.raises(psycopg2.OperationalError):
            wrapper.get_new_connection(params)

    assert pool_for(params).open == 0


def test_the_reserve_stays_one_connection_when_the_heartbeat_recycles_its_own():
    pool, saved = capped(1)
    release = threading.Event()
    threads = holding(1, release)
    try:

        def as_heartbeat():
            reserved()
            return backend_pid()

        for _ in range(3):  # each beat closes its connection and opens one again, beyond the cap
            on_a_new_thread(as_heartbeat)
            assert pool.open <= pool.size + 1
        assert len(pool.idle) == 0  # the reserve's connection was closed, not kept for anyone to take
    finally:
        release.set()
        for thread in threads:
            thread.join()
        pool.size, pool.timeout = saved


def test_warming_leaves_that_many_connections_idle_for_the_next_requests():
    pool = pool_for(connection.get_connection_params())
    pool.clear()

    assert warm(3) == 3

    warmed = {raw.get_backend_pid() for raw in pool.idle}
    assert len(warmed) == 3
    assert on_a_new_thread(backend_pid) in warmed


def test_warming_takes_only_the_free_places_and_holds_them_briefly():
    pool, saved = capped(2)
    release = threading.Event()
    threads = holding(1, release)  # one of the two places is taken
    try:
        started = time.monotonic()
        assert warm(5) == 1
        assert time.monotonic() - started < 1.5
        assert len(pool.idle) == 1
    finally:
        release.set()
        for thread in threads:
            thread.join()
        pool.size, pool.timeout = saved
