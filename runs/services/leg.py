"""Executing one leg of a run: build the agent's context from the session, run it, collect its events."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from django.db import connection

from agents_registry.context import PermanentRunError, RunContext, RunRequest, RunResult
from agents_registry.events import stream_ending
from agents_registry.registry import ComponentNotFound, registry

from ..events import eventbus
from ..models import AgentSession, Run
from ..selectors import session_history

CONTENT_EVENTS = {"RunContent", "TeamRunContent"}


class EventSink:
    """Numbers a run's events from `first_index`, publishes them live, and keeps the ones worth storing (all but
    content chunks).

    An event that ends the run's stream (completed, error, cancelled, paused) is held back: it is stored with the
    run's outcome and published only once that commits (`publish_held_on_commit`), so a client never sees an end
    that a rollback undid.
    """

    def __init__(self, run: Run, attempt: int, first_index: int):
        self.run = run
        self.attempt = attempt
        self.next_index = first_index
        self.stored: list[dict] = []
        self.held: list[dict] = []
        self._ending = stream_ending(run.component_type)
        self._keep = eventbus.keep_seconds(stream=run.stream)

    def emit(self, name: str, fields: dict) -> dict:
        event = {
            "event": name,
            "run_id": str(self.run.run_id),
            "session_id": self.run.session_id,
            "created_at": int(time.time()),
            "event_index": self.next_index,
            **fields,
        }
        self.next_index += 1
        if name not in CONTENT_EVENTS:
            self.stored.append(event)
        if name in self._ending:
            self.held.append(event)
        else:
            eventbus.sender.send(self.run.run_id, [event], self.run.stream_inbox, self._keep)
        return event

    def drop_held(self) -> None:
        """Forget the held events: the leg ends otherwise than they said (a pause that gave way to a cancel). They
        were never published, so their indices are given again when they were the last ones."""
        if not self.held:
            return
        held = [event["event_index"] for event in self.held]
        self.stored = [event for event in self.stored if not any(event is dropped for dropped in self.held)]
        if held == list(range(held[0], self.next_index)):
            self.next_index = held[0]
        self.held = []

    def publish_held_on_commit(self) -> None:
        """Publish the held events once the transaction storing them commits (again if a retry re-stores them)."""
        eventbus.sender.send_on_commit(self.run.run_id, self.held, self.run.stream_inbox, self._keep)

    def publish_held(self) -> None:
        """Publish the held events now (their transaction has committed)."""
        eventbus.sender.send(self.run.run_id, self.held, self.run.stream_inbox, self._keep)


def mark_tools_applied(*, run_id, attempt: int) -> None:
    """Record, before a continuation runs its first confirmed tool, that this attempt did (one guarded UPDATE,
    fenced on the attempt): a lost leg that had side effects is failed, not offered for confirmation again."""
    Run.objects.filter(pk=run_id, attempt=attempt).update(tools_applied_attempt=attempt)


def first_event_index(run: Run, *, leg: bool = False) -> int:
    """Where a new leg (or a terminal event written from outside) numbers on from: after the last index stored
    and after the last one published, so an attempt that died before storing its events is not overlapped. A
    run's first leg (`leg`, attempt 1) follows no attempt, so Redis need not be asked."""
    if leg and run.attempt <= 1:
        return run.next_event_index
    return max(run.next_event_index, eventbus.last_index(run.run_id) + 1)


@dataclasses.dataclass
class LegResult:
    """What a leg produced: the agent's result, or the error that ended it (`permanent` when retrying cannot help)."""

    sink: EventSink
    result: RunResult | None = None
    error: str | None = None
    permanent: bool = False

    @property
    def yields_to_cancel(self) -> bool:
        """A pause, or a failure that was not the input's fault: a cancel asked while the leg ran wins over it."""
        return (self.result is None and not self.permanent) or (
            self.result is not None and self.result.status == RunResult.PAUSED
        )


def cancelled_leg(leg: LegResult) -> LegResult:
    """`leg` as a cancel asked while it ran makes it end: CANCELLED, with the content and messages of a pause (none
    of a failure), the pause's held event dropped unpublished."""
    leg.sink.drop_held()
    if leg.result is None:
        return LegResult(leg.sink, result=RunResult(RunResult.CANCELLED, "", [], {}))
    return LegResult(leg.sink, result=dataclasses.replace(leg.result, status=RunResult.CANCELLED, tools=None))


def run_leg(
    run: Run,
    *,
    attempt: int,
    timeout_seconds: float | None,
    cancelled: Callable[[], bool] = lambda: False,
    inputs: tuple[dict, list[dict]] | None = None,
) -> LegResult:
    """Run `run`'s component once, from its input (or its paused state), with the session's history.

    Outside any transaction: nothing here writes (events go live to Redis) but the mark that a continuation is
    about to run its confirmed tools. A timeout becomes an error `Run exceeded timeout_seconds=N`. `inputs`, the
    session's state and history window when the caller read them with the run (`run_for_leg`), saves reading them.
    """
    sink = EventSink(run, attempt, first_event_index(run, leg=True))
    try:
        component = registry.get(run.component_type, run.component_id)
    except ComponentNotFound:
        return LegResult(
            sink, error=f"Component {run.component_type} {run.component_id!r} is not registered here", permanent=True
        )
    if inputs is None:
        state = AgentSession.objects.values_list("session_state", flat=True).get(pk=run.session_id)
        inputs = state, session_history(session_id=run.session_id, runs=component.history_runs)
    state, history = inputs
    if not connection.in_atomic_block:  # a model call may take minutes: its connection serves others meanwhile
        connection.close()
    deadline = time.monotonic() + timeout_seconds if timeout_seconds else None
    timed_out = lambda: deadline is not None and time.monotonic() > deadline  # noqa: E731
    ctx = RunContext(
        run_id=str(run.run_id),
        session_id=run.session_id,
        user_id=run.user_id,
        history=history,
        session_state={**state, **(run.session_state_input or {})},
        attempt=attempt,
        emit=sink.emit,
        cancelled=lambda: timed_out() or cancelled(),
        applying_tools=lambda: mark_tools_applied(run_id=run.run_id, attempt=attempt),
    )
    request = RunRequest(message=run.input_content, run_messages=run.run_messages, decided_tools=run.continued_tools)
    started = time.monotonic()
    try:
        result = component.run(request, ctx)
    except PermanentRunError as error:
        return LegResult(sink, error=str(error), permanent=True)
    except Exception as error:
        return LegResult(sink, error=str(error) or type(error).__name__)
    if timed_out():
        return LegResult(sink, error=f"Run exceeded timeout_seconds={timeout_seconds:g}")
    result.metrics = {**result.metrics, "duration": round(time.monotonic() - started, 6)}
    return LegResult(sink, result=result)
