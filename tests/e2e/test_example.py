"""The examples a new user starts from (examples/support_desk.py, and examples/agno_desk.py: a module of Agno's own
agents), served as the README says, run through Agno's own client against a fake OpenAI-compatible server: a tool,
a refund confirmed by a person, history, the tokens."""

from __future__ import annotations

import pytest
from agno.client import AgentOSClient
from agno.run.agent import (
    ModelRequestCompletedEvent,
    RunCompletedEvent,
    RunContinuedEvent,
    RunPausedEvent,
    ToolCallCompletedEvent,
)

from runs.models import AgentSession

from ..fake_openai import Answer

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_example_runs_streams_pauses_for_a_refund_and_continues_with_agnos_client(start_serve, fake_openai, run):
    fake_openai.answer(
        Answer(tool_calls=[("call_1", "look_up_order", {"code": "a1"})], usage={"input": 90, "output": 12}),
        Answer(tool_calls=[("call_2", "refund", {"code": "A1", "amount": 42})], usage={"input": 130, "output": 15}),
        Answer(text="Done: 42.00 EUR are on their way back.", usage={"input": 170, "output": 10}),
    )
    serve = start_serve(
        AGENTOS_COMPONENTS="examples.support_desk", OPENAI_BASE_URL=fake_openai.url, OPENAI_API_KEY="sk-test"
    )
    client = AgentOSClient(base_url=serve.url)

    async def first_leg():
        asked = client.run_agent_stream("support", "Refund my order A1, please", session_id="desk-1", background="true")
        return [event async for event in asked]

    async def second_leg(run_id, requirements):
        tools = [requirement.tool_execution for requirement in requirements]
        continuing = client.continue_agent_run_stream("support", run_id, tools, session_id="desk-1", background="true")
        return [event async for event in continuing]

    before = run(first_leg())
    paused = before[-1]
    requirements = paused.active_requirements
    for requirement in requirements:
        requirement.confirm()
    after = run(second_leg(paused.run_id, requirements))

    assert type(paused) is RunPausedEvent
    assert [(r.tool_execution.tool_name, r.tool_execution.tool_args) for r in requirements] == [
        ("refund", {"code": "A1", "amount": 42})
    ]
    looked_up = next(event for event in before if type(event) is ToolCallCompletedEvent)
    assert looked_up.content == '{"code": "A1", "status": "shipped", "total": 42.0}'
    assert (type(after[0]), type(after[-1])) == (RunContinuedEvent, RunCompletedEvent)
    assert after[-1].content == "Done: 42.00 EUR are on their way back."
    assert [e.input_tokens for e in before + after if type(e) is ModelRequestCompletedEvent] == [90, 130, 170]
    assert [event.event_index for event in before + after] == list(range(len(before) + len(after)))
    assert AgentSession.objects.get(pk="desk-1").session_state == {"refunds": [{"code": "A1", "amount": 42.0}]}
    system = fake_openai.requests[0]["messages"][0]
    assert system == {
        "role": "system",
        "content": "You answer customers of a small shop.\nLook an order up before you talk about it.",
    }


def test_the_agno_example_module_runs_unchanged_streams_pauses_and_continues(start_serve, fake_openai, run):
    fake_openai.answer(
        Answer(tool_calls=[("call_1", "look_up_order", {"code": "a1"})], usage={"input": 90, "output": 12}),
        Answer(tool_calls=[("call_2", "refund", {"code": "A1", "amount": 42})], usage={"input": 130, "output": 15}),
        Answer(text="Done: 42.00 EUR are on their way back.", usage={"input": 170, "output": 10}),
    )
    serve = start_serve(
        AGENTOS_COMPONENTS="examples.agno_desk:agent_os", OPENAI_BASE_URL=fake_openai.url, OPENAI_API_KEY="sk-test"
    )
    client = AgentOSClient(base_url=serve.url)

    async def leg(run_id=None, requirements=None):
        if run_id is None:
            asked = client.run_agent_stream(
                "agno-support", "Refund A1, please", session_id="agno-desk-1", background="true"
            )
        else:
            tools = [requirement.tool_execution for requirement in requirements]
            asked = client.continue_agent_run_stream(
                "agno-support", run_id, tools, session_id="agno-desk-1", background="true"
            )
        return [event async for event in asked]

    before = run(leg())
    paused = before[-1]
    requirements = paused.active_requirements
    for requirement in requirements:
        requirement.confirm()
    after = run(leg(paused.run_id, requirements))

    assert type(paused) is RunPausedEvent
    assert [(r.tool_execution.tool_name, r.tool_execution.tool_args) for r in requirements] == [
        ("refund", {"code": "A1", "amount": 42})
    ]
    looked_up = next(event for event in before if type(event) is ToolCallCompletedEvent)
    assert looked_up.tool.result == "A1: shipped, 42.00 EUR"
    assert (type(after[0]), type(after[-1])) == (RunContinuedEvent, RunCompletedEvent)
    assert after[-1].content == "Done: 42.00 EUR are on their way back."
    assert [e.input_tokens for e in before + after if type(e) is ModelRequestCompletedEvent] == [90, 130, 170]
    assert [event.event_index for event in before + after] == list(range(len(before) + len(after)))
    print("\nthe Agno example's run, by index:")
    for event in before + after:
        print(f"{event.event_index:3} {event.event}")
