"""Cancelling a run (CONTRACT 9), whatever it is doing: the writes, and the intent for a running one."""

from __future__ import annotations

from django.db import transaction
from django.db.models.functions import Now

from queueing.tickets import ticket_cancel

from . import cancellation
from .models import FINISHED, Run, RunStatus
from .selectors import run_find
from .services import CANCELLED_PAUSED, CANCELLED_QUEUED, run_record_end_event


def run_cancel(*, kind: str, component_id: str, run_id: str, session_id: str | None) -> None:
    """Cancel a run (CONTRACT 9); a run that is unknown here, or already finished, is left as it is.

    A queued, waiting or paused run is cancelled at once by the ticket's guarded change (stage PENDING or
    PAUSED); a run without a ticket that waits for its in-process slot, or is paused, likewise by its row's. A
    running one is marked (`cancel_requested_at`) and gets an intent in Redis, which its executing attempt sees
    at its next checkpoint wherever it runs; it then ends CANCELLED with stage EXECUTING. Whichever of the cancel
    and a finishing attempt changes the row first decides; the other changes nothing.
    """
    run = run_find(kind=kind, component_id=component_id, run_id=run_id, session_id=session_id)
    if run is not None:
        run_cancel_found(run)


def run_cancel_by_id(*, run_id) -> str:
    """Cancel the run wherever it is in its life (an inline run whose client went away, an operator's cancel):
    see `run_cancel_found`; `unknown` when there is no such run."""
    run = Run.objects.filter(pk=run_id).first()
    return "unknown" if run is None else run_cancel_found(run)


def run_cancel_found(run: Run) -> str:
    """Cancel `run` (already looked up): see `run_cancel`. Returns `finished` (it had ended), `cancelled` (done at
    once) or `requested` (marked; its executing attempt stops at its next checkpoint)."""
    if run.status in FINISHED:
        return "finished"
    if run.queued:
        cancelled = ticket_cancel(ticket_id=run.run_id, error=CANCELLED_QUEUED, paused_error=CANCELLED_PAUSED)
    else:
        cancelled = run_cancel_unqueued(run_id=run.run_id)
    if cancelled:
        return "cancelled"
    marked = Run.objects.filter(pk=run.run_id, status__in=(RunStatus.PENDING, RunStatus.RUNNING)).update(
        cancel_requested_at=Now()
    )
    cancellation.cancel_request(run.run_id)
    return "requested" if marked else "finished"


def run_cancel_unqueued(*, run_id) -> bool:
    """A run without a ticket that waits for its slot (PENDING, stage PENDING) or is paused (stage PAUSED) →
    CANCELLED; False when it is executing (or ended)."""
    waiting = ((RunStatus.PENDING, "PENDING", CANCELLED_QUEUED), (RunStatus.PAUSED, "PAUSED", CANCELLED_PAUSED))
    with transaction.atomic():
        runs = Run.objects.filter(pk=run_id, queued=False)
        for status, stage, content in waiting:
            ending = {"content": content, "cancellation_stage": stage, "completed_at": Now()}
            if runs.filter(status=status).update(status=RunStatus.CANCELLED, **ending):
                run_record_end_event(run_id=run_id, event_role="cancelled", content=content)
                return True
    return False
