"""`@tool`: the schema a typed function gives the model, the checks before a call, and what the model is told when a
call fails; and the agent's instructions and bound on model calls."""

from __future__ import annotations

import asyncio
import enum
import json
from typing import Literal, Optional

import pydantic
import pytest

from agents_registry.chat_models import ToolCall
from agents_registry.components import Agent, Team, Workflow
from agents_registry.context import PermanentRunError, RunContext, RunRequest
from agents_registry.output import OutputInvalid, checked, schema_name
from agents_registry.tools import Tool, ToolFailed, tool


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(pydantic.BaseModel):
    street: str
    city: str = "Paris"


@tool
def open_ticket(
    title: str,
    ctx: RunContext,
    priority: Priority = Priority.LOW,
    kind: Literal["bug", "question"] = "bug",
    assignee: Optional[str] = None,  # noqa: UP045 (the shape a user writes is what is tested)
    tags: list[str] | None = None,
    estimate: float = 1.5,
    urgent: bool = False,
    count: int = 1,
    address: Address | None = None,
) -> dict:
    """Open a ticket in the tracker.

    Args:
        title: What the ticket is about.
        priority: How soon it needs an answer.
        assignee (str): Who takes it; nobody
            when left out.
    """
    ctx.session_state["opened"] = ctx.session_state.get("opened", 0) + 1
    return {"title": title, "priority": priority, "kind": kind, "by": ctx.run_id, "address": address}


def test_a_typed_function_gives_its_name_description_and_whole_schema():
    assert open_ticket.schema() == {
        "type": "function",
        "function": {
            "name": "open_ticket",
            "description": "Open a ticket in the tracker.",
            "parameters": {
                "type": "object",
                "additionalProperties": False,
                "required": ["title"],
                "$defs": {
                    "Address": {
                        "type": "object",
                        "properties": {"street": {"type": "string"}, "city": {"type": "string", "default": "Paris"}},
                        "required": ["street"],
                    },
                    "Priority": {"type": "string", "enum": ["low", "high"]},
                },
                "properties": {
                    "title": {"type": "string", "description": "What the ticket is about."},
                    "priority": {
                        "$ref": "#/$defs/Priority",
                        "default": "low",
                        "description": "How soon it needs an answer.",
                    },
                    "kind": {"type": "string", "enum": ["bug", "question"], "default": "bug"},
                    "assignee": {
                        "anyOf": [{"type": "string"}, {"type": "null"}],
                        "default": None,
                        "description": "Who takes it; nobody when left out.",
                    },
                    "tags": {
                        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                        "default": None,
                    },
                    "estimate": {"type": "number", "default": 1.5},
                    "urgent": {"type": "boolean", "default": False},
                    "count": {"type": "integer", "default": 1},
                    "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
                },
            },
        },
    }


def test_options_name_the_tool_and_ask_for_confirmation():
    @tool(name="wipe", description="Wipe a disk.", requires_confirmation=True)
    def wipe_disk(device: str) -> str:
        return f"wiped {device}"

    assert (wipe_disk.name, wipe_disk.description, wipe_disk.requires_confirmation) == ("wipe", "Wipe a disk.", True)
    assert wipe_disk.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"device": {"type": "string"}},
        "required": ["device"],
    }


def test_the_decorated_function_stays_callable_as_written(make_context):
    context = make_context()

    assert open_ticket("printer jam", context, priority=Priority.HIGH) == {
        "title": "printer jam",
        "priority": Priority.HIGH,
        "kind": "bug",
        "by": "r",
        "address": None,
    }
    assert context.session_state == {"opened": 1}


def test_a_call_is_validated_and_its_result_reaches_the_model_as_json(make_context):
    context = make_context()

    result = open_ticket.call({"title": "jam", "priority": "high", "address": {"street": "1 rue"}}, context)

    assert json.loads(result) == {
        "title": "jam",
        "priority": "high",
        "kind": "bug",
        "by": "r",
        "address": {"street": "1 rue", "city": "Paris"},
    }
    assert context.session_state == {"opened": 1}


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({}, "title\n  Field required"),
        ({"title": "x", "kind": "praise"}, "kind\n  Input should be 'bug' or 'question'"),
        ({"title": "x", "colour": "red"}, "colour\n  Extra inputs are not permitted"),
        ({"title": "x", "count": "many"}, "count\n  Input should be a valid integer"),
    ],
    ids=["missing", "not in the literal", "unknown", "wrong type"],
)
def test_bad_arguments_are_refused_before_the_call_with_what_is_wrong(make_context, arguments, said):
    context = make_context()

    with pytest.raises(ToolFailed) as failed:
        open_ticket.call(arguments, context)

    assert str(failed.value).startswith("Invalid arguments for tool open_ticket: 1 validation error for")
    assert said in str(failed.value)
    assert context.session_state == {}, "the function did not run"


