"""A user's agent, loaded from AGENTOS_COMPONENTS by the web and the worker of a real `serve`, on an
OpenAI-compatible model (a fake server the test scripts), through the queue."""

from __future__ import annotations

import json

import pytest
from agno.client import AgentOSClient
from agno.run.agent import RunCompletedEvent, RunContinuedEvent, RunPausedEvent

from runs.models import AgentSession, RunEvent

from ..fake_openai import Answer

pytestmark = pytest.mark.django_db(transaction=True)
SHOP = "/agents/shop"
MODULE = "tests.agents_registry.user_modules.shop"


def test_tools_instructions_usage_and_a_failing_tool_through_the_queue(start_serve, fake_openai):
    fake_openai.answer(
        Answer(
            tool_calls=[
                ("call_1", "look_up_order", {"code": "A1"}),
                ("call_2", "cancel_order", {"code": "A1"}),
                ("call_3", "look_up_order", {"number": 5}),
            ],
            usage={"input": 20, "output": 8},
        ),
        Answer(text="A1 has shipped; it cannot be cancelled.", usage={"input": 40, "output": 11}),
    )
    serve = start_serve(AGENTOS_COMPONENTS=f"{MODULE}:components", FAKE_OPENAI_URL=fake_openai.url)

    run_id = serve.submitted("shop-1", "cancel A1", prefix=SHOP)
    polled = serve.wait_status(run_id, "shop-1", "COMPLETED", prefix=SHOP, timeout=30)

    assert polled["content"] == "A1 has shipped; it cannot be cancelled."
    assert {key: polled["metrics"][key] for key in ("input_tokens", "output_tokens", "total_tokens")} == {
        "input_tokens": 60,
        "output_tokens": 19,
        "total_tokens": 79,
    }
    first, second = (request["messages"] for request in fake_openai.requests)
    assert first == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "cancel A1"}]
    told = [(m["tool_call_id"], m["content"]) for m in second if m["role"] == "tool"]
    assert told[:2] == [("call_1", json.dumps({"code": "A1", "status": "shipped"})), ("call_2", "order A1 has shipped")]
    assert told[2][0] == "call_3"
    assert told[2][1].startswith("Invalid arguments for tool look_up_order: 2 validation errors")
    events = list(RunEvent.objects.filter(run_id=run_id).values_list("event", flat=True))
    assert events == [
        "RunStarted",
        "ModelRequestStarted",
        "ModelRequestCompleted",
        "ToolCallStarted",
        "ToolCallCompleted",
        "ToolCallStarted",
        "ToolCallError",
        "ToolCallStarted",
        "ToolCallError",
        "ModelRequestStarted",
        "ModelRequestCompleted",
        "RunCompleted",
    ]
    completed = RunEvent.objects.get(run_id=run_id, event="ModelRequestCompleted", event_index=2).data
    assert (completed["agent_id"], completed["input_tokens"], completed["output_tokens"]) == ("shop", 20, 8)
    assert AgentSession.objects.get(pk="shop-1").session_state == {"looked_up": ["A1"]}


def test_the_model_sees_the_last_two_runs_and_never_the_instructions_as_history(start_serve, fake_openai):
    fake_openai.answer(Answer(text="one"), Answer(text="two"), Answer(text="three"), Answer(text="four"))
    serve = start_serve(AGENTOS_COMPONENTS=f"{MODULE}:components", FAKE_OPENAI_URL=fake_openai.url)

    for number, message in enumerate(("first", "second", "third", "fourth"), start=1):
        run_id = serve.submitted("shop-2", message, prefix=SHOP)
        serve.wait_status(run_id, "shop-2", "COMPLETED", prefix=SHOP, timeout=30)
        assert len(fake_openai.requests) == number

    assert fake_openai.requests[-1]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "third"},
        {"role": "assistant", "content": "three"},
        {"role": "user", "content": "fourth"},
    ]


