"""The sweeper's changes: a stale running ticket failed, parked, resumed or cancelled; a queued one past its
deadline expired; old terminal tickets pruned."""

from __future__ import annotations

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from agentos_project.core.units import seconds_text

from .. import router
from ..models import Ticket, TicketStatus
from ..seam import LostAttempt, Settlement, get_executor
from ..transition_log import changed, pruned
from ._sql import TABLE, _update_returning, _while, mirror, promote_next_head, session_lock
from .fair import ticket_release_held

SWEEP_ERROR = (
    "Worker lost and attempt budget exhausted; run was not re-executed. "
    "Raise AGENTOS_MAX_ATTEMPTS to let a lost run execute again, or requeue it with POST /queue/jobs/{id}/requeue."
)


# The error of a ticket the sweeper cancelled: its cancel was asked, and its worker was lost before the attempt
# could end it (which the worker, if it lives on, may still be executing: `ticket_requeue` waits the grace).
SWEEP_CANCELLED = "Worker lost while a cancel of its attempt was pending; cancelled by the sweeper"


def ticket_fail_stale(*, ticket_id: str, grace_seconds: float) -> bool:
    """Sweep: a running ticket whose lease is stale and whose budget is spent → failed with `SWEEP_ERROR`.

    Guarded on the stale lease, so a live owner's heartbeat or a concurrent sweeper makes it a no-op.
    The executor marks the work failed in the same transaction; the session's next ticket is released.
    """
    with transaction.atomic():
        ticket = _change_stale_spent(
            ticket_id,
            grace_seconds,
            status=TicketStatus.FAILED,
            error=SWEEP_ERROR,
            is_head=False,
            completed_at=Now(),
        )
        if ticket is None:
            return False
        changed("sweep", run_id=ticket_id, status=TicketStatus.FAILED, **ticket)
        mirror(Settlement(str(ticket_id), TicketStatus.FAILED, ticket["attempt"], SWEEP_ERROR))
        promote_next_head(ticket["session_id"])
    return True


SPENT = "attempt >= max_attempts AND cancel_requested_at IS NULL"


def ticket_sweep_lost(*, ticket_id: str, grace_seconds: float) -> LostAttempt | None:
    """Sweep: a running ticket whose lease is stale, whose budget is spent and whose cancel was not asked → failed,
    parked or resumed, as the executor answers (`Executor.lost_attempt`): `ticket_fail_stale`, `ticket_park_stale`
    or `ticket_resume_stale`.

    Decided and changed in one transaction: under the session's lock the ticket's row is locked before the executor
    is asked, and the executor locks its work's row, so a write of the lost attempt (a zombie that wakes) either
    came before the answer or finds the change made. Returns what was done; None when the ticket was not such (a
    heartbeat, another sweep or a cancel won). An answer that raises rolls back and changes nothing: the next pass
    asks again."""
    with transaction.atomic():
        if _stale(ticket_id, grace_seconds, SPENT, lock=True) is None:
            return None
        fate = LostAttempt(get_executor().lost_attempt(str(ticket_id)))
        change = {LostAttempt.PARK: ticket_park_stale, LostAttempt.RESUME: ticket_resume_stale}
        return fate if change.get(fate, ticket_fail_stale)(ticket_id=ticket_id, grace_seconds=grace_seconds) else None


def _change_stale_spent(ticket_id: str, grace_seconds: float, **changes) -> dict | None:
    """Under the session's lock, apply `changes` to the ticket if it is running with a lease older than the grace,
    no budget left and no cancel asked; its session_id, attempt and lost worker if it was, else None (a heartbeat,
    another sweep or a cancel won)."""
    return _change_stale(ticket_id, grace_seconds, SPENT, changes)


def _stale(ticket_id: str, grace_seconds: float, condition: str, *, lock: bool = False) -> dict | None:
    """Under the session's lock (taken here), the ticket's session_id, attempt and lost worker if it is running with
    a lease older than the grace and `condition` holds (its row locked too, with `lock`); else None."""
    ticket = Ticket.objects.filter(pk=ticket_id).values("session_id", "attempt", worker=F("locked_by")).first()
    if ticket is None:
        return None
    session_lock(ticket["session_id"])
    if lock:
        stale = Ticket.objects.select_for_update().filter(_stale_lease(condition, grace_seconds), pk=ticket_id)
        if stale.values_list("pk", flat=True).first() is None:
            return None
    return ticket


def _stale_lease(condition: str, grace_seconds: float):
    return _while(
        f"status = 'running' AND {condition} AND locked_at < statement_timestamp() - %s * interval '1 second'",
        [grace_seconds],
    )


def _change_stale(ticket_id: str, grace_seconds: float, condition: str, changes: dict) -> dict | None:
    """Under the session's lock, apply `changes` (and clear the lease) to the ticket if it is running with a lease
    older than the grace and `condition` holds; its session_id, attempt and lost worker if it was, else None."""
    ticket = _stale(ticket_id, grace_seconds, condition)
    if ticket is None:
        return None
    updated = Ticket.objects.filter(_stale_lease(condition, grace_seconds), pk=ticket_id).update(
        locked_by=None, locked_at=None, updated_at=Now(), **changes
    )
    return ticket if updated else None