class Scripted:
    """A model that answers from a script: each turn a list of tool calls or a text; it records what it was sent."""

    id, provider = "scripted", "test"

    def __init__(self, *turns):
        self.turns = list(turns)
        self.prompts: list[list[dict]] = []
        self.formats: list[dict | None] = []

    def stream(self, messages, tools, ctx, response_format=None):
        self.prompts.append(list(messages))
        self.formats.append(response_format)
        turn = self.turns.pop(0)
        if isinstance(turn, str):
            yield turn
            return
        for index, (name, arguments) in enumerate(turn):
            yield ToolCall(id=f"call_{len(self.prompts)}_{index}", name=name, arguments=arguments)


def failing_lookup(code: str) -> str:
    raise LookupError(f"no order {code}")


def test_a_failing_tool_goes_back_to_the_model_with_a_tool_error_event_and_the_run_completes(make_context, recorder):
    model = Scripted([("failing_lookup", {"code": "A1"}), ("open_ticket", {})], "sorry, no such order")
    agent = Agent(id="support", name="Support", model=model, tools=[failing_lookup, open_ticket])

    result = agent.run(RunRequest(message="where is A1?"), make_context())

    assert (result.status, result.content) == ("completed", "sorry, no such order")
    told = [message["content"] for message in model.prompts[1] if message["role"] == "tool"]
    assert told[0] == "no order A1"
    assert told[1].startswith("Invalid arguments for tool open_ticket: 1 validation error")
    errors = [fields for name, fields in recorder.events if name == "ToolCallError"]
    assert [(e["tool"]["tool_name"], e["tool"]["tool_call_error"], e["error"]) for e in errors] == [
        ("failing_lookup", True, "no order A1"),
        ("open_ticket", True, told[1]),
    ]
    assert errors[0]["tool"]["result"] == "no order A1"
    assert recorder.names.count("ToolCallStarted") == 2 and "ToolCallCompleted" not in recorder.names


def test_on_error_fail_ends_the_run_as_before(make_context):
    strict = tool(failing_lookup, on_error="fail")
    agent = Agent(id="strict", name="Strict", model=Scripted([("failing_lookup", {"code": "A1"})]), tools=[strict])

    with pytest.raises(LookupError, match="no order A1"):
        agent.run(RunRequest(message="where is A1?"), make_context())
    with pytest.raises(PermanentRunError, match="Invalid arguments for tool failing_lookup"):
        strict.call({"order": "A1"})


def test_a_tool_written_out_is_checked_against_its_functions_signature():
    written = Tool(name="read", description="", parameters={}, function=lambda path: f"read {path}")

    assert written.call({"path": "x"}) == "read x"
    with pytest.raises(ToolFailed, match=r"Invalid arguments for tool read: <lambda>\(\) got an unexpected keyword"):
        written.call({"file": "x"})


def test_an_unknown_on_error_is_refused_when_the_tool_is_made():
    with pytest.raises(ValueError, match="tool failing_lookup: on_error must be one of"):
        tool(failing_lookup, on_error="ignore")


def test_instructions_open_every_model_call_and_stay_out_of_the_history(make_context):
    model = Scripted([("open_ticket", {"title": "jam"})], "opened")
    agent = Agent(id="i", name="I", model=model, tools=[open_ticket], instructions=["Be brief.", "Use tools."])
    history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]

    result = agent.run(RunRequest(message="jam"), make_context(history))

    system = {"role": "system", "content": "Be brief.\nUse tools."}
    assert [prompt[:3] for prompt in model.prompts] == [[system, *history]] * 2
    assert all(message["role"] != "system" for message in result.messages)


def test_an_agent_that_keeps_calling_tools_stops_after_its_max_model_turns(make_context):
    model = Scripted(*[[("failing_lookup", {"code": "A1"})]] * 3)
    agent = Agent(id="loop", name="Loop", model=model, tools=[failing_lookup], max_model_turns=3)

    with pytest.raises(PermanentRunError, match="Agent loop called tools 3 times without answering"):
        agent.run(RunRequest(message="go"), make_context())
    assert len(model.prompts) == 3


