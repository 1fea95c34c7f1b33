"""What a run's record stores besides its row: its stored events, its session's state, and the event that ends
its stream when the run ends without a leg to record it (`states` writes the row)."""

from __future__ import annotations

import json

from django.db import connection

from agentos_project.core.jsonsafe import storable
from agentos_project.core.postgres.prepared import Prepared
from agents_registry.events import event_name
from queueing.seam import FENCE

from ..events.sink import EventSink, first_event_index
from ..models import AgentSession, Run, RunEvent

SESSIONS = AgentSession._meta.db_table
EVENTS = RunEvent._meta.db_table
# With a `fence` (every ticket change's statements, `Executor.settle`): only if the ticket's change matched; a run
# without a ticket sends none.
FENCE_MATCHED = f"(%(fence)s IS NULL OR {FENCE})"
_STORE_EVENTS = Prepared(
    "agentos_store_events",
    f"""
    INSERT INTO {EVENTS} (run_id, event_index, attempt, event, data)
    SELECT %(run_id)s, (event ->> 'event_index')::int, %(attempt)s, event ->> 'event', event
    FROM jsonb_array_elements(%(events)s) AS event
    WHERE {FENCE_MATCHED}
    """,
    {"run_id": "uuid", "attempt": "int", "events": "jsonb", "fence": "text"},
)
_SAVE_STATE = Prepared(
    "agentos_save_state",
    f"UPDATE {SESSIONS} SET session_state = %(state)s, updated_at = statement_timestamp() "
    f"WHERE session_id = %(session_id)s AND {FENCE_MATCHED}",
    {"state": "jsonb", "session_id": "text", "fence": "text"},
)


def store_events_call(sink: EventSink, fence: str | None = None) -> tuple[str, list]:
    """The sink's stored events as one INSERT (all but content chunks, as `jsonsafe.storable` makes them)."""
    events = json.dumps(storable(sink.stored))
    return _STORE_EVENTS.call({"run_id": sink.run.run_id, "attempt": sink.attempt, "events": events, "fence": fence})


def save_state_call(*, session_id: str, state: dict, fence: str | None = None) -> tuple[str, list]:
    """The session state a completed leg left, as one UPDATE of its session."""
    return _SAVE_STATE.call({"session_id": session_id, "state": json.dumps(storable(state)), "fence": fence})


def ending_run(run_id) -> Run:
    """The run whose stream is about to end, its row locked first inside a transaction (the queue's one-message
    finish reads it before, while its attempt owns the run)."""
    runs = Run.objects.select_for_update() if connection.in_atomic_block else Run.objects
    return runs.get(pk=run_id)


def end_event(run: Run, *, event_role: str, content: str, fields: dict | None = None) -> EventSink:
    """The event that ends `run`'s stream (read by `ending_run`), numbered after its last index (stored or
    published), held in a sink for the caller to store (`store_events_call`) and publish once that committed."""
    sink = EventSink(run, run.attempt, first_event_index(run))
    sink.emit(event_name(run.component_type, event_role), {"content": content, **(fields or {})})
    return sink


def run_record_end_event(*, run_id, event_role: str, content: str, fields: dict | None = None) -> None:
    """Store the event that ends the run's stream after its last index, and publish it once this commits."""
    sink = end_event(ending_run(run_id), event_role=event_role, content=content, fields=fields)
    with connection.cursor() as cursor:
        cursor.execute(*store_events_call(sink))
    sink.publish_held_on_commit()
    Run.objects.filter(pk=run_id).update(next_event_index=sink.next_index)
