"""A run's step journal (`agents_registry.journal`), kept in PostgreSQL next to the run: each model call and tool
call of a leg, written as it completes, fenced by the attempt that owns the run, and replayed by a later attempt of
the same leg (a retry, a reclaim after a lost worker, an operator's requeue).

Writes: a tool call is written `started` before it runs and again when it returns (with its completion event,
published only once written), each one statement of its own; a model's answer is written with the next write (the
start of the tool it asked for, or before the next model call) or with the leg's record, so a leg of one model
call and no tool call costs the journal nothing: its record is its answer. Each write also
stores the events the leg emitted since the last one, so a lost attempt's steps keep their events, and is
fenced: it writes nothing unless the run is RUNNING under this attempt (the row read FOR SHARE, so a reclaim
waits for the write or the write sees the reclaim). A write that finds the run taken from it stops the leg.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from django.db import connection

from agentos_project.core.jsonsafe import storable
from agentos_project.core.postgres.base import release_connection
from agentos_project.core.postgres.prepared import Prepared
from agents_registry.context import PermanentRunError
from agents_registry.events import event_name
from agents_registry.journal import COMPLETED, INTERRUPTED, MODEL, STARTED, TOOL, Journal, Recorded
from queueing import metrics
from queueing.seam import LostAttempt

from ..events.sink import EventSink
from ..models import Run, RunEvent, Step
from .record import FENCE_MATCHED

log = logging.getLogger("agentos.journal")
STEPS = Step._meta.db_table
RUNS = Run._meta.db_table
EVENTS = RunEvent._meta.db_table
TOO_LARGE = (
    "Step {position} of the run ({what}) is {size} bytes of JSON, above AGENTOS_STEP_MAX_BYTES={limit}: it was not "
    "journaled, and the run cannot go on without it"
)
TAKEN = "A newer attempt started this run: its journal is not this attempt's to write"
REPLAYED = "StepsReplayed"  # the `name` of the CustomEvent that tells what an attempt replayed
metrics.register_counters(
    {
        "journaled_steps": "Model calls and tool calls written to runs' step journals",
        "replayed_model_calls": "Model calls a later attempt took from the journal instead of calling the model",
        "replayed_tool_calls": "Tool calls a later attempt took from the journal instead of running the tool",
        "interrupted_tool_calls": "Tool calls a lost attempt left unfinished, reported to the model or failing the run",
    }
)

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


def leg_of(run: Run) -> int:
    """Which leg of its run a run's next (or current) leg is: how many continues it had since it last started from
    its input (a requeue of a run that was not continuing starts it again from its input: leg 0)."""
    return len(run.tool_decisions or []) - run.decisions_before_restart


class RunJournal(Journal):
    """The journal of one leg of `run`, as `attempt` executes it; `entries` are what earlier attempts of the same
    leg journaled, by position (`load_entries`)."""

    keeps = True

    def __init__(self, run: Run, sink: EventSink, *, attempt: int, entries: dict[int, Step], max_bytes: int):
        self.run, self.sink, self.attempt, self.max_bytes = run, sink, attempt, max_bytes
        self.leg = leg_of(run)
        self.entries = entries
        self.replaying = bool(entries)
        self.position = -1
        self.current: dict = {}
        self.pending: list[dict] = []  # steps to write with the next write
        self.replayed = {MODEL: 0, TOOL: 0}
        self.replayed_below: int | None = None  # the positions the next write marks as replayed once more
        self.clear_after: int | None = None  # a divergence: entries past the next write's go
        self.kept = bool(entries)  # the leg has steps in the journal: its last answer is journaled too
        self.settling = 0  # the steps the leg's record writes, counted once it committed (`settled`)

    def replay(self, kind: str, fingerprint: Callable[[], str], call: dict | None = None) -> Recorded | None:
        self.position += 1
        self.current = {"position": self.position, "kind": kind, "fingerprint": fingerprint, **(call or {})}
        recorded = self._recorded(kind) if self.replaying else None
        if kind == MODEL and self.pending and (recorded is None or recorded.status != COMPLETED):
            self.write()  # the answers before it are kept before another model call is paid for
        return recorded

    def _recorded(self, kind: str) -> Recorded | None:
        entry = self.entries.get(self.position)
        if entry is None or (entry.kind, entry.fingerprint) != (kind, self._fingerprint(self.current)):
            self._go_live()
            return None
        if entry.status == COMPLETED:
            self.replayed[kind] += 1
        else:  # a call a lost attempt left unfinished, or one that failed the run: from here, live
            self._go_live()
        return Recorded(entry.status, entry.output, entry.attempt)

    @staticmethod
    def _fingerprint(step: dict) -> str:
        """The step's fingerprint, computed once, when it is first compared or written."""
        if callable(step["fingerprint"]):
            step["fingerprint"] = step["fingerprint"]()
        return step["fingerprint"]

    def started(self) -> None:
        self.pending.append(self._step(STARTED, None, None))
        self.write()

    def completed(
        self,
        kind: str,
        output: dict,
        *,
        duration: float,
        status: str = COMPLETED,
        announce: Callable[[], None] = lambda: None,
    ) -> None:
        self.pending.append(self._step(status, output, duration))
        if output.get("outcome_unknown"):
            metrics.recorder.count("interrupted_tool_calls")
        if kind != TOOL:  # a model's answer waits for the next write (see the module)
            announce()
            return
        with self.sink.deferred():  # its completion event is stored with it, and published once it is
            announce()
            self.write()

    def interrupted(self) -> None:
        self.pending.append(self._step(INTERRUPTED, None, None))
        metrics.recorder.count("interrupted_tool_calls")
        self.write()

    def _step(self, status: str, output: dict | None, duration: float | None) -> dict:
        duration = None if duration is None else round(duration, 6)
        return {**self.current, "status": status, "output": output, "duration": duration}

    def _go_live(self) -> None:
        """The replay ends at the current step: it and every later one run live."""
        self.replaying = False
        if any(position >= self.position for position in self.entries):
            self.clear_after = self.position
        if self.position > 0 and any(self.replayed.values()):
            self.replayed_below = self.position
            self._tell_replay()

    def _tell_replay(self) -> None:
        self._count_replay()
        models, tools = self.replayed[MODEL], self.replayed[TOOL]
        fields = {"name": REPLAYED, "attempt": self.attempt, "model_calls": models, "tool_calls": tools}
        self.sink.emit(event_name(self.run.component_type, "custom"), fields)

    def _count_replay(self) -> None:
        metrics.recorder.count("replayed_model_calls", self.replayed[MODEL])
        metrics.recorder.count("replayed_tool_calls", self.replayed[TOOL])

    def ended(self) -> None:
        """The leg ended: a replay that went to its end counts what it replayed (marked with the leg's record; its
        stream has ended, so no event tells it)."""
        if self.replaying and any(self.replayed.values()):
            self.replaying = False
            self.replayed_below = self.position + 1
            self._count_replay()

    def write_call(self, fence: str | None = None, *, answered: bool = True) -> tuple[str, list] | None:
        """What the leg's record writes of the journal, changing nothing here (a settle may be sent again): the
        pending answer (not when the leg failed: `answered` false, so a retry asks again) unless the leg wrote
        nothing before (a lone model answer is no step to keep) or it is larger than the limit (the record keeps
        it), and the replay's mark. None when there is nothing to write."""
        if not self.kept:
            return None
        steps = [step for step in (self.pending if answered else []) if self._fits(step)]
        if not steps and self.replayed_below is None:
            return None
        self.settling = len(steps)
        return self._statement(fence, steps, [])

    def settled(self) -> None:
        """The leg's record committed, with the steps `write_call` gave it."""
        metrics.recorder.count("journaled_steps", self.settling)

    def write(self) -> None:
        """Write the pending steps and the events emitted since the last write now, in a statement of its own;
        stop the leg when the run is no longer this attempt's, or a step is larger than the limit."""
        for step in self.pending:
            if not self._fits(step):
                raise PermanentRunError(self._too_large(step))
        events = self.sink.unheld_stored()
        with connection.cursor() as cursor:
            cursor.execute(*self._statement(None, self.pending, events))
            owned = cursor.fetchone()[0]
        release_connection()  # a tool or a model call may follow: its connection serves others meanwhile
        if not owned:
            log.warning("run=%s attempt=%s fenced: its journal write was refused", self.run.run_id, self.attempt)
            raise RuntimeError(TAKEN)
        metrics.recorder.count("journaled_steps", len(self.pending))
        self.sink.forget_stored(events)
        if self.pending:
            self.clear_after = None
        self.pending, self.replayed_below, self.kept = [], None, True

    def _fits(self, step: dict) -> bool:
        step["size"] = len(json.dumps(step["output"], default=str)) + len(json.dumps(step.get("arguments")))
        return step["size"] <= self.max_bytes

    def _too_large(self, step: dict) -> str:
        what = f"tool {step['name']}" if step["kind"] == TOOL else "a model answer"
        return TOO_LARGE.format(position=step["position"], what=what, size=step["size"], limit=self.max_bytes)

    def _statement(self, fence: str | None, steps: list[dict], events: list[dict]) -> tuple[str, list]:
        rows = [
            {"position": step["position"], "kind": step["kind"], "fingerprint": self._fingerprint(step),
             "status": step["status"], "tool": step.get("name"), "call_id": step.get("call_id"),
             "arguments": storable(step.get("arguments")), "output": storable(step["output"]),
             "duration": step["duration"]}
            for step in steps
        ]  # fmt: skip
        last = max((step["position"] for step in steps), default=None)
        params = {
            "run_id": self.run.run_id,
            "attempt": self.attempt,
            "fence": fence,
            "leg": self.leg,
            "clear_after": last if self.clear_after is not None else None,
            "replayed_below": self.replayed_below,
            "steps": json.dumps(rows),
            "events": json.dumps(storable(events)),
        }
        return _WRITE.call(params)


