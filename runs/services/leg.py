"""Executing one leg of a run: build the agent's context from the session, run it, collect its events."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

from agentos_project.core.conf import current
from agentos_project.core.postgres.base import release_connection
from agents_registry.context import LegStatus, PermanentRunError, RunContext, RunRequest, RunResult
from agents_registry.journal import Journal
from agents_registry.registry import ComponentNotFound, registry

from ..events.sink import EventSink, first_event_index
from ..models import AgentSession, Run
from ..selectors import session_history
from .journal import RunJournal, load_entries


@dataclasses.dataclass
class LegResult:
    """What a leg produced: the agent's result, or the error that ended it (`permanent` when retrying cannot help);
    its step journal, if it had one."""

    sink: EventSink
    journal: RunJournal | None = None
    result: RunResult | None = None
    error: str | None = None
    permanent: bool = False

    def recorded(self) -> None:
        """The leg's record committed: its held events go out, its journal counts what the record wrote."""
        self.sink.publish_held()
        if self.journal is not None:
            self.journal.settled()

    @property
    def yields_to_cancel(self) -> bool:
        """A pause, or a failure that was not the input's fault: a cancel asked while the leg ran wins over it."""
        return (self.result is None and not self.permanent) or (
            self.result is not None and self.result.status == LegStatus.PAUSED
        )


def cancelled_leg(leg: LegResult) -> LegResult:
    """`leg` as a cancel asked while it ran makes it end: CANCELLED, with the content and messages of a pause (none
    of a failure), the pause's held event dropped unpublished."""
    leg.sink.drop_held()
    if leg.result is None:
        return LegResult(leg.sink, leg.journal, result=RunResult(LegStatus.CANCELLED, "", [], {}))
    cancelled = dataclasses.replace(leg.result, status=LegStatus.CANCELLED, tools=None)
    return LegResult(leg.sink, leg.journal, result=cancelled)


def _context(
    run: Run,
    sink: EventSink,
    *,
    attempt: int,
    inputs: tuple[dict, list[dict]],
    cancelled: Callable[[], bool],
    journal: RunJournal | None,
    woken: threading.Event | None,
) -> RunContext:
    """What the component sees of the run: its session's state (for a continuation, the state its paused leg
    reached) and history, where its events go, and checks."""
    state, history = inputs
    if run.continued_tools is not None and run.paused_state is not None:
        state = dict(run.paused_state)
    else:
        state = {**state, **(run.session_state_input or {})}
    return RunContext(
        run_id=str(run.run_id),
        session_id=run.session_id,
        user_id=run.user_id,
        history=history,
        session_state=state,
        attempt=attempt,
        emit=sink.emit,
        cancelled=cancelled,
        journal=journal or Journal(),  # no journal: every step runs live
        woken=woken,
    )


def _journal(run: Run, sink: EventSink, attempt: int) -> RunJournal | None:
    """The leg's step journal, or None: a run with a ticket has one, and a leg that ran before (its attempt is not the
    run's first) finds what its earlier attempts kept. AGENTOS_STEP_JOURNAL=false leaves only a continuation's
    journal: what says whether its confirmed tools ran."""
    queue = current().queue
    if not run.queued or not (queue.step_journal or run.continued_tools is not None):
        return None
    entries = load_entries(run) if attempt > 1 else {}
    return RunJournal(run, sink, attempt=attempt, entries=entries, max_bytes=queue.step_max_bytes)


def run_leg(
    run: Run,
    *,
    attempt: int,
    timeout_seconds: float | None,
    cancelled: Callable[[], bool] = lambda: False,
    inputs: tuple[dict, list[dict]] | None = None,
    woken: threading.Event | None = None,
) -> LegResult:
    """Run `run`'s component once, from its input (or its paused state), with the session's history.

    Outside any transaction: what writes here is the leg's step journal (`journal.RunJournal`), each step in a
    statement of its own as it completes; events go live to Redis. A timeout becomes an error `Run exceeded
    timeout_seconds=N`. `inputs`, the session's state and history window when the caller read them with the run
    (`run_for_leg`), saves reading them. `woken`: set when `cancelled` turns true, for the component to sleep on.
    """
    sink = EventSink(run, attempt, first_event_index(run, leg=True))
    try:
        component = registry.get(run.component_type, run.component_id)
    except ComponentNotFound:
        return LegResult(
            sink, error=f"Component {run.component_type} {run.component_id!r} is not registered here", permanent=True
        )
    journal = _journal(run, sink, attempt)
    if inputs is None:
        state = AgentSession.objects.values_list("session_state", flat=True).get(pk=run.session_id)
        inputs = state, session_history(session_id=run.session_id, runs=component.num_history_runs)
    release_connection()  # a model call may take minutes: its connection serves others meanwhile
    deadline = time.monotonic() + timeout_seconds if timeout_seconds else None
    timed_out = lambda: deadline is not None and time.monotonic() > deadline  # noqa: E731
    stop = lambda: timed_out() or cancelled()  # noqa: E731
    ctx = _context(run, sink, attempt=attempt, inputs=inputs, cancelled=stop, journal=journal, woken=woken)
    request = RunRequest(message=run.input_content, run_messages=run.run_messages, decided_tools=run.continued_tools)
    started = time.monotonic()
    try:
        result = component.run(request, ctx)
    except PermanentRunError as error:
        return LegResult(sink, journal, error=str(error), permanent=True)
    except Exception as error:
        return LegResult(sink, journal, error=str(error) or type(error).__name__)
    finally:
        if journal is not None:
            journal.ended()
    if timed_out():
        return LegResult(sink, journal, error=f"Run exceeded timeout_seconds={timeout_seconds:g}")
    result.metrics = {**result.metrics, "duration": round(time.monotonic() - started, 6)}
    return LegResult(sink, journal, result=result)