def streamed_with_agnos_client(run, serve, session_id: str, message: str, answer) -> tuple[list, list]:
    """Run `message` on the shop agent streamed with Agno's client until it pauses, let `answer` resolve each of
    its active requirements, continue it streamed; the two legs' events."""
    client = AgentOSClient(base_url=serve.url)

    async def first_leg():
        return [e async for e in client.run_agent_stream("shop", message, session_id=session_id, background="true")]

    async def second_leg(run_id, tools):
        continuing = client.continue_agent_run_stream("shop", run_id, tools, session_id=session_id, background="true")
        return [event async for event in continuing]

    before = run(first_leg())
    requirements = before[-1].active_requirements
    for requirement in requirements:
        answer(requirement)
    return before, run(second_leg(before[-1].run_id, [requirement.tool_execution for requirement in requirements]))


def test_a_tool_the_client_executes_pauses_the_run_until_its_result_comes_back(start_serve, fake_openai, run):
    fake_openai.answer(
        Answer(tool_calls=[("call_9", "send_invoice", {"code": "A1", "email": "ana@example.com"})]),
        Answer(text="The invoice is on its way."),
    )
    serve = start_serve(AGENTOS_COMPONENTS=f"{MODULE}:with_pauses", FAKE_OPENAI_URL=fake_openai.url)
    asked = []

    def run_it_ourselves(requirement):
        asked.append((requirement.needs_external_execution, requirement.tool_execution.tool_args))
        requirement.set_external_execution_result("sent as mail #42")

    before, after = streamed_with_agnos_client(run, serve, "shop-3", "mail me the invoice of A1", run_it_ourselves)

    assert type(before[-1]) is RunPausedEvent
    assert asked == [(True, {"code": "A1", "email": "ana@example.com"})]
    assert (type(after[0]), type(after[-1]), after[-1].content) == (
        RunContinuedEvent,
        RunCompletedEvent,
        "The invoice is on its way.",
    )
    told = [m for m in fake_openai.requests[1]["messages"] if m["role"] == "tool"]
    assert told == [{"role": "tool", "tool_call_id": "call_9", "content": "sent as mail #42"}]


def test_a_tool_that_asks_the_user_for_input_runs_with_the_values_they_give(start_serve, fake_openai, run):
    fake_openai.answer(
        Answer(tool_calls=[("call_5", "book_visit", {"city": "Lyon"})]), Answer(text="Booked for Christmas Eve.")
    )
    serve = start_serve(AGENTOS_COMPONENTS=f"{MODULE}:with_pauses", FAKE_OPENAI_URL=fake_openai.url)
    asked = []

    def fill_in(requirement):
        asked.append([(field.name, field.description) for field in requirement.user_input_schema])
        requirement.provide_user_input({"date": "2026-12-24"})

    before, after = streamed_with_agnos_client(run, serve, "shop-4", "book a visit in Lyon", fill_in)

    offered = next(t for t in fake_openai.requests[0]["tools"] if t["function"]["name"] == "book_visit")
    assert offered["function"]["parameters"]["properties"] == {"city": {"type": "string", "description": "Where."}}
    assert type(before[-1]) is RunPausedEvent
    assert asked == [[("date", "The day the customer chooses.")]]
    assert after[-1].content == "Booked for Christmas Eve."
    told = [m["content"] for m in fake_openai.requests[1]["messages"] if m["role"] == "tool"]
    assert told == ["visit booked in Lyon on 2026-12-24 for shop-4"]


def test_an_output_schema_gives_a_json_content_on_the_poll_and_in_run_completed(start_serve, fake_openai):
    fake_openai.answer(Answer(text='{"refundable": false, "reason": "shipped"}'))
    serve = start_serve(AGENTOS_COMPONENTS=f"{MODULE}:structured", FAKE_OPENAI_URL=fake_openai.url)

    run_id = serve.submitted("shop-5", "can I get a refund for A1?", prefix=SHOP)
    polled = serve.wait_status(run_id, "shop-5", "COMPLETED", prefix=SHOP, timeout=30)

    assert (polled["content"], polled["content_type"]) == ({"refundable": False, "reason": "shipped"}, "Verdict")
    assert fake_openai.requests[0]["response_format"]["json_schema"]["name"] == "Verdict"
    completed = RunEvent.objects.get(run_id=run_id, event="RunCompleted").data
    assert (completed["content"], completed["content_type"]) == ({"refundable": False, "reason": "shipped"}, "Verdict")
