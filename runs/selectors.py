"""Reads of the runs app: the poll body (CONTRACT 3.2)."""

from __future__ import annotations

import datetime
import json
import uuid

from django.db import connection

from agentos_project.core.conf import current
from agentos_project.core.postgres.prepared import Prepared
from agents_registry.events import event_name
from agents_registry.requirements import PAUSE_FIELDS
from queueing.selectors import ticket_user_cap, ticket_waiting_on

from .exceptions import RunNotFound
from .models import AgentSession, Run, RunEvent, RunStatus, Step


def run_get(*, kind: str, component_id: str, run_id: str, session_id: str, visible_to: str | None = None) -> Run:
    """The run, only when it belongs to this component and session (and to the user `visible_to`, when one is
    named: another user's run is as unknown as one that does not exist); else `RunNotFound` (404)."""
    run = run_find(kind=kind, component_id=component_id, run_id=run_id, session_id=session_id, visible_to=visible_to)
    if run is None:
        raise RunNotFound()
    return run


RUNS = Run._meta.db_table
SESSIONS = AgentSession._meta.db_table
# The run, its session's state and its history window (the messages of the last %(window)s runs completed until
# the run's `history_until`, or all with NULL), in one statement: what a worker needs to execute a leg. The run's
# columns are named (not r.*), so a column a later migration adds does not change the prepared statement's result.
LEG = Prepared(
    "agentos_leg",
    f"""
    SELECT {", ".join(f"r.{field.column}" for field in Run._meta.concrete_fields)}, s.session_state::text AS leg_state,
           (SELECT coalesce(jsonb_agg(h.run_messages ORDER BY h.completed_at, h.run_id), '[]')::text
            FROM (SELECT run_messages, completed_at, run_id FROM {RUNS}
                  WHERE session_id = r.session_id AND status = 'COMPLETED'
                    AND (r.history_until IS NULL OR completed_at <= r.history_until)
                  ORDER BY completed_at DESC, run_id DESC LIMIT %(window)s) AS h) AS leg_history
    FROM {RUNS} AS r JOIN {SESSIONS} AS s ON s.session_id = r.session_id
    WHERE r.run_id = %(run_id)s AND r.attempt = %(attempt)s
    """,
    {"window": "bigint", "run_id": "uuid", "attempt": "int"},
)


_RUN_FIELDS = [field.attname for field in Run._meta.concrete_fields]
_FROM_DB = [getattr(field, "from_db_value", None) for field in Run._meta.concrete_fields]  # JSON fields decode


def run_for_leg(*, run_id: str, attempt: int, window: int | None) -> tuple[Run, dict, list[dict]] | None:
    """The run as `attempt` left it, its session's state and its history (`session_history`, as it stood when the
    run was first claimed), in one round trip; None when a newer attempt started the run."""
    with connection.cursor() as cursor:
        cursor.execute(*LEG.call({"run_id": run_id, "attempt": attempt, "window": window}))
        row = cursor.fetchone()
    if row is None:
        return None
    *columns, state, history = row
    values = [
        value if convert is None else convert(value, None, connection)
        for convert, value in zip(_FROM_DB, columns, strict=True)
    ]
    run = Run.from_db(connection.alias, _RUN_FIELDS, values)
    return run, json.loads(state), [message for messages in json.loads(history) for message in messages]


def session_history(*, session_id: str, runs: int | None = None) -> list[dict]:
    """The session's history: the messages of its completed runs, in the order they completed; with `runs`, of
    the last `runs` of them only (one index range read, however long the session has grown)."""
    completed = Run.objects.filter(session_id=session_id, status=RunStatus.COMPLETED)
    if runs is None:
        each = list(completed.order_by("completed_at", "run_id").values_list("run_messages", flat=True))
    else:
        each = list(completed.order_by("-completed_at", "-run_id").values_list("run_messages", flat=True)[:runs])
        each.reverse()
    return [message for messages in each for message in messages]


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def run_find(
    *, kind: str, component_id: str, run_id: str, session_id: str | None, visible_to: str | None = None
) -> Run | None:
    """The run of this component (and of this session, when one is named; of the user `visible_to`, when one is
    named), or None."""
    if not is_uuid(run_id):
        return None
    runs = Run.objects.filter(pk=run_id, component_type=kind, component_id=component_id)
    if visible_to is not None:
        runs = runs.filter(user_id=visible_to)
    return (runs.filter(session_id=session_id) if session_id else runs).first()


