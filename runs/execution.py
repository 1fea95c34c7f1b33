"""Executing one leg of a run: build the agent's context from the session, run it, collect its events."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from agents_registry.context import PermanentRunError, RunContext, RunRequest, RunResult
from agents_registry.registry import ComponentNotFound, registry

from .models import AgentSession, Run

CONTENT_EVENTS = {"RunContent", "TeamRunContent"}


class EventSink:
    """Numbers a run's events from `first_index` and keeps the ones worth storing (all but content chunks)."""

    def __init__(self, run: Run, attempt: int, first_index: int):
        self.run = run
        self.attempt = attempt
        self.next_index = first_index
        self.stored: list[dict] = []

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
        return event


@dataclasses.dataclass
class LegResult:
    """What a leg produced: the agent's result, or the error that ended it (`permanent` when retrying cannot help)."""

    sink: EventSink
    result: RunResult | None = None
    error: str | None = None
    permanent: bool = False


def run_leg(
    run: Run, *, attempt: int, timeout_seconds: float | None, cancelled: Callable[[], bool] = lambda: False
) -> LegResult:
    """Run `run`'s component once, from its input (or its paused state), with the session's history.

    Outside any transaction: nothing here writes. A timeout becomes an error `Run exceeded timeout_seconds=N`.
    """
    sink = EventSink(run, attempt, run.next_event_index)
    try:
        component = registry.get(run.component_type, run.component_id)
    except ComponentNotFound:
        return LegResult(
            sink, error=f"Component {run.component_type} {run.component_id!r} is not registered here", permanent=True
        )
    session = AgentSession.objects.only("session_state", "messages").get(pk=run.session_id)
    deadline = time.monotonic() + timeout_seconds if timeout_seconds else None
    timed_out = lambda: deadline is not None and time.monotonic() > deadline  # noqa: E731
    ctx = RunContext(
        run_id=str(run.run_id),
        session_id=run.session_id,
        user_id=run.user_id,
        history=session.messages,
        session_state={**session.session_state, **(run.session_state_input or {})},
        attempt=attempt,
        emit=sink.emit,
        cancelled=lambda: timed_out() or cancelled(),
    )
    request = RunRequest(message=run.input_content, run_messages=run.run_messages, decided_tools=None)
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
