"""A run's step journal (`agents_registry.steps`), kept in PostgreSQL next to the run: each model call and tool
call of a leg, written as it completes, fenced by the attempt that owns the run, and replayed by a later attempt of
the same leg (a retry, a reclaim after a lost worker, an operator's requeue).

Writes: a tool call is written `started` before it runs and again when it returns, each one statement of its own;
a model's answer is written with the next write (the start of the tool it asked for) or with the leg's record, so
a leg of one model call and no tool call costs the journal nothing: its record is its answer. Each write also
stores the events the leg emitted since the last one, so a lost attempt's steps keep their events, and is
fenced: it writes nothing unless the run is RUNNING under this attempt (the row read FOR SHARE, so a reclaim
waits for the write or the write sees the reclaim). A write that finds the run taken from it stops the leg.
"""

from __future__ import annotations

import json
import logging

from django.db import connection

from agentos_project.postgres.prepared import Prepared
from agents_registry.context import PermanentRunError
from agents_registry.events import event_name
from agents_registry.steps import COMPLETED, INTERRUPTED, MODEL, STARTED, TOOL, Journal, Recorded
from queueing import metrics
from queueing.models import Ticket

from ..events.sink import EventSink
from ..jsonsafe import storable
from ..models import Run, RunEvent, Step
from .record import FENCE_MATCHED

log = logging.getLogger("agentos.journal")
STEPS = Step._meta.db_table
RUNS = Run._meta.db_table
EVENTS = RunEvent._meta.db_table
TICKETS = Ticket._meta.db_table
TOO_LARGE = (
    "Step {position} of the run ({what}) is {size} bytes of JSON, above AGENTOS_STEP_MAX_BYTES={limit}: it was not "
    "journaled, and the run cannot go on without it"
)
TAKEN = "A newer attempt started this run: its journal is not this attempt's to write"
REPLAYED = "StepsReplayed"  # the `name` of the CustomEvent that tells what an attempt replayed

_WRITE = Prepared(
    "agentos_journal_write",
    f"""
    WITH owner AS (
        SELECT run_id FROM {RUNS}
        WHERE run_id = %(run_id)s AND attempt = %(attempt)s AND status = 'RUNNING' AND {FENCE_MATCHED}
        FOR SHARE),
    cleared AS (  -- what an earlier attempt journaled past the step where this one went its own way
        DELETE FROM {STEPS} AS s USING owner
        WHERE s.run_id = owner.run_id AND s.leg = %(leg)s AND s.position > %(clear_after)s),
    marked AS (
        UPDATE {STEPS} AS s SET replays = s.replays + 1 FROM owner
        WHERE s.run_id = owner.run_id AND s.leg = %(leg)s AND s.position < %(replayed_below)s),
    kept AS (
        INSERT INTO {STEPS} (run_id, leg, position, kind, fingerprint, status, tool, call_id, arguments, output,
                             attempt, replays, duration, updated_at)
        SELECT owner.run_id, %(leg)s, (step ->> 'position')::int, step ->> 'kind', step ->> 'fingerprint',
               step ->> 'status', step ->> 'tool', step ->> 'call_id', step -> 'arguments', step -> 'output',
               %(attempt)s, 0, (step ->> 'duration')::float8, statement_timestamp()
        FROM owner, jsonb_array_elements(%(steps)s) AS step
        ON CONFLICT (run_id, leg, position) DO UPDATE
        SET kind = excluded.kind, fingerprint = excluded.fingerprint, status = excluded.status, tool = excluded.tool,
            call_id = excluded.call_id, arguments = excluded.arguments, output = excluded.output,
            attempt = excluded.attempt, duration = excluded.duration, updated_at = excluded.updated_at,
            replays = CASE WHEN {STEPS}.fingerprint = excluded.fingerprint THEN {STEPS}.replays ELSE 0 END),
    stored AS (
        INSERT INTO {EVENTS} (run_id, event_index, attempt, event, data)
        SELECT owner.run_id, (event ->> 'event_index')::int, %(attempt)s, event ->> 'event', event
        FROM owner, jsonb_array_elements(%(events)s) AS event)
    SELECT count(*) FROM owner
    """,
    {
        "run_id": "uuid",
        "attempt": "int",
        "fence": "text",
        "leg": "int",
        "clear_after": "int",
        "replayed_below": "int",
        "steps": "jsonb",
        "events": "jsonb",
    },
)


