"""The run loop: a component + a request + the session's history become events and a `RunResult`."""

from __future__ import annotations

import json
from collections.abc import Sequence

from .chat_models import ToolCall
from .context import PermanentRunError, RunContext, RunRequest, RunResult
from .events import AGENT, event_name
from .tools import REJECTED, Tool

MAX_MODEL_TURNS = 10


def model_turn(
    model, messages: Sequence[dict], tools: Sequence[Tool], ctx: RunContext, kind: str, fields: dict | None = None
):
    """Stream one model answer, emitting a content event per chunk (with `fields`); returns (text, tool calls)."""
    parts: list[str] = []
    calls: list[ToolCall] = []
    for piece in model.stream(messages, tools, ctx):
        if isinstance(piece, ToolCall):
            calls.append(piece)
            continue
        parts.append(piece)
        ctx.emit(event_name(kind, "content"), {"content": piece, "content_type": "str", **(fields or {})})
        if ctx.cancelled():
            break
    return "".join(parts), calls


def member_turn(member, messages: Sequence[dict], ctx: RunContext) -> str:
    """A team member's answer, as member events: the member's own agent events, naming it."""
    member_fields = {"agent_id": member.id, "agent_name": member.name}
    started = {"model": member.model.id, "model_provider": member.model.provider, **member_fields}
    ctx.emit(event_name(AGENT, "started"), started)
    text, _ = model_turn(member.model, messages, (), ctx, AGENT, member_fields)
    if not ctx.cancelled():
        ctx.emit(event_name(AGENT, "completed"), {"content": text, **member_fields})
    return text


def tool_execution(call: ToolCall, tool: Tool) -> dict:
    """A pending call in AgentOS' ToolExecution shape."""
    return {
        "tool_call_id": call.id,
        "tool_name": call.name,
        "tool_args": call.arguments,
        "requires_confirmation": tool.requires_confirmation,
        "confirmed": None,
        "result": None,
    }


def run_tool(tool: Tool, execution: dict, ctx: RunContext, kind: str) -> dict:
    """Execute a tool call, emitting its started/completed events; returns the tool message for the model."""
    ctx.emit(event_name(kind, "tool_started"), {"tool": execution})
    result = tool.call(execution["tool_args"])
    done = {**execution, "result": result}
    ctx.emit(event_name(kind, "tool_completed"), {"tool": done, "content": result})
    return {"role": "tool", "tool_call_id": execution["tool_call_id"], "content": result}


def apply_decisions(agent, request: RunRequest, ctx: RunContext, kind: str) -> list[dict]:
    """Run (or reject) the tools the client decided on when continuing a paused run."""
    messages = list(request.run_messages)
    ctx.emit(event_name(kind, "continued"), {"tools": request.decided_tools})
    for execution in request.decided_tools or ():
        tool = agent.tool(execution["tool_name"])
        if execution.get("confirmed") is True:
            messages.append(run_tool(tool, execution, ctx, kind))
        else:
            messages.append({"role": "tool", "tool_call_id": execution["tool_call_id"], "content": REJECTED})
    return messages


def run_agent(agent, request: RunRequest, ctx: RunContext, *, kind: str = "agent") -> RunResult:
    """An agent's leg: model turns with tool calls until it answers, pauses for confirmation, or is cancelled."""
    if request.decided_tools is not None:
        messages = apply_decisions(agent, request, ctx, kind)
    else:
        ctx.emit(event_name(kind, "started"), {"model": agent.model.id, "model_provider": agent.model.provider})
        messages = [{"role": "user", "content": request.message}]
    for _ in range(MAX_MODEL_TURNS):
        text, calls = model_turn(agent.model, ctx.history + messages, agent.tools, ctx, kind)
        if ctx.cancelled():
            return RunResult(RunResult.CANCELLED, text, messages, ctx.session_state)
        assistant = {"role": "assistant", "content": text}
        if calls:
            assistant["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in calls
            ]
        messages.append(assistant)
        if not calls:
            ctx.emit(event_name(kind, "completed"), {"content": text})
            return RunResult(RunResult.COMPLETED, text, messages, ctx.session_state)
        pending = []
        for call in calls:
            tool = agent.tool(call.name)
            execution = tool_execution(call, tool)
            if tool.requires_confirmation:
                pending.append(execution)
            else:
                messages.append(run_tool(tool, execution, ctx, kind))
        if pending:
            ctx.emit(event_name(kind, "paused"), {"tools": pending})
            return RunResult(RunResult.PAUSED, text, messages, ctx.session_state, tools=pending)
    raise PermanentRunError(f"Agent {agent.id} called tools {MAX_MODEL_TURNS} times without answering")