def ticket_park_stale(*, ticket_id: str, grace_seconds: float) -> bool:
    """Sweep: a running ticket whose lease is stale, whose budget is spent, and whose executor says its work is
    still paused at heart (a continuation leg that died before recording anything) → paused, so it can be
    continued again. Guarded like `ticket_fail_stale`; it stays its session's head, so the session stays held.
    """
    with transaction.atomic():
        ticket = _change_stale_spent(ticket_id, grace_seconds, status=TicketStatus.PAUSED)
        if ticket is None:
            return False
        changed("park", run_id=ticket_id, status=TicketStatus.PAUSED, **ticket)
        settlement = Settlement(str(ticket_id), TicketStatus.PAUSED, ticket["attempt"], previous=TicketStatus.RUNNING)
        mirror(settlement)
    return True


def ticket_resume_stale(*, ticket_id: str, grace_seconds: float) -> bool:
    """Sweep: a running ticket whose lease is stale and whose budget is spent, and whose executor says its lost
    attempt made progress the work kept (a continuation whose journal holds what it did) → queued with one more
    attempt, in the same place: it stays its session's head, and the next attempt resumes after that progress.
    Guarded like `ticket_fail_stale`; published once it commits."""
    with transaction.atomic():
        again = {"status": TicketStatus.QUEUED, "max_attempts": F("attempt") + 1, "available_at": Now()}
        ticket = _change_stale_spent(ticket_id, grace_seconds, **again)
        if ticket is None:
            return False
        changed("resume", run_id=ticket_id, status=TicketStatus.QUEUED, **ticket)
        settlement = Settlement(str(ticket_id), TicketStatus.QUEUED, ticket["attempt"], previous=TicketStatus.RUNNING)
        mirror(settlement)
        router.on_commit(ticket_id)
    return True


def ticket_cancel_stale(*, ticket_id: str, grace_seconds: float) -> bool:
    """Sweep: a running ticket whose cancel was asked and whose lease is stale (its worker was lost before the
    attempt could end it) → cancelled with `SWEEP_CANCELLED`, whatever budget is left: nothing runs it again to be
    cancelled.

    Guarded on the stale lease, so a live owner's heartbeat or a concurrent sweeper makes it a no-op. The executor
    mirrors it (previous status running) in the same transaction; the session's next ticket is released.
    """
    with transaction.atomic():
        ended = {"status": TicketStatus.CANCELLED, "error": SWEEP_CANCELLED, "is_head": False, "completed_at": Now()}
        ticket = _change_stale(ticket_id, grace_seconds, "cancel_requested_at IS NOT NULL", ended)
        if ticket is None:
            return False
        changed("sweep", run_id=ticket_id, status=TicketStatus.CANCELLED, **ticket)
        mirror(Settlement(str(ticket_id), ended["status"], ticket["attempt"], previous="running"))
        promote_next_head(ticket["session_id"])
    return True


EXPIRED = "expired after {seconds} s in the queue"


def expired_text(ttl_seconds: float | None) -> str:
    """The error (and the run's content) of a ticket that expired: its deadline's seconds, as the submit gave them."""
    return EXPIRED.format(seconds=seconds_text(ttl_seconds or 0))


def ticket_expire(*, ticket_id: str) -> bool:
    """Sweep: a queued ticket past its deadline (`expires_at`) → cancelled with `expired after <N> s in the queue`,
    whether it waited for a worker, for its user's turn or behind its session's head. It never started (a claim
    clears the deadline), so its run ends CANCELLED at stage PENDING. Guarded on the deadline under the session
    lock, so a claim at the same moment either started it (then the deadline is gone) or finds it cancelled; the
    session's next ticket is released, and a place in the broker's line its user had, too.
    """
    with transaction.atomic():
        ticket = Ticket.objects.filter(pk=ticket_id).values("session_id", "user_id", "ttl_seconds").first()
        if ticket is None:
            return False
        session_lock(ticket["session_id"])
        error = expired_text(ticket["ttl_seconds"])
        row = _update_returning(
            f"""
            UPDATE {TABLE} SET status = 'cancelled', error = %s, is_head = false, held = false,
                   completed_at = statement_timestamp(), updated_at = statement_timestamp()
            WHERE id = %s AND (SELECT status = 'queued' AND expires_at <= statement_timestamp())  -- by its key
            RETURNING attempt
            """,
            [error, ticket_id],
        )
        if row is None:
            return False
        changed(
            "expire", run_id=ticket_id, session_id=ticket["session_id"], status=TicketStatus.CANCELLED, attempt=row[0]
        )
        settlement = Settlement(str(ticket_id), TicketStatus.CANCELLED, row[0], error, previous=TicketStatus.QUEUED)
        mirror(settlement)
        promote_next_head(ticket["session_id"])
        ticket_release_held(user_id=ticket["user_id"])
    return True


def ticket_prune(*, retention_seconds: float, batch: int = 1000) -> int:
    """Delete up to `batch` terminal tickets completed more than `retention_seconds` ago; paused never. The executor
    then forgets, for the tickets deleted, what their work kept only while they lived (`Executor.forget`).

    One statement finds and locks them (a requeue at the same moment either waits and finds the ticket gone, or
    committed first, and PostgreSQL's re-check of the locked row skips it) and deletes them."""
    with transaction.atomic(), connection.cursor() as cursor:  # the tickets and what their work kept go together
        cursor.execute(
            f"""
            WITH old AS (SELECT id FROM {TABLE}
                         WHERE status IN ('completed', 'failed', 'cancelled')
                           AND completed_at < statement_timestamp() - %s * interval '1 second'
                         LIMIT %s FOR UPDATE)
            DELETE FROM {TABLE} AS t USING old WHERE t.id = old.id RETURNING t.id
            """,
            [retention_seconds, batch],
        )
        deleted = [str(ticket_id) for (ticket_id,) in cursor.fetchall()]
        if deleted:
            get_executor().forget(ticket_ids=deleted)
    pruned(len(deleted))
    return len(deleted)
