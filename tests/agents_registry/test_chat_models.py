"""The stub model of CONTRACT 13, and the OpenAI-compatible model against a real HTTP server on 127.0.0.1."""

import pytest

from agents_registry.chat_models import OpenAIChat, Reasoning, StubModel, ToolCall, Usage
from agents_registry.context import PermanentRunError, RunContext
from agents_registry.tools import DELETE_TEMP_FILES

from ..fake_openai import Answer


def context(**overrides) -> RunContext:
    return RunContext(run_id="r", session_id="s", user_id=None, history=[], session_state={}, **overrides)


def user(text):
    return {"role": "user", "content": text}


def test_stub_echoes_word_by_word_and_counts_history():
    history = [user("earlier"), {"role": "assistant", "content": "answer"}]

    pieces = list(StubModel().stream([*history, user("hello there sleep=0")], (), context()))

    assert pieces == ["echo:", " hello", " there", " sleep=0", " (history:", " 2", " messages)"]


def test_stub_waits_the_seconds_named_in_the_prompt():
    waits = []

    class Recording(RunContext):
        def wait(self, seconds, *, step=0.05):
            waits.append(seconds)
            return False

    ctx = Recording(run_id="r", session_id="s", user_id=None, history=[], session_state={})
    list(StubModel().stream([user("a sleep=2.5")], (), ctx))
    list(StubModel().stream([user("no sleep named")], (), ctx))

    assert waits == [2.5, 1.0]


def test_stub_explodes_after_its_sleep():
    with pytest.raises(RuntimeError, match="^stub model exploded$"):
        list(StubModel().stream([user("explode sleep=0")], (), context()))


def test_stub_stops_when_cancelled_during_its_sleep():
    assert list(StubModel().stream([user("sleep=30")], (), context(cancelled=lambda: True))) == []


def test_stub_asks_for_the_delete_tool_then_answers_its_result():
    first = list(StubModel().stream([user("delete sleep=0")], (DELETE_TEMP_FILES,), context()))
    assert len(first) == 1 and isinstance(first[0], ToolCall)
    assert (first[0].name, first[0].arguments) == ("delete_temp_files", {"directory": "/tmp"})

    tool_message = {"role": "tool", "tool_call_id": first[0].id, "content": "ok"}
    second = list(StubModel().stream([user("delete sleep=0"), tool_message], (DELETE_TEMP_FILES,), context()))
    assert "".join(second) == "done: tool result received"


def test_openai_model_streams_text_from_a_compatible_server(fake_openai):
    fake_openai.answer(Answer(text="Hello, world"))
    model = OpenAIChat("local-model", base_url=fake_openai.url, api_key="sk-test")
    messages = [user("earlier"), {"role": "assistant", "content": "before"}, user("hi")]

    pieces = list(model.stream(messages, (), context()))

    assert pieces == ["Hello,", " world"]
    request = fake_openai.requests[0]
    assert (request["path"], request["auth"], request["model"]) == (
        "/v1/chat/completions",
        "Bearer sk-test",
        "local-model",
    )
    assert request["messages"] == messages
    assert (request["stream"], request["stream_options"]) == (True, {"include_usage": True})


def test_openai_model_assembles_a_tool_call_split_across_chunks(fake_openai):
    fake_openai.answer(Answer(tool_calls=[("call_7", "delete_temp_files", {"directory": "/var/tmp"})]))
    model = OpenAIChat("local-model", base_url=fake_openai.url)

    pieces = list(model.stream([user("clean up")], (DELETE_TEMP_FILES,), context()))

    assert pieces == [ToolCall(id="call_7", name="delete_temp_files", arguments={"directory": "/var/tmp"})]
    assert fake_openai.requests[0]["tools"] == [DELETE_TEMP_FILES.schema()]


def test_openai_model_gives_reasoning_and_the_tokens_used(fake_openai):
    fake_openai.answer(Answer(text="42", reasoning="six times seven", usage={"input": 12, "output": 5, "reasoning": 3}))
    model = OpenAIChat("local-model", base_url=fake_openai.url)

    pieces = list(model.stream([user("why?")], (), context()))

    assert pieces == [
        Reasoning("six times seven"),
        "4",
        "2",
        Usage(input_tokens=12, output_tokens=5, total_tokens=17, reasoning_tokens=3),
    ]


def test_openai_model_sends_its_options_and_the_key_of_its_variable(fake_openai, monkeypatch):
    monkeypatch.setenv("CRM_MODEL_KEY", "sk-from-env")
    model = OpenAIChat(
        "local-model",
        base_url=fake_openai.url,
        api_key_env="CRM_MODEL_KEY",
        temperature=0.2,
        max_tokens=64,
        extra_headers={"X-Team": "support"},
    )

    list(model.stream([user("hi")], (), context()))

    request = fake_openai.requests[0]
    assert (request["auth"], request["temperature"], request["max_tokens"]) == ("Bearer sk-from-env", 0.2, 64)
    assert request["headers"]["x-team"] == "support"


def test_a_request_the_provider_refuses_is_a_permanent_error_with_its_message(fake_openai):
    fake_openai.answer(Answer(status=400, error="This model's maximum context length is 8192 tokens"))
    model = OpenAIChat("local-model", base_url=fake_openai.url)

    with pytest.raises(PermanentRunError) as refused:
        list(model.stream([user("hi")], (), context()))

    assert str(refused.value) == (
        "The model's provider refused the request (400): This model's maximum context length is 8192 tokens"
    )


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_rate_limit_or_a_server_error_is_retried_then_left_to_the_runs_attempts(fake_openai, status):
    fake_openai.answer(Answer(status=status, error="busy"), Answer(text="at last"))
    patient = OpenAIChat("local-model", base_url=fake_openai.url, max_retries=1)

    assert "".join(list(patient.stream([user("hi")], (), context()))) == "at last"

    fake_openai.answer(Answer(status=status, error="busy"))
    hasty = OpenAIChat("local-model", base_url=fake_openai.url, max_retries=0)
    with pytest.raises(Exception) as failed:
        list(hasty.stream([user("hi")], (), context()))
    assert not isinstance(failed.value, PermanentRunError), "retryable: the run's queue attempts apply"
    assert getattr(failed.value, "status_code", None) == status