class Unjournaled(Journal):
    """A leg without a journal (a run without a ticket, or AGENTOS_STEP_JOURNAL off): nothing to write."""

    def ended(self) -> None:
        pass

    def write_call(self, fence: str | None = None, *, leg_end: bool = True) -> None:
        return None


class RunJournal(Journal):
    """The journal of one leg of `run`, as `attempt` executes it; `entries` are what earlier attempts of the same
    leg journaled, by position (`load_entries`)."""

    def __init__(self, run: Run, sink: EventSink, *, attempt: int, entries: dict[int, Step], max_bytes: int):
        self.run, self.sink, self.attempt, self.max_bytes = run, sink, attempt, max_bytes
        self.leg = len(run.tool_decisions or [])
        self.entries = entries
        self.replaying = bool(entries)
        self.position = -1
        self.current: dict = {}
        self.pending: list[dict] = []  # steps to write with the next write
        self.replayed = {MODEL: 0, TOOL: 0}
        self.replayed_below: int | None = None  # the positions the next write marks as replayed once more
        self.clear_after: int | None = None  # a divergence: entries past the next write's go
        self.kept = bool(entries)  # the leg has steps in the journal: its last answer is journaled too

    def replay(self, kind: str, fingerprint: str, call: dict | None = None) -> Recorded | None:
        self.position += 1
        self.current = {"position": self.position, "kind": kind, "fingerprint": fingerprint, **(call or {})}
        if not self.replaying:
            return None
        entry = self.entries.get(self.position)
        if entry is None or (entry.kind, entry.fingerprint) != (kind, fingerprint):
            self._go_live()
            return None
        recorded = Recorded(entry.status, entry.output, entry.attempt)
        if entry.status == COMPLETED:
            self.replayed[kind] += 1
        else:  # a call a lost attempt left unfinished, or one that failed the run: from here, live
            self._go_live()
        return recorded

    def started(self) -> None:
        self.pending.append(self._step(STARTED, None, None))
        self.write()

    def completed(self, kind: str, output: dict, *, duration: float, status: str = COMPLETED) -> None:
        self.pending.append(self._step(status, output, duration))
        if output.get("outcome_unknown"):
            metrics.recorder.count("interrupted_tool_calls")
        if kind == TOOL:  # a model's answer waits for the next write (see the module)
            self.write()

    def interrupted(self) -> None:
        self.pending.append(self._step(INTERRUPTED, None, None))
        metrics.recorder.count("interrupted_tool_calls")
        self.write()

    def _step(self, status: str, output: dict | None, duration: float | None) -> dict:
        duration = None if duration is None else round(duration, 6)
        step = {**self.current, "status": status, "output": output, "duration": duration}
        size = len(json.dumps(step, default=str))
        if size > self.max_bytes:
            what = f"tool {step['name']}" if step["kind"] == TOOL else "a model answer"
            limit = self.max_bytes
            raise PermanentRunError(TOO_LARGE.format(position=step["position"], what=what, size=size, limit=limit))
        return step

    def _go_live(self) -> None:
        """The replay ends at the current step: it and every later one run live."""
        self.replaying = False
        if any(position >= self.position for position in self.entries):
            self.clear_after = self.position
        if self.position > 0 and any(self.replayed.values()):
            self.replayed_below = self.position
            self._tell_replay()

    def _tell_replay(self) -> None:
        models, tools = self.replayed[MODEL], self.replayed[TOOL]
        metrics.recorder.count("replayed_model_calls", models)
        metrics.recorder.count("replayed_tool_calls", tools)
        fields = {"name": REPLAYED, "attempt": self.attempt, "model_calls": models, "tool_calls": tools}
        self.sink.emit(event_name(self.run.component_type, "custom"), fields)

    def ended(self) -> None:
        """The leg ended: a replay that went to its end counts what it replayed (marked with the leg's record; its
        stream has ended, so no event tells it)."""
        if self.replaying and any(self.replayed.values()):
            self.replaying = False
            self.replayed_below = self.position + 1
            metrics.recorder.count("replayed_model_calls", self.replayed[MODEL])
            metrics.recorder.count("replayed_tool_calls", self.replayed[TOOL])

    def write_call(self, fence: str | None = None, *, leg_end: bool = True) -> tuple[str, list] | None:
        """What is still to write (steps, the replay's mark, a divergence's clearing, the events emitted since the
        last write) as one statement, taking the events from the sink (all but held ones). At the leg's end
        (`leg_end`), None when the leg wrote nothing before: its lone model answer is no step to keep."""
        if leg_end and not self.kept:
            return None
        steps = [
            {**step, "output": storable(step["output"]), "arguments": storable(step.get("arguments")),
             "tool": step.get("name"), "position": step["position"]}
            for step in self.pending
        ]  # fmt: skip
        held = {id(event) for event in self.sink.held}
        events = [event for event in self.sink.stored if id(event) not in held]
        self.sink.stored = [event for event in self.sink.stored if id(event) in held]
        last = max((step["position"] for step in steps), default=None)
        params = {
            "run_id": self.run.run_id,
            "attempt": self.attempt,
            "fence": fence,
            "leg": self.leg,
            "clear_after": last if self.clear_after is not None and last is not None else None,
            "replayed_below": self.replayed_below,
            "steps": json.dumps(steps),
            "events": json.dumps(storable(events)),
        }
        if params["clear_after"] is not None:
            self.clear_after = None
        self.pending, self.replayed_below = [], None
        metrics.recorder.count("journaled_steps", len(steps))
        return _WRITE.call(params)

    def write(self) -> None:
        """Write now, in a statement of its own; stop the leg when the run is no longer this attempt's."""
        call = self.write_call(leg_end=False)
        with connection.cursor() as cursor:
            cursor.execute(*call)
            owned = cursor.fetchone()[0]
        if not connection.in_atomic_block:  # a tool or a model call may follow: its connection serves others
            connection.close()
        self.kept = True
        if not owned:
            log.warning("run=%s attempt=%s fenced: its journal write was refused", self.run.run_id, self.attempt)
            raise RuntimeError(TAKEN)


