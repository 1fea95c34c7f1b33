"""Warm shutdown (CONTRACT 6): on SIGTERM stop claiming, let running attempts finish within
AGENTOS_STOP_TIMEOUT_SECONDS, then interrupt the stragglers.

An interrupted attempt with budget left goes back to the queue (`interrupted by worker shutdown`, after a flat
AGENTOS_RETRY_DELAY_SECONDS); without budget it ends as a lost attempt would (`Executor.lost_attempt`): failed with
that text, or, for a continuation, parked back to paused or queued once more. Agents see the interruption at their
next checkpoint, like a cancellation; one that does not stop within a moment more (blocked in a call) is
settled from here and the process exits, so it cannot hold the worker past the lease grace. Its late writes
are fenced off.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator

from agentos_project.core.conf import current

from . import router
from .models import TicketStatus
from .seam import Claim, LostAttempt, Outcome, get_executor

log = logging.getLogger("agentos.queue")
INTERRUPTED = "interrupted by worker shutdown"


class _State:
    draining = threading.Event()
    interrupted = threading.Event()
    before_exit: list[Callable[[], object]] = []
    wakes: set[threading.Event] = set()  # what running attempts sleep on: set at the interrupt
    wakes_lock = threading.Lock()


def before_exit(flush: Callable[[], object]) -> None:
    """Have `flush` called (briefly) before a drain that had to settle stragglers ends the process: the app that
    owns the work sends what it still owes (its live events) there."""
    _State.before_exit.append(flush)


def draining() -> bool:
    """True once a warm shutdown began: claim nothing new, hand nothing off."""
    return _State.draining.is_set()


@contextlib.contextmanager
def woken_at_interrupt(event: threading.Event) -> Iterator[threading.Event]:
    """Inside the block, the interrupt (the drain window closing) sets `event`: an attempt sleeping on it stops at
    once rather than at its next look at `interrupted()`."""
    with _State.wakes_lock:
        _State.wakes.add(event)
    if interrupted():
        event.set()
    try:
        yield event
    finally:
        with _State.wakes_lock:
            _State.wakes.discard(event)


def _interrupt() -> None:
    _State.interrupted.set()
    with _State.wakes_lock:
        wakes = list(_State.wakes)
    for event in wakes:
        event.set()


def interrupted() -> bool:
    """True once the drain window closed: running attempts must stop."""
    return _State.interrupted.is_set()


def interrupted_outcome(claim: Claim) -> Outcome:
    """How an attempt the shutdown stopped ends, with `INTERRUPTED`, as the executor answers for a lost attempt
    (`Executor.lost_attempt`): parked back to paused; or queued again after a flat AGENTOS_RETRY_DELAY_SECONDS while
    it has budget left, and when it has none if it made progress its work keeps (resumed); else failed."""
    fate = get_executor().lost_attempt(claim.ticket_id)
    if fate == LostAttempt.PARK:
        return Outcome(TicketStatus.PAUSED, error=INTERRUPTED)
    delay = current().queue.retry_delay_seconds
    return Outcome(
        TicketStatus.FAILED, error=INTERRUPTED, retryable=True, retry_delay=delay, resume=fate == LostAttempt.RESUME
    )


def begin(*, active_claims, settle, exit_process=os._exit) -> threading.Thread:
    """Start draining; a timer interrupts what still runs when the window closes, then settles what did not stop."""
    conf = current().queue
    _State.draining.set()
    log.info("warm shutdown: draining for %ss", conf.stop_timeout_seconds)

    def close_window() -> None:
        time.sleep(conf.stop_timeout_seconds)
        if not active_claims.snapshot():
            return
        log.warning("drain window closed; interrupting %d running attempt(s)", len(active_claims.snapshot()))
        _interrupt()
        deadline = time.monotonic() + min(2.0, max(0.0, conf.lock_grace_seconds - conf.stop_timeout_seconds - 0.5))
        while active_claims.snapshot() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not active_claims.snapshot():
            return
        for claim in active_claims.executing():  # one already settling keeps its own outcome (or is swept)
            log.warning("ticket=%s attempt=%s did not stop; settled as interrupted", claim.ticket_id, claim.attempt)
            settle(claim, interrupted_outcome(claim))
        router.publisher.flush(2)
        for flush in _State.before_exit:
            flush()
        exit_process(0)

    timer = threading.Thread(target=close_window, name="agentos-drain", daemon=True)
    timer.start()
    return timer
