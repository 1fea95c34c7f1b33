"""Writes of the runs app: accepting a run, starting it, and recording how it ended."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import Future

from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from agentos_project.conf import current
from agentos_project.exceptions import first_line
from agentos_project.postgres.prepared import Prepared, together
from agents_registry.context import RunResult
from agents_registry.events import event_name
from queueing import metrics
from queueing.seam import ADMITTED, FENCE, GATE, NewTicket, Rows
from queueing.tickets import ticket_accept

from ..exceptions import BackgroundNeedsStore, SessionNotYours
from ..jsonsafe import storable
from ..models import AgentSession, Run, RunEvent, RunStatus
from ..selectors import run_pause_asked, run_to_wire
from ..submission import Accepted, Submission
from . import cancel_signal
from .idempotency import idempotent_replay
from .leg import EventSink, LegResult, cancelled_leg, first_event_index, run_leg
from .unqueued import InProcessRunner

SESSIONS = AgentSession._meta.db_table
EVENTS = RunEvent._meta.db_table
CANCELLED_QUEUED = "cancelled before execution"
CANCELLED_EXECUTING = "Run {run_id} was cancelled"  # AgentOS' content of a run cancelled before it wrote anything
CANCELLED_PAUSED = "cancelled while paused awaiting continuation"
PARKED = "The worker executing the continuation was lost; the run is paused again and can be continued again."
LEG_STATUS = {
    RunResult.COMPLETED: RunStatus.COMPLETED,
    RunResult.PAUSED: RunStatus.PAUSED,
    RunResult.CANCELLED: RunStatus.CANCELLED,
}


def cancelled_content(run_id) -> str:
    return CANCELLED_EXECUTING.format(run_id=run_id)


def session_claim(*, session_id: str, component_type: str, component_id: str, user_id: str | None) -> None:
    """Create the session for this component and user, or make sure an existing one is theirs.

    A session belongs to the component and user that created it; anyone else naming it gets `SessionNotYours`
    (409) and never sees its history. One statement in the common case: the insert, or else the owner's row.
    A row whose creator had not committed when the statement began is read again once that creator is done.
    """
    owner = (component_type, component_id, user_id)
    existing = f"SELECT component_type, component_id, user_id FROM {SESSIONS} WHERE session_id = %s"
    claim = f"""
        WITH inserted AS (
            INSERT INTO {SESSIONS} (session_id, component_type, component_id, user_id, session_state)
            VALUES (%s, %s, %s, %s, '{{}}') ON CONFLICT (session_id) DO NOTHING
            RETURNING component_type, component_id, user_id)
        SELECT * FROM inserted UNION ALL {existing} LIMIT 1
    """
    with connection.cursor() as cursor:
        cursor.execute(claim, [session_id, *owner, session_id])
        row = cursor.fetchone()
        if row is None:
            cursor.execute(existing, [session_id])
            row = cursor.fetchone()
    if tuple(row) != owner:
        raise SessionNotYours(session_id)


def _create_run(submission: Submission, *, queued: bool) -> Run:
    component = submission.component
    session_claim(
        session_id=submission.session_id,
        component_type=component.kind,
        component_id=component.id,
        user_id=submission.user_id,
    )
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


RUNS = Run._meta.db_table
# The run's and its session's rows in the accept's one statement (`queueing.tickets.ticket_accept`): the session
# is created unless it exists; the run is written only when the session is the submitter's (and the gate is open).
# `owner` is empty when the session was created by a writer that had not committed when the statement began.
ACCEPT_ROWS = f"""
    new_session AS (
        INSERT INTO {SESSIONS} (session_id, component_type, component_id, user_id, session_state)
        SELECT %(session_id)s, %(component_type)s, %(component_id)s, %(user_id)s, '{{}}' FROM {GATE} WHERE open
        ON CONFLICT (session_id) DO NOTHING
        RETURNING component_type, component_id, user_id),
    owner AS (
        SELECT component_type, component_id, user_id FROM new_session
        UNION ALL SELECT component_type, component_id, user_id FROM {SESSIONS} WHERE session_id = %(session_id)s
        LIMIT 1),
    {ADMITTED} AS (
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


ACCEPT_TYPES = {
    "message": "text",
    "session_state": "jsonb",
    "metadata": "jsonb",
    "background": "boolean",
    "stream": "boolean",
    "stream_inbox": "text",
}


def _json_or_null(value) -> str | None:
    return None if value is None else json.dumps(value)


def run_submit(*, submission: Submission) -> Accepted:
    """Accept a background run durably: session, run and ticket rows commit together (one round trip, one
    transaction, `ticket_accept`), then the ticket is published.

    Refuses (writing nothing) a component without a store (400), a session of another component or user (409);
    replays an earlier submission with the same Idempotency-Key (CONTRACT 7), before the queue-depth check (429,
    exact). Two identical submits racing each other yield one run: the unique index makes the loser roll back
    and replay the winner. With the durable queue off, the run executes in this process instead
    (`run_submit_in_process`).
    """
    conf = current().queue
    component = submission.component
    if not component.has_store:
        raise BackgroundNeedsStore()
    if not conf.durable:
        return run_submit_in_process(submission=submission)
    if submission.idempotency_key and (earlier := idempotent_replay(submission)):
        return earlier
    started = time.perf_counter()
    run_id = uuid.uuid4()
    ticket = NewTicket(
        id=run_id,
        component_type=component.kind,
        component_id=component.id,
        session_id=submission.session_id,
        user_id=submission.user_id,
        payload=submission.payload(),
        serialized=conf.effective_per_session or component.one_turn_per_session,
        max_attempts=conf.max_attempts,
        idempotency_key=submission.idempotency_key,
        idempotency_scope=submission.user_id or "",
        request_digest=submission.digest(),
    )
    rows = Rows(
        "run",
        ACCEPT_ROWS,
        {
            "message": submission.message,
            "session_state": _json_or_null(submission.session_state),
            "metadata": _json_or_null(submission.metadata),
            "background": submission.background,
            "stream": submission.stream,
            "stream_inbox": submission.stream_inbox,
        },
        types=ACCEPT_TYPES,
        answers=("EXISTS (SELECT 1 FROM owner)",),
    )
    try:
        for _ in range(2):  # a second time only when the session was created meanwhile by an unlocked writer
            admitted = ticket_accept(ticket=ticket, rows=rows, max_queue_depth=conf.max_queue_depth)
            (owned,) = admitted.answers
            if admitted.accepted or owned:
                break
    except IntegrityError:
        if submission.idempotency_key and (winner := idempotent_replay(submission)):
            return winner
        raise
    if not admitted.accepted:
        raise SessionNotYours(submission.session_id)
    metrics.recorder.observe("accept_latency_seconds", time.perf_counter() - started)
    return Accepted(str(run_id), submission.session_id, RunStatus.PENDING, stream_inbox=submission.stream_inbox)


def run_submit_in_process(*, submission: Submission) -> Accepted:
    """AGENTOS_QUEUE_DURABLE=false: the run row commits, then the run waits for a slot of this process's bounded
    pool (runs.services.unqueued). Not durable, not ordered, no ticket."""
    with transaction.atomic():
        run = _create_run(submission, queued=False)
        runner.submit(run.run_id)
    return Accepted(str(run.run_id), run.session_id, run.status)


def run_start(*, run_id, attempt: int) -> bool:
    """Mark the run RUNNING for `attempt`; False when a newer attempt already started it (fenced)."""
    return bool(
        Run.objects.filter(pk=run_id, attempt__lt=attempt).update(
            status=RunStatus.RUNNING, attempt=attempt, started_at=Now()
        )
    )


def run_execute_unqueued(*, run_id) -> None:
    """Execute a run that has no ticket (inline, or in-process with the durable queue off): one attempt per leg
    (a continue makes another), recorded like a queued run's. A run cancelled while it waited for its slot is
    not started; one cancelled while it ran ends CANCELLED even if it paused or failed meanwhile."""
    started = Run.objects.filter(pk=run_id, queued=False, status=RunStatus.PENDING).update(
        status=RunStatus.RUNNING, attempt=F("attempt") + 1, started_at=Now()
    )
    if not started:
        return
    try:
        run = Run.objects.get(pk=run_id)
        with cancel_signal.watcher.watch(run_id) as cancel:
            leg = run_leg(
                run, attempt=run.attempt, timeout_seconds=current().queue.timeout_seconds, cancelled=cancel.is_set
            )
        with transaction.atomic():
            # The row locked first: a cancel asked until now is seen here, one asked later finds the run ended.
            asked = Run.objects.select_for_update().values_list("cancel_requested_at", flat=True).get(pk=run_id)
            if (asked or cancel.is_set()) and leg.yields_to_cancel:
                leg = cancelled_leg(leg)
            run_record_leg(run_id=run_id, attempt=run.attempt, leg=leg, final=True)
    except Exception as error:  # never leave a run without a ticket RUNNING: no sweeper would end it
        with transaction.atomic():
            content = f"Run outcome could not be stored: {first_line(error)}"
            run_end_unexecuted(run_id=run_id, status=RunStatus.ERROR, content=content, stage=None, event_role="error")


runner = InProcessRunner(execute=run_execute_unqueued, size=lambda: current().queue.max_concurrency)


def run_execute_inline(*, run_id) -> dict:
    """An inline run, executed; returns its poll body."""
    run_execute_unqueued(run_id=run_id)
    return run_to_wire(Run.objects.get(pk=run_id))


inline_runner = InProcessRunner(execute=run_execute_inline, size=lambda: None, name="agentos-inline")


def run_start_inline(*, submission: Submission) -> tuple[Run, Future]:
    """Start a run in this process for the request that waits on it (background=false): not queued, not ordered.

    The run row commits first; the returned future is done when the run has ended. The caller cancels the run
    (`run_cancel_by_id`) if its client goes away.
    """
    with transaction.atomic():
        run = _create_run(submission, queued=False)
    return run, inline_runner.start(run.run_id)


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
        status = LEG_STATUS[result.status]
        content = storable(result.content)
        if status == RunStatus.CANCELLED:
            content = content or cancelled_content(run_id)  # partial content stays as it is
            sink.emit(event_name(sink.run.component_type, "cancelled"), {"content": content})
        update = _RECORD_RESULT
        row.update(
            status=status,
            content=content,
            metrics=_json_or_null(storable(result.metrics)),
            tools=_json_or_null(storable(result.tools)),
            run_messages=json.dumps(storable(result.messages or [])),
            cancellation_stage="EXECUTING" if status == RunStatus.CANCELLED else None,
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
