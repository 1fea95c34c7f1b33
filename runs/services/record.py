"""Recording how a run's leg, or the run, ended: its row, its stored events, its session's state."""

from __future__ import annotations

import json

from django.db import connection, transaction
from django.db.models.functions import Now

from agentos_project.postgres.prepared import Prepared, together
from agents_registry.context import RunResult
from agents_registry.events import event_name
from queueing.models import TicketStatus
from queueing.seam import FENCE

from ..events.sink import EventSink, first_event_index
from ..jsonsafe import json_or_null, storable
from ..models import RUN_STATUS_OF_TICKET, AgentSession, CancellationStage, Run, RunEvent, RunStatus
from ..selectors import run_pause_asked
from . import cancel_signal
from .leg import LegResult

SESSIONS = AgentSession._meta.db_table
EVENTS = RunEvent._meta.db_table
CANCELLED_QUEUED = "cancelled before execution"
CANCELLED_EXECUTING = "Run {run_id} was cancelled"  # AgentOS' content of a run cancelled before it wrote anything
CANCELLED_PAUSED = "cancelled while paused awaiting continuation"
PARKED = "The worker executing the continuation was lost; the run is paused again and can be continued again."
RUNS = Run._meta.db_table


def cancelled_content(run_id) -> str:
    return CANCELLED_EXECUTING.format(run_id=run_id)


def run_record_leg(*, run_id, attempt: int, leg: LegResult, final: bool) -> None:
    """Write how a leg ended: run status and output, its stored events, the session's history and state.

    Runs inside the transaction that settles the ticket, fenced on `attempt`. `final` says an error ends the
    run (ERROR, with a RunError event); otherwise the run waits for its retry (PENDING). What the agent produced
    is stored as `jsonsafe.storable` makes it (a NUL or an unpaired surrogate becomes U+FFFD).
    """
    calls = run_record_leg_calls(run_id=run_id, attempt=attempt, leg=leg, final=final)
    with connection.cursor() as cursor:
        cursor.execute(*together(*calls))  # one round trip
    leg.sink.publish_held_on_commit()


def run_record_leg_calls(*, run_id, attempt: int, leg: LegResult, final: bool, fence: str | None = None) -> list:
    """`run_record_leg`'s statements (SQL and values), to send in one message; with `fence`, each writes only in
    the transaction the queue marked with it (`queueing.seam.FENCE`). The caller publishes the held events
    once they commit."""
    sink, result = leg.sink, leg.result
    row = {"run_id": run_id, "attempt": attempt, "next_event_index": None, "fence": fence}
    if result is None:
        error = storable(leg.error)
        if final:
            sink.emit(event_name(sink.run.component_type, "error"), {"content": error})
        update = _RECORD_ERROR
        row.update(status=RunStatus.ERROR if final else RunStatus.PENDING, content=error, final=final)
    else:
        status = RUN_STATUS_OF_TICKET[TicketStatus(result.status)]
        content = storable(result.content)
        if status == RunStatus.CANCELLED:
            content = content or cancelled_content(run_id)  # partial content stays as it is
            sink.emit(event_name(sink.run.component_type, "cancelled"), {"content": content})
        update = _RECORD_RESULT
        row.update(
            status=status,
            content=content,
            metrics=json_or_null(storable(result.metrics)),
            tools=json_or_null(storable(result.tools)),
            run_messages=json.dumps(storable(result.messages or [])),
            cancellation_stage=CancellationStage.EXECUTING if status == RunStatus.CANCELLED else None,
            completed=status != RunStatus.PAUSED,
        )
    row["next_event_index"] = sink.next_index
    calls = [update.call(row)]
    if sink.stored:
        calls.insert(0, _store_events_call(sink, fence))
    if result is not None and result.status == RunResult.COMPLETED:
        state = {"session_id": sink.run.session_id, "state": json.dumps(storable(result.session_state)), "fence": fence}
        calls.append(_SAVE_STATE.call(state))
    return calls


