"""Agno's own components, run here as they are: the `Agent`, `Team` and `Workflow` objects a team already passes to
`agno.os.AgentOS`, registered beside agentos's own (docs/components.md, "Agno agents").

Agno is an optional dependency (`requirements-agno.txt`). Nothing here imports it until a module of the user's
hands us one of its objects (`is_agno`, by the object's module alone): a process without Agno never loads it.

Inside: `components` (what the registry holds for an Agno object: its id, name, description and model, and how it
runs), `legs` (one leg of a run: the copy of the object, the session agentos keeps, the events, the result).
"""

from __future__ import annotations

AGNO = "agno"


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
