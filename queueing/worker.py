"""What a worker does with one message: claim, execute outside any transaction, settle (CONTRACT 4, 6)."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import uuid

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
    next ticket becomes the head, this thread claims and runs it at once (a hand-off: no broker round trip,
    so the next turn starts within milliseconds). After HAND_OFF_LIMIT runs in a row, or once the worker is
    shutting down, the successor is published instead, so one long session cannot keep a thread forever.
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
        hand_off = handed_off < HAND_OFF_LIMIT and not shutdown.draining()
        claim = execute_claim(claim, hand_off=hand_off)
        if claim is None:
            break
        log.info("ticket=%s session=%s status=running attempt=%s worker=%s", *_ids(claim), claim.worker_id)
    return True


def _claim(ticket_id: str) -> Claim | None:
    conf = current()
    claim = ticket_claim(ticket_id=ticket_id, worker_id=worker_identity(), grace_seconds=conf.queue.lock_grace_seconds)
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
    """Run one claimed attempt outside any transaction, then settle it; returns the handed-off successor's claim."""
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


def settle_attempt(claim: Claim, outcome: Outcome, *, hand_off: bool = False) -> Claim | None:
    """Record how the attempt ended: retry with backoff when it failed retryably with budget left, else finish.

    Returns the claim on the session's next ticket when `hand_off` asked for it. A fenced attempt (a newer
    attempt or a sweep owns the ticket) writes nothing and is logged.
    """
    conf = current()
    next_claim = None
    if outcome.status == TicketStatus.FAILED and outcome.retryable and claim.attempt < claim.max_attempts:
        delay = outcome.retry_delay
        if delay is None:
            delay = backoff_delay(attempt=claim.attempt, base_seconds=conf.queue.retry_delay_seconds)
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


def _ids(claim: Claim) -> tuple:
    return claim.ticket_id, claim.session_id, claim.attempt
