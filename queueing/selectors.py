"""Reads of the queue (no state changes here)."""

from __future__ import annotations

from django.db import connection

from .executor import Claim
from .models import Ticket, TicketStatus


def ticket_by_idempotency_key(*, scope: str, key: str) -> Ticket | None:
    """The ticket accepted under this Idempotency-Key in this scope (the user id, "" for anonymous)."""
    return Ticket.objects.filter(idempotency_scope=scope, idempotency_key=key).first()


def ticket_seconds_until_available(*, ticket_id) -> float | None:
    """For a queued ticket that may run but whose backoff has not ended: seconds left (database clock); else None."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT extract(epoch FROM available_at - statement_timestamp()) FROM {Ticket._meta.db_table} "
            "WHERE id = %s AND status = 'queued' AND (is_head OR NOT serialized) "
            "AND available_at > statement_timestamp()",
            [ticket_id],
        )
        row = cursor.fetchone()
    return float(row[0]) if row else None


def ticket_waiting_on(*, ticket_id) -> str | None:
    """What a waiting ticket waits for (CONTRACT 5.3): its session's head (the running or paused holder, else the
    earliest queued ticket ahead of it). None when the ticket is not waiting behind another."""
    table = Ticket._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT head.id FROM {table} AS t JOIN {table} AS head ON head.session_id = t.session_id AND head.is_head "
            "WHERE t.id = %s AND t.status = 'queued' AND t.serialized AND NOT t.is_head",
            [ticket_id],
        )
        row = cursor.fetchone()
    return str(row[0]) if row else None


def ticket_running_for(*, worker_id: str, session_id: str, exclude: set[str]) -> Claim | None:
    """A ticket of `session_id` running under `worker_id` that this process is not running (`exclude`): the one a
    settling commit claimed for it as a hand-off, when the commit's answer was lost. None if there is none."""
    row = (
        Ticket.objects.filter(session_id=session_id, status=TicketStatus.RUNNING, locked_by=worker_id)
        .exclude(pk__in=exclude)
        .values_list("pk", "attempt", "max_attempts", "payload")
        .first()
    )
    if row is None:
        return None
    ticket_id, attempt, max_attempts, payload = row
    return Claim(str(ticket_id), attempt, max_attempts, worker_id, session_id, payload)
