"""The operator's changes: cancel, continue a paused ticket, requeue a dead letter."""

from __future__ import annotations

import enum

from django.db import transaction

from .. import router
from ..models import Ticket, TicketStatus
from ..seam import Settlement
from ..transition_log import changed
from ._sql import _LIVE_SQL, TABLE, _update_returning, _while, mirror, promote_next_head, session_lock
from .fair import ticket_release_held
from .sweep import SWEEP_CANCELLED


def ticket_cancel(*, ticket_id: str, error: str, paused_error: str | None = None) -> str | None:
    """Cancel a ticket: queued or paused → cancelled at once; running → cancel asked (`cancel_requested_at`), for
    its attempt to end it cancelled. Returns the status it had, or None when it had ended (or is unknown).

    One statement for the three, so no change of the ticket can slip between them: a running ticket that pauses
    meanwhile is cancelled as paused, one whose cancel was asked first can no longer pause (`ticket_finish`).
    `error` is the ticket's error afterwards (`paused_error`, when given, for a ticket that was paused). Releases
    the session's next ticket when the cancelled one was the head. Asking again of a running ticket keeps the
    first time asked.
    """
    with transaction.atomic():
        session_id = Ticket.objects.filter(pk=ticket_id).values_list("session_id", flat=True).first()
        if session_id is None:
            return None
        session_lock(session_id)
        row = _update_returning(
            f"""
            WITH old AS (SELECT id, status, attempt FROM {TABLE}  -- by its key (see _claim_ctes)
                         WHERE id = %s AND (SELECT status IN {_LIVE_SQL}) FOR UPDATE)
            UPDATE {TABLE} AS t SET
                   status = CASE old.status WHEN 'running' THEN 'running' ELSE 'cancelled' END,
                   error = CASE old.status WHEN 'running' THEN t.error WHEN 'paused' THEN %s ELSE %s END,
                   is_head = t.is_head AND old.status = 'running', held = false,
                   cancel_requested_at = CASE old.status WHEN 'running'
                                         THEN coalesce(t.cancel_requested_at, statement_timestamp()) END,
                   completed_at = CASE WHEN old.status <> 'running' THEN statement_timestamp() END,
                   updated_at = CASE old.status WHEN 'running' THEN t.updated_at ELSE statement_timestamp() END
            FROM old WHERE t.id = old.id
            RETURNING old.status, old.attempt, t.error, t.user_id
            """,
            [ticket_id, paused_error or error, error],
        )
        if row is None:
            return None
        previous, attempt, error, user_id = row
        if previous == TicketStatus.RUNNING:
            changed("cancel_ask", run_id=ticket_id, session_id=session_id, status=previous, attempt=attempt)
            return previous
        changed("cancel", run_id=ticket_id, session_id=session_id, status=TicketStatus.CANCELLED, attempt=attempt)
        mirror(Settlement(str(ticket_id), TicketStatus.CANCELLED, attempt, error, previous=previous))
        promote_next_head(session_id)
        if previous == TicketStatus.QUEUED:  # its place in the broker's line, if it had one, goes to a held one
            ticket_release_held(user_id=user_id)
    return previous


def ticket_continue(*, ticket_id: str) -> bool:
    """Continue a paused ticket: paused → queued with one more attempt, same row, same `session_seq`.

    It stays its session's head, so nothing overtakes it; published after commit. Idempotent: a second
    continue finds it queued and changes nothing (returns False).
    """
    with transaction.atomic():
        row = _update_returning(
            f"""
            UPDATE {TABLE} SET status = 'queued', max_attempts = max_attempts + 1,
                   available_at = statement_timestamp(), updated_at = statement_timestamp()
            WHERE id = %s AND (SELECT status = 'paused')  -- by its key (see _claim_ctes)
            RETURNING session_id, attempt
            """,
            [ticket_id],
        )
        if row is None:
            return False
        changed("continue", run_id=ticket_id, session_id=row[0], status=TicketStatus.QUEUED, attempt=row[1])
        router.on_commit(ticket_id)
    return True


class RequeueResult(enum.Enum):
    REQUEUED = "requeued"
    NOT_REQUEUEABLE = "not_requeueable"
    TOO_RECENT = "too_recent"


def ticket_requeue(*, ticket_id: str, grace_seconds: float, force: bool = False) -> RequeueResult:
    """A dead letter back in line: failed | cancelled → queued with exactly one more attempt, at the back, the cancel
    asked of its last attempt (if any) forgotten.

    A ticket failed less than `grace_seconds` ago may still have a live (presumed dead) worker, and so may one the
    sweeper cancelled that long ago for a lost worker (`SWEEP_CANCELLED`): refused unless `force`. Takes the
    session lock; the new `session_seq` is 1 + the largest live one, and the ticket is its session's head when no
    live serialized ticket remains. A ticket with a deadline gets a new one, as far from now as its submit asked.
    """
    with transaction.atomic():
        session_id = Ticket.objects.filter(pk=ticket_id).values_list("session_id", flat=True).first()
        if session_id is None:
            return RequeueResult.NOT_REQUEUEABLE
        session_lock(session_id)
        recent = (  # its worker may still hold the lease: it failed, or the sweeper cancelled it for a lost worker
            "(t.status = 'failed' OR (t.status = 'cancelled' AND t.error IS NOT DISTINCT FROM %s)) "
            "AND t.completed_at > statement_timestamp() - %s * interval '1 second'"
        )
        row = _update_returning(
            f"""
            WITH line AS (SELECT coalesce(max(session_seq), 0) AS last_seq,
                                 coalesce(bool_or(serialized), false) AS occupied
                          FROM {TABLE} WHERE session_id = %s AND status IN {_LIVE_SQL}),
                 old AS (SELECT id, status FROM {TABLE} WHERE id = %s FOR UPDATE)
            UPDATE {TABLE} AS t SET status = 'queued', max_attempts = t.attempt + 1,
                   session_seq = line.last_seq + 1, is_head = t.serialized AND NOT line.occupied,
                   available_at = statement_timestamp(), locked_by = NULL, locked_at = NULL, completed_at = NULL,
                   cancel_requested_at = NULL, updated_at = statement_timestamp(), held = false,
                   expires_at = statement_timestamp() + t.ttl_seconds * interval '1 second'  -- a new deadline
            FROM line, old
            WHERE t.id = %s AND t.id = old.id  -- by its key (see _claim_ctes): its state is tested apart
              AND (SELECT t.status IN ('failed', 'cancelled') AND (%s OR NOT ({recent})))
            RETURNING t.is_head OR NOT t.serialized, old.status, t.attempt
            """,
            [session_id, ticket_id, ticket_id, force, SWEEP_CANCELLED, grace_seconds],
        )
        if row is None:
            dead = Ticket.objects.filter(_while("status IN ('failed', 'cancelled')"), pk=ticket_id)
            return RequeueResult.TOO_RECENT if dead.exists() else RequeueResult.NOT_REQUEUEABLE
        publish, previous, attempt = row
        changed("requeue", run_id=ticket_id, session_id=session_id, status=TicketStatus.QUEUED, attempt=attempt)
        mirror(Settlement(str(ticket_id), TicketStatus.QUEUED, 0, previous=previous))
        if publish:
            router.on_commit(ticket_id)
    return RequeueResult.REQUEUED
