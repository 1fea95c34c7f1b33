"""Reads of the queue (no state changes here)."""

from __future__ import annotations

from .models import Ticket, TicketStatus


def queue_is_full(*, max_depth: int) -> bool:
    """True when `max_depth` > 0 and at least that many tickets are queued (reads at most `max_depth` index rows)."""
    if max_depth <= 0:
        return False
    return Ticket.objects.filter(status=TicketStatus.QUEUED).order_by()[max_depth - 1 : max_depth].exists()


def ticket_get(*, ticket_id) -> Ticket | None:
    return Ticket.objects.filter(pk=ticket_id).first()
