"""Every change of a run's status, each one guarded statement or part of one (STYLE 3, 7).

A run with a ticket mirrors it: the ticket's guarded change (`queueing.tickets`) decides, and the run changes in
the same transaction or statement, fenced on the attempt. A run without a ticket (inline, or the durable queue
off) is guarded by its own status. The transition table, which `tests/runs/test_states.py` walks:

    from                 event                                   to                             by
    -                    accepted with a ticket                  PENDING                        ACCEPT_RUN
    -                    accepted without a ticket               PENDING                        run_create
    PENDING | RUNNING    ticket claimed by a newer attempt       RUNNING, the claim's attempt   START_SQL
    PENDING, no ticket   its turn in this process                RUNNING, attempt + 1           run_start_unqueued
    RUNNING              its leg completed | paused | cancelled  COMPLETED | PAUSED | CANCELLED run_record_leg
    RUNNING              its leg failed, for good | to retry     ERROR | PENDING                run_record_leg
    (ticket decides)     ticket failed | cancelled, no leg       ERROR | CANCELLED              run_end_unexecuted
    (ticket decides)     ticket of a lost continuation parked    PAUSED                         run_park
    (ticket decides)     ticket queued again (retry, requeue)    PENDING                        run_reset_pending
    PENDING | PAUSED     cancel, no ticket                       CANCELLED                      run_cancel_unqueued
    PENDING | RUNNING    its process stops, no ticket            ERROR                          run_end_unqueued
    PAUSED               continue                                PENDING                        run_continue_pending

A leg's record is fenced on its attempt: a leg of an older attempt changes nothing.
"""

from __future__ import annotations

import json
import uuid

from django.db import connection, transaction
from django.db.models import Case, F, PositiveIntegerField, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from agentos_project.core.jsonsafe import json_or_null, storable
from agentos_project.core.postgres.prepared import Prepared, together
from agents_registry.context import LegStatus
from agents_registry.events import event_name
from queueing.seam import ADMITTED, CLAIMED, GATE, SettleStatements

from ..models import RUN_STATUS_OF_LEG, CancellationStage, Run, RunStatus
from ..selectors import run_pause_asked
from ..submission import Submission
from . import cancel_signal
from .leg import LegResult
from .record import FENCE_MATCHED, end_event, ending_run, run_record_end_event, save_state_call, store_events_call

RUNS = Run._meta.db_table
CANCELLED_QUEUED = "cancelled before execution"
CANCELLED_EXECUTING = "Run {run_id} was cancelled"  # AgentOS' content of a run cancelled before it wrote anything
CANCELLED_PAUSED = "cancelled while paused awaiting continuation"
PARKED = "The worker executing the continuation was lost; the run is paused again and can be continued again."


def cancelled_content(run_id) -> str:
    return CANCELLED_EXECUTING.format(run_id=run_id)


# The run's row in the queue's accept statement (`submit.ACCEPT_ROWS`, which defines the CTE `owner`): PENDING,
# written only when the session is the submitter's and the gate is open.
ACCEPT_RUN = f"""{ADMITTED} AS (
        INSERT INTO {RUNS} (run_id, session_id, component_type, component_id, user_id, status, input_content,
                            session_state_input, metadata, background, stream, queued, attempt, run_messages,
                            next_event_index, tool_decisions, stream_inbox)
        SELECT %(ticket_id)s, %(session_id)s, %(component_type)s, %(component_id)s, %(user_id)s, 'PENDING',
               %(message)s, %(session_state)s::jsonb, %(metadata)s::jsonb, %(background)s, %(stream)s, true, 0,
               '[]', 0, '[]', %(stream_inbox)s
        FROM owner, {GATE}
        WHERE {GATE}.open AND owner.component_type = %(component_type)s AND owner.component_id = %(component_id)s
          AND owner.user_id IS NOT DISTINCT FROM %(user_id)s
        RETURNING run_id)"""

