"""The worker's handling of messages and of settling, and what accept publishes, read from the real Redis broker."""

import datetime
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from queueing import router
from queueing.models import Ticket
from queueing.seam import Outcome
from queueing.settle import settle_attempt
from queueing.tickets import ticket_finish, ticket_retry
from queueing.worker import worker_execute
from tests.support.database import terminate_backend
from tests.support.http import free_port

from .conftest import BROKER_QUEUE, accept, broker_messages, claim, draining_meanwhile, snapshot


@pytest.mark.django_db(transaction=True)
def test_accept_publishes_only_after_commit_and_the_message_carries_only_the_ticket_id(redis_db):
    with transaction.atomic():
        ticket_id = accept(session_id="publish-1")
        assert router.publisher.flush()
        assert broker_messages(redis_db) == []

    assert router.publisher.flush()
    messages = broker_messages(redis_db)
    assert [(m["args"], m["kwargs"], m["headers"]["task"]) for m in messages] == [
        ([ticket_id], {}, "agentos.execute_ticket")
    ]


@pytest.mark.django_db(transaction=True)
def test_a_ticket_behind_its_session_head_gets_no_message(redis_db):
    head = accept(session_id="publish-2")
    accept(session_id="publish-2")

    assert router.publisher.flush()
    assert [m["args"] for m in broker_messages(redis_db)] == [[head]]


@pytest.mark.django_db
def test_an_early_message_for_a_ticket_in_backoff_is_published_again_for_when_it_ends(redis_db, executor):
    ticket_id = accept(session_id="early-1", max_attempts=2)
    owner = claim(ticket_id)
    assert ticket_retry(claim=owner, outcome=Outcome("failed", error="boom", retryable=True), delay_seconds=60)
    redis_db.delete(BROKER_QUEUE)

    assert worker_execute(ticket_id=ticket_id) is False

    assert broker_messages(redis_db) == []
    [message] = broker_messages(redis_db, queue=router.celery_queue())  # Celery holds it until its ETA
    assert message["args"] == [ticket_id]
    eta = datetime.datetime.fromisoformat(message["headers"]["eta"])
    assert timezone.now() + datetime.timedelta(seconds=50) < eta < timezone.now() + datetime.timedelta(seconds=61)
    assert executor.executed == []
    assert router.consumed_markers.flush()
    assert redis_db.exists(router.MARKER.format(ticket_id)), (
        "the new message's marker (the old one's delete is not sent)"
    )


@pytest.mark.django_db
def test_a_message_for_a_finished_ticket_is_dropped(redis_db, executor):
    ticket_id = accept(session_id="late-1")
    assert worker_execute(ticket_id=ticket_id) is True
    redis_db.delete(BROKER_QUEUE)

    assert worker_execute(ticket_id=ticket_id) is False
    assert broker_messages(redis_db) == []
    assert executor.executed == [(ticket_id, 1)]


@pytest.mark.django_db(transaction=True)  # the failure's settlement is recorded once its finish commits
def test_an_executor_that_raises_is_retried_with_budget_then_fails(redis_db, executor):
    ticket_id = accept(session_id="raise-1", max_attempts=2, outcomes=("raise",))

    assert worker_execute(ticket_id=ticket_id) is True
    assert (snapshot(ticket_id)["status"], snapshot(ticket_id)["error"]) == ("queued", "fake job raised")
    ticket_retry_now(ticket_id)
    assert worker_execute(ticket_id=ticket_id) is True

    assert (snapshot(ticket_id)["status"], snapshot(ticket_id)["attempt"]) == ("failed", 2)
    assert executor.settled(ticket_id) == [("queued", 1, "fake job raised"), ("failed", 2, "fake job raised")]


def ticket_retry_now(ticket_id: str) -> None:
    Ticket.objects.filter(pk=ticket_id).update(available_at=timezone.now() - datetime.timedelta(seconds=1))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("hand_off", [True, False])
def test_the_end_of_a_head_claims_its_successor_in_the_same_transaction_or_publishes_it(redis_db, executor, hand_off):
    head, successor = accept(session_id=f"handoff-{hand_off}"), accept(session_id=f"handoff-{hand_off}")
    assert router.publisher.flush()
    redis_db.delete(BROKER_QUEUE)

    finished = ticket_finish(claim=claim(head), outcome=Outcome("completed"), hand_off=hand_off)
    assert router.publisher.flush()

    if hand_off:
        assert (finished.next_claim.ticket_id, finished.next_claim.attempt) == (successor, 1)
        assert (snapshot(successor)["status"], snapshot(successor)["locked_by"]) == ("running", "w1")
        assert snapshot(successor)["locked_at"] >= snapshot(head)["completed_at"]
        assert executor.started == [(head, 1), (successor, 1)], "its job started in the same transaction"
        assert broker_messages(redis_db) == []
    else:
        assert finished.next_claim is None
        assert (snapshot(successor)["status"], snapshot(successor)["attempt"]) == ("queued", 0)
        assert executor.started == [(head, 1)]
        assert [m["args"] for m in broker_messages(redis_db)] == [[successor]]


