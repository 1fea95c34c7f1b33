"""Chat models: the stub of CONTRACT section 13 and an OpenAI-compatible client.

A model turns messages (OpenAI format) and tools into a stream of text pieces and `ToolCall`s.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections.abc import Iterator, Sequence

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


def last_user_turn(messages: Sequence[dict]) -> int:
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
        turn = last_user_turn(messages)
        prompt = messages[turn]["content"]
        match = SLEEP_PATTERN.search(prompt)
        if ctx.wait(float(match.group(1)) if match else self.default_sleep):
            return
        if "explode" in prompt:
            raise RuntimeError("stub model exploded")
        results = [message["content"] for message in messages[turn:] if message["role"] == "tool"]
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
            answer = f"echo: {echoed} (history: {turn} messages)"
        pace = PACE_PATTERN.search(prompt)
        for index, word in enumerate(answer.split(" ")):
            if index and pace and ctx.wait(float(pace.group(1)), step=0.01):
                return
            yield word if index == 0 else f" {word}"


class OpenAIChatModel:
    """Any OpenAI-compatible chat completions server (OpenAI, vLLM, Ollama...), streamed."""

    provider = "openai"

    def __init__(self, *, model: str, base_url: str | None, api_key: str | None, timeout: float = 600.0):
        import openai

        self.id = model
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed", timeout=timeout)

    def stream(self, messages: Sequence[dict], tools: Sequence[Tool], ctx: RunContext) -> Iterator[str | ToolCall]:
        options = {"tools": [tool.schema() for tool in tools]} if tools else {}
        response = self.client.chat.completions.create(model=self.id, messages=list(messages), stream=True, **options)
        pending: dict[int, dict] = {}
        try:
            for chunk in response:
                if ctx.cancelled():
                    return
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
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


def _tool_call(slot: dict) -> ToolCall:
    try:
        arguments = json.loads(slot["arguments"] or "{}")
    except json.JSONDecodeError as error:
        raise PermanentRunError(f"Model sent invalid arguments for tool {slot['name']}: {error}") from error
    return ToolCall(id=slot["id"] or f"call_{uuid.uuid4().hex[:12]}", name=slot["name"], arguments=arguments)
