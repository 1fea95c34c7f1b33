"""What a worker does with one message: claim, execute outside any transaction, settle (CONTRACT 4, 6)."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
import uuid

from agentos_project.core.conf import current

from . import metrics, router, shutdown
from .models import TicketStatus
from .seam import Claim, Outcome, get_executor
from .selectors import ticket_seconds_until_available
from .settle import settle_attempt
from .tickets import ticket_claim

log = logging.getLogger("agentos.queue")


@functools.cache
def _identity(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}"


def worker_identity() -> str:
    """This process's lease owner name: host, pid and a random tag, so a restarted process with the same host
    and pid (a container's PID 1) is not mistaken for its predecessor. All threads of a process share it."""
    return _identity(os.getpid())


class ActiveClaims:
    """The attempts this process holds now, executing or settling; the heartbeat refreshes exactly these leases."""

    def __init__(self) -> None:
        self._claims: dict[tuple[str, int], Claim] = {}
        self._settling: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims[(claim.ticket_id, claim.attempt)] = claim

    def settling(self, claim: Claim) -> None:
        """The attempt's work is done; only its outcome is being recorded (a shutdown must not interrupt it)."""
        with self._lock:
            self._settling.add((claim.ticket_id, claim.attempt))

    def discard(self, claim: Claim) -> None:
        with self._lock:
            self._claims.pop((claim.ticket_id, claim.attempt), None)
            self._settling.discard((claim.ticket_id, claim.attempt))

    def snapshot(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._claims)

    def ticket_ids(self) -> set[str]:
        with self._lock:
            return {ticket_id for ticket_id, _ in self._claims}

    def executing(self) -> list[Claim]:
        """The attempts still running their work (not yet settling)."""
        with self._lock:
            return [claim for key, claim in self._claims.items() if key not in self._settling]


active_claims = ActiveClaims()


HAND_OFF_LIMIT = 20


def worker_execute(*, ticket_id: str) -> bool:
    """Claim `ticket_id`, run it, and then run its session's successors on this thread; False if nothing to claim.

    A duplicate, early or late message claims nothing and returns False: the guarded claim is the only
    gate, so executing twice is impossible whatever the broker delivers. When a run ends and its session's
    next ticket becomes the head, the settling transaction claims it for this thread, which runs it at once (a
    hand-off: no broker round trip, so the session's next run starts within milliseconds). After HAND_OFF_LIMIT runs
    in a row, or once the worker is shutting down, the successor is published instead, so one long session cannot
    keep a thread forever and a draining worker starts nothing it may not finish.
    """
    if shutdown.draining():
        log.info("ticket=%s arrived during shutdown; published again for another worker", ticket_id)
        router.publish(ticket_id)
        return False
    # The message's marker goes once the claim is decided (or failed), not before: under a backlog many claimable
    # tickets have waited long enough for the sweeper to look, and one whose claim is under way must not look lost.
    # An early message published again keeps it (the publish renewed it; a later delete would take the new one).
    published_again = False
    try:
        claim = _claim(ticket_id)
        if claim is None:
            published_again = _reschedule_if_early(ticket_id)
    finally:
        if not published_again:
            router.consumed(ticket_id)
    if claim is None:
        return False
    for handed_off in range(1, HAND_OFF_LIMIT + 1):
        claim = execute_claim(claim, hand_off=handed_off < HAND_OFF_LIMIT)
        if claim is None:
            break
    return True


def _claim(ticket_id: str) -> Claim | None:
    grace = current().queue.lock_grace_seconds
    return ticket_claim(ticket_id=ticket_id, worker_id=worker_identity(), grace_seconds=grace)


def _reschedule_if_early(ticket_id: str) -> bool:
    """Publish an early message again for when the ticket's backoff ends; True if it was."""
    wait = ticket_seconds_until_available(ticket_id=ticket_id)
    if wait is None:
        log.info("ticket=%s not claimable (duplicate, late or taken); message dropped", ticket_id)
        return False
    log.info("ticket=%s early (backoff ends in %.2fs); published again for then", ticket_id, wait)
    return router.publish(ticket_id, countdown=wait)


def execute_claim(claim: Claim, *, hand_off: bool = False) -> Claim | None:
    """Run one claimed attempt outside any transaction, then settle it; returns the handed-off successor's claim.

    The lease stays in `active_claims` (so the heartbeat keeps it) until the attempt is settled or given up.
    """
    active_claims.add(claim)
    try:
        started = _observe_start(claim)
        try:
            outcome = get_executor().execute(claim)
        except Exception as error:
            log.exception("ticket=%s executor raised", claim.ticket_id)
            outcome = Outcome(TicketStatus.FAILED, error=str(error) or type(error).__name__, retryable=True)
        metrics.recorder.observe("run_duration_seconds", time.monotonic() - started)
        active_claims.settling(claim)
        return settle_attempt(claim, outcome, hand_off=hand_off, busy=active_claims.ticket_ids)
    finally:
        active_claims.discard(claim)


def _observe_start(claim: Claim) -> float:
    """Record how long the ticket waited for its start, and for its session's hand-off; returns the start."""
    started = time.monotonic()
    since_claim = started - claim.claimed_at if claim.claimed_at else 0.0
    if claim.waited_seconds is not None:
        metrics.recorder.observe("wait_seconds", claim.waited_seconds + since_claim)
    if claim.handoff_seconds is not None:
        metrics.recorder.observe("handoff_latency_seconds", claim.handoff_seconds + since_claim)
    return started
