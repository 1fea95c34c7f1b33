"""What a worker does with one message: claim, execute outside any transaction, settle (CONTRACT 4, 6)."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import uuid

from django.db import InterfaceError, OperationalError, connection

from agentos_project.conf import current

from . import router, shutdown
from .executor import Claim, Outcome, get_executor
from .models import TicketStatus
from .retry import backoff_delay
from .selectors import ticket_seconds_until_available
from .tickets import ticket_claim, ticket_finish, ticket_retry

log = logging.getLogger("agentos.queue")


@functools.cache
def _identity(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}"


def worker_identity() -> str:
    """This process's lease owner name: host, pid and a random tag, so a restarted process with the same host
    and pid (a container's PID 1) is not mistaken for its predecessor. All threads of a process share it."""
    return _identity(os.getpid())


class ActiveClaims:
    """The attempts this process is executing now; the heartbeat refreshes exactly these leases."""

    def __init__(self) -> None:
        self._claims: dict[tuple[str, int], Claim] = {}
        self._lock = threading.Lock()

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims[(claim.ticket_id, claim.attempt)] = claim

    def discard(self, claim: Claim) -> None:
        with self._lock:
            self._claims.pop((claim.ticket_id, claim.attempt), None)

    def snapshot(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._claims)

    def claims(self) -> list[Claim]:
        with self._lock:
            return list(self._claims.values())


active_claims = ActiveClaims()


HAND_OFF_LIMIT = 20


def worker_execute(*, ticket_id: str) -> bool:
    """Claim `ticket_id`, run it, and then run its session's successors on this thread; False if nothing to claim.

    A duplicate, early or late message claims nothing and returns False: the guarded claim is the only
    gate, so executing twice is impossible whatever the broker delivers. When a run ends and its session's
    next ticket becomes the head, the settling transaction claims it for this thread, which runs it at once (a
    hand-off: no broker round trip, so the next turn starts within milliseconds). After HAND_OFF_LIMIT runs in a
    row, or once the worker is shutting down, the successor is published instead, so one long session cannot
    keep a thread forever and a draining worker starts nothing it may not finish.
    """
    if shutdown.draining():
        log.info("ticket=%s arrived during shutdown; published again for another worker", ticket_id)
        router.publish(ticket_id)
        return False
    router.consumed(ticket_id)
    claim = _claim(ticket_id)
    if claim is None:
        _reschedule_if_early(ticket_id)
        return False
    for handed_off in range(1, HAND_OFF_LIMIT + 1):
        claim = execute_claim(claim, hand_off=handed_off < HAND_OFF_LIMIT)
        if claim is None:
            break
        log.info("ticket=%s session=%s status=running attempt=%s worker=%s", *_ids(claim), claim.worker_id)
    return True


def _claim(ticket_id: str) -> Claim | None:
    grace = current().queue.lock_grace_seconds
    claim = ticket_claim(ticket_id=ticket_id, worker_id=worker_identity(), grace_seconds=grace)
    if claim is not None:
        log.info("ticket=%s session=%s status=running attempt=%s worker=%s", *_ids(claim), claim.worker_id)
    return claim


def _reschedule_if_early(ticket_id: str) -> None:
    wait = ticket_seconds_until_available(ticket_id=ticket_id)
    if wait is not None:
        log.info("ticket=%s early (backoff ends in %.2fs); published again for then", ticket_id, wait)
        router.publish(ticket_id, countdown=wait)
    else:
        log.info("ticket=%s not claimable (duplicate, late or taken); message dropped", ticket_id)


def execute_claim(claim: Claim, *, hand_off: bool = False) -> Claim | None:
    """Run one claimed attempt outside any transaction, then settle it; returns the handed-off successor's claim.

    The lease stays in `active_claims` (so the heartbeat keeps it) until the attempt is settled or given up.
    """
    active_claims.add(claim)
    try:
        try:
            outcome = get_executor().execute(claim)
        except Exception as error:
            log.exception("ticket=%s executor raised", claim.ticket_id)
            outcome = Outcome(TicketStatus.FAILED, error=str(error) or type(error).__name__, retryable=True)
        return settle_attempt(claim, outcome, hand_off=hand_off)
    finally:
        active_claims.discard(claim)


def settle_attempt(
    claim: Claim, outcome: Outcome, *, hand_off: bool = False, patience: float | None = None
) -> Claim | None:
    """Record how the attempt ended, whatever the database does meanwhile; returns the handed-off successor's claim.

    Whether to hand off is decided here, at the end: a worker that began draining while the attempt ran
    publishes the successor instead of claiming it. The database going away (a restart killed the
    connection, an outage) is waited out: the settle is retried on a fresh connection with back-off (0.1 s
    doubling to 1 s) for `patience` seconds (default: the lease grace, after which the sweeper owns the ticket).
    An outcome the database refuses to store is replaced by a permanent failure that says why, so the run
    ends visibly as ERROR instead of staying `running` without a heartbeat.
    """
    wait = _Backoff(current().queue.lock_grace_seconds if patience is None else patience)
    fresh_failures, replaced = 0, False
    while True:
        try:
            return _settle_once(claim, outcome, hand_off=hand_off and not shutdown.draining())
        except (OperationalError, InterfaceError) as error:
            connection.close()
            if not database_answers():
                if wait.sleep():
                    log.warning("ticket=%s attempt=%s settle failed, retrying: %s", *_ids(claim)[::2], error)
                    continue
                log.error(
                    "ticket=%s attempt=%s not settled: database away too long; left to the sweeper", *_ids(claim)[::2]
                )
                return None
            fresh_failures += 1
            if fresh_failures == 1:  # the old connection died (a restart); a fresh one should do
                continue
            failure = error
        except Exception as error:  # refused (a value it cannot store): the transaction rolled back, the link is fine
            failure = error
        if replaced:
            log.error("ticket=%s attempt=%s not settled; left to the sweeper", *_ids(claim)[::2], exc_info=failure)
            return None
        log.error("ticket=%s attempt=%s outcome refused by the database", *_ids(claim)[::2], exc_info=failure)
        outcome, replaced, fresh_failures = Outcome(TicketStatus.FAILED, error=_refused_text(failure)), True, 0


def _refused_text(error: Exception) -> str:
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"Run outcome could not be stored: {reason}"


def _settle_once(claim: Claim, outcome: Outcome, *, hand_off: bool) -> Claim | None:
    """One try at settling: retry with backoff when it failed retryably with budget left, else finish.

    A fenced attempt (a newer attempt or a sweep owns the ticket) writes nothing and is logged.
    """
    next_claim = None
    if outcome.status == TicketStatus.FAILED and outcome.retryable and claim.attempt < claim.max_attempts:
        delay = outcome.retry_delay
        if delay is None:
            delay = backoff_delay(attempt=claim.attempt, base_seconds=current().queue.retry_delay_seconds)
        settled = ticket_retry(claim=claim, outcome=outcome, delay_seconds=delay)
        status = f"queued retry_in={delay:.2f}s"
    else:
        finished = ticket_finish(claim=claim, outcome=outcome, hand_off=hand_off)
        settled, status = finished is not None, outcome.status
        next_claim = finished.next_claim if finished else None
    if settled:
        log.info("ticket=%s session=%s status=%s attempt=%s", claim.ticket_id, claim.session_id, status, claim.attempt)
    else:
        log.warning("ticket=%s attempt=%s fenced: a newer attempt owns it; result dropped", *_ids(claim)[::2])
    return next_claim


class _Backoff:
    """Sleeps 0.1 s doubling to 1 s between tries, until `patience` seconds have passed; False when they have."""

    def __init__(self, patience: float):
        self.deadline = time.monotonic() + patience
        self.delay = 0.1

    def sleep(self) -> bool:
        if time.monotonic() + self.delay > self.deadline:
            return False
        time.sleep(self.delay)
        self.delay = min(2 * self.delay, 1.0)
        return True


def database_answers() -> bool:
    """True when a fresh connection of this thread gets an answer from PostgreSQL (else it is closed again)."""
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except (OperationalError, InterfaceError):
        connection.close()
        return False


def _ids(claim: Claim) -> tuple:
    return claim.ticket_id, claim.session_id, claim.attempt
