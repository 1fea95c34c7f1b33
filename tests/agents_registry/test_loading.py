"""AGENTOS_COMPONENTS: a user's module loaded in every process, and each way it can be refused: one line, a non-zero
exit, nothing started."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentos_project.core.conf import AgentsSettings, ConfigError, load
from agents_registry.loading import ComponentsRefused, configured_components, entry_components
from tests.support.processes import ROOT, process_env

USER = "tests.agents_registry.user_modules"
REFUSALS = {
    "broken": f"AGENTOS_COMPONENTS: {USER}.broken failed to import: RuntimeError: no API key for the CRM",
    "missing": f"AGENTOS_COMPONENTS: {USER}.good has no attribute 'agents'",
    "not a list": f"AGENTOS_COMPONENTS: {USER}.odd:single must be a list of components (got Agent Agent(id='single'",
    "not components": f"AGENTOS_COMPONENTS: {USER}.odd holds str 'support', not an Agent, Team or Workflow",
    "raising": f"AGENTOS_COMPONENTS: {USER}.odd:failing() raised ValueError: the catalogue is offline",
    "not URL-safe": (
        f"AGENTOS_COMPONENTS: {USER}.odd:spaced gives agent id 'my agent', which is not URL-safe "
        "(letters, digits, '-', '.', '_' and '~' only)"
    ),
    "twice": f"AGENTOS_COMPONENTS: agent 'twin' is given twice, by {USER}.twice and by {USER}.twice",
    "a stub's id": (
        f"AGENTOS_COMPONENTS: agent 'stub-agent' is given twice, by the demo stubs and by {USER}.twice:stub_again"
    ),
}
ENTRIES = {
    "broken": f"{USER}.broken",
    "missing": f"{USER}.good:agents",
    "not a list": f"{USER}.odd:single",
    "not components": f"{USER}.odd",
    "raising": f"{USER}.odd:failing",
    "not URL-safe": f"{USER}.odd:spaced",
    "twice": f"{USER}.twice",
    "a stub's id": f"{USER}.twice:stub_again",
}


@pytest.mark.parametrize("case", list(ENTRIES))
def test_each_refusal_names_the_entry_and_the_cause(case):
    conf = AgentsSettings(demo_agents=True, components=(ENTRIES[case],))

    with pytest.raises(ComponentsRefused) as refused:
        configured_components(conf)

    assert str(refused.value).startswith(REFUSALS[case])
    assert "\n" not in str(refused.value)


def test_a_module_attribute_and_a_callable_give_the_same_components():
    from_list = entry_components(f"{USER}.good")
    from_callable = entry_components(f"{USER}.good:build")

    assert [c.id for c in from_list] == [c.id for c in from_callable] == ["support"]
    found = configured_components(AgentsSettings(demo_agents=False, components=(f"{USER}.good",)))
    assert [(origin, component.id) for origin, component in found] == [(f"{USER}.good", "support")]


@pytest.mark.parametrize("value", ["tests/agents.py", "pkg.mod:attr:more", "pkg..mod", "pkg.mod:"])
def test_a_malformed_setting_is_a_configuration_error(value):
    with pytest.raises(ConfigError, match=r"^AGENTOS_COMPONENTS entries must be package\.module\[:attribute\]"):
        load({"AGENTOS_COMPONENTS": value})


def test_the_setting_takes_several_entries():
    loaded = load({"AGENTOS_COMPONENTS": f" {USER}.good , {USER}.twice:stub_again,"})

    assert loaded.agents.components == (f"{USER}.good", f"{USER}.twice:stub_again")


def run(command: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=ROOT, env=process_env(**env), capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.django_db
def test_the_components_command_lists_each_component_with_its_tools_schemas():
    shown = run([sys.executable, "manage.py", "components", "--json"], AGENTOS_COMPONENTS=f"{USER}.good")

    assert (shown.returncode, shown.stderr) == (0, "")
    listed = json.loads(shown.stdout)
    support = next(entry for entry in listed if entry["id"] == "support")
    assert support == {
        "kind": "agent",
        "id": "support",
        "from": f"{USER}.good",
        "model": "stub-model (agentos-stub)",
        "agents": [
            {
                "id": "support",
                "tools": [
                    {
                        "name": "look_up_order",
                        "description": "Find an order by its code.",
                        "requires_confirmation": False,
                        "parameters": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "code": {"type": "string", "description": "The order's code, as the customer gives it."}
                            },
                            "required": ["code"],
                        },
                    },
                    {
                        "name": "refund",
                        "description": "Refund an order.",
                        "requires_confirmation": True,
                        "parameters": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"code": {"type": "string"}, "amount": {"type": "number"}},
                            "required": ["code", "amount"],
                        },
                    },
                ],
            }
        ],
    }
    text = run([sys.executable, "manage.py", "components"], AGENTOS_COMPONENTS=f"{USER}.good")
    assert f"agent support  from {USER}.good  model stub-model (agentos-stub)" in text.stdout.splitlines()


COMMANDS = {
    "components": [sys.executable, "manage.py", "components"],
    "serve": [sys.executable, "manage.py", "serve", "--port", "1"],
    "serve --web-only": [sys.executable, "manage.py", "serve", "--web-only", "--port", "1"],
    "serve --worker-only": [sys.executable, "manage.py", "serve", "--worker-only"],
    "worker": [sys.executable, "-m", "celery", "-A", "agentos_project", "worker", "--pool", "threads"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", ["broken", "not URL-safe", "twice", "not components"])
def test_every_process_refuses_to_start_with_one_line(command, case):
    refused = run(COMMANDS[command], AGENTOS_COMPONENTS=ENTRIES[case])

    assert refused.returncode == 2
    assert refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith(f"agentos: {REFUSALS[case]}")


def test_a_users_agent_runs_through_the_queue_when_web_and_worker_load_its_module(start_serve):
    serve = start_serve(AGENTOS_COMPONENTS=f"{USER}.good")

    listed = serve.get("/agents")
    run_id = serve.submitted("chat-1", "hello sleep=0", prefix="/agents/support")
    polled = serve.wait_status(run_id, "chat-1", "COMPLETED", prefix="/agents/support", timeout=30)

    assert "support" in [agent["id"] for agent in listed]
    assert polled["content"] == "echo: hello sleep=0 (history: 1 messages)", "the instructions came first"
