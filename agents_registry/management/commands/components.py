"""`python manage.py components`: what this process registered, with each agent's model and tools (their schemas).

AGENTOS_COMPONENTS is loaded when Django starts, so a setting that cannot be loaded stops the command before it
runs, with the one line that says why and a non-zero exit.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from agentos_project.core.conf import current
from agents_registry.components import Agent, Team, Workflow
from agents_registry.loading import configured_components


class Command(BaseCommand):
    help = "List the registered components: kind, id, where each came from, its model and its tools."
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", dest="as_json", help="one JSON document instead of text")

    def handle(self, *args, as_json: bool = False, **options):
        listed = [described(origin, component) for origin, component in configured_components(current().agents)]
        if as_json:
            self.stdout.write(json.dumps(listed, indent=2))
            return
        for entry in listed:
            self.stdout.write(f"{entry['kind']} {entry['id']}  from {entry['from']}  model {entry['model']}")
            for agent in entry["agents"]:
                prefix = "  " if agent["id"] == entry["id"] else f"  {agent['id']}: "
                for tool in agent["tools"]:
                    asks = " (requires confirmation)" if tool["requires_confirmation"] else ""
                    self.stdout.write(f"{prefix}tool {tool['name']}{asks} {json.dumps(tool['parameters'])}")


def described(origin: str, component) -> dict:
    """What `components` shows of one component; `agents` are the agents inside it (itself for an agent)."""
    model_id, provider = component.model_info
    return {
        "kind": component.kind,
        "id": component.id,
        "from": origin,
        "model": f"{model_id} ({provider})",
        "agents": [{"id": agent.id, "tools": [_tool(tool) for tool in agent.tools]} for agent in _agents(component)],
    }


def _agents(component) -> list[Agent]:
    if isinstance(component, Team):
        return [component.leader, *component.members]
    if isinstance(component, Workflow):
        return list(component.steps)
    return [component]


def _tool(tool) -> dict:
    return {
        "name": tool.name,
        "description": tool.description,
        "requires_confirmation": tool.requires_confirmation,
        "parameters": tool.parameters,
    }
