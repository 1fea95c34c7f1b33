"""The ticket transition table of CONTRACT section 4, walked against PostgreSQL.

Each allowed transition succeeds once (a repeat is a no-op); each disallowed one returns "lost" and leaves
the row exactly as it was.
"""

import pytest
from django.db.models import F

from queueing.models import Ticket
from queueing.seam import Claim, Outcome
from queueing.tickets import (
    SWEEP_ERROR,
    RequeueResult,
    ticket_cancel,
    ticket_cancel_stale,
    ticket_continue,
    ticket_fail_stale,
    ticket_heartbeat,
    ticket_park_stale,
    ticket_prune,
    ticket_requeue,
    ticket_resume_stale,
    ticket_retry,
)

from .conftest import accept, backdate, claim, finish, snapshot

pytestmark = pytest.mark.django_db
STATES = ("queued", "running", "paused", "completed", "failed", "cancelled")


def ticket_in(state: str, *, max_attempts: int = 2) -> tuple[str, object]:
    """A fresh ticket brought to `state` through allowed transitions; returns (id, the owner's claim or None)."""
    ticket_id = accept(session_id=f"s-{state}-{max_attempts}-{Ticket.objects.count()}", max_attempts=max_attempts)
    if state == "queued":
        return ticket_id, None
    if state == "cancelled":
        assert ticket_cancel(ticket_id=ticket_id, error="cancelled before execution") == "queued"
        return ticket_id, None
    owner = claim(ticket_id)
    if state != "running":
        assert finish(owner, state)
    return ticket_id, owner


def test_claim_takes_a_queued_head_once(db):
    ticket_id, _ = ticket_in("queued")

    owner = claim(ticket_id, "worker-a")
    row = snapshot(ticket_id)

    assert (owner.attempt, owner.worker_id, owner.ticket_id) == (1, "worker-a", ticket_id)
    assert (row["status"], row["attempt"], row["locked_by"]) == ("running", 1, "worker-a")
    assert row["locked_at"] is not None
    assert claim(ticket_id, "worker-b") is None
    assert snapshot(ticket_id) == row


def test_claim_of_a_ticket_behind_its_session_head_changes_nothing(db):
    accept(session_id="s-line")
    second = accept(session_id="s-line")
    before = snapshot(second)

    assert claim(second) is None
    assert snapshot(second) == before


def test_reclaim_takes_a_stale_lease_with_budget_left(db):
    ticket_id, old = ticket_in("running", max_attempts=2)
    assert claim(ticket_id, "worker-b") is None  # fresh lease: not stale yet
    backdate(ticket_id)

    new = claim(ticket_id, "worker-b")

    assert (new.attempt, snapshot(ticket_id)["locked_by"], snapshot(ticket_id)["status"]) == (2, "worker-b", "running")
    before = snapshot(ticket_id)
    assert not finish(old, "completed"), "the presumed-dead owner is fenced off"
    assert snapshot(ticket_id) == before


def test_reclaim_without_budget_changes_nothing(db):
    ticket_id, _ = ticket_in("running", max_attempts=1)
    backdate(ticket_id)
    before = snapshot(ticket_id)

    assert claim(ticket_id, "worker-b") is None
    assert snapshot(ticket_id) == before


def test_heartbeat_refreshes_only_the_owners_leases(db):
    ticket_id, owner = ticket_in("running")
    backdate(ticket_id, seconds=30)
    stale = snapshot(ticket_id)

    assert ticket_heartbeat(worker_id="someone-else", attempts=[(ticket_id, owner.attempt)]) == 0
    assert ticket_heartbeat(worker_id=owner.worker_id, attempts=[(ticket_id, owner.attempt + 1)]) == 0
    assert snapshot(ticket_id) == stale
    assert ticket_heartbeat(worker_id=owner.worker_id, attempts=[(ticket_id, owner.attempt)]) == 1
    assert snapshot(ticket_id)["locked_at"] > stale["locked_at"]


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "paused"])
def test_finish_by_owner_succeeds_once(db, status):
    ticket_id, owner = ticket_in("running")

    assert finish(owner, status, error="boom" if status == "failed" else None)
    row = snapshot(ticket_id)
    assert row["status"] == status
    assert row["locked_by"] is None
    assert (row["completed_at"] is None) == (status == "paused")
    assert row["is_head"] == (status == "paused")
    assert not finish(owner, "completed")
    assert snapshot(ticket_id) == row


