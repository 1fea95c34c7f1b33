"""Continuing a paused run (CONTRACT 3.4, 11): the client's decisions on its pending tool calls, then one more leg
of the same run, through the queue, in the same place of its session's line."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

from django.db import transaction

from agentos_project.core.exceptions import RequestInvalid
from agents_registry.requirements import ANSWER_FIELD, AnswerInvalid, Answers
from queueing.tickets import ticket_continue

from ..exceptions import ContinueRefused, LegSettling, RunNotFound
from ..models import Run, RunStatus
from ..selectors import run_find
from ..submission import Accepted
from .states import run_continue_pending
from .unqueued import inline_runner, runner


@dataclasses.dataclass(frozen=True)
class Continued:
    """A continue that was taken: its 202 body, the index its leg's events come after, and for an inline run the
    future that is done when the leg has ended."""

    accepted: Accepted
    after: int
    done: Future | None = None


def _invalid(message: str, field: str) -> RequestInvalid:
    return RequestInvalid([{"type": "invalid", "loc": ["body", field], "msg": message, "input": None}])


def run_continue(
    *,
    kind: str,
    component_id: str,
    run_id: str,
    session_id: str,
    answers: Answers,
    background: bool,
    stream: bool,
    visible_to: str | None = None,
) -> Continued:
    """Queue the next leg of a paused run with the client's decisions; the 202 body, or a refusal.

    A run without a ticket (inline, or the durable queue off) continues in this process: on its pool with
    background=true, else inline, when the returned future is done.

    Checked in order: unknown run, or another user's (`visible_to`) (404), cancelled, a leg of an earlier
    continue still executing (409 with Retry-After), not paused, a queue-owned run continued without
    background=true, a stream asked of a run submitted without one (all 409); then an earlier continue still
    queued answers the same 202 (a double click); then decisions that do not answer every pending call (422).
    Then, in one transaction, the ticket (paused → queued, one more attempt, same place; guarded, and taken first,
    as a cancel takes it) and the run's row (paused → PENDING, guarded) change together.
    """
    run = run_find(kind=kind, component_id=component_id, run_id=run_id, session_id=session_id, visible_to=visible_to)
    if run is None:
        raise RunNotFound()
    waiting = _continuable(run, background=background, stream=stream)
    accepted = Accepted(str(run.run_id), run.session_id, RunStatus.PENDING)
    if waiting:
        return Continued(accepted, run.next_event_index - 1)
    decided = decisions(pending=run.tools or [], answers=answers, kind=kind)
    with transaction.atomic():
        queued = ticket_continue(ticket_id=run.run_id) if run.queued else True
        continued = queued and run_continue_pending(run_id=run.run_id, decided=decided)
        if queued and not continued:
            transaction.set_rollback(True)
        elif continued and not run.queued and background:
            runner.submit(run.run_id)
    if not continued:  # a concurrent continue (or cancel) came first: answer as it now stands
        return run_continue(
            kind=kind, component_id=component_id, run_id=run_id, session_id=session_id, answers=answers,
            background=background, stream=stream, visible_to=visible_to,
        )  # fmt: skip
    if not run.queued and not background:
        return Continued(accepted, run.next_event_index - 1, inline_runner.start(run.run_id))
    return Continued(accepted, run.next_event_index - 1)


def _continuable(run: Run, *, background: bool, stream: bool) -> bool:
    """Refuse a continue of `run` that cannot be taken (409s, in `run_continue`'s order); True when an earlier
    continue's leg is still queued (a double click), False when the run is paused."""
    waiting = run.continued_tools is not None and run.status == RunStatus.PENDING
    if run.status == RunStatus.CANCELLED:
        raise ContinueRefused(f"Cannot continue run {run.run_id}: run is cancelled")
    if run.continued_tools is not None and run.status == RunStatus.RUNNING:
        raise LegSettling()
    if run.status != RunStatus.PAUSED and not waiting:
        raise ContinueRefused(f"Run {run.run_id} is not paused (status: {run.status})")
    if run.queued and not background:
        raise ContinueRefused(
            f"Run {run.run_id} was submitted through the durable queue; continue it with background=true "
            "(the queue owns its continuations)."
        )
    if stream and not run.stream:
        raise ContinueRefused(f"Run was submitted non-streaming; poll run {run.run_id} instead of attaching a stream")
    return waiting


def decisions(*, pending: list[dict], answers: Answers, kind: str) -> list[dict]:
    """The pending calls with the client's answers: `confirmed` for a call to confirm, the `result` of a call the
    client ran (external execution), the values of a call's `user_input_schema` (nothing else of theirs).

    Every pending call must be answered, by `tool_call_id`, in any of the shapes AgentOS clients send (`Answers`:
    tool executions, requirements, step requirements); extra fields of theirs (AgentOS clients send whole objects)
    are ignored. Without any answer, the field `kind` answers with is missing.
    """
    if not answers.sent:
        field = ANSWER_FIELD[kind]
        raise RequestInvalid(
            [{"type": "missing", "loc": ["body", field], "msg": "This field is required.", "input": None}]
        )
    try:
        given = answers.by_call()
    except AnswerInvalid as refusal:
        raise _invalid(str(refusal), refusal.field) from None
    return [_decided(call, given.get(call["tool_call_id"]) or {}, answers.field) for call in pending]


def _decided(call: dict, answer: dict, field: str) -> dict:
    if call.get("external_execution_required"):
        if not isinstance(answer.get("result"), str):
            raise _invalid(f"tool call {call['tool_call_id']} needs its result (the client executes it)", field)
        return {**call, "result": answer["result"]}
    if call.get("requires_user_input"):
        values = answer.get("user_input") or {}
        missing = [f["name"] for f in call.get("user_input_schema") or [] if values.get(f["name"]) is None]
        if missing:
            raise _invalid(f"tool call {call['tool_call_id']} needs a value for {missing[0]}", field)
        for asked in call["user_input_schema"]:
            shape = _SHAPES.get(asked.get("field_type"), _SCALAR)
            if not isinstance(values[asked["name"]], shape.types):
                raise _invalid(f"tool call {call['tool_call_id']} needs {shape.said} value for {asked['name']}", field)
        schema = [{**f, "value": values[f["name"]]} for f in call["user_input_schema"]]
        return {**call, "user_input_schema": schema, "answered": True}
    if not isinstance(answer.get("confirmed"), bool):
        raise _invalid(f"tool call {call['tool_call_id']} needs confirmed true or false", field)
    return {**call, "confirmed": answer["confirmed"]}


@dataclasses.dataclass(frozen=True)
class _Shape:
    types: tuple[type, ...]
    said: str


# The JSON shape a user input field takes, by its AgentOS `field_type`: a list or an object only where the field is
# one, else a string, number or boolean (the tool's own validation checks the rest when it runs).
_SCALAR = _Shape((str, int, float, bool), "a string, number or boolean")
_SHAPES = {"list": _Shape((list,), "a list"), "dict": _Shape((dict,), "an object")}
