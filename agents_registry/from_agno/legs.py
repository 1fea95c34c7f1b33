"""One leg of a run of an Agno component: a copy of the object, on an in-memory Agno db holding the session as
agentos keeps it; Agno's events forwarded as they come; what Agno stored of the run, taken back for agentos to keep.

agentos owns the session. The object's own `db` is never written by a run here: each leg copies the object
(`deep_copy`) and gives the copy a fresh `InMemoryDb`, seeded with the session's state and with the earlier runs
agentos stored, as Agno's db would hold them, so Agno's history settings choose from them as they do in Agno. What
the leg wrote there is read back once it ends (the run as Agno stores it, the session's state) and kept only by
agentos's fenced settle; the in-memory db goes with the leg.
"""

from __future__ import annotations

import asyncio
import inspect
import json

from agno.db.base import SessionType
from agno.db.in_memory import InMemoryDb
from agno.models.response import ToolExecution
from agno.run.agent import RunOutput
from agno.run.base import RunStatus
from agno.run.requirement import RunRequirement
from agno.run.team import TeamRunOutput
from agno.run.workflow import WorkflowRunOutput
from agno.session.agent import AgentSession
from agno.session.team import TeamSession
from agno.session.workflow import WorkflowSession
from agno.workflow.types import StepRequirement

from ..context import LegStatus, RunContext, RunRequest, RunResult
from ..events import AGENT, TEAM, WORKFLOW, event_name
from .cancels import cancellations
from .durable import Stopped, journal_tool_calls

# The Agno records of each kind: its session, its run, the id field naming the component in the session.
SESSIONS = {
    AGENT: (SessionType.AGENT, AgentSession, RunOutput, "agent_id"),
    TEAM: (SessionType.TEAM, TeamSession, TeamRunOutput, "team_id"),
    WORKFLOW: (SessionType.WORKFLOW, WorkflowSession, WorkflowRunOutput, "workflow_id"),
}
OUTPUTS = (RunOutput, TeamRunOutput, WorkflowRunOutput)
STATUSES = {
    RunStatus.completed: LegStatus.COMPLETED,
    RunStatus.paused: LegStatus.PAUSED,
    RunStatus.cancelled: LegStatus.CANCELLED,
}
RUN_RECORD = "agno_run"  # how a stored run's messages hold the run as Agno stores it


class AgnoRunFailed(Exception):
    """The Agno run ended in error (its model or a tool failed): the attempt fails, and is retried while the run's
    attempts last."""


def run_leg(component, request: RunRequest, ctx: RunContext) -> RunResult:
    """Run `component`'s Agno object once for `request`, on a copy, with the session as agentos keeps it. An object
    with async tools runs as Agno runs it then (`arun`), on an event loop of the leg's own thread."""
    session_type, _, _, _ = SESSIONS[component.kind]
    target = component.target.deep_copy()
    target.db = InMemoryDb()
    target.db.upsert_session(_session(component, request, ctx))
    asynchronous = component.asynchronous
    stopped = journal_tool_calls(target, ctx, asynchronous=asynchronous) if ctx.journal.keeps else Stopped()
    told: set[str] = set()
    with cancellations().watching(ctx.run_id, ctx.cancelled):  # an agentos cancel stops it at Agno's checkpoints
        if asynchronous:
            asyncio.run(
                _forwarded_async(_started(target, request, ctx, component.kind, True), component.kind, ctx, told)
            )
        else:
            for item in _started(target, request, ctx, component.kind, False):
                if not isinstance(item, OUTPUTS):
                    told.add(_forward(item, component.kind, ctx, told))
    if stopped.error is not None:  # a tool hook stopped the run: the journal refused it, or a call fails it
        raise stopped.error
    stored = target.db.get_session(session_id=ctx.session_id, session_type=session_type, deserialize=False)
    result, record = _result(stored, ctx)
    if result.status == LegStatus.PAUSED and event_name(component.kind, "paused") not in told:
        ctx.emit(event_name(component.kind, "paused"), _pause_told(record))  # a workflow's executor pause
    return result


def _started(target, request: RunRequest, ctx: RunContext, kind: str, asynchronous: bool):
    """The stream of the copy's run (or `arun`) for `request`: a new run, or the paused one continued with the
    client's decisions."""
    options = {"session_id": ctx.session_id, "user_id": ctx.user_id, "stream": True, "stream_events": True}
    if request.decided_tools is None:
        run = target.arun if asynchronous else target.run
        return run(request.message, run_id=ctx.run_id, **options)
    paused = request.run_messages[0][RUN_RECORD]
    continued = target.acontinue_run if asynchronous else target.continue_run
    return continued(run_id=ctx.run_id, **_decisions(kind, paused, request.decided_tools), **options)


async def _forwarded_async(stream, kind: str, ctx: RunContext, told: set[str]) -> None:
    if inspect.isawaitable(stream):
        stream = await stream
    async for item in stream:
        if not isinstance(item, OUTPUTS):
            told.add(_forward(item, kind, ctx, told))