_FENCE_TYPES = {
    "run_id": "uuid",
    "attempt": "int",
    "next_event_index": "int",
    "status": "text",
    "content": "text",
    "fence": "text",
}
_FENCED = f"(%(fence)s IS NULL OR {FENCE})"  # in the queue's one-message settle: only if the ticket's change matched
_RECORD_RESULT = Prepared(
    "agentos_record_result",
    f"""
    UPDATE {RUNS} SET next_event_index = %(next_event_index)s, status = %(status)s, content = %(content)s,
           metrics = %(metrics)s, tools = %(tools)s, run_messages = %(run_messages)s,
           cancellation_stage = %(cancellation_stage)s,
           completed_at = CASE WHEN %(completed)s THEN statement_timestamp() END,
           continued_tools = NULL  -- this leg applied them
    WHERE run_id = %(run_id)s AND attempt = %(attempt)s AND {_FENCED}
    """,
    {
        **_FENCE_TYPES,
        "metrics": "jsonb",
        "tools": "jsonb",
        "run_messages": "jsonb",
        "cancellation_stage": "text",
        "completed": "boolean",
    },
)
_RECORD_ERROR = Prepared(  # final: the run ends ERROR; else it waits for its retry, PENDING
    "agentos_record_error",
    f"""
    UPDATE {RUNS} SET next_event_index = %(next_event_index)s, status = %(status)s, content = %(content)s,
           completed_at = CASE WHEN %(final)s THEN statement_timestamp() END,
           continued_tools = CASE WHEN %(final)s THEN NULL ELSE continued_tools END
    WHERE run_id = %(run_id)s AND attempt = %(attempt)s AND {_FENCED}
    """,
    {**_FENCE_TYPES, "final": "boolean"},
)
_STORE_EVENTS = Prepared(
    "agentos_store_events",
    f"""
    INSERT INTO {EVENTS} (run_id, event_index, attempt, event, data)
    SELECT %(run_id)s, (event ->> 'event_index')::int, %(attempt)s, event ->> 'event', event
    FROM jsonb_array_elements(%(events)s) AS event
    WHERE {_FENCED}
    """,
    {"run_id": "uuid", "attempt": "int", "events": "jsonb", "fence": "text"},
)


def _store_events_call(sink: EventSink, fence: str | None = None) -> tuple[str, list]:
    """The sink's stored events as one INSERT (all but content chunks, as `jsonsafe.storable` makes them)."""
    events = json.dumps(storable(sink.stored))
    return _STORE_EVENTS.call({"run_id": sink.run.run_id, "attempt": sink.attempt, "events": events, "fence": fence})


_SAVE_STATE = Prepared(
    "agentos_save_state",
    f"UPDATE {SESSIONS} SET session_state = %(state)s, updated_at = statement_timestamp() "
    f"WHERE session_id = %(session_id)s AND {_FENCED}",
    {"state": "jsonb", "session_id": "text", "fence": "text"},
)


def run_end_unexecuted(*, run_id, status: str, content: str, stage: str | None, event_role: str) -> None:
    """Mirror a ticket that ended while no attempt was executing it (swept, cancelled while queued or paused).

    Stores the terminal event (`event_role`: "error" or "cancelled") after the run's last index, stored or
    published, and publishes it once the caller's transaction commits.
    """
    Run.objects.filter(pk=run_id).update(status=status, content=content, cancellation_stage=stage, completed_at=Now())
    run_record_end_event(run_id=run_id, event_role=event_role, content=content)


def run_park(*, run_id) -> None:
    """A continuation leg was lost before it recorded anything: the run is paused again, on the same pending
    calls, and may be continued again (a RunPaused ends any stream that watched the lost leg)."""
    Run.objects.filter(pk=run_id).update(status=RunStatus.PAUSED, continued_tools=None)
    tools, kind = Run.objects.values_list("tools", "component_type").get(pk=run_id)
    asked = run_pause_asked(run_id=run_id, kind=kind)  # the same requirements, so a client's answers still fit
    run_record_end_event(run_id=run_id, event_role="paused", content=PARKED, fields={"tools": tools, **asked})


def run_record_end_event(*, run_id, event_role: str, content: str, fields: dict | None = None) -> None:
    """Store the event that ends the run's stream after its last index, and publish it once this commits."""
    run = Run.objects.select_for_update().get(pk=run_id)
    sink = EventSink(run, run.attempt, first_event_index(run))
    sink.emit(event_name(run.component_type, event_role), {"content": content, **(fields or {})})
    _store_events(sink)
    sink.publish_held_on_commit()
    Run.objects.filter(pk=run_id).update(next_event_index=sink.next_index)


def run_reset_pending(*, run_id, requeued: bool = False) -> None:
    """A run waits again: PENDING, its previous output cleared. A requeued one (a dead letter back in line)
    also forgets a cancellation asked of it, so it really executes again. Its events stay: the new leg numbers on
    after them, and its streams go on past the old end (`runs.events.streams.Tail`)."""
    fields = {"cancel_requested_at": None} if requeued else {}
    Run.objects.filter(pk=run_id).update(
        status=RunStatus.PENDING, content=None, tools=None, cancellation_stage=None, completed_at=None, **fields
    )
    if requeued:
        transaction.on_commit(lambda: cancel_signal.cancel_clear(run_id))


def _store_events(sink: EventSink) -> None:
    if sink.stored:
        with connection.cursor() as cursor:
            cursor.execute(*_store_events_call(sink))