def load_entries(run: Run) -> dict[int, Step]:
    """What earlier attempts journaled for the leg `run` is about to execute again, by position."""
    return {step.position: step for step in Step.objects.filter(run_id=run.run_id, leg=leg_of(run))}


def run_lost_continuation(*, run_id) -> LostAttempt:
    """What becomes of the run's attempt, lost or interrupted with no budget left: a continuing run (a continue's
    leg) whose leg's journal holds no tool call ran none of the confirmed tools, so it is paused again on the same
    calls (PARK); one whose attempt completed a step of the leg made progress the journal keeps, so it runs once
    more and resumes after it (RESUME; a replayed step, or a call only started, is no progress: a tool that kills
    its worker every time is not resumed for ever). Anything else fails (FAIL).

    Inside a transaction the run's row is locked first (FOR UPDATE): a journal write of the lost attempt, which
    reads that row FOR SHARE and writes only while the run is RUNNING under its attempt, lands before this reads
    the journal or after the caller's change, when it is refused."""
    runs = Run.objects.select_for_update() if connection.in_atomic_block else Run.objects
    fields = ("tool_decisions", "decisions_before_restart", "attempt")
    run = runs.filter(pk=run_id, continued_tools__isnull=False).only(*fields).first()
    if run is None:
        return LostAttempt.FAIL
    leg = Step.objects.filter(run_id=run_id, leg=leg_of(run))
    if not leg.filter(kind=TOOL).exists():
        return LostAttempt.PARK
    return LostAttempt.RESUME if leg.filter(attempt=run.attempt, status=COMPLETED).exists() else LostAttempt.FAIL


def run_journals_prune(*, run_ids: list[str]) -> int:
    """Delete the journals of the runs `run_ids`, whose tickets were pruned; how many steps went."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {STEPS} WHERE run_id = ANY(%s::uuid[])", [run_ids])
        return cursor.rowcount
