"""Per-session order through the ticket API (CONTRACT 5): who may start, who waits on whom, who keeps a place."""

import pytest

from queueing.models import Ticket
from queueing.seam import Outcome
from queueing.selectors import ticket_waiting_on
from queueing.tickets import RequeueResult, ticket_continue, ticket_requeue, ticket_retry
from queueing.worker import worker_execute

from .conftest import accept, claim, finish, snapshot

pytestmark = pytest.mark.django_db


def test_a_paused_holder_keeps_its_session_until_continued_and_finished(session_id):
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    owner = claim(a)
    assert finish(owner, "paused")

    assert claim(b) is None
    assert ticket_waiting_on(ticket_id=b) == a
    assert ticket_continue(ticket_id=a)
    assert claim(b) is None, "a continued run keeps its place"
    assert ticket_waiting_on(ticket_id=b) == a

    assert finish(claim(a), "completed")
    assert ticket_waiting_on(ticket_id=b) is None
    assert claim(b) is not None


def test_a_run_waiting_out_its_retry_backoff_keeps_its_place(session_id):
    a, b = accept(session_id=session_id, max_attempts=2), accept(session_id=session_id)
    assert ticket_retry(claim=claim(a), outcome=Outcome("failed", error="boom", retryable=True), delay_seconds=60)

    assert claim(b) is None
    assert ticket_waiting_on(ticket_id=b) == a
    assert snapshot(a)["is_head"] is True


def test_a_requeued_run_goes_to_the_back_of_its_session(session_id):
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    assert finish(claim(a), "failed", error="boom")
    assert snapshot(b)["is_head"] is True

    assert ticket_requeue(ticket_id=a, grace_seconds=60, force=True) == RequeueResult.REQUEUED

    assert snapshot(a)["session_seq"] == snapshot(b)["session_seq"] + 1
    assert claim(a) is None
    assert ticket_waiting_on(ticket_id=a) == b
    assert finish(claim(b), "completed")
    assert claim(a) is not None


def test_waiting_on_names_the_head_not_the_run_just_ahead(session_id):
    a, b, c = (accept(session_id=session_id) for _ in range(3))
    claim(a)

    assert [ticket_waiting_on(ticket_id=t) for t in (a, b, c)] == [None, a, a]


def test_duplicate_and_early_messages_for_a_blocked_ticket_do_not_start_it(session_id, executor):
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    claim(a)
    before = snapshot(b)

    assert worker_execute(ticket_id=b) is False
    assert worker_execute(ticket_id=b) is False
    assert snapshot(b) == before
    assert executor.started == [(a, 1)] and executor.executed == []


def test_the_end_of_a_run_hands_its_session_to_the_next_on_the_same_thread(session_id, executor):
    a, b, c = (accept(session_id=session_id) for _ in range(3))
    other = accept(session_id=f"{session_id}-other")

    assert worker_execute(ticket_id=a) is True

    assert executor.executed == [(a, 1), (b, 1), (c, 1)], "the session's runs, in order, on this thread only"
    assert [snapshot(t)["status"] for t in (a, b, c, other)] == ["completed", "completed", "completed", "queued"]
    assert [snapshot(t)["locked_by"] for t in (a, b, c)] == [None, None, None]
    assert (
        snapshot(a)["completed_at"] <= executor.started_at[b] and snapshot(b)["completed_at"] <= executor.started_at[c]
    )


def test_unordered_tickets_neither_wait_nor_block(session_id):
    a, b = accept(session_id=session_id, serialized=False), accept(session_id=session_id, serialized=False)
    serialized = accept(session_id=session_id)

    assert (snapshot(a)["is_head"], snapshot(b)["is_head"], snapshot(serialized)["is_head"]) == (False, False, True)
    assert claim(a) is not None and claim(b) is not None
    assert ticket_waiting_on(ticket_id=b) is None
    assert claim(serialized) is not None, "unordered tickets hold nothing"


def test_serialized_tickets_wait_even_when_unordered_ones_do_not(session_id):
    """Serialized tickets (per-session order, or a one-turn-per-session component) wait for their holder."""
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    loose = accept(session_id=session_id, serialized=False)

    claim(a)
    assert claim(b) is None
    assert ticket_waiting_on(ticket_id=b) == a
    assert claim(loose) is not None, "an unordered ticket neither waits nor blocks"


def test_the_claim_itself_refuses_a_ticket_with_a_live_one_ahead(session_id):
    """Even if the head flag were wrong, the claim's own NOT EXISTS check keeps the order."""
    a, b = accept(session_id=session_id), accept(session_id=session_id)
    Ticket.objects.filter(pk=a).update(is_head=False)
    Ticket.objects.filter(pk=b).update(is_head=True)

    assert claim(b) is None
