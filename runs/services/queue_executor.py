"""The queue's executor for runs: what a claimed ticket does, and how ticket changes show on the run."""

from __future__ import annotations

import threading

from agentos_project.core.conf import current
from agentos_project.core.jsonsafe import storable_text
from agents_registry.context import LegStatus
from agents_registry.registry import ComponentNotFound, registry
from queueing.models import TicketStatus
from queueing.seam import Claim, LostAttempt, Outcome, Settlement, SettleStatements
from queueing.shutdown import interrupted, interrupted_outcome, woken_at_interrupt

from ..models import RUN_STATUS_OF_TICKET, CancellationStage, RunStatus
from ..selectors import run_for_leg
from .cancel import run_cancel_by_id
from .cancel_signal import watcher
from .journal import run_journals_prune, run_lost_continuation
from .leg import LegResult, cancelled_leg, run_leg
from .states import START_SQL, cancelled_content, run_end_unexecuted, run_park, run_record_leg, run_reset_pending

FENCED = "A newer attempt started this run"
# The ticket status each way a leg ends asks for (an error asks for failed, retryable or not).
TICKET_STATUS_OF_LEG = {
    LegStatus.COMPLETED: TicketStatus.COMPLETED,
    LegStatus.PAUSED: TicketStatus.PAUSED,
    LegStatus.CANCELLED: TicketStatus.CANCELLED,
}


def _window(claim: Claim) -> int | None:
    """How many earlier runs the claimed run's component sees (None: all, or a component not registered here)."""
    try:
        return registry.get(*claim.component).num_history_runs if claim.component else None
    except ComponentNotFound:
        return None


class RunExecutor:
    # In the claiming statement: RUNNING for the claimed attempt unless a newer attempt started it.
    start_sql = START_SQL

    def execute(self, claim: Claim) -> Outcome:
        """Run one leg of the claimed run; nothing is written until the ticket settles."""
        # Watched before the row is read: a cancel marked after the read is announced to the watch, one marked
        # before it shows in the row. The leg sleeps on `wake`, set by a cancel or by the shutdown's interrupt.
        wake = threading.Event()
        with watcher.watch(claim.ticket_id, look_up=False, wake=wake) as cancel, woken_at_interrupt(wake):
            found = run_for_leg(run_id=claim.ticket_id, attempt=claim.attempt, window=_window(claim))
            if found is None:
                return Outcome(TicketStatus.FAILED, error=FENCED)
            run, state, history = found
            if run.cancel_requested_at is not None:
                cancel.set()
                wake.set()
            leg = run_leg(
                run,
                attempt=claim.attempt,
                timeout_seconds=current().queue.timeout_seconds,
                cancelled=lambda: cancel.is_set() or interrupted(),
                inputs=(state, history),
                woken=wake,
            )
        stopped = leg.result is None or leg.result.status == LegStatus.CANCELLED
        if stopped and interrupted() and not cancel.is_set():
            return interrupted_outcome(claim)  # as a lost attempt: a continuation may be parked or resumed
        if leg.result is None:
            error = storable_text(leg.error)  # it lands in the ticket's error as well
            return Outcome(TicketStatus.FAILED, error=error, retryable=not leg.permanent, result=leg)
        return Outcome(TICKET_STATUS_OF_LEG[leg.result.status], result=leg)

    def cancel(self, ticket_id: str) -> str:
        """An operator's cancel (admin, command line): as a client's, wherever the run is."""
        return run_cancel_by_id(run_id=ticket_id)

    def cancelled(self, outcome: Outcome) -> Outcome:
        """A leg whose pause or failure gave way to a cancel asked while it ran: CANCELLED, stage EXECUTING, with
        the content it had (`Run <run_id> was cancelled` when none); its held pause is never published."""
        leg = outcome.result
        if isinstance(leg, LegResult):
            return Outcome(TicketStatus.CANCELLED, result=cancelled_leg(leg))
        return Outcome(TicketStatus.CANCELLED)  # no leg ran (an interrupted one): settled by `settle`

    def lost_attempt(self, ticket_id: str) -> LostAttempt:
        """A continuation leg lost (or interrupted) before it started a confirmed tool is continued again (parked);
        one that completed a step runs once more and resumes after it, replaying its journal (a completed tool is
        not run twice; an unfinished one follows its `on_interrupt`); anything else fails
        (`run_lost_continuation`)."""
        return run_lost_continuation(run_id=ticket_id)

    def forget(self, ticket_ids: list[str]) -> None:
        """Pruned tickets' runs keep their record and events, not their journals: no attempt will replay them."""
        run_journals_prune(run_ids=ticket_ids)

    def settle(self, settlement: Settlement, fence: str) -> SettleStatements:
        """How a ticket change shows on its run, as statements each guarded by `fence`: the leg's record
        (`run_record_leg`: an ending, or PENDING for its retry); for a change with no leg to record (a sweep, a
        cancel, a requeue, an interrupted or fenced attempt), the run PENDING again when the ticket is queued
        again, paused again when it is parked, else its end. What follows a commit (the events a record or an end
        held published, a requeued run's cancel intent cleared) is the statements' `after`."""
        run_id, leg = settlement.ticket_id, settlement.outcome.result if settlement.outcome else None
        if isinstance(leg, LegResult):
            final = settlement.status != TicketStatus.QUEUED
            return run_record_leg(run_id=run_id, attempt=settlement.attempt, leg=leg, final=final, fence=fence)
        if settlement.status == TicketStatus.QUEUED:
            requeued = settlement.previous in (TicketStatus.FAILED, TicketStatus.CANCELLED)
            return run_reset_pending(run_id=run_id, requeued=requeued, fence=fence)
        if settlement.status == TicketStatus.PAUSED:
            return run_park(run_id=run_id, fence=fence)
        return run_end_unexecuted(**_ending(settlement), fence=fence)


def _ending(settlement: Settlement) -> dict:
    """`run_end_unexecuted`'s arguments for a run whose ticket failed or was cancelled with no leg to record."""
    run_id = settlement.ticket_id
    if settlement.status == TicketStatus.FAILED:
        return {
            "run_id": run_id,
            "status": RunStatus.ERROR,
            "content": settlement.error,
            "stage": None,
            "event_role": "error",
        }
    return {
        "run_id": run_id,
        "status": RunStatus.CANCELLED,
        "content": settlement.error or cancelled_content(run_id),
        "stage": CancellationStage.of(RUN_STATUS_OF_TICKET.get(settlement.previous)),  # as the run was
        "event_role": "cancelled",
    }