def load_entries(run: Run, sink: EventSink) -> dict[int, Step]:
    """What earlier attempts journaled for the leg `run` is about to execute again, by position; and the sink
    numbers on after every event they stored (Redis may have lost what it published)."""
    leg = len(run.tool_decisions or [])
    entries = {step.position: step for step in Step.objects.filter(run_id=run.run_id, leg=leg)}
    stored = RunEvent.objects.filter(run_id=run.run_id).order_by("-event_index").values_list("event_index", flat=True)
    last = stored.first()
    if last is not None:
        sink.next_index = max(sink.next_index, last + 1)
    return entries


def run_continuation_untouched(*, run_id) -> bool:
    """Whether `run` is continuing (a continue's leg is queued or executing) and that leg's journal holds no tool
    call: it ran none of the confirmed tools, so the run may be paused again on the same calls."""
    run = Run.objects.filter(pk=run_id, continued_tools__isnull=False).values_list("tool_decisions", flat=True)
    decisions = run.first()
    if decisions is None:
        return False
    return not Step.objects.filter(run_id=run_id, leg=len(decisions), kind=TOOL).exists()


def run_continuation_progressed(*, run_id) -> bool:
    """Whether `run` is continuing and the attempt executing that leg journaled a step of it."""
    run = Run.objects.filter(pk=run_id, continued_tools__isnull=False).values_list("tool_decisions", "attempt")
    found = run.first()
    if found is None:
        return False
    decisions, attempt = found
    return Step.objects.filter(run_id=run_id, leg=len(decisions), attempt=attempt).exists()


def run_journals_prune(*, run_ids: list[str]) -> int:
    """Delete the journals of those of `run_ids` whose ticket is gone (pruned); how many steps went."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {STEPS} AS s WHERE s.run_id = ANY(%s::uuid[]) "
            f"AND NOT EXISTS (SELECT 1 FROM {TICKETS} AS t WHERE t.id = s.run_id)",
            [run_ids],
        )
        return cursor.rowcount