def test_retry_requeues_with_backoff_and_keeps_the_head(db):
    ticket_id, owner = ticket_in("running", max_attempts=2)

    assert ticket_retry(claim=owner, outcome=Outcome("failed", error="boom", retryable=True), delay_seconds=120)
    row = snapshot(ticket_id)

    assert (row["status"], row["attempt"], row["is_head"], row["error"], row["locked_by"]) == (
        "queued",
        1,
        True,
        "boom",
        None,
    )
    assert claim(ticket_id) is None, "not available before its backoff ends"
    assert snapshot(ticket_id) == row
    assert not ticket_retry(claim=owner, outcome=Outcome("failed", retryable=True), delay_seconds=0)
    assert snapshot(ticket_id) == row


def test_retry_without_budget_changes_nothing(db):
    ticket_id, owner = ticket_in("running", max_attempts=1)
    before = snapshot(ticket_id)

    assert not ticket_retry(claim=owner, outcome=Outcome("failed", retryable=True), delay_seconds=0)
    assert snapshot(ticket_id) == before


def test_a_retry_that_resumes_is_granted_one_more_attempt_without_budget(db):
    ticket_id, owner = ticket_in("running", max_attempts=1)
    before = snapshot(ticket_id)

    assert ticket_retry(claim=owner, outcome=Outcome("failed", retryable=True, resume=True), delay_seconds=0)
    row = snapshot(ticket_id)
    assert (row["status"], row["attempt"], row["max_attempts"], row["locked_by"]) == ("queued", 1, 2, None)
    assert (row["is_head"], row["session_seq"]) == (before["is_head"], before["session_seq"]), "in its place"


def test_sweep_fails_a_stale_lease_without_budget(db, executor):
    ticket_id, _ = ticket_in("running", max_attempts=1)
    assert not ticket_fail_stale(ticket_id=ticket_id, grace_seconds=60), "fresh lease"
    backdate(ticket_id)

    assert ticket_fail_stale(ticket_id=ticket_id, grace_seconds=60)
    row = snapshot(ticket_id)
    assert (row["status"], row["error"], row["is_head"]) == ("failed", SWEEP_ERROR, False)
    assert executor.settled(ticket_id) == [("failed", 1, SWEEP_ERROR)], "the executor ends its job in the same change"
    assert not ticket_fail_stale(ticket_id=ticket_id, grace_seconds=60)
    assert snapshot(ticket_id) == row


def test_resume_queues_a_stale_lease_without_budget_once_more_in_its_place(db, executor):
    ticket_id, _ = ticket_in("running", max_attempts=1)
    assert not ticket_resume_stale(ticket_id=ticket_id, grace_seconds=60), "fresh lease"
    backdate(ticket_id)
    before = snapshot(ticket_id)

    assert ticket_resume_stale(ticket_id=ticket_id, grace_seconds=60)
    row = snapshot(ticket_id)
    assert (row["status"], row["attempt"], row["max_attempts"]) == ("queued", 1, 2)
    assert (row["is_head"], row["session_seq"], row["locked_by"]) == (before["is_head"], before["session_seq"], None)
    assert [(s.status, s.previous) for s in executor.settlements if s.ticket_id == ticket_id] == [("queued", "running")]
    assert not ticket_resume_stale(ticket_id=ticket_id, grace_seconds=60)
    assert snapshot(ticket_id) == row


def test_sweep_leaves_a_stale_lease_with_budget_for_reclaim(db):
    ticket_id, _ = ticket_in("running", max_attempts=2)
    backdate(ticket_id)
    before = snapshot(ticket_id)

    assert not ticket_fail_stale(ticket_id=ticket_id, grace_seconds=60)
    assert snapshot(ticket_id) == before


@pytest.mark.parametrize("state", ["queued", "paused"])
def test_cancel_ends_a_queued_or_paused_ticket_once(db, executor, state):
    ticket_id, _ = ticket_in(state)

    assert ticket_cancel(ticket_id=ticket_id, error="cancelled") == state
    row = snapshot(ticket_id)
    assert (row["status"], row["is_head"]) == ("cancelled", False)
    assert [(s.status, s.previous) for s in executor.settlements if s.ticket_id == ticket_id][-1] == (
        "cancelled",
        state,
    )
    assert ticket_cancel(ticket_id=ticket_id, error="cancelled") is None
    assert snapshot(ticket_id) == row


