"""Cancelling a run (CONTRACT 9), whatever it is doing: the writes, and the intent for a running one."""

from __future__ import annotations

from django.db import transaction
from django.db.models.functions import Now

from queueing.models import TicketStatus
from queueing.tickets import ticket_cancel

from ..models import FINISHED, Run, RunStatus
from ..selectors import run_find
from . import cancel_signal
from .states import CANCELLED_PAUSED, CANCELLED_QUEUED, run_cancel_unqueued


def run_cancel(
    *, kind: str, component_id: str, run_id: str, session_id: str | None, visible_to: str | None = None
) -> None:
    """Cancel a run (CONTRACT 9); a run that is unknown here, or already finished, is left as it is.

    A queued, waiting or paused run is cancelled at once by the ticket's guarded change (stage PENDING or
    PAUSED); a run without a ticket that waits for its in-process slot, or is paused, likewise by its row's. A
    running one is marked (`cancel_requested_at`) and gets an intent in Redis, which its executing attempt sees
    at its next checkpoint wherever it runs; it then ends CANCELLED with stage EXECUTING. Whichever of the cancel
    and a finishing attempt changes the row first decides; the other changes nothing. Another user's run
    (`visible_to`) is left as an unknown one is.
    """
    run = run_find(kind=kind, component_id=component_id, run_id=run_id, session_id=session_id, visible_to=visible_to)
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
        return _cancel_queued(run.run_id)
    return _cancel_unqueued(run.run_id)


def _cancel_queued(run_id) -> str:
    """The ticket's one guarded change decides (`ticket_cancel`): cancelled at once, or, for a running ticket, the
    cancel asked of its attempt, which then ends it cancelled whatever it was about to do. The run's row is marked
    in the same transaction (the watchers read it when Redis cannot tell them), and the intent announced once
    that commits."""
    with transaction.atomic():
        previous = ticket_cancel(ticket_id=run_id, error=CANCELLED_QUEUED, paused_error=CANCELLED_PAUSED)
        if previous == TicketStatus.RUNNING:
            Run.objects.filter(pk=run_id).update(cancel_requested_at=Now())
            transaction.on_commit(lambda: cancel_signal.cancel_request(run_id))
    return {None: "finished", TicketStatus.RUNNING: "requested"}.get(previous, "cancelled")


def _cancel_unqueued(run_id) -> str:
    """A run without a ticket: cancelled at once while it waits for its slot or is paused, else marked while it
    executes (`cancel_requested_at`), which its leg's record then obeys (`unqueued.run_execute_unqueued`). Tried
    again when the run moved between the two (it paused meanwhile), until one applies or the run has ended."""
    for _ in range(3):
        if run_cancel_unqueued(run_id=run_id):
            return "cancelled"
        marked = Run.objects.filter(pk=run_id, queued=False, status=RunStatus.RUNNING).update(cancel_requested_at=Now())
        if marked:
            cancel_signal.cancel_request(run_id)
            return "requested"
        if Run.objects.filter(pk=run_id, status__in=FINISHED).exists():
            return "finished"
    return "finished"
