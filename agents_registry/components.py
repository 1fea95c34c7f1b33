"""Agents, teams and workflows: what the registry holds and what a run executes."""

from __future__ import annotations

import dataclasses
import re
import uuid

from .context import LegStatus, PermanentRunError, RunContext, RunRequest, RunResult
from .events import AGENT, TEAM, WORKFLOW, event_name
from .requirements import of_member, run_requirements, step_requirement
from .runloop import Progress, add_usage, agent_turns, answered, apply_decisions, run_agent
from .tools import Tool, as_tool


@dataclasses.dataclass(frozen=True)
class Component:
    """What the registry holds: `id` (from `name` when left out, as Agno makes it), `name` (the id when left out)."""

    id: str = ""
    name: str = ""
    description: str = ""
    has_store: bool = True
    one_turn_per_session: bool = False
    # How many of the session's earlier runs a run sees in its history (AgentOS' name); 0: none; None: all.
    num_history_runs: int | None = None

    kind = ""

    def __post_init__(self):
        if not self.id and not self.name:
            raise ValueError(f"{type(self).__name__} needs an id or a name")
        if not self.id:
            object.__setattr__(self, "id", re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-"))
        if not self.name:
            object.__setattr__(self, "name", self.id)

    def summary(self) -> dict:
        """The shape `/config` and `GET /agents` list."""
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "db_id": "agentos-db" if self.has_store else None,
            "model": {"id": self.model_info[0], "provider": self.model_info[1]},
        }

    @property
    def model_info(self) -> tuple[str, str]:
        raise NotImplementedError

    def run(self, request: RunRequest, ctx: RunContext) -> RunResult:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Agent(Component):
    """A model with tools and instructions. `tools` takes `Tool`s or plain typed functions (made tools as `@tool`
    makes them); `instructions` (a string or a list of them) go to the model as a system message on every call and
    are never stored in the session's history; `max_model_turns` bounds the model calls of one leg; with
    `output_schema` the answer is JSON of that schema, checked (`agents_registry.output`)."""

    model: object = None
    tools: tuple[Tool, ...] = ()
    instructions: str | tuple[str, ...] | None = None
    max_model_turns: int = 10
    # A pydantic model or a JSON schema: the model is asked for JSON of it, and the run's content is that object.
    output_schema: object = None

    kind = AGENT

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "tools", tuple(as_tool(tool) for tool in self.tools))
        if isinstance(self.instructions, list):
            object.__setattr__(self, "instructions", tuple(self.instructions))

    def system_messages(self) -> list[dict]:
        """The instructions as the system message that opens every model call (none without instructions)."""
        if not self.instructions:
            return []
        text = self.instructions if isinstance(self.instructions, str) else "\n".join(self.instructions)
        return [{"role": "system", "content": text}]

    @property
    def model_info(self) -> tuple[str, str]:
        return self.model.id, self.model.provider

    def tool(self, name: str) -> Tool:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise PermanentRunError(f"Agent {self.id} has no tool named {name!r}")

    def run(self, request: RunRequest, ctx: RunContext) -> RunResult:
        return run_agent(self, request, ctx)


