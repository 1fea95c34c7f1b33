"""Which components a process registers at start-up, from the settings: the stubs, the `assistant`, and a user's
own from AGENTOS_COMPONENTS.

Each AGENTOS_COMPONENTS entry, `package.module[:attribute]`, names a list of components (the attribute, by default
`components`) or a callable returning one; Agno's own objects are taken as they are (`from_agno`): an
`agno.os.AgentOS` app (its agents, teams and workflows), and Agno agents, teams and workflows in the list beside
agentos's. Whatever cannot be loaded (a module that fails to import, Agno not installed for a module that needs it,
a missing attribute, an object that is not a component, a component without an id or name, an id that is not
URL-safe, a kind and id registered twice) is `ComponentsRefused`, whose message is the one line start-up prints.
"""

from __future__ import annotations

import importlib
import re

from agentos_project.core.exceptions import first_line

from .chat_models import OpenAIChat
from .components import Agent, Component
from .from_agno import AGNO, agno_components, is_agno
from .registry import registry
from .stubs import bench_components, stub_components

DEFAULT_ATTRIBUTE = "components"
URL_SAFE = re.compile(r"^[A-Za-z0-9._~-]+$")  # RFC 3986's unreserved characters: a path segment as it is


class ComponentsRefused(Exception):
    """AGENTOS_COMPONENTS cannot be loaded; the message names the entry and the cause, in one line."""


def configured_components(conf) -> list[tuple[str, Component]]:
    """Every component the settings ask for, each with where it came from: the stubs when AGENTOS_DEMO_AGENTS is
    on (and the bench's, AGENTOS_BENCH_AGENTS), an `assistant` agent when an OpenAI base URL is set, then the
    user's. Raises `ComponentsRefused` for an entry that cannot be loaded or a kind and id given twice."""
    found: list[tuple[str, Component]] = []
    if conf.demo_agents:
        found += [("the demo stubs", component) for component in stub_components()]
    if conf.bench_agents:
        found += [("the bench stubs", component) for component in bench_components()]
    if conf.openai_base_url:
        model = OpenAIChat(id=conf.openai_model, base_url=conf.openai_base_url, api_key=conf.openai_api_key)
        assistant = Agent(id="assistant", name="Assistant", description="OpenAI-compatible model.", model=model)
        found.append(("AGENTOS_OPENAI_BASE_URL", assistant))
    for entry in conf.components:
        found += [(entry, component) for component in entry_components(entry)]
    seen: dict[tuple[str, str], str] = {}
    for origin, component in found:
        key = (component.kind, component.id)
        if key in seen:
            raise ComponentsRefused(
                f"AGENTOS_COMPONENTS: {component.kind} {component.id!r} is given twice, by {seen[key]} and by {origin}"
            )
        seen[key] = origin
    return found


def register_configured_components(conf) -> None:
    """Register what `configured_components` finds; raises `ComponentsRefused` before registering anything."""
    for _origin, component in configured_components(conf):
        registry.register(component)


def entry_components(entry: str) -> list[Component]:
    """The components one AGENTOS_COMPONENTS entry names (`package.module[:attribute]`)."""
    module_name, _, attribute = entry.partition(":")
    attribute = attribute or DEFAULT_ATTRIBUTE
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if (error.name or "").split(".", 1)[0] == AGNO:
            raise ComponentsRefused(
                f"AGENTOS_COMPONENTS: {module_name} needs Agno, which is not installed: "
                "pip install -r requirements-agno.txt"
            ) from error
        raise ComponentsRefused(f"AGENTOS_COMPONENTS: {module_name} failed to import: {_said(error)}") from error
    except Exception as error:
        raise ComponentsRefused(f"AGENTOS_COMPONENTS: {module_name} failed to import: {_said(error)}") from error
    if not hasattr(module, attribute):
        raise ComponentsRefused(f"AGENTOS_COMPONENTS: {module_name} has no attribute {attribute!r}")
    value = getattr(module, attribute)
    if callable(value) and not isinstance(value, Component):
        try:
            value = value()
        except Exception as error:
            raise ComponentsRefused(f"AGENTOS_COMPONENTS: {entry}() raised {_said(error)}") from error
    if is_agno(value):  # an AgentOS app, or one Agno agent, team or workflow
        value = [value]
    if isinstance(value, Component) or not isinstance(value, list | tuple):
        raise ComponentsRefused(f"AGENTOS_COMPONENTS: {entry} must be a list of components (got {_kind_of(value)})")
    value = [component for given in value for component in _taken(entry, given)]
    for component in value:
        if not isinstance(component, Component):
            raise ComponentsRefused(
                f"AGENTOS_COMPONENTS: {entry} holds {_kind_of(component)}, not an Agent, Team or Workflow"
            )
        if not URL_SAFE.match(component.id or ""):
            raise ComponentsRefused(
                f"AGENTOS_COMPONENTS: {entry} gives {component.kind} id {component.id!r}, which is not URL-safe "
                "(letters, digits, '-', '.', '_' and '~' only)"
            )
    return list(value)


def _taken(entry: str, given: object) -> list:
    """The components `given` stands for: itself, or the Agno components an Agno object holds."""
    if not is_agno(given):
        return [given]
    try:
        return agno_components(given)
    except ValueError as error:
        raise ComponentsRefused(f"AGENTOS_COMPONENTS: {entry}: {error}") from None


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {first_line(error)}"


def _kind_of(value) -> str:
    return f"{type(value).__name__} {value!r}"[:120]