# The executor's `start_sql`, in the claiming statement: RUNNING for the claimed attempt unless a newer attempt
# started it; its history pinned at its first claim (`Run.history_until`).
START_SQL = (
    f"UPDATE {RUNS} AS r SET status = 'RUNNING', attempt = {CLAIMED}.attempt, "
    f"started_at = statement_timestamp(), history_until = coalesce(r.history_until, statement_timestamp()) "
    f"FROM {CLAIMED} WHERE r.run_id = {CLAIMED}.id AND r.attempt < {CLAIMED}.attempt"
)


def run_create(*, submission: Submission, queued: bool) -> Run:
    """A new run, PENDING, of a session its submitter owns (`sessions.session_own`)."""
    component = submission.component
    return Run.objects.create(
        run_id=uuid.uuid4(),
        session_id=submission.session_id,
        component_type=component.kind,
        component_id=component.id,
        user_id=submission.user_id,
        input_content=submission.message,
        session_state_input=submission.session_state,
        metadata=submission.metadata,
        background=submission.background,
        stream=submission.stream,
        queued=queued,
    )


def run_start_unqueued(*, run_id) -> bool:
    """A run without a ticket, PENDING → RUNNING for one more attempt; False when it was not waiting (cancelled
    meanwhile, or started by another)."""
    started = Run.objects.filter(pk=run_id, queued=False, status=RunStatus.PENDING).update(
        status=RunStatus.RUNNING, attempt=F("attempt") + 1, started_at=Now()
    )
    return bool(started)


def run_record_leg(*, run_id, attempt: int, leg: LegResult, final: bool, fence: str | None = None) -> SettleStatements:
    """How a leg ended, as statements: run status and output, its stored events, the session's history and state.

    Sent in the transaction that settles the ticket (a run without one: in its own, `send_statements`), fenced on
    `attempt` (and with `fence`, each writes only in the transaction the queue marked with it,
    `queueing.seam.FENCE`). `final` says an error ends the run (ERROR, with a
    RunError event); otherwise the run waits for its retry (PENDING). What the agent produced is stored as
    `jsonsafe.storable` makes it (a NUL or an unpaired surrogate becomes U+FFFD). Once they committed, the leg's
    held events are published (`LegResult.recorded`).
    """
    sink, result = leg.sink, leg.result
    journaled = leg.journal.write_call(fence, answered=result is not None) if leg.journal is not None else None
    row = {"run_id": run_id, "attempt": attempt, "next_event_index": None, "fence": fence}
    if result is None:
        error = storable(leg.error)
        if final:
            sink.emit(event_name(sink.run.component_type, "error"), {"content": error})
        update = _RECORD_ERROR
        row.update(status=RunStatus.ERROR if final else RunStatus.PENDING, content=error, final=final)
    else:
        status = RUN_STATUS_OF_LEG[result.status]
        content = storable(result.content)
        if status == RunStatus.CANCELLED:
            content = content or cancelled_content(run_id)  # partial content stays as it is
            sink.emit(event_name(sink.run.component_type, "cancelled"), {"content": content})
        update = _RECORD_RESULT
        row.update(
            status=status,
            content=content,
            content_type=None if result.content_type == "str" else result.content_type,
            metrics=json_or_null(storable(result.metrics)),
            tools=json_or_null(storable(result.tools)),
            run_messages=json.dumps(storable(result.messages or [])),
            paused_state=json.dumps(storable(result.session_state)) if status == RunStatus.PAUSED else None,
            cancellation_stage=CancellationStage.EXECUTING if status == RunStatus.CANCELLED else None,
            completed=status != RunStatus.PAUSED,
        )
    row["next_event_index"] = sink.next_index
    calls = [update.call(row)]
    if sink.stored:
        calls.insert(0, store_events_call(sink, fence))
    if result is not None and result.status == LegStatus.COMPLETED:
        calls.append(save_state_call(session_id=sink.run.session_id, state=result.session_state, fence=fence))
    if journaled is not None:
        calls.insert(0, journaled)  # while the run is still RUNNING under this attempt, as its fence wants
    return SettleStatements(calls, after=leg.recorded)