def _iso(value: datetime.datetime | None) -> str | None:
    return value.isoformat(timespec="microseconds") if value else None


USER_CAP_WAIT = "user {user} has {running} runs running, the most AGENTOS_MAX_RUNNING_PER_USER={cap} allows"


def run_waiting(run: Run) -> dict:
    """What a PENDING run waits for (CONTRACT 5.3, 17), as the poll shows it: `waiting_on`, the run ahead of it in its
    session's line; or, when its user's cap holds it, one of the user's running runs (the longest running) with
    `waiting_reason` saying so. Empty when it waits for nothing but a worker."""
    if run.status != RunStatus.PENDING or not run.queued:
        return {}
    ahead = ticket_waiting_on(ticket_id=run.run_id)
    if ahead is not None:
        return {"waiting_on": ahead}
    cap = current().queue.max_running_per_user
    held = ticket_user_cap(ticket_id=run.run_id, cap=cap)
    if held is None:
        return {}
    reason = USER_CAP_WAIT.format(user=held.user_id, running=held.running, cap=cap)
    return {"waiting_on": held.longest, "waiting_reason": reason}


def run_to_wire(run: Run, *, waiting: dict | None = None) -> dict:
    """The run as AgentOS clients read it; optional fields only when present."""
    body = {
        "run_id": str(run.run_id),
        "session_id": run.session_id,
        f"{run.component_type}_id": run.component_id,
        "status": run.status,
        "created_at": int(run.created_at.timestamp()),
        "input": {"input_content": run.input_content},
        "queue_attempt": run.attempt,
    }
    events = [event.data for event in RunEvent.objects.filter(run_id=run.run_id).only("data")]
    steps = run_steps(run_id=run.run_id) if run.queued else []  # a run without a ticket has no journal
    paused = run.status == RunStatus.PAUSED
    optional = {
        "user_id": run.user_id,  # the token's subject, with JWT on
        "content": run.content if run.content_type is None or run.content is None else json.loads(run.content),
        "content_type": run.content_type,
        "events": events or None,
        "metrics": run.metrics,
        "tools": run.tools if paused else None,
        **(pause_asked(run.component_type, events) if paused else {}),
        "tool_decisions": run.tool_decisions or None,  # beyond: what each continue decided
        "steps": steps or None,  # beyond: its journal, and how many of its steps a later attempt replayed
        "steps_replayed": sum(1 for step in steps if step["replays"]) if steps else None,
        "cancellation_stage": run.cancellation_stage if run.status == RunStatus.CANCELLED else None,
        **(waiting or {}),
        "started_at": _iso(run.started_at),
        "completed_at": _iso(run.completed_at),
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    return body


STEP_FIELDS = ("leg", "kind", "tool", "status", "attempt", "replays", "duration")


def run_steps(*, run_id) -> list[dict]:
    """The run's journal as the poll shows it: each model call and tool call of each leg, in order (no outputs)."""
    return list(Step.objects.filter(run_id=run_id).order_by("leg", "position").values(*STEP_FIELDS))


def pause_asked(kind: str, events: list[dict]) -> dict:
    """What the last pause among a run's stored `events` asked (AgentOS' `requirements`, or a workflow's
    `step_requirements` and where it paused), as its pause event told it."""
    paused = event_name(kind, "paused")
    for event in reversed(events):
        if event["event"] == paused:
            return {key: event[key] for key in PAUSE_FIELDS if key in event}
    return {}


def run_pause_asked(*, run_id, kind: str) -> dict:
    """`pause_asked` of the run's last stored pause event."""
    last = RunEvent.objects.filter(run_id=run_id, event=event_name(kind, "paused")).order_by("-event_index")
    return pause_asked(kind, list(last.values_list("data", flat=True)[:1]))


def run_stored_events(*, run_id, after: int, before: int | None = None) -> list[dict]:
    """The run's stored events with an index above `after` (and below `before`, when given), in order."""
    events = RunEvent.objects.filter(run_id=run_id, event_index__gt=after)
    if before is not None:
        events = events.filter(event_index__lt=before)
    return list(events.order_by("event_index").values_list("data", flat=True))


def run_status(*, run_id) -> str | None:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first()


def runs_cancel_requested(*, run_ids: list[str]) -> set[str]:
    """Those of `run_ids` (running runs) whose cancellation was asked for."""
    requested = Run.objects.filter(pk__in=run_ids, cancel_requested_at__isnull=False)
    return {str(run_id) for run_id in requested.values_list("pk", flat=True)}
