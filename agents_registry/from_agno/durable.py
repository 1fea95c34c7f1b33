"""An Agno run's tool calls through agentos's step journal, as Agno's `tool_hooks` see them: a later attempt of the
same leg replays the calls an earlier one completed instead of running them again.

Each agent and team of the leg's copy gets one more hook, outermost, that asks the journal before a call of one of
its own tools runs (`Journal.replay`, by the tool's name and arguments, in the order the run makes its calls; Agno's
own, a team's delegation to its members, pass through: the members' calls are the steps): a call journaled as
completed is not run again, its result (and the session state it left) given back as it was; one a lost attempt
started and never finished runs again only if its tool is idempotent, else follows its `on_interrupt` (`report`:
the model is told its outcome is unknown; `fail`: the run fails), as for agentos's own tools (`durable` marks an
Agno tool so). Any other call is journaled `started` before it runs and `completed` when it returns. Model calls are
not journaled: a later attempt asks the model again, and the calls it asks for replay when they are the same (a
tool's name and arguments; not its call id, which a model makes anew).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
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


def journal_tool_calls(target: object, ctx: RunContext, *, asynchronous: bool = False) -> Stopped:
    """Hook `ctx.journal` into every tool call of `target` (an agent, a team, a workflow: a leg's copy) and of the
    agents and teams inside it; what stopped the run from a hook, if anything, is told by the returned `Stopped`.
    `asynchronous`: the copy runs as `arun`, its hooks awaited on its event loop, where no database call may run:
    the journal's writes go to a thread of their own. The journaled calls run one at a time (`_OneAtATime`)."""
    stopped, one_at_a_time = Stopped(), _OneAtATime()
    for runner in _runners(target):
        steps = _Steps(ctx, {name: _durability(tool) for name, tool in functions_of(runner)}, stopped, one_at_a_time)
        runner.tool_hooks = [steps.hook_async if asynchronous else steps.hook, *(runner.tool_hooks or [])]
    return stopped


class _OneAtATime:
    """The leg's journaled calls, one at a time: the journal numbers its steps in the order they run, and Agno may
    run a model's several calls at once (an async run gathers them). So they run in the order Agno started them,
    the same in every attempt, each step whole before the next."""

    def __init__(self) -> None:
        self.thread = threading.Lock()
        self.loop = asyncio.Lock()


def has_async_tools(target: object) -> bool:
    """Whether a tool of `target`, or of an agent or team inside it, is a coroutine (Agno's `run` refuses one)."""
    return any(
        inspect.iscoroutinefunction(entrypoint) or inspect.isasyncgenfunction(entrypoint)
        for runner in _runners(target)
        for _, tool in functions_of(runner)
        for entrypoint in [getattr(tool, "entrypoint", None) or tool]
    )


class _Steps:
    """One runner's tool calls as steps of the leg's journal: asked before a call runs, journaled around it."""

    def __init__(self, ctx: RunContext, marks: dict[str, Durability], stopped: Stopped, one_at_a_time: _OneAtATime):
        self.ctx, self.journal, self.marks, self.stopped = ctx, ctx.journal, marks, stopped
        self.one_at_a_time = one_at_a_time

    def hook(self, function_name: str, function_call: Callable, arguments: dict, run_context=None):
        if function_name not in self.marks:  # Agno's own (a team's delegation): its members' calls are the steps
            return function_call(**arguments)
        with self.one_at_a_time.thread:
            return self._journaled_call(function_name, function_call, arguments, run_context)

    async def hook_async(self, function_name: str, function_call: Callable, arguments: dict, run_context=None):
        if function_name not in self.marks:
            result = function_call(**arguments)
            return await result if inspect.isawaitable(result) else result
        async with self.one_at_a_time.loop:
            return await self._journaled_call_async(function_name, function_call, arguments, run_context)

    def _journaled_call(self, function_name: str, function_call: Callable, arguments: dict, run_context):
        before = self._before(function_name, arguments, run_context)
        if before.answer is not _RUN:
            return before.answer
        try:
            result = function_call(**arguments)
        except (AgentRunException, RunCancelledException):
            raise  # Agno's own control of the run: the call stays started, as one a lost attempt left
        except Exception as error:
            self._failed(before, error)
            raise
        self._completed(before, result)
        return result

    async def _journaled_call_async(self, function_name: str, function_call: Callable, arguments: dict, run_context):
        before = await asyncio.to_thread(self._before, function_name, arguments, run_context)
        if before.answer is not _RUN:
            return before.answer
        try:
            result = function_call(**arguments)
            result = await result if inspect.isawaitable(result) else result
        except (AgentRunException, RunCancelledException):
            raise
        except Exception as error:
            await asyncio.to_thread(self._failed, before, error)
            raise
        await asyncio.to_thread(self._completed, before, result)
        return result

    def _before(self, name: str, arguments: dict, run_context) -> _Before:
        """Ask the journal about the call about to run: its answer when it is replayed (or reported interrupted),
        else `_RUN`, the call journaled started."""
        call = {"name": name, "arguments": _plain(arguments)}
        before = _Before(getattr(run_context, "session_state", None), self.ctx.clock())
        try:
            recorded = self.journal.replay(TOOL, lambda: fingerprint(TOOL, name, call["arguments"]), call)
        except Exception as error:
            raise self.stopped.stop(error) from None
        if recorded is not None and recorded.status == COMPLETED:
            _restore(before.state, recorded.output)
            if recorded.output.get("error"):
                raise RuntimeError(recorded.output["content"])  # told to the model as the call's error, as before
            before.answer = recorded.output.get("result", recorded.output["content"])
            return before
        mark = self.marks.get(name, Durability())
        if recorded is not None and recorded.status == STARTED and not mark.idempotent:
            before.answer = self._interrupted(name, recorded.attempt, mark)
            return before
        try:
            self.journal.started()
        except Exception as error:
            raise self.stopped.stop(error) from None
        before.text = _state_text(before.state)
        return before

    def _interrupted(self, name: str, attempt: int, mark: Durability) -> str:
        """A call a lost attempt started and never finished, of a tool that is not idempotent: the run fails
        (`on_interrupt="fail"`), or the model is told its outcome is unknown (`"report"`), as that call's result."""
        call_id = "-"  # Agno's hooks see no call id; the model's next one is its own
        if mark.on_interrupt == "fail":
            self.journal.interrupted()
            failed = PermanentRunError(INTERRUPTED_FAILS.format(tool=name, call_id=call_id, attempt=attempt))
            raise self.stopped.stop(failed)
        content = OUTCOME_UNKNOWN.format(tool=name, call_id=call_id)
        self.journal.completed(TOOL, {"content": content, "outcome_unknown": True}, duration=0.0)
        return content

    def _failed(self, before: _Before, error: Exception) -> None:
        output = {"content": str(error) or type(error).__name__, "error": True, **_state_left(before)}
        self._journaled(output, before)

    def _completed(self, before: _Before, result) -> None:
        self._journaled({"content": _text(result), "result": _plain(result), **_state_left(before)}, before)

    def _journaled(self, output: dict, before: _Before) -> None:
        try:
            self.journal.completed(TOOL, output, duration=self.ctx.clock() - before.started)
        except Exception as error:
            raise self.stopped.stop(error) from None


_RUN = object()  # a `_Before` whose call is to run


class _Before:
    """What is known of a call before it runs: the run's session state and its text then, when it started, and the
    journal's answer when the call does not run (`_RUN` when it does)."""

    def __init__(self, state, started: float):
        self.state, self.started = state, started
        self.text: str | None = None
        self.answer = _RUN


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


def functions_of(runner: object):
    """(name, tool) of the runner's own tools, as Agno names them: a function's, a `Function`'s, a toolkit's."""
    for tool in getattr(runner, "tools", None) or ():
        if isinstance(tool, Toolkit):
            yield from {**tool.async_functions, **tool.functions}.items()  # a toolkit keeps them apart
        elif isinstance(tool, Function):
            yield tool.name, tool
        elif callable(tool):
            yield getattr(tool, "__name__", ""), tool


def _durability(tool: object) -> Durability:
    entrypoint = getattr(tool, "entrypoint", None) or tool
    return getattr(getattr(entrypoint, "__func__", entrypoint), DURABILITY, None) or Durability()


def _state_text(state) -> str | None:
    return json.dumps(state, sort_keys=True, default=str) if isinstance(state, dict) else None


def _state_left(before: _Before) -> dict:
    """The session state a call left, when it changed it: a replay, which does not call the tool, leaves the same."""
    after = _state_text(before.state)
    return {} if before.text is None or after == before.text else {STATE: json.loads(after)}


def _restore(state, output: dict) -> None:
    if STATE in output and isinstance(state, dict):
        state.clear()
        state.update(output[STATE])


def _text(result) -> str:
    return result if isinstance(result, str) else json.dumps(_plain(result))


def _plain(value):
    return json.loads(json.dumps(value, default=str))
