"""The run loop: a component + a request + the session's history become events and a `RunResult`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from agentos_project.core.jsonsafe import storable

from .chat_models import Reasoning, ToolCall, Usage
from .context import LegStatus, PermanentRunError, RunContext, RunRequest, RunResult
from .events import AGENT, event_name
from .journal import COMPLETED, FAILED, INTERRUPTED_FAILS, MODEL, OUTCOME_UNKNOWN, STARTED, STATE, TOOL, fingerprint
from .output import checked, response_format, schema_name
from .requirements import run_requirements
from .tools import REJECTED, Tool, ToolFailed


@dataclasses.dataclass
class ModelTurn:
    """One model request's answer: its text, the tool calls it asked for, its reasoning, and the tokens it used."""

    text: str
    calls: list[ToolCall]
    reasoning: str = ""
    usage: Usage | None = None

    def record(self) -> dict:
        """The answer as the journal keeps it."""
        calls = [[call.id, call.name, call.arguments] for call in self.calls]
        usage = dataclasses.asdict(self.usage) if self.usage else None
        return {"text": self.text, "calls": calls, "reasoning": self.reasoning, "usage": usage}

    @classmethod
    def recorded(cls, output: dict) -> ModelTurn:
        usage = Usage(**output["usage"]) if output.get("usage") else None
        calls = [ToolCall(call_id, name, arguments) for call_id, name, arguments in output["calls"]]
        return cls(output["text"], calls, output.get("reasoning", ""), usage)


def model_turn(
    model,
    messages: Sequence[dict],
    tools: Sequence[Tool],
    ctx: RunContext,
    kind: str,
    fields: dict | None = None,
    response_format: dict | None = None,
) -> ModelTurn:
    """Stream one model answer, emitting a content event per chunk (reasoning too, as `reasoning_content`), all with
    `fields`; a model with `request_events` has the request told by its started and completed events. An answer
    the journal holds for this very request is replayed: no call, no event."""
    request = lambda: fingerprint(MODEL, model.id, messages, [tool.schema() for tool in tools], response_format)  # noqa: E731
    recorded = ctx.journal.replay(MODEL, request)
    if recorded is not None:
        return ModelTurn.recorded(recorded.output)
    fields = fields or {}
    named = {"model": model.id, "model_provider": model.provider}
    told = getattr(model, "request_events", False)
    if told:
        ctx.emit(event_name(kind, "model_request_started"), {**named, **fields})
    started = ctx.clock()
    asked = {"response_format": response_format} if response_format else {}  # only a model that can is asked
    turn, first = _streamed(model.stream(messages, tools, ctx, **asked), ctx, kind, fields)
    if not ctx.cancelled():  # an answer cut short is no step to replay
        ctx.journal.completed(MODEL, turn.record(), duration=ctx.clock() - started)
    if told:
        spent = dataclasses.asdict(turn.usage) if turn.usage else {}
        waited = {"time_to_first_token": None if first is None else round(first - started, 6)}
        ctx.emit(event_name(kind, "model_request_completed"), {**named, **spent, **waited, **fields})
    return turn


def _streamed(pieces, ctx: RunContext, kind: str, fields: dict) -> tuple[ModelTurn, float | None]:
    """A model's streamed answer, gathered: a content event per text or reasoning piece as it comes (with `fields`),
    its tool calls and usage kept; until it ends or the run is cancelled. The answer, and when its first text or
    reasoning piece came (None: none did)."""
    turn, first = ModelTurn("", []), None
    parts: list[str] = []
    reasoning: list[str] = []
    for piece in pieces:
        if isinstance(piece, ToolCall):  # its arguments as the journal stores them, so a replay asks the same
            turn.calls.append(ToolCall(piece.id, piece.name, storable(piece.arguments)))
            continue
        if isinstance(piece, Usage):
            turn.usage = piece
            continue
        first = ctx.clock() if first is None else first
        if isinstance(piece, Reasoning):
            reasoning.append(piece.text)
            ctx.emit(event_name(kind, "content"), {"content": "", "reasoning_content": piece.text, **fields})
        else:
            parts.append(piece)
            ctx.emit(event_name(kind, "content"), {"content": piece, "content_type": "str", **fields})
        if ctx.cancelled():
            break
    turn.text, turn.reasoning = "".join(parts), "".join(reasoning)
    return turn, first


