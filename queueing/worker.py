"""What a worker does with one message: claim, execute outside any transaction, settle (CONTRACT 4, 6)."""

from __future__ import annotations

import logging
import os
import socket

from .conf import current
from .executor import Claim, Outcome, get_executor
from .models import TicketStatus
from .retry import backoff_delay
from .tickets import ticket_claim, ticket_finish, ticket_retry

log = logging.getLogger("agentos.queue")


def worker_identity() -> str:
    """This process's lease owner name: host and pid (all threads of a worker share its leases)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_execute(*, ticket_id: str) -> bool:
    """Claim `ticket_id` and run it to the end of one attempt; False when there was nothing to claim.

    A duplicate, early or late message claims nothing and returns False: the guarded claim is the only
    gate, so executing twice is impossible whatever the broker delivers.
    """
    conf = current()
    claim = ticket_claim(ticket_id=ticket_id, worker_id=worker_identity(), grace_seconds=conf.lock_grace_seconds)
    if claim is None:
        log.info("ticket=%s not claimable (duplicate, early or taken); message dropped", ticket_id)
        return False
    log.info("ticket=%s session=%s status=running attempt=%s worker=%s", *_ids(claim), claim.worker_id)
    try:
        outcome = get_executor().execute(claim)
    except Exception as error:
        log.exception("ticket=%s executor raised", ticket_id)
        outcome = Outcome(TicketStatus.FAILED, error=str(error) or type(error).__name__, retryable=True)
    settle_attempt(claim, outcome)
    return True


def settle_attempt(claim: Claim, outcome: Outcome) -> bool:
    """Record how the attempt ended: retry with backoff when it failed retryably with budget left, else finish.

    Returns False when the attempt had been fenced off (a newer attempt or a sweep owns the ticket).
    """
    conf = current()
    if outcome.status == TicketStatus.FAILED and outcome.retryable and claim.attempt < claim.max_attempts:
        delay = backoff_delay(attempt=claim.attempt, base_seconds=conf.retry_delay_seconds)
        settled = ticket_retry(claim=claim, outcome=outcome, delay_seconds=delay)
        status = f"queued retry_in={delay:.2f}s"
    else:
        settled = ticket_finish(claim=claim, outcome=outcome)
        status = outcome.status
    if settled:
        log.info("ticket=%s session=%s status=%s attempt=%s", claim.ticket_id, claim.session_id, status, claim.attempt)
    else:
        log.warning("ticket=%s attempt=%s fenced: a newer attempt owns it; result dropped", *_ids(claim)[::2])
    return settled


def _ids(claim: Claim) -> tuple:
    return claim.ticket_id, claim.session_id, claim.attempt
