"""Chat models: the stub of CONTRACT section 13 and an OpenAI-compatible client.

A model makes messages (OpenAI format) and tools into a stream of text pieces and `ToolCall`s.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from typing import Protocol

from .context import PermanentRunError, RunContext
from .tools import REJECTED, Tool

SLEEP_PATTERN = re.compile(r"sleep=(\d+(?:\.\d+)?)")
PACE_PATTERN = re.compile(r"pace=(\d+(?:\.\d+)?)")
NUL_ESCAPE = "\\u0000"


@dataclasses.dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict


@dataclasses.dataclass(frozen=True)
class Usage:
    """The tokens one model request used, as its provider reported them (a model yields it once, at the end)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0


@dataclasses.dataclass(frozen=True)
class Reasoning:
    """A piece of the model's reasoning (`reasoning_content`), streamed apart from its answer."""

    text: str


def last_user_message(messages: Sequence[dict]) -> int:
    """Index of the last user message."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "user":
            return index
    raise PermanentRunError("No user message to answer")


class StubModel:
    """Waits `sleep=N` seconds named in the prompt (default 1), then streams an echo word by word.

    `explode` in the prompt raises after the wait; `delete` asks for `delete_temp_files` when that tool is offered
    (`delete twice`: once more after the first result), then answers `done: tool result received`, or
    `not done: <the rejection>` when a call was rejected;
    `pace=S` waits S seconds before each word after the first (a slow stream, for stream tests and benchmarks).
    The six characters `\\u0000` in the prompt are echoed as a NUL character (clients cannot send a real one), so
    tests can see what happens to an answer PostgreSQL cannot store as it is.
    """

    id = "stub-model"
    provider = "agentos-stub"

    def __init__(self, default_sleep: float = 1.0):
        self.default_sleep = default_sleep

    def stream(self, messages: Sequence[dict], tools: Sequence[Tool], ctx: RunContext) -> Iterator[str | ToolCall]:
        last = last_user_message(messages)
        prompt = messages[last]["content"]
        match = SLEEP_PATTERN.search(prompt)
        if ctx.wait(float(match.group(1)) if match else self.default_sleep):
            return
        if "explode" in prompt:
            raise RuntimeError("stub model exploded")
        results = [message["content"] for message in messages[last:] if message["role"] == "tool"]
        wanted = 2 if "twice" in prompt else 1
        if "delete" in prompt and any(t.name == "delete_temp_files" for t in tools) and len(results) < wanted:
            yield ToolCall(
                id=f"call_{uuid.uuid4().hex[:12]}", name="delete_temp_files", arguments={"directory": "/tmp"}
            )
            return
        echoed = prompt.replace(NUL_ESCAPE, "\x00")
        if REJECTED in results:
            answer = f"not done: {REJECTED}"
        elif results:
            answer = "done: tool result received"
        else:
            answer = f"echo: {echoed} (history: {last} messages)"
        pace = PACE_PATTERN.search(prompt)
        for index, word in enumerate(answer.split(" ")):
            if index and pace and ctx.wait(float(pace.group(1)), step=0.01):
                return
            yield word if index == 0 else f" {word}"


class ChatModel(Protocol):
    """What an agent's model is: an `id` and a `provider` (shown on `/config` and in events), and `stream`, which
    makes messages (OpenAI format) and the agent's tools into text pieces and `ToolCall`s, with `Reasoning` pieces
    and one `Usage` when the model reports them. An exception ends the leg: `PermanentRunError` for good, any other
    is retried while the run's attempts last. With `request_events` true, each request is told by
    ModelRequestStarted and ModelRequestCompleted events (with its token counts)."""

    id: str
    provider: str
    request_events: bool

    def stream(self, messages: Sequence[dict], tools: Sequence[Tool], ctx: RunContext) -> Iterator[str | ToolCall]: ...


# A provider's answers that no retry changes: the request itself is refused (not a timeout, a conflict, a rate limit).
_RETRYABLE_STATUSES = (408, 409, 429)


class OpenAIChat:
    """Any server that speaks OpenAI's Chat Completions (OpenAI, vLLM, Ollama, LM Studio, gateways), streamed.

    `api_key`, or else the environment variable `api_key_env` names, authenticates; `temperature`, `max_tokens` and
    `extra_headers` go with every request. A rate limit, a 5xx, a timeout or a lost connection is retried by the
    client (`max_retries`, with its backoff), then as the run's queue attempts allow; any other 4xx is a permanent
    error that carries the provider's message.
    """

    provider = "openai"
    request_events = True

    def __init__(
        self,
        id: str,  # noqa: A002 (Agno's and AgentOS' name for it)
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_headers: dict[str, str] | None = None,
        timeout: float = 600.0,
        max_retries: int = 2,
    ):
        import openai  # only a process that has such a model pays for loading the client library

        self.id = id
        self.refused = openai.APIStatusError
        key = api_key or os.environ.get(api_key_env) or "not-needed"
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries)
        options = {"temperature": temperature, "max_tokens": max_tokens, "extra_headers": extra_headers}
        self.options = {name: value for name, value in options.items() if value is not None}

    def stream(
        self, messages: Sequence[dict], tools: Sequence[Tool], ctx: RunContext, response_format: dict | None = None
    ) -> Iterator[str | ToolCall]:
        options = {"tools": [tool.schema() for tool in tools]} if tools else {}
        if response_format is not None:
            options["response_format"] = response_format
        try:
            response = self.client.chat.completions.create(
                model=self.id,
                messages=list(messages),
                stream=True,
                stream_options={"include_usage": True},
                **self.options,
                **options,
            )
        except self.refused as error:
            if 400 <= error.status_code < 500 and error.status_code not in _RETRYABLE_STATUSES:
                said = f"({error.status_code}): {_message(error)}"
                raise PermanentRunError(f"The model's provider refused the request {said}") from error
            raise
        pending: dict[int, dict] = {}
        try:
            for chunk in response:
                if ctx.cancelled():
                    return
                if chunk.usage is not None:
                    yield _usage(chunk.usage)
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                reasoning = (delta.model_extra or {}).get("reasoning_content")  # not OpenAI's: DeepSeek's, vLLM's...
                if reasoning:
                    yield Reasoning(reasoning)
                if delta.content:
                    yield delta.content
                for call in delta.tool_calls or ():
                    slot = pending.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                    slot["id"] = call.id or slot["id"]
                    if call.function is not None:
                        slot["name"] += call.function.name or ""
                        slot["arguments"] += call.function.arguments or ""
        finally:
            response.close()
        for index in sorted(pending):
            yield _tool_call(pending[index])


def _usage(usage) -> Usage:
    details = getattr(usage, "completion_tokens_details", None)
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        total_tokens=usage.total_tokens or 0,
        reasoning_tokens=(getattr(details, "reasoning_tokens", None) or 0) if details is not None else 0,
    )


def _message(error) -> str:
    """The provider's own words for a refusal: its error body's message, else the status line."""
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return error.message


def _tool_call(slot: dict) -> ToolCall:
    try:
        arguments = json.loads(slot["arguments"] or "{}")
    except json.JSONDecodeError as error:
        raise PermanentRunError(f"Model sent invalid arguments for tool {slot['name']}: {error}") from error
    return ToolCall(id=slot["id"] or f"call_{uuid.uuid4().hex[:12]}", name=slot["name"], arguments=arguments)