def _session(component, request: RunRequest, ctx: RunContext):
    """The session as agentos keeps it, as Agno's db would hold it: its state, the earlier runs of the window agentos
    read (`ctx.history`: each stored run's Agno record), and for a continuation the paused run itself (its record,
    the run's messages)."""
    _, session_class, run_class, component_field = SESSIONS[component.kind]
    records = [*ctx.history, *(request.run_messages if request.decided_tools is not None else [])]
    runs = [run_class.from_dict(_plain(entry[RUN_RECORD])) for entry in records if RUN_RECORD in entry]
    return session_class(
        session_id=ctx.session_id,
        user_id=ctx.user_id,
        session_data={"session_state": dict(ctx.session_state)},
        runs=runs,
        **{component_field: component.id},
    )


def _decisions(kind: str, paused: dict, decided: list[dict]) -> dict:
    """The client's decisions on the paused calls (agentos's `decisions`: each pending call with what was decided),
    as Agno's AgentOS hands them to `continue_run`: the paused run's requirements (a workflow's step requirements,
    their executor's requirements) each with its call decided; for an agent, the decided calls as tool executions
    too."""
    by_call = {call["tool_call_id"]: call for call in _plain(decided)}
    if kind == WORKFLOW:
        steps = _plain(paused.get("step_requirements") or [])
        for step in steps:
            for requirement in step.get("executor_requirements") or ():
                _decide(requirement, by_call)
        return {"step_requirements": [StepRequirement.from_dict(step) for step in steps]}
    requirements = _plain(paused.get("requirements") or [])
    for requirement in requirements:
        _decide(requirement, by_call)
    parsed = [RunRequirement.from_dict(requirement) for requirement in requirements]
    if kind != AGENT:
        return {"requirements": parsed}
    return {"requirements": parsed, "updated_tools": [ToolExecution.from_dict(call) for call in by_call.values()]}


def _decide(requirement: dict, by_call: dict[str, dict]) -> None:
    call = (requirement.get("tool_execution") or {}).get("tool_call_id")
    if call in by_call:
        requirement["tool_execution"] = by_call[call]


def _forward(event, kind: str, ctx: RunContext, told: set[str]) -> str:
    """An Agno event as AgentOS streams it, numbered by agentos; its name. Member and step events keep their own run
    ids (and `parent_run_id`). The run's own error and cancelled events are agentos's to emit, once, with the run's
    end; so is the completed event Agno sends after them (a cancelled Agno run tells RunCancelled, then
    RunCompleted)."""
    fields = _plain(event.to_dict())
    name = fields.pop("event")
    fields.pop("event_index", None)
    ended = {event_name(kind, "error"), event_name(kind, "cancelled")}
    if fields.get("run_id") == ctx.run_id and (
        name in ended or (name == event_name(kind, "completed") and told & ended)
    ):
        return name
    ctx.emit(name, fields)
    return name


def _pause_told(record: dict) -> dict:
    """The pause event of a run that paused without one of its own (a workflow whose step's agent paused: Agno tells
    only `StepExecutorPaused`), as Agno's `WorkflowPausedEvent` tells a pause: from the stored run."""
    told = ("content", "status", "paused_step_index", "paused_step_name", "pause_kind", "step_requirements")
    return {key: record[key] for key in told if record.get(key) is not None}


def _result(stored: dict | None, ctx: RunContext) -> tuple[RunResult, dict]:
    """How the leg ended, from the run as Agno stored it: its status, content and metrics, the session's state
    after it; the record itself is the run's messages, the history of the session's later runs. And the record."""
    record = next((run for run in (stored or {}).get("runs") or () if run.get("run_id") == ctx.run_id), None)
    if record is None:
        raise AgnoRunFailed("The Agno run ended without storing its run")
    record = _plain(record)
    status = RunStatus(record.get("status") or RunStatus.error)
    if status not in STATUSES:
        raise AgnoRunFailed(_text(record.get("content")) or f"The Agno run ended {status.value}")
    state = ((stored or {}).get("session_data") or {}).get("session_state") or {}
    content = record.get("content")
    result = RunResult(
        STATUSES[status],
        _text(content),
        [{RUN_RECORD: record}],
        _plain(state),
        tools=_pending(record) if status == RunStatus.paused else None,
        metrics=record.get("metrics") or {},
        content_type=record.get("content_type") or "str",
    )
    return result, record


def _pending(record: dict) -> list[dict]:
    """The calls a paused run waits on the client for (its unresolved requirements' tool executions), as agentos
    asks the client to answer them."""
    steps = record.get("step_requirements") or ()
    listed = record.get("requirements") or [
        entry for step in steps for entry in step.get("executor_requirements") or ()
    ]
    requirements = [RunRequirement.from_dict(_plain(entry)) for entry in listed]
    return [_plain(r.tool_execution.to_dict()) for r in requirements if r.tool_execution and not r.is_resolved()]


def _text(content) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return json.dumps(content)


def _plain(value):
    """`value` as JSON holds it (Agno's dicts may hold enums, datetimes, models)."""
    return json.loads(json.dumps(value, default=str))
