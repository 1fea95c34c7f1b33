"""Cancellation intents in Redis and the watcher that turns them into a flag the run loop checks."""

from __future__ import annotations

import threading
import uuid

import pytest

from queueing import shutdown
from runs.services import cancel_signal
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)  # the watcher asks the database too


def test_an_intent_stored_before_the_run_starts_is_seen_at_once(redis_db):
    run_id = str(uuid.uuid4())
    cancel_signal.cancel_request(run_id)

    with cancel_signal.watcher.watch(run_id) as cancelled:
        assert cancelled.is_set()
    assert 0 < redis_db.ttl(cancel_signal.intent_key(run_id)) <= 24 * 3600


def test_a_cancel_announced_while_the_run_executes_sets_its_flag(redis_db):
    run_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    with cancel_signal.watcher.watch(run_id) as cancelled, cancel_signal.watcher.watch(other) as untouched:
        assert not cancelled.is_set()
        wait_until(cancel_signal.watcher.listening.is_set, timeout=2, what="the watcher to subscribe")
        redis_db.publish(cancel_signal.channel(), run_id)  # as another process's cancel_request announces it
        wait_until(cancelled.is_set, timeout=2, what="the announcement to arrive")
        assert not untouched.is_set()


def test_an_attempt_that_stops_watching_leaves_an_overlapping_attempt_of_the_run_watched(redis_db):
    run_id = str(uuid.uuid4())
    with cancel_signal.watcher.watch(run_id, look_up=False) as live:
        with cancel_signal.watcher.watch(run_id, look_up=False):  # an older, fenced attempt, come and gone
            pass
        wait_until(cancel_signal.watcher.listening.is_set, timeout=2, what="the watcher to subscribe")
        redis_db.publish(cancel_signal.channel(), run_id)

        wait_until(live.is_set, timeout=2, what="the announcement to reach the attempt still watching")


def test_a_cancel_sets_the_wake_event_the_run_sleeps_on_and_the_interrupt_does_too(redis_db):
    run_id = str(uuid.uuid4())
    wake, other_wake = threading.Event(), threading.Event()
    with cancel_signal.watcher.watch(run_id, look_up=False, wake=wake) as cancelled:
        wait_until(cancel_signal.watcher.listening.is_set, timeout=2, what="the watcher to subscribe")
        redis_db.publish(cancel_signal.channel(), run_id)
        wait_until(wake.is_set, timeout=2, what="the announcement to wake the run")
        assert cancelled.is_set()
    with shutdown.woken_at_interrupt(other_wake):
        try:
            shutdown._interrupt()
            assert other_wake.is_set()
        finally:
            shutdown._State.interrupted.clear()


def test_an_intent_whose_announcement_was_lost_is_found_within_a_second_or_so(redis_db):
    run_id = str(uuid.uuid4())
    with cancel_signal.watcher.watch(run_id) as cancelled:
        redis_db.set(cancel_signal.intent_key(run_id), 1)  # stored, never announced

        wait_until(cancelled.is_set, timeout=2.5, what="the watcher's poll to find the intent")


@pytest.mark.parametrize("cleared", [True, False])
def test_cancel_clear_forgets_an_intent(redis_db, cleared):
    run_id = str(uuid.uuid4())
    cancel_signal.cancel_request(run_id)
    if cleared:
        cancel_signal.cancel_clear(run_id)

    assert cancel_signal.cancel_requested(run_id) is not cleared
