"""A cancel asked while a leg runs (CONTRACT 9): it wins over that leg's pause or retryable failure, whichever
commits first, and ends the run CANCELLED at once, stage EXECUTING; a run cancelled before it wrote anything says
so. Races are run with real connections on threads."""

from __future__ import annotations

import datetime

import pytest
from django.db.models.functions import Now

from agentos_project.core.conf import current
from queueing.models import Ticket
from queueing.seam import get_executor
from queueing.settle import settle_attempt
from queueing.sweeper import sweep_once
from queueing.tickets import ticket_claim
from queueing.worker import execute_claim, worker_identity
from runs.models import Run, RunEvent
from runs.services import cancel_signal
from runs.services.unqueued import run_execute_unqueued
from tests.support.conf import with_conf
from tests.support.waiting import in_threads

from .conftest import accept_run

pytestmark = pytest.mark.django_db(transaction=True)
HITL = "/agents/hitl-agent/runs"
RUNS = "/agents/stub-agent/runs"
PAUSING = "please delete scratch sleep=0"


def claimed(run_id: str):
    return ticket_claim(ticket_id=run_id, worker_id=worker_identity(), grace_seconds=60)


def ended(run_id: str) -> tuple:
    run, ticket = Run.objects.get(pk=run_id), Ticket.objects.get(pk=run_id)
    return run.status, run.cancellation_stage, ticket.status, ticket.is_head, ticket.attempt


def stored(run_id: str) -> list[str]:
    return list(RunEvent.objects.filter(run_id=run_id).order_by("event_index").values_list("event", flat=True))


def test_a_cancel_asked_while_a_leg_runs_wins_over_the_pause_that_leg_then_settles(api, redis_db):
    run_id = accept_run(session_id="cr-1", component="hitl-agent", message=PAUSING)
    successor = accept_run(session_id="cr-1", component="hitl-agent", message="next sleep=0")
    claim = claimed(run_id)
    outcome = get_executor().execute(claim)  # the leg paused, after its last checkpoint

    answer = api.post(f"{HITL}/{run_id}/cancel?session_id=cr-1")
    settle_attempt(claim, outcome)

    run = Run.objects.get(pk=run_id)
    assert (answer.status_code, answer.json()) == (200, {})
    assert outcome.status == "paused"
    assert ended(run_id) == ("CANCELLED", "EXECUTING", "cancelled", False, 1)
    assert (run.content, run.tools) == ("Run " + run_id + " was cancelled", None)
    assert stored(run_id) == ["RunStarted", "RunCancelled"]  # the pause was never published nor stored
    assert Ticket.objects.get(pk=successor).is_head, "the session goes on"


def test_a_cancel_racing_a_pausing_settle_never_leaves_the_run_paused(api, redis_db):
    outcomes = []
    for round_ in range(12):
        session_id = f"cr-race-{round_}"
        run_id = accept_run(session_id=session_id, component="hitl-agent", message=PAUSING)
        claim = claimed(run_id)
        outcome = get_executor().execute(claim)
        cancel = lambda: api.post(f"{HITL}/{run_id}/cancel?session_id={session_id}").status_code  # noqa: B023,E731
        settle = lambda: settle_attempt(claim, outcome)  # noqa: B023,E731

        in_threads(2, lambda i: (cancel, settle)[i]())  # noqa: B023

        outcomes.append(ended(run_id)[:3])
    assert {status for status, _, _ in outcomes} == {"CANCELLED"}
    assert {ticket for _, _, ticket in outcomes} == {"cancelled"}
    assert {stage for _, stage, _ in outcomes} <= {"EXECUTING", "PAUSED"}  # asked while running, or once paused