_FENCE_TYPES = {
    "run_id": "uuid",
    "attempt": "int",
    "next_event_index": "int",
    "status": "text",
    "content": "text",
    "fence": "text",
}
_RECORD_RESULT = Prepared(
    "agentos_record_result",
    f"""
    UPDATE {RUNS} SET next_event_index = %(next_event_index)s, status = %(status)s, content = %(content)s,
           content_type = %(content_type)s, metrics = %(metrics)s, tools = %(tools)s, run_messages = %(run_messages)s,
           paused_state = %(paused_state)s, cancellation_stage = %(cancellation_stage)s,
           completed_at = CASE WHEN %(completed)s THEN statement_timestamp() END,
           continued_tools = NULL  -- this leg applied them
    WHERE run_id = %(run_id)s AND attempt = %(attempt)s AND {FENCE_MATCHED}
    """,
    {
        **_FENCE_TYPES,
        "content_type": "text",
        "metrics": "jsonb",
        "tools": "jsonb",
        "run_messages": "jsonb",
        "paused_state": "jsonb",
        "cancellation_stage": "text",
        "completed": "boolean",
    },
)
_RECORD_ERROR = Prepared(  # final: the run ends ERROR; else it waits for its retry, PENDING
    "agentos_record_error",
    f"""
    UPDATE {RUNS} SET next_event_index = %(next_event_index)s, status = %(status)s, content = %(content)s,
           content_type = NULL, completed_at = CASE WHEN %(final)s THEN statement_timestamp() END
    WHERE run_id = %(run_id)s AND attempt = %(attempt)s AND {FENCE_MATCHED}
    """,
    {**_FENCE_TYPES, "final": "boolean"},
)


def run_end_unexecuted(
    *, run_id, status: str, content: str, stage: str | None, event_role: str, fence: str | None = None
) -> SettleStatements:
    """A run ended with no leg to record (ERROR or CANCELLED at `stage`), as statements (with `fence`, as
    `run_record_leg`'s): its row, and its terminal event (`event_role`: "error" or "cancelled") after its last
    index, stored or published; the event is published once they committed. Its row is locked first inside a
    transaction (`record.ending_run`)."""
    sink = end_event(ending_run(run_id), event_role=event_role, content=content)
    row = {"run_id": run_id, "status": status, "content": content, "stage": stage}
    row.update(next_event_index=sink.next_index, fence=fence)
    return SettleStatements([_END_UNEXECUTED.call(row), store_events_call(sink, fence)], after=sink.publish_held)


def run_park(*, run_id, fence: str | None = None) -> SettleStatements:
    """A continuation leg was lost before it recorded anything: the run is paused again, on the same pending
    calls, and may be continued again (a RunPaused ends any stream that watched the lost leg). As statements, like
    `run_end_unexecuted`'s."""
    run = ending_run(run_id)
    asked = run_pause_asked(run_id=run_id, kind=run.component_type)  # the same requirements: a client's answers fit
    sink = end_event(run, event_role="paused", content=PARKED, fields={"tools": run.tools, **asked})
    row = {"run_id": run_id, "next_event_index": sink.next_index, "fence": fence}
    return SettleStatements([_PARK.call(row), store_events_call(sink, fence)], after=sink.publish_held)


_ENDING_TYPES = {"run_id": "uuid", "next_event_index": "int", "fence": "text"}
_END_UNEXECUTED = Prepared(
    "agentos_end_unexecuted",
    f"""
    UPDATE {RUNS} SET status = %(status)s, content = %(content)s, content_type = NULL, cancellation_stage = %(stage)s,
           completed_at = statement_timestamp(), next_event_index = %(next_event_index)s
    WHERE run_id = %(run_id)s AND {FENCE_MATCHED}
    """,
    {**_ENDING_TYPES, "status": "text", "content": "text", "stage": "text"},
)
_PARK = Prepared(
    "agentos_park",
    f"""
    UPDATE {RUNS} SET status = 'PAUSED', continued_tools = NULL, next_event_index = %(next_event_index)s
    WHERE run_id = %(run_id)s AND {FENCE_MATCHED}
    """,
    _ENDING_TYPES,
)


