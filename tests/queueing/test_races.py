"""Races proved with real, separate database connections (one per thread)."""

import dataclasses
import threading
import uuid

import pytest
from django.db import connection, transaction

from agentos_project.core.conf import current
from queueing import tickets
from queueing.exceptions import QueueFull
from queueing.models import Ticket
from queueing.seam import NewTicket
from queueing.sweeper import sweep_once
from tests.support.waiting import in_threads, wait_until

from .conftest import accept, backdate, claim, ended, finish, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_claims_of_one_ticket_have_one_winner():
    ticket_id = accept(session_id="race-claim")

    claims = in_threads(8, lambda i: claim(ticket_id, f"worker-{i}"))

    winners = [c for c in claims if c is not None]
    assert len(winners) == 1
    assert Ticket.objects.get(pk=ticket_id).locked_by == winners[0].worker_id


def test_concurrent_accepts_in_one_session_get_distinct_places_and_one_head():
    ids = in_threads(12, lambda i: accept(session_id="race-accept"))

    tickets = Ticket.objects.filter(pk__in=ids)
    assert sorted(t.session_seq for t in tickets) == list(range(1, 13))
    assert [t.session_seq for t in tickets if t.is_head] == [1]


def test_accepts_racing_the_end_of_the_head_leave_exactly_one_head():
    for round_ in range(10):
        session = f"race-handoff-{round_}"
        head = accept(session_id=session)
        owner = claim(head)

        def work(index, owner=owner, session=session):
            return finish(owner, "completed") if index == 0 else accept(session_id=session)

        in_threads(4, work)

        live = Ticket.objects.filter(session_id=session, status="queued").order_by("session_seq")
        assert [t.is_head for t in live] == [True, False, False], f"round {round_}"


def test_concurrent_sweepers_fail_each_stale_ticket_once(executor):
    stale = [accept(session_id=f"race-sweep-{n}") for n in range(10)]
    for ticket_id in stale:
        claim(ticket_id)
        backdate(ticket_id)

    reports = in_threads(4, lambda i: sweep_once(dataclasses.replace(current().queue, lock_grace_seconds=60)))

    assert sum(report.failed for report in reports) == 10
    assert Ticket.objects.filter(pk__in=stale, status="failed").count() == 10
    assert sorted(s.ticket_id for s in executor.settlements if s.status == "failed") == sorted(stale), "once each"


def test_the_queue_depth_cap_is_exact_under_concurrent_accepts():
    def try_accept(index: int) -> str:
        try:
            accept(session_id=f"race-depth-{index}", max_queue_depth=5)
        except QueueFull:
            return "full"
        return "accepted"

    answers = in_threads(40, try_accept)

    assert (answers.count("accepted"), answers.count("full")) == (5, 35)
    assert Ticket.objects.filter(status="queued").count() == 5


def test_the_depth_cap_stays_exact_when_accepts_far_from_it_take_the_shared_lock(monkeypatch):
    """With max_connections taken as 20 and a cap of 30, accepts that see fewer than 10 queued admit under the shared
    lock, concurrently; the rest count under the exclusive one. 16 threads (fewer than 20 connections) try 48, each
    in no transaction of the caller's, as a submit does."""
    monkeypatch.setattr(tickets.depth, "max_connections", lambda: 20)
    modes = []
    real_depth_gate = tickets.depth.depth_gate

    def recording(max_depth, mode):
        gate = real_depth_gate(max_depth, mode)
        modes.append(gate.mode)
        return gate

    monkeypatch.setattr(tickets.depth, "depth_gate", recording)

    def try_accepts(index: int) -> list[str]:
        answers = []
        for n in range(3):
            ticket = NewTicket(uuid.uuid4(), "job", "fake", f"race-fast-{index}-{n}", None, {}, True, 1)
            try:
                tickets.ticket_accept(ticket=ticket, max_queue_depth=30)
                answers.append("accepted")
            except QueueFull:
                answers.append("full")
        return answers

    answers = [answer for answers in in_threads(16, try_accepts) for answer in answers]

    assert (answers.count("accepted"), answers.count("full")) == (30, 18)
    assert Ticket.objects.filter(status="queued").count() == 30
    assert modes.count(tickets.FAST) == 48, "every accept tried the shared lock first"
    assert modes.count(tickets.EXACT) >= 18, "and counted exactly once it saw the queue near full"


def test_a_ticket_requeued_while_a_prune_runs_is_not_pruned(executor):
    ticket_id = ended("race-prune", "failed")
    backdate(ticket_id, field="completed_at", seconds=7200)  # past the retention, and past the requeue's grace
    requeuing = threading.Event()

    def requeue_while_the_prune_waits() -> object:
        with transaction.atomic():
            requeued = tickets.ticket_requeue(ticket_id=ticket_id, grace_seconds=60)
            requeuing.set()
            wait_until(lambda: _lock_waiters() > 0, timeout=10, what="the prune to wait on the requeued ticket")
        return requeued

    def prune() -> object:
        requeuing.wait(10)
        return tickets.ticket_prune(retention_seconds=3600)

    requeued, pruned = in_threads(2, lambda i: (requeue_while_the_prune_waits, prune)[i]())

    assert (requeued, pruned) == (tickets.RequeueResult.REQUEUED, 0)
    assert (snapshot(ticket_id)["status"], executor.forgotten) == ("queued", [])


def _lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return cursor.fetchone()[0]