@dataclasses.dataclass(frozen=True)
class Team(Component):
    """A leader and its members, as AgentOS runs a team: the members answer the message first (their events are
    member events, `RunStarted`/`RunContent`/`RunCompleted` with the member's `agent_id`), then the leader answers
    it, seeing their answers. The team's content, and the turn its session keeps, is the leader's answer."""

    leader: Agent = None
    members: tuple[Agent, ...] = ()

    kind = TEAM

    @property
    def model_info(self) -> tuple[str, str]:
        return self.leader.model_info

    def run(self, request: RunRequest, ctx: RunContext) -> RunResult:
        """The members in turn, then the leader, with its own tools and instructions. A member's tool, or the
        leader's, that needs the client pauses the team (`TeamRunPaused`, a member's requirements naming it); the
        continue resumes there, then goes on."""
        model = self.leader.model
        messages = [{"role": "user", "content": request.message}]
        progress = Progress.read(request)
        if progress is None:
            started = {"model": model.id, "model_provider": model.provider, "members": [m.id for m in self.members]}
            ctx.emit(event_name(TEAM, "started"), started)
            progress = Progress(0, [], [])
        else:
            ctx.emit(event_name(TEAM, "continued"), {"tools": request.decided_tools})
        answers = list(progress.outputs)
        metrics: dict = {}  # the tokens of this leg's members and leader
        for index in range(progress.index, len(self.members)):
            member = self.members[index]
            resuming = index == progress.index and progress.messages
            leg = RunRequest(
                message=request.message,
                run_messages=progress.messages if resuming else [],
                decided_tools=request.decided_tools if resuming else None,
            )
            result = run_agent(member, leg, ctx, fields=_member_fields(member, ctx))
            metrics = add_usage(metrics, result.metrics)
            if result.status == LegStatus.CANCELLED:
                return RunResult(LegStatus.CANCELLED, "", messages, ctx.session_state)
            if result.status == LegStatus.PAUSED:
                asked = of_member(result.requirements, member_id=member.id, member_name=member.name)
                return self._paused(index, answers, result, asked, ctx)
            answers.append({"role": "assistant", "name": member.id, "content": result.content})
        return self._lead(request, progress, messages, answers, metrics, ctx)

    def _lead(self, request, progress, messages: list, answers: list, metrics: dict, ctx: RunContext) -> RunResult:
        """The leader's answer, seeing the members'; with its tools, it may pause the team as a member does."""
        lead = len(self.members)
        if progress.index == lead and progress.messages:  # the leader itself paused: its calls are decided now
            leading = apply_decisions(self.leader, progress.messages, request.decided_tools, ctx, TEAM)
        else:
            leading = messages + answers
        result = agent_turns(self.leader, leading, ctx, TEAM)
        metrics = add_usage(metrics, result.metrics)
        if result.status == LegStatus.PAUSED:
            return self._paused(lead, answers, result, run_requirements(result.tools), ctx)
        text = result.content
        if result.status == LegStatus.CANCELLED:
            return RunResult(LegStatus.CANCELLED, text, messages, ctx.session_state, metrics=metrics)
        messages = [*messages, {"role": "assistant", "content": text}]
        ctx.emit(event_name(TEAM, "completed"), {**answered(result), "metrics": metrics})
        # The leader's output schema is the team's.
        kept = {"metrics": metrics, "content_type": result.content_type}
        return RunResult(LegStatus.COMPLETED, text, messages, ctx.session_state, **kept)

    @staticmethod
    def _paused(index: int, answers: list, result: RunResult, asked: list[dict], ctx: RunContext) -> RunResult:
        """The team paused where member (or, past the last, the leader) `index` waits on `asked`."""
        ctx.emit(event_name(TEAM, "paused"), {"tools": result.tools, "requirements": asked})
        state = Progress(index, answers, result.messages).record()
        return RunResult(LegStatus.PAUSED, "", [state], ctx.session_state, tools=result.tools)


def _member_fields(member: Agent, ctx: RunContext) -> dict:
    """What marks a member's events, as AgentOS marks them: the member, and a run of its own (the same in every leg
    of the team's run) whose parent is the team's."""
    member_run = uuid.uuid5(uuid.NAMESPACE_URL, f"agentos:{ctx.run_id}/{member.id}")
    return {"agent_id": member.id, "agent_name": member.name, "run_id": str(member_run), "parent_run_id": ctx.run_id}