def test_continue_requeues_a_paused_ticket_in_its_place_once(db):
    ticket_id, _ = ticket_in("paused")
    before = snapshot(ticket_id)

    assert ticket_continue(ticket_id=ticket_id)
    row = snapshot(ticket_id)
    assert (row["status"], row["max_attempts"], row["session_seq"], row["is_head"]) == (
        "queued",
        before["max_attempts"] + 1,
        before["session_seq"],
        True,
    )
    assert not ticket_continue(ticket_id=ticket_id)
    assert snapshot(ticket_id) == row


@pytest.mark.parametrize("state", ["failed", "cancelled"])
def test_requeue_gives_one_more_attempt_at_the_back(db, executor, state):
    ticket_id, _ = ticket_in(state)
    session = snapshot(ticket_id)["session_id"]
    newcomer = accept(session_id=session)
    backdate(ticket_id, field="completed_at")

    assert ticket_requeue(ticket_id=ticket_id, grace_seconds=60) == RequeueResult.REQUEUED
    row = snapshot(ticket_id)
    assert (row["status"], row["max_attempts"], row["is_head"]) == ("queued", row["attempt"] + 1, False)
    assert row["session_seq"] == snapshot(newcomer)["session_seq"] + 1
    assert executor.settled(ticket_id)[-1] == ("queued", 0, None), "the executor resets its job"
    assert ticket_requeue(ticket_id=ticket_id, grace_seconds=60) == RequeueResult.NOT_REQUEUEABLE
    assert snapshot(ticket_id) == row


def test_requeue_of_a_recent_failure_needs_force(db):
    ticket_id, _ = ticket_in("failed")
    before = snapshot(ticket_id)

    assert ticket_requeue(ticket_id=ticket_id, grace_seconds=60) == RequeueResult.TOO_RECENT
    assert snapshot(ticket_id) == before
    assert ticket_requeue(ticket_id=ticket_id, grace_seconds=60, force=True) == RequeueResult.REQUEUED
    assert snapshot(ticket_id)["is_head"] is True


def test_requeue_of_a_ticket_the_sweeper_cancelled_for_a_lost_worker_needs_force(db):
    ticket_id, _ = ticket_in("running")
    assert ticket_cancel(ticket_id=ticket_id, error="x") == "running"  # asked of its attempt, whose worker is lost
    backdate(ticket_id)
    assert ticket_cancel_stale(ticket_id=ticket_id, grace_seconds=60)
    before = snapshot(ticket_id)

    assert ticket_requeue(ticket_id=ticket_id, grace_seconds=60) == RequeueResult.TOO_RECENT, "it may still run"
    assert snapshot(ticket_id) == before
    backdate(ticket_id, field="completed_at", seconds=61)
    assert ticket_requeue(ticket_id=ticket_id, grace_seconds=60) == RequeueResult.REQUEUED


def test_requeue_of_a_ticket_cancelled_while_queued_or_by_its_own_attempt_needs_no_wait(db):
    queued, _ = ticket_in("cancelled")
    ended, owner = ticket_in("running")
    assert ticket_cancel(ticket_id=ended, error="x") == "running"
    assert finish(owner, "cancelled")  # its attempt ended it, without an error
    assert snapshot(ended)["error"] is None

    assert ticket_requeue(ticket_id=queued, grace_seconds=60) == RequeueResult.REQUEUED
    assert ticket_requeue(ticket_id=ended, grace_seconds=60) == RequeueResult.REQUEUED


def test_prune_deletes_only_old_terminal_tickets(db):
    old = [ticket_in(state)[0] for state in ("completed", "failed", "cancelled")]
    young, _ = ticket_in("completed")
    paused, _ = ticket_in("paused")
    for ticket_id in old:
        backdate(ticket_id, field="completed_at", seconds=7200)
    backdate(paused, field="updated_at", seconds=7200)

    assert ticket_prune(retention_seconds=3600) == 3
    assert not Ticket.objects.filter(pk__in=old).exists()
    assert Ticket.objects.filter(pk__in=[young, paused]).count() == 2
    assert ticket_prune(retention_seconds=3600) == 0


def intruder(ticket_id: str) -> Claim:
    """A claim on `ticket_id` that this ticket never granted: another worker, attempt 1."""
    row = snapshot(ticket_id)
    return Claim(ticket_id, 1, row["max_attempts"], "intruder", row["session_id"], row["payload"])


def make_stale_and_spent(ticket_id: str) -> None:
    """Lease long expired and budget spent, so only the status can stop a sweep."""
    backdate(ticket_id)
    Ticket.objects.filter(pk=ticket_id).update(max_attempts=F("attempt"))