TOKENS = tuple(field.name for field in dataclasses.fields(Usage))


def _response_format(agent) -> dict | None:
    schema = getattr(agent, "output_schema", None)
    return None if schema is None else response_format(schema)


def add_usage(metrics: dict, usage: Usage | dict | None) -> dict:
    """`metrics` with the tokens of `usage` (a request's, or another run's metrics) added, under AgentOS' names:
    input, output, total and reasoning tokens."""
    if not usage:
        return metrics
    spent = dataclasses.asdict(usage) if isinstance(usage, Usage) else usage
    summed = dict(metrics)
    for name in TOKENS:
        if name in spent:
            summed[name] = summed.get(name, 0) + spent[name]
    return summed


def tool_execution(call: ToolCall, tool: Tool) -> dict:
    """A call in AgentOS' ToolExecution shape, with what a pause waits for: a confirmation, the client's result
    (`external_execution_required`), or the values of its `user_input_schema`."""
    execution = {
        "tool_call_id": call.id,
        "tool_name": call.name,
        "tool_args": call.arguments,
        "requires_confirmation": tool.requires_confirmation,
        "confirmed": None,
        "result": None,
    }
    if tool.external_execution:
        execution["external_execution_required"] = True
    if tool.requires_user_input:
        execution.update(requires_user_input=True, user_input_schema=tool.user_input_schema(), answered=None)
    return execution


def run_tool(tool: Tool, execution: dict, ctx: RunContext, kind: str, fields: dict | None = None) -> dict:
    """Execute a tool call, emitting its started and completed (or error) events; returns the tool message for the
    model: the result, or what went wrong when the call failed in a way the model is told of.

    The journal first: a call it holds as completed is replayed (no call, no event; the session state it left is
    restored); one a lost attempt started and never finished runs again only if the tool is idempotent, else
    follows its `on_interrupt`."""
    call_id, name, arguments = execution["tool_call_id"], execution["tool_name"], execution["tool_args"]
    call = {"name": name, "call_id": call_id, "arguments": arguments}
    recorded = ctx.journal.replay(TOOL, lambda: fingerprint(TOOL, name, call_id, arguments), call)
    if recorded is not None and recorded.status == COMPLETED:
        _restore_state(ctx, recorded.output)
        return _tool_message(call_id, recorded.output["content"])
    if recorded is not None and recorded.status == STARTED and not tool.idempotent:
        return _interrupted(tool, execution, recorded.attempt, ctx, kind, fields)
    ctx.emit(event_name(kind, "tool_started"), {"tool": execution, **(fields or {})})
    ctx.journal.started()
    started = ctx.clock()
    before = _state_text(ctx.session_state) if ctx.journal.keeps else None
    try:
        result = tool.call(arguments, ctx)
    except ToolFailed as failure:
        error = str(failure)
        failed = {"tool": {**execution, "result": error, "tool_call_error": True}, "error": error, **(fields or {})}
        announce = lambda: ctx.emit(event_name(kind, "tool_error"), failed)  # noqa: E731
        output = {"content": error, "error": True, **_state_left(ctx, before)}
        ctx.journal.completed(TOOL, output, duration=ctx.clock() - started, announce=announce)
        return _tool_message(call_id, error)
    except Exception as error:  # on_error="fail": the run fails; a retry runs the call again
        failure = {"content": str(error) or type(error).__name__, "error": True}
        ctx.journal.completed(TOOL, failure, duration=ctx.clock() - started, status=FAILED)
        raise
    done = {"tool": {**execution, "result": result}, "content": result, **(fields or {})}
    announce = lambda: ctx.emit(event_name(kind, "tool_completed"), done)  # noqa: E731
    output = {"content": result, **_state_left(ctx, before)}
    ctx.journal.completed(TOOL, output, duration=ctx.clock() - started, announce=announce)
    return _tool_message(call_id, result)


