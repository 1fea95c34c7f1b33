"""An Agno run's tool calls through agentos's step journal, as Agno's `tool_hooks` see them: a later attempt of the
same leg replays the calls an earlier one completed instead of running them again.

Each agent and team of the leg's copy gets one more hook, outermost, that asks the journal before the call runs
(`Journal.replay`, by the tool's name and arguments, in the order the run makes its calls): a call journaled as
completed is not run again, its result (and the session state it left) given back as it was; one a lost attempt
started and never finished runs again only if its tool is idempotent, else follows its `on_interrupt` (`report`:
the model is told its outcome is unknown; `fail`: the run fails), as for agentos's own tools (`durable` marks an
Agno tool so). Any other call is journaled `started` before it runs and `completed` when it returns. Model calls are
not journaled: a later attempt asks the model again, and the calls it asks for replay when they are the same (a
tool's name and arguments; not its call id, which a model makes anew).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from agno.exceptions import AgentRunException, RunCancelledException, StopAgentRun
from agno.tools.function import Function
from agno.tools.toolkit import Toolkit

from ..context import PermanentRunError, RunContext
from ..journal import COMPLETED, INTERRUPTED_FAILS, OUTCOME_UNKNOWN, STARTED, STATE, TOOL, fingerprint
from . import DURABILITY, Durability


class Stopped:
    """Why a leg's Agno run was stopped from inside a tool hook (the journal refused a write, or a call a lost attempt
    left unfinished fails the run): raised once the run has ended."""

    def __init__(self) -> None:
        self.error: Exception | None = None

    def stop(self, error: Exception) -> StopAgentRun:
        self.error = error
        return StopAgentRun(str(error))


def journal_tool_calls(target: object, ctx: RunContext) -> Stopped:
    """Hook `ctx.journal` into every tool call of `target` (an agent, a team, a workflow: a leg's copy) and of the
    agents and teams inside it; what stopped the run from a hook, if anything, is told by the returned `Stopped`."""
    stopped = Stopped()
    for runner in _runners(target):
        marks = {name: _durability(tool) for name, tool in _functions(runner)}
        runner.tool_hooks = [_hook(ctx, marks, stopped), *(runner.tool_hooks or [])]
    return stopped


def _hook(ctx: RunContext, marks: dict[str, Durability], stopped: Stopped) -> Callable:
    journal = ctx.journal

    def journaled(function_name: str, function_call: Callable, arguments: dict, run_context=None):
        call = {"name": function_name, "arguments": _plain(arguments)}
        try:
            recorded = journal.replay(TOOL, lambda: fingerprint(TOOL, function_name, call["arguments"]), call)
        except Exception as error:
            raise stopped.stop(error) from None
        state = getattr(run_context, "session_state", None)
        if recorded is not None and recorded.status == COMPLETED:
            _restore(state, recorded.output)
            if recorded.output.get("error"):
                raise RuntimeError(recorded.output["content"])  # told to the model as the call's error, as before
            return recorded.output.get("result", recorded.output["content"])
        mark = marks.get(function_name, Durability())
        if recorded is not None and recorded.status == STARTED and not mark.idempotent:
            return _interrupted(function_name, recorded.attempt, mark, journal, stopped)
        try:
            journal.started()
        except Exception as error:
            raise stopped.stop(error) from None
        started, before = ctx.clock(), _state_text(state)
        try:
            result = function_call(**arguments)
        except (AgentRunException, RunCancelledException):
            raise  # Agno's own control of the run: the call stays started, as one a lost attempt left
        except Exception as error:
            output = {"content": str(error) or type(error).__name__, "error": True, **_state_left(state, before)}
            _completed(journal, output, ctx.clock() - started, stopped)
            raise
        output = {"content": _text(result), "result": _plain(result), **_state_left(state, before)}
        _completed(journal, output, ctx.clock() - started, stopped)
        return result

    return journaled


def _interrupted(name: str, attempt: int, mark: Durability, journal, stopped: Stopped):
    """A call a lost attempt started and never finished, of a tool that is not idempotent: the run fails
    (`on_interrupt="fail"`), or the model is told its outcome is unknown (`"report"`), as that call's result."""
    call_id = "-"  # Agno's hooks see no call id; the model's next one is its own
    if mark.on_interrupt == "fail":
        journal.interrupted()
        raise stopped.stop(PermanentRunError(INTERRUPTED_FAILS.format(tool=name, call_id=call_id, attempt=attempt)))
    content = OUTCOME_UNKNOWN.format(tool=name, call_id=call_id)
    journal.completed(TOOL, {"content": content, "outcome_unknown": True}, duration=0.0)
    return content


def _completed(journal, output: dict, duration: float, stopped: Stopped) -> None:
    try:
        journal.completed(TOOL, output, duration=duration)
    except Exception as error:
        raise stopped.stop(error) from None


def _runners(target: object):
    """`target` and every agent and team inside it that runs tools: a team's members, a workflow's steps' agents
    and teams, at any depth."""
    seen, found, pending = set(), [], [target]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if hasattr(node, "tool_hooks"):
            found.append(node)
        pending += [getattr(node, name, None) for name in ("agent", "team")]
        for name in ("members", "steps", "choices"):
            inner = getattr(node, name, None)
            if isinstance(inner, list | tuple):
                pending += list(inner)
    return found


def _functions(runner: object):
    """(name, tool) of the runner's own tools, as Agno names them: a function's, a `Function`'s, a toolkit's."""
    for tool in getattr(runner, "tools", None) or ():
        if isinstance(tool, Toolkit):
            yield from tool.functions.items()
        elif isinstance(tool, Function):
            yield tool.name, tool
        elif callable(tool):
            yield getattr(tool, "__name__", ""), tool


def _durability(tool: object) -> Durability:
    entrypoint = getattr(tool, "entrypoint", None) or tool
    return getattr(getattr(entrypoint, "__func__", entrypoint), DURABILITY, None) or Durability()


def _state_text(state) -> str | None:
    return json.dumps(state, sort_keys=True, default=str) if isinstance(state, dict) else None


def _state_left(state, before: str | None) -> dict:
    """The session state a call left, when it changed it: a replay, which does not call the tool, leaves the same."""
    after = _state_text(state)
    return {} if before is None or after == before else {STATE: json.loads(after)}


def _restore(state, output: dict) -> None:
    if STATE in output and isinstance(state, dict):
        state.clear()
        state.update(output[STATE])


def _text(result) -> str:
    return result if isinstance(result, str) else json.dumps(_plain(result))


def _plain(value):
    return json.loads(json.dumps(value, default=str))
