"""Agno's own components, run here as they are: the `Agent`, `Team` and `Workflow` objects a team already passes to
`agno.os.AgentOS`, registered beside agentos's own (docs/components.md, "Agno agents").

Agno is an optional dependency (`requirements-agno.txt`). Nothing here imports it until a module of the user's
hands us one of its objects (`is_agno`, by the object's module alone): a process without Agno never loads it.

Inside: `components` (what the registry holds for an Agno object: its id, name, description and model, and how it
runs), `legs` (one leg of a run: the copy of the object, the session agentos keeps, the events, the result),
`durable` (its tool calls through agentos's step journal; `durable` here marks a tool for it), `cancels` (agentos's
cancel at Agno's checkpoints).
"""

from __future__ import annotations

import dataclasses

from ..tools import ON_INTERRUPT

AGNO = "agno"
DURABILITY = "__agentos_durability__"  # the attribute `durable` sets on a tool's function


@dataclasses.dataclass(frozen=True)
class Durability:
    """What a later attempt does with a call of an Agno tool that a lost attempt started and never finished, as for
    agentos's own tools: run it again (`idempotent`), else tell the model its outcome is unknown (`on_interrupt`
    "report", the default) or fail the run ("fail")."""

    idempotent: bool = False
    on_interrupt: str = "report"


def durable(tool, *, idempotent: bool = False, on_interrupt: str = "report"):
    """Mark an Agno tool (a plain function, what Agno's `@tool` made of one, or a toolkit's method) for agentos's
    journal: what a call a lost attempt left unfinished does on the next attempt (`Durability`). Returns `tool`,
    unchanged otherwise, so it marks in place: `durable(charge_card, on_interrupt="fail")` beside the agent."""
    if on_interrupt not in ON_INTERRUPT:
        raise ValueError(f"on_interrupt must be one of {ON_INTERRUPT}, not {on_interrupt!r}")
    entrypoint = getattr(tool, "entrypoint", None) or tool  # Agno's `Function` keeps the function as its entrypoint
    setattr(getattr(entrypoint, "__func__", entrypoint), DURABILITY, Durability(idempotent, on_interrupt))
    return tool


def is_agno(value: object) -> bool:
    """Whether `value` is an object of Agno's (an agent, a team, a workflow, an `AgentOS` app), told by its class's
    module: asking imports nothing."""
    return type(value).__module__.split(".", 1)[0] == AGNO


def agno_components(value: object) -> list:
    """The components `value` holds, wrapped for the registry: an `AgentOS` app's agents, teams and workflows (in
    that order), or the one agent, team or workflow `value` is. Raises `ValueError`, saying why, for any other Agno
    object, or a component without an id or a name."""
    from .components import of_agent_os, wrapped

    if type(value).__name__ == "AgentOS":
        return of_agent_os(value)
    return [wrapped(value)]