def test_a_paused_run_has_no_cancel_left_for_its_next_leg(api, redis_db):
    """Only a running ticket is asked to cancel: a run that paused before the cancel came is cancelled as paused,
    and no mark or intent is left behind for a continuation to trip over."""
    run_id = accept_run(session_id="cr-2", component="hitl-agent", message=PAUSING)
    claim = claimed(run_id)
    settle_attempt(claim, get_executor().execute(claim))

    api.post(f"{HITL}/{run_id}/cancel?session_id=cr-2")

    run = Run.objects.get(pk=run_id)
    assert ended(run_id) == ("CANCELLED", "PAUSED", "cancelled", False, 1)
    assert (run.cancel_requested_at, Ticket.objects.get(pk=run_id).cancel_requested_at) == (None, None)
    assert not cancel_signal.cancel_requested(run_id)


@with_conf("queue", max_attempts=3, retry_delay_seconds=30)
def test_a_leg_that_fails_while_a_cancel_is_asked_ends_cancelled_at_once(api, redis_db):
    run_id = accept_run(session_id="cr-3", message="explode sleep=0", max_attempts=3)
    successor = accept_run(session_id="cr-3", message="next sleep=0", max_attempts=3)
    claim = claimed(run_id)
    outcome = get_executor().execute(claim)

    api.post(f"{RUNS}/{run_id}/cancel?session_id=cr-3")
    settle_attempt(claim, outcome)

    run = Run.objects.get(pk=run_id)
    assert (outcome.status, outcome.retryable) == ("failed", True)
    assert ended(run_id) == ("CANCELLED", "EXECUTING", "cancelled", False, 1), "no backoff, no second attempt"
    assert run.content == f"Run {run_id} was cancelled"
    assert stored(run_id) == ["RunStarted", "RunCancelled"]
    assert Ticket.objects.get(pk=successor).is_head


def test_a_running_run_cancelled_before_it_wrote_anything_says_so(api, redis_db):
    """AgentOS's content for it; a run cancelled after some words keeps them (tests/e2e/test_streams.py)."""
    run_id = accept_run(session_id="cr-4", message="quiet sleep=0")
    claim = claimed(run_id)
    api.post(f"{RUNS}/{run_id}/cancel")  # asked before the leg's first chunk

    execute_claim(claim)

    run = Run.objects.get(pk=run_id)
    last = RunEvent.objects.filter(run_id=run_id).order_by("event_index").last()
    assert (run.status, run.cancellation_stage, run.content) == (
        "CANCELLED",
        "EXECUTING",
        f"Run {run_id} was cancelled",
    )
    assert (last.event, last.data["content"]) == ("RunCancelled", f"Run {run_id} was cancelled")


def test_a_stale_lease_whose_cancel_was_asked_is_cancelled_by_the_sweeper_not_parked_or_reclaimed(api, redis_db):
    run_id = accept_run(session_id="cr-5", message="lost sleep=0", max_attempts=2)
    claimed(run_id)
    api.post(f"{RUNS}/{run_id}/cancel")
    Ticket.objects.filter(pk=run_id).update(locked_at=Now() - datetime.timedelta(hours=1))

    report = sweep_once(current().queue)

    run = Run.objects.get(pk=run_id)
    assert (report.cancelled, report.redispatched, report.failed) == (1, 0, 0)
    assert ended(run_id) == ("CANCELLED", "EXECUTING", "cancelled", False, 1)
    assert run.content == f"Run {run_id} was cancelled"
    assert stored(run_id)[-1] == "RunCancelled"


def test_a_run_without_a_ticket_cancelled_while_it_ran_is_not_left_paused(redis_db):
    run_id = accept_run(session_id="cr-6", component="hitl-agent", message=PAUSING)
    Ticket.objects.filter(pk=run_id).delete()
    Run.objects.filter(pk=run_id).update(queued=False, cancel_requested_at=Now())  # as a cancel marks it running

    run_execute_unqueued(run_id=run_id)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancellation_stage, run.tools) == ("CANCELLED", "EXECUTING", None)
    assert stored(run_id) == ["RunStarted", "RunCancelled"]