def _state_text(state: dict) -> str:
    return json.dumps(state, sort_keys=True, default=str)


def _state_left(ctx: RunContext, before: str | None) -> dict:
    """What the journal keeps of the session state a tool call left: the whole state when the call changed it (so a
    replay, which does not call the tool, leaves the same), nothing when it did not or the journal keeps nothing."""
    if before is None:
        return {}
    after = _state_text(ctx.session_state)
    return {} if after == before else {STATE: json.loads(after)}


def _restore_state(ctx: RunContext, output: dict) -> None:
    """A replayed call's change of the session state, made again: the state it left replaces the one it found."""
    if STATE in output:
        ctx.session_state.clear()
        ctx.session_state.update(output[STATE])


def _tool_message(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _interrupted(tool: Tool, execution: dict, attempt: int, ctx: RunContext, kind: str, fields: dict | None) -> dict:
    """A call a lost attempt started and never finished, of a tool that is not idempotent: the run fails
    (`on_interrupt="fail"`), or the model is told its outcome is unknown (`"report"`), as that call's result."""
    named = {"tool": execution["tool_name"], "call_id": execution["tool_call_id"]}
    if tool.on_interrupt == "fail":
        ctx.journal.interrupted()
        raise PermanentRunError(INTERRUPTED_FAILS.format(**named, attempt=attempt))
    content = OUTCOME_UNKNOWN.format(**named)
    done = {"tool": {**execution, "result": content}, "content": content, **(fields or {})}
    announce = lambda: ctx.emit(event_name(kind, "tool_completed"), done)  # noqa: E731
    ctx.journal.completed(TOOL, {"content": content, "outcome_unknown": True}, duration=0.0, announce=announce)
    return _tool_message(execution["tool_call_id"], content)


def apply_decisions(
    agent, messages: list[dict], decided: list[dict], ctx: RunContext, kind: str, fields: dict | None = None
) -> list[dict]:
    """The paused leg's messages with each decided call answered: run once confirmed (with the user's input
    filled in), its result as the client gave it (external execution), or reported as rejected; a cancelled run
    runs no further tool."""
    messages = list(messages)
    for execution in decided:
        tool = agent.tool(execution["tool_name"])
        if ctx.cancelled():
            break
        if execution.get("external_execution_required"):
            done = {**execution, "result": execution["result"]}
            ctx.emit(event_name(kind, "tool_completed"), {"tool": done, "content": done["result"], **(fields or {})})
            messages.append({"role": "tool", "tool_call_id": execution["tool_call_id"], "content": done["result"]})
        elif execution.get("confirmed") is True or execution.get("requires_user_input"):
            messages.append(run_tool(tool, with_user_input(execution), ctx, kind, fields))
        else:
            messages.append({"role": "tool", "tool_call_id": execution["tool_call_id"], "content": REJECTED})
    return messages


def with_user_input(execution: dict) -> dict:
    """The call with the values the user filled in as its arguments."""
    values = {field["name"]: field["value"] for field in execution.get("user_input_schema") or []}
    return {**execution, "tool_args": {**execution["tool_args"], **values}} if values else execution


def agent_turns(agent, messages: list[dict], ctx: RunContext, kind: str, fields: dict | None = None) -> RunResult:
    """Model turns with tool calls from `messages` until the agent answers (completed), needs a person to confirm
    a call (paused, before calling it), or is cancelled. Emits content and tool events, not the start or end."""
    messages = list(messages)
    metrics: dict = {}
    for _ in range(agent.max_model_turns):
        prompt = agent.system_messages() + ctx.history + messages
        turn = model_turn(agent.model, prompt, agent.tools, ctx, kind, fields, _response_format(agent))
        text, calls = turn.text, turn.calls
        metrics = add_usage(metrics, turn.usage)
        if ctx.cancelled():
            return RunResult(LegStatus.CANCELLED, text, messages, ctx.session_state, metrics=metrics)
        assistant = {"role": "assistant", "content": text}
        if calls:
            assistant["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in calls
            ]
        messages.append(assistant)
        if not calls:
            result = RunResult(LegStatus.COMPLETED, text, messages, ctx.session_state, metrics=metrics)
            result.reasoning = turn.reasoning
            if getattr(agent, "output_schema", None) is not None:
                result.content = checked(agent.output_schema, text)
                result.content_type = schema_name(agent.output_schema)
            return result
        pending = []
        for call in calls:
            tool = agent.tool(call.name)
            execution = tool_execution(call, tool)
            if tool.pauses:
                pending.append(execution)
            else:
                messages.append(run_tool(tool, execution, ctx, kind, fields))
        if pending and ctx.cancelled():  # asked to stop while it would wait for a person
            return RunResult(LegStatus.CANCELLED, text, messages, ctx.session_state, metrics=metrics)
        if pending:
            return RunResult(LegStatus.PAUSED, text, messages, ctx.session_state, tools=pending, metrics=metrics)
    raise PermanentRunError(f"Agent {agent.id} called tools {agent.max_model_turns} times without answering")


def answered(result: RunResult) -> dict:
    """How a completed event tells an answer, as AgentOS does: the text, or the object of the output schema the
    answer is the JSON of, with its `content_type` (`str`, or the schema's name)."""
    content = result.content if result.content_type == "str" else json.loads(result.content)
    return {"content": content, "content_type": result.content_type}


def run_agent(
    agent, request: RunRequest, ctx: RunContext, *, kind: str = AGENT, fields: dict | None = None
) -> RunResult:
    """An agent's leg, with its start (or continuation) and end events; `fields` mark a team member's events. A
    paused leg's result carries the requirements its pause event told."""
    fields = fields or {"agent_id": agent.id, "agent_name": agent.name}
    started = ctx.clock()
    if request.decided_tools is not None:
        ctx.emit(event_name(kind, "continued"), {"tools": request.decided_tools, **fields})
        messages = apply_decisions(agent, request.run_messages, request.decided_tools, ctx, kind, fields)
    else:
        model = {"model": agent.model.id, "model_provider": agent.model.provider}
        ctx.emit(event_name(kind, "started"), {**model, **fields})
        messages = [{"role": "user", "content": request.message}]
    result = agent_turns(agent, messages, ctx, kind, fields)
    if result.status == LegStatus.COMPLETED:
        metrics = {**result.metrics, "duration": round(ctx.clock() - started, 6)}
        completed = {**answered(result), "metrics": metrics, **fields}
        if result.reasoning:
            completed["reasoning_content"] = result.reasoning
        ctx.emit(event_name(kind, "completed"), completed)
    elif result.status == LegStatus.PAUSED:
        result.requirements = run_requirements(result.tools)
        ctx.emit(event_name(kind, "paused"), {"tools": result.tools, "requirements": result.requirements, **fields})
    return result


@dataclasses.dataclass(frozen=True)
class Progress:
    """Where a paused team or workflow stands: the member or step that paused (`index`), what came before it
    (`outputs`, or the step's input), and that member's or step's own messages. Kept as the run's messages
    while it is paused, so the continuation picks up there."""

    index: int
    outputs: list
    messages: list
    ROLE = "agentos_progress"

    def record(self) -> dict:
        return {"role": self.ROLE, "index": self.index, "outputs": self.outputs, "messages": self.messages}

    @classmethod
    def read(cls, request: RunRequest) -> Progress | None:
        """The progress a continued run left, or None for a fresh run."""
        if request.decided_tools is None or not request.run_messages:
            return None
        record = request.run_messages[-1]
        if record.get("role") != cls.ROLE:
            return None
        return cls(record["index"], record["outputs"], record["messages"])