def test_a_tool_that_asks_for_input_hides_those_fields_from_the_model_and_describes_them_to_the_user():
    @tool(requires_user_input=True, user_input_fields=["date"])
    def book_visit(city: str, date: str, hour: int = 9) -> str:
        """Book a visit.

        Args:
            date: The day the customer chooses.
        """
        return f"{city} {date} {hour}"

    assert book_visit.schema()["function"]["parameters"] == {
        "type": "object",
        "additionalProperties": False,
        "properties": {"city": {"type": "string"}, "hour": {"type": "integer", "default": 9}},
        "required": ["city"],
    }
    assert book_visit.user_input_schema() == [
        {"name": "date", "field_type": "str", "description": "The day the customer chooses.", "value": None}
    ]
    everything = tool(book_visit.function, requires_user_input=True)
    assert everything.user_input_fields == ("city", "date", "hour")


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"requires_confirmation": True, "external_execution": True}, "pauses for one thing only"),
        ({"requires_user_input": True, "user_input_fields": ["day"]}, "user_input_fields names no parameter 'day'"),
    ],
)
def test_pause_options_that_cannot_hold_are_refused_when_the_tool_is_made(options, refusal):
    with pytest.raises(ValueError, match=f"tool failing_lookup: {refusal}"):
        tool(failing_lookup, **options)


def test_a_teams_leader_uses_its_own_tools_and_instructions_after_its_members(make_context, recorder):
    member = Agent(id="m", name="M", model=Scripted("the order is A1"))
    leader_model = Scripted([("open_ticket", {"title": "late A1"})], "ticket opened for A1")
    leader = Agent(id="lead", name="Lead", model=leader_model, tools=[open_ticket], instructions="Decide.")
    team = Team(id="desk", name="Desk", leader=leader, members=(member,))

    result = team.run(RunRequest(message="my order is late"), make_context())

    assert (result.status, result.content) == ("completed", "ticket opened for A1")
    assert leader_model.prompts[0] == [
        {"role": "system", "content": "Decide."},
        {"role": "user", "content": "my order is late"},
        {"role": "assistant", "name": "m", "content": "the order is A1"},
    ]
    assert [name for name in recorder.names if "Tool" in name] == ["TeamToolCallStarted", "TeamToolCallCompleted"]
    members = [fields for name, fields in recorder.events if fields.get("agent_id") == "m"]
    assert {(f["parent_run_id"], f["run_id"] != "r") for f in members} == {("r", True)}, "a run of its own"
    assert len({f["run_id"] for f in members}) == 1
    assert result.messages == [
        {"role": "user", "content": "my order is late"},
        {"role": "assistant", "content": "ticket opened for A1"},
    ]


def test_a_leaders_tool_that_needs_confirmation_pauses_the_team_and_the_continue_runs_it(make_context, recorder):
    @tool(requires_confirmation=True)
    def refund(code: str) -> str:
        """Refund an order."""
        return f"refunded {code}"

    leader_model = Scripted([("refund", {"code": "A1"})], "refunded, sorry for the wait")
    member = Agent(id="m", name="M", model=Scripted("A1 is late"))
    team = Team(
        id="desk", name="Desk", leader=Agent(id="lead", name="L", model=leader_model, tools=[refund]), members=(member,)
    )

    paused = team.run(RunRequest(message="refund A1"), make_context())
    [asked] = [fields for name, fields in recorder.events if name == "TeamRunPaused"]
    decided = [{**call, "confirmed": True} for call in paused.tools]
    continued = team.run(
        RunRequest(message="refund A1", run_messages=paused.messages, decided_tools=decided), make_context()
    )

    assert (paused.status, [call["tool_name"] for call in paused.tools]) == ("paused", ["refund"])
    assert "member_agent_id" not in asked["requirements"][0], "the leader asks, not a member"
    assert (continued.status, continued.content) == ("completed", "refunded, sorry for the wait")
    assert [m["content"] for m in leader_model.prompts[1] if m["role"] == "tool"] == ["refunded A1"]
    assert len(member.model.prompts) == 1, "the members answered once, before the pause"


class Refund(pydantic.BaseModel):
    code: str
    amount: float


def test_an_output_schema_asks_the_model_for_it_and_makes_the_content_its_json(make_context, recorder):
    model = Scripted('{"code": "A1", "amount": 42}')
    agent = Agent(id="o", name="O", model=model, output_schema=Refund)

    result = agent.run(RunRequest(message="refund A1"), make_context())

    assert (result.content, result.content_type) == ('{"code":"A1","amount":42.0}', "Refund")
    assert model.formats == [
        {"type": "json_schema", "json_schema": {"name": "Refund", "schema": Refund.model_json_schema()}}
    ]
    [completed] = [fields for name, fields in recorder.events if name == "RunCompleted"]
    assert (completed["content"], completed["content_type"]) == ({"code": "A1", "amount": 42.0}, "Refund")


