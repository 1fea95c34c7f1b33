"""What the registry holds for an Agno agent, team or workflow: the object itself (never run as it is: each leg runs
a copy, `legs`), with the id, name, description and model Agno gives it, and the window of earlier runs its
history settings read."""

from __future__ import annotations

import dataclasses

from agno.agent import Agent
from agno.team import Team
from agno.tools.function import Function
from agno.utils.string import generate_id_from_name
from agno.workflow import Workflow

from ..components import Component
from ..context import RunContext, RunRequest, RunResult
from ..events import AGENT, TEAM, WORKFLOW
from .durable import functions_of, has_async_tools
from .legs import run_leg

NO_MODEL = ("", "")


@dataclasses.dataclass(frozen=True)
class AgnoTool:
    """An Agno tool as `manage.py components` lists it."""

    name: str
    description: str
    requires_confirmation: bool
    parameters: dict


@dataclasses.dataclass(frozen=True)
class AgnoComponent(Component):
    """An Agno object registered as it is (`target`): it runs here, a copy per leg, on a session agentos keeps."""

    target: object = None
    asynchronous: bool = False  # a tool of it is a coroutine: it runs as Agno's `arun`

    @property
    def model_info(self) -> tuple[str, str]:
        model = _model_of(self.target)
        return (str(model.id), str(model.provider)) if model is not None else NO_MODEL

    @property
    def tools(self) -> tuple[AgnoTool, ...]:
        return _tools_of(self.target)

    def run(self, request: RunRequest, ctx: RunContext) -> RunResult:
        return run_leg(self, request, ctx)


class AgnoAgent(AgnoComponent):
    kind = AGENT


class AgnoTeam(AgnoComponent):
    kind = TEAM


class AgnoWorkflow(AgnoComponent):
    kind = WORKFLOW


_KINDS = ((Agent, AgnoAgent), (Team, AgnoTeam), (Workflow, AgnoWorkflow))


def wrapped(target: object) -> AgnoComponent:
    """`target`, an Agno `Agent`, `Team` or `Workflow`, as the registry holds it: its id (Agno's, or made from its
    name as Agno makes it), name and description. Raises `ValueError` for another object, or one with neither an id
    nor a name (Agno would make up a random id, different in every process)."""
    kind = next((wrapper for agno_class, wrapper in _KINDS if isinstance(target, agno_class)), None)
    if kind is None:
        raise ValueError(f"{type(target).__name__} is not an Agno Agent, Team or Workflow")
    if not target.id and not target.name:
        raise ValueError(f"an Agno {kind.kind} has neither an id nor a name")
    component_id = target.id or generate_id_from_name(target.name)
    description = getattr(target, "description", None) or ""
    return kind(
        id=component_id,
        name=target.name or component_id,
        description=description,
        num_history_runs=_history_window(target),
        target=target,
        asynchronous=has_async_tools(target),
    )


def of_agent_os(app: object) -> list[AgnoComponent]:
    """The agents, teams and workflows an `agno.os.AgentOS` app was given, wrapped, in that order."""
    listed = [*(app.agents or ()), *(app.teams or ()), *(app.workflows or ())]
    return [wrapped(target) for target in listed]


def _history_window(target: object) -> int | None:
    """How many of the session's earlier runs a leg reads for Agno to choose its history from, as its settings ask:
    none without `add_history_to_context`, its `num_history_runs` (Agno's default 3) unless it counts messages
    (`num_history_messages`: then every run, Agno cuts). A workflow reads them all: its steps choose."""
    if isinstance(target, Workflow):
        return None
    if not getattr(target, "add_history_to_context", False):
        return 0
    if getattr(target, "num_history_messages", None) is not None:
        return None
    return getattr(target, "num_history_runs", None)


def _model_of(target: object):
    """An agent's or team's model; a workflow's first step's agent's or team's."""
    if isinstance(target, Workflow):
        steps = target.steps if isinstance(target.steps, list | tuple) else []
        inner = next((step for step in (_step_target(step) for step in steps) if step is not None), None)
        return _model_of(inner) if inner is not None else None
    return getattr(target, "model", None)


def _step_target(step: object):
    for attribute in ("agent", "team"):
        inner = getattr(step, attribute, None)
        if inner is not None:
            return inner
    return step if isinstance(step, Agent | Team) else None


def _tools_of(target: object) -> tuple[AgnoTool, ...]:
    """An agent's or team's own tools, as Agno makes them of its functions and toolkits."""
    found = []
    for _, function in functions_of(target):
        function = function if isinstance(function, Function) else Function.from_callable(function)
        function = function.model_copy(deep=True)  # its schema as Agno makes it for a model, on a copy
        function.process_entrypoint()
        found.append(
            AgnoTool(
                name=function.name,
                description=function.description or "",
                requires_confirmation=bool(function.requires_confirmation),
                parameters=function.parameters or {},
            )
        )
    return tuple(found)