@pytest.fixture
def draining():
    with draining_meanwhile():
        yield


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_began_draining_while_the_head_ran_publishes_the_successor(redis_db, executor, draining):
    head, successor = accept(session_id="drain-1"), accept(session_id="drain-1")
    assert router.publisher.flush()
    redis_db.delete(BROKER_QUEUE)
    owner = claim(head)  # claimed before the drain began: the caller asked for a hand-off then

    assert settle_attempt(owner, Outcome("completed"), hand_off=True) is None

    assert router.publisher.flush()
    assert snapshot(head)["status"] == "completed"
    assert (snapshot(successor)["status"], snapshot(successor)["attempt"]) == ("queued", 0)
    assert [m["args"] for m in broker_messages(redis_db)] == [[successor]]


@pytest.mark.django_db(transaction=True)
def test_settling_survives_a_connection_killed_while_the_attempt_ran(redis_db, executor):
    head, successor = accept(session_id="killed-1"), accept(session_id="killed-1")
    owner = claim(head)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [pid] = cursor.fetchone()
    terminate_backend(pid)  # as a PostgreSQL restart does to every open connection

    next_claim = settle_attempt(owner, Outcome("completed"), hand_off=True)

    assert snapshot(head)["status"] == "completed"
    assert (next_claim.ticket_id, snapshot(successor)["status"]) == (successor, "running")
    assert executor.settled(head) == [("completed", 1, None)]


@pytest.mark.django_db(transaction=True)
def test_an_outcome_the_database_refuses_ends_the_attempt_as_a_visible_failure(redis_db, executor):
    head = accept(session_id="nul-1", outcomes=("unstorable",), max_attempts=3)
    successor = accept(session_id="nul-1")

    assert worker_execute(ticket_id=head) is True

    row = snapshot(head)
    assert (row["status"], row["attempt"], row["locked_by"]) == ("failed", 1, None), "permanent: not retried"
    assert row["error"] == "Run outcome could not be stored: A string literal cannot contain NUL (0x00) characters."
    assert executor.settled(head) == [("failed", 1, row["error"])]
    assert snapshot(successor)["status"] == "completed", "and the session moves on at once"


@pytest.mark.django_db(transaction=True)
def test_a_settle_whose_commit_answer_was_lost_finds_the_successor_it_claimed(redis_db, executor):
    head, successor = accept(session_id="lost-ack-1"), accept(session_id="lost-ack-1")
    owner = claim(head)
    ticket_finish(claim=owner, outcome=Outcome("completed"), hand_off=True)  # committed; its answer "lost":
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [pid] = cursor.fetchone()
    terminate_backend(pid)

    next_claim = settle_attempt(owner, Outcome("completed"), hand_off=True)

    assert (next_claim.ticket_id, next_claim.attempt, next_claim.worker_id) == (successor, 1, "w1")
    assert next_claim.component == ("job", "fake"), "its executor finds the successor's component (its history window)"
    assert snapshot(successor)["status"] == "running"


@pytest.mark.django_db(transaction=True)
def test_a_settle_whose_commit_answer_was_lost_adopts_no_unordered_ticket_another_thread_runs(redis_db, executor):
    ended, other = accept(session_id="lost-ack-2", serialized=False), accept(session_id="lost-ack-2", serialized=False)
    owner = claim(ended)
    claim(other)  # by another thread of the same worker, not in its busy set yet
    ticket_finish(claim=owner, outcome=Outcome("completed"), hand_off=True)  # committed; its answer "lost":
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [pid] = cursor.fetchone()
    terminate_backend(pid)

    assert settle_attempt(owner, Outcome("completed"), hand_off=True) is None, "a hand-off claims only a head"
    assert (snapshot(other)["status"], snapshot(other)["attempt"]) == ("running", 1)


@pytest.mark.django_db(transaction=True)
def test_a_settle_that_cannot_reach_the_database_gives_up_after_its_patience(redis_db, executor):
    head = accept(session_id="away-1")
    owner = claim(head)
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = str(free_port())  # nothing listens there: as if PostgreSQL were away
    try:
        started = time.monotonic()
        assert settle_attempt(owner, Outcome("completed"), patience=0.5) is None
        waited = time.monotonic() - started
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port

    assert 0.3 <= waited < 5
    assert (snapshot(head)["status"], snapshot(head)["locked_by"]) == ("running", "w1"), "left to the sweeper"


@pytest.mark.django_db(transaction=True)
def test_a_settle_refused_even_as_a_failure_is_left_to_the_sweeper(redis_db, executor):
    head = accept(session_id="refused-1")
    owner = claim(head)
    executor.refuse.add(head)

    assert settle_attempt(owner, Outcome("completed")) is None

    assert snapshot(head)["status"] == "running"
    assert executor.settlements == []