def test_a_team_whose_leader_has_an_output_schema_answers_its_object_as_an_agent_does(make_context, recorder):
    leader = Agent(id="lead", name="L", model=Scripted('{"code": "A1", "amount": 42}'), output_schema=Refund)
    team = Team(id="desk", name="Desk", leader=leader, members=(Agent(id="m", name="M", model=Scripted("A1 is late")),))

    result = team.run(RunRequest(message="refund A1"), make_context())

    assert (result.content, result.content_type) == ('{"code":"A1","amount":42.0}', "Refund")
    [completed] = [fields for name, fields in recorder.events if name == "TeamRunCompleted"]
    assert (completed["content"], completed["content_type"]) == ({"code": "A1", "amount": 42.0}, "Refund")


def test_a_workflow_whose_last_step_has_an_output_schema_answers_its_object_as_an_agent_does(make_context, recorder):
    first = Agent(id="draft", name="Draft", model=Scripted("refund A1 in full"))
    last = Agent(id="price", name="Price", model=Scripted('{"code": "A1", "amount": 42}'), output_schema=Refund)
    workflow = Workflow(id="refunds", name="Refunds", steps=(first, last))

    result = workflow.run(RunRequest(message="refund A1"), make_context())

    assert (result.content, result.content_type) == ('{"code":"A1","amount":42.0}', "Refund")
    steps = [(f["content"], f["content_type"]) for name, f in recorder.events if name == "StepCompleted"]
    assert steps == [("refund A1 in full", "str"), ({"code": "A1", "amount": 42.0}, "Refund")]
    [completed] = [fields for name, fields in recorder.events if name == "WorkflowCompleted"]
    assert (completed["content"], completed["content_type"]) == ({"code": "A1", "amount": 42.0}, "Refund")


@pytest.mark.parametrize(
    ("schema", "answer", "said"),
    [
        (Refund, '{"code": "A1"}', "The model's answer is not the output schema Refund: 1 validation error"),
        (Refund, "sure, refunded", "The model's answer is not the output schema Refund: 1 validation error"),
        (
            {"title": "Verdict", "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
            '{"ok": "yes"}',
            "The model's answer is not the output schema Verdict: 'yes' is not of type 'boolean'",
        ),
    ],
    ids=["a field missing", "not json", "json schema"],
)
def test_an_answer_that_is_not_the_output_schema_fails_the_leg_with_what_is_wrong(make_context, schema, answer, said):
    agent = Agent(id="o", name="O", model=Scripted(answer), output_schema=schema)

    with pytest.raises(OutputInvalid) as failed:
        agent.run(RunRequest(message="verdict?"), make_context())

    assert str(failed.value).startswith(said)


def test_a_json_schema_output_is_stored_as_its_json():
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}

    assert checked(schema, ' {"ok": true} ') == '{"ok": true}'
    assert schema_name(schema) == "output"


def test_an_async_tool_runs_to_its_end_and_an_agent_named_only_gets_its_id_from_its_name(make_context):
    @tool
    async def fetch_rate(currency: str) -> dict:
        """The exchange rate of a currency."""
        await asyncio.sleep(0)
        return {"currency": currency, "rate": 1.08}

    model = Scripted([("fetch_rate", {"currency": "USD"})], "1.08")
    agent = Agent(name="Currency Desk", model=model, tools=[fetch_rate])

    result = agent.run(RunRequest(message="rate?"), make_context())

    assert (agent.id, agent.name, result.content) == ("currency-desk", "Currency Desk", "1.08")
    assert [m["content"] for m in model.prompts[1] if m["role"] == "tool"] == ['{"currency": "USD", "rate": 1.08}']
    with pytest.raises(ValueError, match="^Agent needs an id or a name$"):
        Agent(model=model)


def test_a_workflow_steps_agent_events_name_the_agent(make_context, recorder):
    first, second = (
        Agent(id="draft", name="Draft", model=Scripted("a draft")),
        Agent(name="Polish", model=Scripted("done")),
    )
    workflow = Workflow(id="write", name="Write", steps=(first, second))

    result = workflow.run(RunRequest(message="write"), make_context())

    content = [(fields["agent_id"], fields["content"]) for name, fields in recorder.events if name == "RunContent"]
    assert (result.content, content) == ("done", [("draft", "a draft"), ("polish", "done")])
