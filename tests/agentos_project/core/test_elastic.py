"""The elastic thread pool: threads made as work arrives, at most the limit, ended once idle."""

import threading
import time
from concurrent.futures import CancelledError

import pytest

from agentos_project.core.elastic import ElasticThreads
from tests.support.waiting import wait_until


def test_work_runs_and_its_result_or_error_reaches_its_future():
    executor = ElasticThreads(2)

    done, failed = executor.submit(lambda a, b=0: a + b, 2, b=3), executor.submit(lambda: 1 / 0)

    assert done.result(timeout=5) == 5
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=5)
    executor.shutdown()


def test_threads_are_made_as_work_arrives_up_to_the_limit_and_the_rest_waits():
    executor = ElasticThreads(3)
    release, started = threading.Event(), []

    def hold(n):
        started.append(n)
        release.wait(5)

    futures = [executor.submit(hold, n) for n in range(5)]
    wait_until(lambda: len(started) == 3, timeout=5, what="three at once")
    time.sleep(0.1)

    assert (sorted(started), len(executor._threads)) == ([0, 1, 2], 3)
    release.set()
    for future in futures:
        future.result(timeout=5)
    assert (sorted(started[3:]), len(executor._threads)) == ([3, 4], 3)
    executor.shutdown()


def test_work_waiting_for_a_thread_runs_in_the_order_it_was_submitted():
    executor = ElasticThreads(1)
    release, order = threading.Event(), []
    executor.submit(release.wait, 5)
    futures = [executor.submit(order.append, n) for n in range(20)]

    release.set()
    for future in futures:
        future.result(timeout=5)

    assert order == list(range(20))
    executor.shutdown()


def test_an_idle_thread_takes_the_next_work_instead_of_a_new_one():
    executor = ElasticThreads(10)
    names = [executor.submit(lambda: threading.current_thread().name).result(timeout=5) for _ in range(20)]

    assert len(set(names)) == 1
    assert len(executor._threads) == 1
    executor.shutdown()


def test_a_thread_idle_for_idle_seconds_ends_and_the_next_work_makes_another():
    executor = ElasticThreads(50, idle_seconds=0.2, name="idle-test")
    release = threading.Event()
    futures = [executor.submit(release.wait, 5) for _ in range(50)]
    wait_until(lambda: len(executor._threads) == 50, timeout=5, what="fifty threads")
    release.set()
    for future in futures:
        future.result(timeout=5)

    wait_until(lambda: not executor._threads, timeout=5, what="the idle threads to end")
    assert [t for t in threading.enumerate() if t.name.startswith("idle-test-")] == []
    assert executor.submit(lambda: 7).result(timeout=5) == 7
    executor.shutdown()


def test_no_work_is_lost_to_a_thread_ending_as_it_arrives():
    """Work submitted around the moment idle threads give up is still run: a thread leaves only with nothing queued
    (decided under the lock submit takes), and submit makes a thread whenever the idle ones cannot take it all."""
    executor = ElasticThreads(4, idle_seconds=0.01)
    futures = []
    for n in range(300):
        futures.append(executor.submit(lambda n=n: n))
        time.sleep(0.0005 * (n % 40))  # gaps around the idle time, shorter and longer

    assert [future.result(timeout=5) for future in futures] == list(range(300))
    executor.shutdown()


def test_shutdown_cancels_the_queued_work_when_asked_and_waits_for_the_running():
    executor = ElasticThreads(1)
    release = threading.Event()
    running = executor.submit(lambda: release.wait(5) and "finished")
    queued = executor.submit(lambda: "never")
    threading.Timer(0.2, release.set).start()

    executor.shutdown(cancel_futures=True)

    assert running.result(timeout=0) == "finished"
    with pytest.raises(CancelledError):
        queued.result(timeout=0)
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(lambda: None)


def test_shutdown_without_cancelling_runs_what_was_queued():
    executor = ElasticThreads(1)
    futures = [executor.submit(time.sleep, 0.05) for _ in range(3)]

    executor.shutdown()

    assert all(future.done() and future.exception() is None for future in futures)


def test_a_thread_the_system_refuses_leaves_the_work_to_the_threads_there_are(monkeypatch):
    executor = ElasticThreads(2)
    release = threading.Event()
    first = executor.submit(release.wait, 5)
    wait_until(lambda: len(executor._threads) == 1, timeout=5, what="the first thread")
    monkeypatch.setattr(threading.Thread, "start", lambda self: (_ for _ in ()).throw(RuntimeError("can't start")))

    second = executor.submit(lambda: "ran on the first thread")
    release.set()

    assert (first.result(timeout=5), second.result(timeout=5)) == (True, "ran on the first thread")
    monkeypatch.undo()
    executor.shutdown()


def test_with_no_thread_at_all_the_refusal_reaches_the_caller_and_nothing_stays_queued(monkeypatch):
    executor = ElasticThreads(2)
    monkeypatch.setattr(threading.Thread, "start", lambda self: (_ for _ in ()).throw(RuntimeError("can't start")))

    with pytest.raises(RuntimeError, match="can't start"):
        executor.submit(lambda: None)

    assert (len(executor._queue), executor._threads) == (0, set())
