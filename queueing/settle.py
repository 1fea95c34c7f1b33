"""Recording how an attempt ended, whatever the database does meanwhile (CONTRACT 4, 6).

Three kinds of failure, three answers:
- the database went away (a restart killed the connection, an outage): wait and retry on a fresh connection,
  0.1 s doubling to 0.5 s, for `patience` seconds (default the lease grace; after that the sweeper owns the
  ticket, as for a lost worker);
- the database (or its driver) refuses the outcome itself (a data error, SQLSTATE class 22 or 54, or a value
  the driver cannot send): replace it once by a permanent failure that says why, so the run ends visibly as ERROR;
- a commit whose answer was lost: if that commit handed the session on to this worker, the successor it claimed
  is found and returned, so it runs instead of waiting, unexecuted, for the sweeper.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.db import DatabaseError, connection

from agentos_project.core.conf import current
from agentos_project.core.exceptions import first_line

from . import shutdown
from .models import TicketStatus
from .retry import backoff_delay
from .seam import Claim, Outcome, get_executor
from .selectors import ticket_running_for
from .tickets import ticket_cancel_asked, ticket_finish, ticket_retry

log = logging.getLogger("agentos.queue")
REFUSING_SQLSTATE_CLASSES = ("22", "54")  # data exception, program limit exceeded


def settle_attempt(
    claim: Claim,
    outcome: Outcome,
    *,
    hand_off: bool = False,
    patience: float | None = None,
    busy: Callable[[], set[str]] = set,
) -> Claim | None:
    """Record `outcome` for the attempt `claim` owns; returns the successor's claim when the session was handed
    on to this worker.

    Whether to hand off is decided here, at the end: a worker that began draining while the attempt ran
    publishes the successor instead. `busy` names the tickets this process is running (never a lost hand-off).
    Returns None, leaving the ticket to the sweeper, only when the database stayed away for `patience` or
    refused even the failure that replaced a refused outcome.
    """
    wait = _Backoff(current().queue.lock_grace_seconds if patience is None else patience)
    replaced, reconnected = False, False
    while True:
        try:
            settled, next_claim = _settle_once(claim, outcome, hand_off=hand_off and not shutdown.draining())
        except Exception as error:
            refused = _refused(error)
            if refused and not replaced:
                log.error("ticket=%s attempt=%s outcome refused by the database", *_ids(claim), exc_info=error)
                outcome, replaced = Outcome(TicketStatus.FAILED, error=_refused_text(error)), True
                continue
            connection.close()
            if refused or not wait.sleep():
                log.error("ticket=%s attempt=%s not settled (%s); left to the sweeper", *_ids(claim), error)
                return None
            log.warning("ticket=%s attempt=%s settle failed, retrying: %s", *_ids(claim), error)
            reconnected = True
            continue
        if not settled and reconnected and hand_off:
            return ticket_running_for(worker_id=claim.worker_id, session_id=claim.session_id, exclude=busy())
        return next_claim


def _refused(error: Exception) -> bool:
    """True when retrying the same outcome cannot help: the database refused the data, or the driver could not
    even send it (a NUL in a string, say); False for a lost connection, a timeout, a deadlock."""
    if isinstance(error, DatabaseError):
        code = getattr(error.__cause__, "pgcode", None) or ""
        return code[:2] in REFUSING_SQLSTATE_CLASSES
    return True


def _refused_text(error: Exception) -> str:
    return f"Run outcome could not be stored: {first_line(error)}"


def _settle_once(claim: Claim, outcome: Outcome, *, hand_off: bool) -> tuple[bool, Claim | None]:
    """One try: retry with backoff when the attempt failed retryably with budget left, else finish; an outcome that
    yields to a cancel asked meanwhile (a pause, a retryable failure) ends the ticket cancelled instead.

    Returns (whether the guarded change matched, the handed-off successor). A fenced attempt (a newer attempt or
    a sweep owns the ticket) writes nothing and is logged.
    """
    settled, next_claim = _settle_as(claim, outcome, hand_off=hand_off)
    if not settled and outcome.yields_to_cancel and ticket_cancel_asked(claim=claim):
        log.info("ticket=%s attempt=%s cancelled while it ran: ends cancelled, not %s", *_ids(claim), outcome.status)
        settled, next_claim = _settle_as(claim, get_executor().cancelled(outcome), hand_off=hand_off)
    if not settled:
        log.warning("ticket=%s attempt=%s fenced: a newer attempt owns it; result dropped", *_ids(claim))
    return settled, next_claim


def _settle_as(claim: Claim, outcome: Outcome, *, hand_off: bool) -> tuple[bool, Claim | None]:
    budget = claim.attempt < claim.max_attempts or outcome.resume  # a resume is granted one more attempt
    if outcome.status == TicketStatus.FAILED and outcome.retryable and budget:
        delay = outcome.retry_delay
        if delay is None:
            delay = backoff_delay(attempt=claim.attempt, base_seconds=current().queue.retry_delay_seconds)
        return ticket_retry(claim=claim, outcome=outcome, delay_seconds=delay), None
    finished = ticket_finish(claim=claim, outcome=outcome, hand_off=hand_off)
    return finished is not None, finished.next_claim if finished else None


class _Backoff:
    """Sleeps 0.1 s doubling to 0.5 s between tries, until `patience` seconds have passed; False when they have."""

    def __init__(self, patience: float):
        self.deadline = time.monotonic() + patience
        self.delay = 0.1

    def sleep(self) -> bool:
        if time.monotonic() + self.delay > self.deadline:
            return False
        time.sleep(self.delay)
        self.delay = min(2 * self.delay, 0.5)
        return True


def _ids(claim: Claim) -> tuple[str, int]:
    return claim.ticket_id, claim.attempt