def send_statements(statements: SettleStatements) -> None:
    """Send a run's statements made without a fence (a run without a ticket) in one round trip, in the caller's
    transaction; what they do once committed, after the commit."""
    with connection.cursor() as cursor:
        cursor.execute(*together(*statements.calls))
    if statements.after is not None:
        transaction.on_commit(statements.after)


def run_reset_pending(*, run_id, requeued: bool = False, fence: str | None = None) -> SettleStatements:
    """A run waits again: PENDING, its previous output cleared, as a statement (with `fence`, as
    `run_record_leg`'s). A requeued one (a dead letter back in line) also forgets a cancellation asked of it, so it
    really executes again, its cancel intent cleared once that committed; unless it was continuing (its
    continuation leg failed: that leg runs again), it starts again from its input, its first leg again
    (`decisions_before_restart`), whose journal it replays. Its events stay: the new leg numbers on after them, and
    its streams go on past the old end (`runs.events.tail.Tail`)."""
    call = _RESET_PENDING.call({"run_id": run_id, "requeued": requeued, "fence": fence})
    return SettleStatements([call], after=(lambda: cancel_signal.cancel_clear(run_id)) if requeued else None)


_RESET_PENDING = Prepared(
    "agentos_reset_pending",
    f"""
    UPDATE {RUNS} SET status = 'PENDING', content = NULL, content_type = NULL, tools = NULL,
           cancellation_stage = NULL, completed_at = NULL,
           cancel_requested_at = CASE WHEN %(requeued)s THEN NULL ELSE cancel_requested_at END,
           decisions_before_restart = CASE WHEN %(requeued)s AND continued_tools IS NULL
                                           THEN jsonb_array_length(tool_decisions) ELSE decisions_before_restart END
    WHERE run_id = %(run_id)s AND {FENCE_MATCHED}
    """,
    {"run_id": "uuid", "requeued": "boolean", "fence": "text"},
)


def run_cancel_unqueued(*, run_id) -> bool:
    """A run without a ticket that waits for its slot (PENDING, stage PENDING) or is paused (stage PAUSED) →
    CANCELLED; False when it is executing (or ended)."""
    waiting = ((RunStatus.PENDING, CANCELLED_QUEUED), (RunStatus.PAUSED, CANCELLED_PAUSED))
    with transaction.atomic():
        runs = Run.objects.filter(pk=run_id, queued=False)
        for status, content in waiting:
            ending = {"content": content, "cancellation_stage": CancellationStage.of(status), "completed_at": Now()}
            if runs.filter(status=status).update(status=RunStatus.CANCELLED, **ending):
                run_record_end_event(run_id=run_id, event_role="cancelled", content=content)
                return True
    return False


def run_end_unqueued(*, run_id, content: str) -> bool:
    """A run without a ticket that its stopping process could not finish, waiting for its slot (PENDING) or still
    executing (RUNNING) → ERROR with `content`, and its stream's end stored; in the caller's transaction. An
    executing one's attempt moves on, so the record of its leg, should it still come, matches nothing. False when
    it had ended (or paused) meanwhile."""
    fenced = Case(
        When(status=RunStatus.RUNNING, then=F("attempt") + 1), default=F("attempt"), output_field=PositiveIntegerField()
    )
    ended = Run.objects.filter(pk=run_id, queued=False, status__in=(RunStatus.PENDING, RunStatus.RUNNING)).update(
        status=RunStatus.ERROR, content=content, content_type=None, completed_at=Now(), attempt=fenced
    )
    if ended:
        run_record_end_event(run_id=run_id, event_role="error", content=content)
    return bool(ended)


def run_continue_pending(*, run_id, decided: list[dict]) -> bool:
    """PAUSED → PENDING with the client's decisions on its pending calls (`continued_tools`, and appended to
    `tool_decisions`), for the leg that continues it; False when the run was not paused."""
    continued = Run.objects.filter(pk=run_id, status=RunStatus.PAUSED).update(
        status=RunStatus.PENDING,
        continued_tools=decided,
        tool_decisions=RawSQL("tool_decisions || %s::jsonb", [json.dumps([decided])]),
    )
    return bool(continued)
