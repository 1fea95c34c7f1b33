"""Agents, teams and workflows: what the registry holds and what a run executes."""

from __future__ import annotations

import dataclasses

from .context import PermanentRunError, RunContext, RunRequest, RunResult
from .events import AGENT, TEAM, WORKFLOW, event_name
from .runloop import member_turn, model_turn, run_agent
from .tools import Tool


@dataclasses.dataclass(frozen=True)
class Component:
    id: str
    name: str
    description: str = ""
    has_store: bool = True
    one_turn_per_session: bool = False

    kind = ""

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
    model: object = None
    tools: tuple[Tool, ...] = ()

    kind = AGENT

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
        model = self.leader.model
        ctx.emit(
            event_name(TEAM, "started"),
            {"model": model.id, "model_provider": model.provider, "members": [m.id for m in self.members]},
        )
        messages = [{"role": "user", "content": request.message}]
        answers = []
        for member in self.members:
            answer = member_turn(member, ctx.history + messages, ctx)
            if ctx.cancelled():
                return RunResult(RunResult.CANCELLED, "", messages, ctx.session_state)
            answers.append({"role": "assistant", "name": member.id, "content": answer})
        text, _ = model_turn(model, ctx.history + messages + answers, (), ctx, TEAM)
        if ctx.cancelled():
            return RunResult(RunResult.CANCELLED, text, messages, ctx.session_state)
        messages.append({"role": "assistant", "content": text})
        ctx.emit(event_name(TEAM, "completed"), {"content": text})
        return RunResult(RunResult.COMPLETED, text, messages, ctx.session_state)


@dataclasses.dataclass(frozen=True)
class Workflow(Component):
    """Steps run in order, each step's agent answering the previous step's output."""

    steps: tuple[Agent, ...] = ()

    kind = WORKFLOW

    @property
    def model_info(self) -> tuple[str, str]:
        return self.steps[0].model_info

    def run(self, request: RunRequest, ctx: RunContext) -> RunResult:
        ctx.emit(event_name(WORKFLOW, "started"), {"steps": [s.name for s in self.steps]})
        step_input = request.message
        for number, step in enumerate(self.steps, start=1):
            ctx.emit(event_name(WORKFLOW, "step_started"), {"step_name": step.name, "step_index": number - 1})
            step_messages = [{"role": "user", "content": step_input}]
            text, _ = model_turn(step.model, ctx.history + step_messages, (), ctx, WORKFLOW)
            if ctx.cancelled():
                return RunResult(RunResult.CANCELLED, text, step_messages, ctx.session_state)
            ctx.emit(event_name(WORKFLOW, "step_completed"), {"step_name": step.name, "content": text})
            step_input = text
        messages = [{"role": "user", "content": request.message}, {"role": "assistant", "content": step_input}]
        ctx.emit(event_name(WORKFLOW, "completed"), {"content": step_input})
        return RunResult(RunResult.COMPLETED, step_input, messages, ctx.session_state)