@dataclasses.dataclass(frozen=True)
class Workflow(Component):
    """Steps run in order, each step's agent answering the previous step's output."""

    steps: tuple[Agent, ...] = ()

    kind = WORKFLOW

    @property
    def model_info(self) -> tuple[str, str]:
        return self.steps[0].model_info

    def run(self, request: RunRequest, ctx: RunContext) -> RunResult:
        """The steps in turn. A step's tool that needs confirmation pauses the workflow, as AgentOS pauses on a
        step's agent (`StepExecutorPaused`, then `WorkflowPaused` with its step requirement); the continue
        (`StepExecutorContinued`) resumes that step, then the rest."""
        progress = Progress.read(request)
        if progress is None:
            ctx.emit(event_name(WORKFLOW, "started"), {"steps": [s.name for s in self.steps]})
            progress = Progress(0, [request.message], [])
        else:
            executor = _executor(self.steps[progress.index], progress.index)
            ctx.emit(event_name(WORKFLOW, "continued"), {"tools": request.decided_tools, **executor})
        step_input = progress.outputs[-1]
        for number in range(progress.index, len(self.steps)):
            step = self.steps[number]
            agent = {"agent_id": step.id, "agent_name": step.name}  # on the events of the step's agent
            if number == progress.index and progress.messages:
                step_messages = apply_decisions(step, progress.messages, request.decided_tools, ctx, WORKFLOW, agent)
            else:
                ctx.emit(event_name(WORKFLOW, "step_started"), {"step_name": step.name, "step_index": number})
                step_messages = [{"role": "user", "content": step_input}]
            result = agent_turns(step, step_messages, ctx, WORKFLOW, agent)
            metrics = self._metrics(completed=number)
            if result.status == LegStatus.CANCELLED:
                return RunResult(LegStatus.CANCELLED, result.content, step_messages, ctx.session_state, metrics=metrics)
            if result.status == LegStatus.PAUSED:
                self._pause(step, number, result.tools, ctx)
                state = Progress(number, [step_input], result.messages).record()
                return RunResult(LegStatus.PAUSED, "", [state], ctx.session_state, tools=result.tools, metrics=metrics)
            ctx.emit(event_name(WORKFLOW, "step_completed"), {"step_name": step.name, **answered(result)})
            step_input = result.content  # a step's output schema reaches the next step as its JSON
        messages = [{"role": "user", "content": request.message}, {"role": "assistant", "content": step_input}]
        ctx.emit(event_name(WORKFLOW, "completed"), answered(result))
        metrics = self._metrics(completed=len(self.steps))
        # The last step's output schema is the workflow's.
        kept = {"metrics": metrics, "content_type": result.content_type}
        return RunResult(LegStatus.COMPLETED, step_input, messages, ctx.session_state, **kept)

    def _metrics(self, *, completed: int) -> dict:
        """The run's metrics as AgentOS' `WorkflowMetrics` has them: one entry per step completed so far (the run
        adds its `duration`)."""
        return {"steps": {step.name: _step_metrics(step) for step in self.steps[:completed]}}

    @staticmethod
    def _pause(step: Agent, number: int, tools: list[dict], ctx: RunContext) -> None:
        """Tell that `step`'s agent paused on `tools`: the step's pause, then the workflow's, with its requirement."""
        requirements = run_requirements(tools)
        pending = step_requirement(step_id=step.id, step_name=step.name, step_index=number, requirements=requirements)
        executor = _executor(step, number)
        ctx.emit(event_name(WORKFLOW, "executor_paused"), {**executor, "executor_requirements": requirements})
        paused = {
            "tools": tools,
            "step_name": step.name,
            "status": "PAUSED",
            "paused_step_index": number,
            "paused_step_name": step.name,
            "pause_kind": "executor",
            "step_requirements": [pending],
        }
        ctx.emit(event_name(WORKFLOW, "paused"), paused)


def _step_metrics(step: Agent) -> dict:
    """A step's entry in its workflow's metrics (AgentOS' `StepMetrics`; the step's own run measures nothing)."""
    return {"step_name": step.name, "executor_type": "agent", "executor_name": step.name, "metrics": None}


def _executor(step: Agent, number: int) -> dict:
    """How AgentOS' step executor events name the step and its agent."""
    return {
        "step_name": step.name,
        "step_index": number,
        "step_id": step.id,
        "executor_id": step.id,
        "executor_name": step.name,
        "executor_type": "agent",
    }
