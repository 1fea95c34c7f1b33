"""The session router's publishing half: a ticket gets a broker message only when it may run.

`tickets` decides *whether* a ticket may run (it is its session's head, or unordered); this module sends
the message, after the deciding transaction commits, carrying the ticket id and nothing else. A publish
that fails (broker down) is logged and left to the sweeper, which re-dispatches claimable tickets.
"""

from __future__ import annotations

import logging

from django.db import transaction

log = logging.getLogger("agentos.queue")


def publish(ticket_id, *, countdown: float | None = None) -> bool:
    """Send the execute message for `ticket_id` now; False (and a log line) when the broker refused it."""
    from .tasks import execute_ticket

    try:
        execute_ticket.apply_async(args=[str(ticket_id)], countdown=countdown or None, retry=False)
    except Exception as error:  # the broker is down or refused: the sweeper re-dispatches later
        log.warning("dispatch failed ticket=%s error=%s", ticket_id, error)
        return False
    return True


def on_commit(ticket_id, *, countdown: float | None = None) -> None:
    """Publish `ticket_id` once the current transaction commits (at once when there is none)."""
    transaction.on_commit(lambda: publish(ticket_id, countdown=countdown))