def make_stale_and_cancelled(ticket_id: str) -> None:
    """Lease long expired and a cancel asked, so only the status can stop the sweep that cancels it."""
    backdate(ticket_id)
    Ticket.objects.filter(pk=ticket_id).update(cancel_requested_at=F("created_at"))


HEARTBEAT_WORKER = "beating-worker"


def make_owned(ticket_id: str) -> None:
    """The heartbeating worker's name on the row, whatever its status, so only the status can stop a heartbeat."""
    Ticket.objects.filter(pk=ticket_id).update(locked_by=HEARTBEAT_WORKER)


def make_old(ticket_id: str) -> None:
    """Completed (if at all) long ago, so only the status can stop a prune."""
    backdate(ticket_id, field="completed_at", seconds=7200)
    backdate(ticket_id, field="updated_at", seconds=7200)


# Each event gets the ticket and the claim of the attempt that last ran it (None if it never ran), under the
# conditions in which only the status decides: the real owner, an expired lease, an old completion.
EVENTS = {
    "claim": lambda t, owner: claim(t, "another-worker"),
    "heartbeat": lambda t, owner: ticket_heartbeat(worker_id=HEARTBEAT_WORKER, attempts=[(t, snapshot(t)["attempt"])]),
    "finish": lambda t, owner: finish(owner or intruder(t), "completed"),
    "retry": lambda t, owner: ticket_retry(
        claim=owner or intruder(t), outcome=Outcome("failed", retryable=True), delay_seconds=0
    ),
    "sweep": lambda t, owner: ticket_fail_stale(ticket_id=t, grace_seconds=60),
    "park": lambda t, owner: ticket_park_stale(ticket_id=t, grace_seconds=60),
    "resume": lambda t, owner: ticket_resume_stale(ticket_id=t, grace_seconds=60),
    "sweep_cancelled": lambda t, owner: ticket_cancel_stale(ticket_id=t, grace_seconds=60),
    "cancel": lambda t, owner: ticket_cancel(ticket_id=t, error="x"),
    "continue": lambda t, owner: ticket_continue(ticket_id=t),
    "requeue": lambda t, owner: ticket_requeue(ticket_id=t, grace_seconds=60, force=True) == RequeueResult.REQUEUED,
    "prune": lambda t, owner: ticket_prune(retention_seconds=3600),
}
PREPARE = {
    "sweep": make_stale_and_spent,
    "park": make_stale_and_spent,
    "resume": make_stale_and_spent,
    "sweep_cancelled": make_stale_and_cancelled,
    "prune": make_old,
    "heartbeat": make_owned,
}
ALLOWED = {
    ("claim", "queued"),
    ("heartbeat", "running"),
    ("finish", "running"),
    ("retry", "running"),
    ("sweep", "running"),
    ("park", "running"),
    ("resume", "running"),
    ("sweep_cancelled", "running"),
    ("cancel", "queued"),
    ("cancel", "running"),
    ("cancel", "paused"),
    ("continue", "paused"),
    ("requeue", "failed"),
    ("requeue", "cancelled"),
    ("prune", "completed"),
    ("prune", "failed"),
    ("prune", "cancelled"),
}
DISALLOWED = [(event, state) for event in sorted(EVENTS) for state in STATES if (event, state) not in ALLOWED]
REPEATABLE = {"heartbeat"}  # a repeat refreshes the lease again
ANSWERED_AGAIN = {("cancel", "running")}  # a repeat answers as the first did and changes nothing


@pytest.mark.parametrize(("event", "state"), sorted(ALLOWED))
def test_allowed_transitions_succeed_once(db, event, state):
    ticket_id, owner = ticket_in(state)
    prepare = PREPARE.get(event, lambda t: None)
    prepare(ticket_id)

    assert EVENTS[event](ticket_id, owner)
    if event in REPEATABLE:
        return
    prepare(ticket_id)
    after = snapshot(ticket_id)
    assert bool(EVENTS[event](ticket_id, owner)) is ((event, state) in ANSWERED_AGAIN), "a repeat is a no-op"
    assert snapshot(ticket_id) == after


@pytest.mark.parametrize(("event", "state"), DISALLOWED)
def test_disallowed_transitions_change_nothing(db, event, state):
    """Only the status stands in the way (real owner, expired lease, old completion): the guard matches no row."""
    ticket_id, owner = ticket_in(state)
    PREPARE.get(event, lambda t: None)(ticket_id)
    before = snapshot(ticket_id)

    assert not EVENTS[event](ticket_id, owner)
    assert snapshot(ticket_id) == before
