"""A user's agent, loaded from AGENTOS_COMPONENTS by the web and the worker of a real `serve`, on an
OpenAI-compatible model (a fake server the test scripts), through the queue."""

from __future__ import annotations

import json

import pytest

from runs.models import AgentSession, RunEvent

from ..fake_openai import Answer

pytestmark = pytest.mark.django_db(transaction=True)
SHOP = "/agents/shop"
MODULE = "tests.agents_registry.user_modules.shop"


def test_tools_instructions_usage_and_a_failing_tool_through_the_queue(start_serve, fake_openai):
    fake_openai.answer(
        Answer(
            tool_calls=[("call_1", "look_up_order", {"code": "A1"}), ("call_2", "cancel_order", {"code": "A1"})],
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
    assert told == [("call_1", json.dumps({"code": "A1", "status": "shipped"})), ("call_2", "order A1 has shipped")]
    events = list(RunEvent.objects.filter(run_id=run_id).values_list("event", flat=True))
    assert events == [
        "RunStarted",
        "ModelRequestStarted",
        "ModelRequestCompleted",
        "ToolCallStarted",
        "ToolCallCompleted",
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
