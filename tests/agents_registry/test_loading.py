"""AGENTOS_COMPONENTS: a user's module loaded in every process, and each way it can be refused: one line, a non-zero
exit, nothing started."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentos_project.core.conf import AgentsSettings, ConfigError, load
from agents_registry.loading import ComponentsRefused, configured_components, entry_components
from agents_registry.management.commands.components import described
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
    "an Agno agent without an id or name": (
        f"AGENTOS_COMPONENTS: {USER}.agno_mixed:nameless: an Agno agent has neither an id nor a name"
    ),
    "an Agno id twice": (
        f"AGENTOS_COMPONENTS: agent 'clerk' is given twice, by {USER}.agno_mixed:twice and by {USER}.agno_mixed:twice"
    ),
    "an Agno object of another kind": (
        f"AGENTOS_COMPONENTS: {USER}.agno_mixed:not_a_component: OpenAIChat is not an Agno Agent, Team or Workflow"
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
    "an Agno agent without an id or name": f"{USER}.agno_mixed:nameless",
    "an Agno id twice": f"{USER}.agno_mixed:twice",
    "an Agno object of another kind": f"{USER}.agno_mixed:not_a_component",
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


def test_an_agentos_app_gives_its_agents_and_teams_as_agno_made_them():
    found = entry_components(f"{USER}.agno_app:agent_os")

    assert [(c.kind, c.id, c.name, c.description, c.model_info) for c in found] == [
        ("agent", "agno-helper", "Agno Helper", "Answers with what the session said before.", ("gpt-fake", "OpenAI")),
        ("agent", "agno-shop", "Agno Shop", "", ("gpt-fake", "OpenAI")),
        ("team", "editors", "Editors", "", ("gpt-fake", "OpenAI")),
    ]
    assert [c.num_history_runs for c in found] == [2, 0, 0], "the runs Agno's history settings may choose from"
    assert [c.asynchronous for c in found] == [False, True, False], "an async tool: the agent runs as Agno's arun"
    assert [tool.name for tool in found[1].tools] == ["look_up", "count"], "a toolkit's async method too"
    assert found[0].summary() == {
        "id": "agno-helper",
        "name": "Agno Helper",
        "description": "Answers with what the session said before.",
        "db_id": "agentos-db",
        "model": {"id": "gpt-fake", "provider": "OpenAI"},
    }


def test_a_list_takes_agno_objects_beside_agentos_own():
    found = entry_components(f"{USER}.agno_mixed")

    assert [(c.kind, c.id) for c in found] == [("agent", "native"), ("agent", "clerk"), ("workflow", "digest")]
    assert found[2].model_info == ("gpt-fake", "OpenAI"), "a workflow's first step's model"
    assert [(tool.name, tool.requires_confirmation, tool.parameters["required"]) for tool in found[1].tools] == [
        ("delete_file", True, ["path"]),
        ("list_files", False, ["folder"]),
    ], "a decorated function's and a toolkit's, as Agno makes them for a model"


def test_the_components_command_shows_agno_components_as_agno_made_them():
    [native, clerk, digest] = entry_components(f"{USER}.agno_mixed")

    assert described(f"{USER}.agno_mixed", clerk) == {
        "kind": "agent",
        "id": "clerk",
        "from": f"{USER}.agno_mixed",
        "model": "gpt-fake (OpenAI)",
        "agents": [
            {
                "id": "clerk",
                "tools": [
                    {
                        "name": "delete_file",
                        "description": "Delete one file.",
                        "requires_confirmation": True,
                        "parameters": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                            "required": ["path"],
                            "additionalProperties": False,
                        },
                    },
                    {
                        "name": "list_files",
                        "description": "List a folder's files.",
                        "requires_confirmation": False,
                        "parameters": {
                            "type": "object",
                            "properties": {"folder": {"type": "string"}},
                            "required": ["folder"],
                        },
                    },
                ],
            }
        ],
    }
    assert described(f"{USER}.agno_mixed", digest)["model"] == "gpt-fake (OpenAI)"


def test_a_module_that_needs_agno_without_agno_installed_stops_start_up_with_one_line():
    without_agno = "import runpy, sys; sys.modules['agno'] = None; sys.argv = ['manage.py', 'components']; "
    without_agno += "runpy.run_path('manage.py', run_name='__main__')"  # as if Agno were not installed

    refused = run([sys.executable, "-c", without_agno], AGENTOS_COMPONENTS=f"{USER}.agno_app:agent_os")

    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.splitlines() == [
        f"agentos: AGENTOS_COMPONENTS: {USER}.agno_app needs Agno, which is not installed: "
        "pip install -r requirements-agno.txt"
    ]


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
