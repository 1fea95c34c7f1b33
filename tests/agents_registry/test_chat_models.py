"""The stub model of CONTRACT 13, and the OpenAI-compatible model against a real HTTP server on 127.0.0.1."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agents_registry.chat_models import OpenAIChat, StubModel, ToolCall
from agents_registry.context import RunContext
from agents_registry.tools import DELETE_TEMP_FILES


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


class ChatCompletions(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible server: streams a fixed answer, or a split tool call when tools are offered."""

    requests: list[dict] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ChatCompletions.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if body.get("tools") and body["messages"][-1]["role"] == "user":
            deltas = [
                {"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
                                 "function": {"name": "delete_temp_files", "arguments": '{"direc'}}]},
                {"tool_calls": [{"index": 0, "function": {"arguments": 'tory": "/var/tmp"}'}}]},
            ]  # fmt: skip
        else:
            deltas = [{"role": "assistant", "content": "Hello"}, {"content": ", world"}]
        for delta in deltas:
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture
def openai_server():
    ChatCompletions.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatCompletions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_openai_model_streams_text_from_a_compatible_server(openai_server):
    model = OpenAIChat("local-model", base_url=openai_server, api_key="sk-test")
    messages = [user("earlier"), {"role": "assistant", "content": "before"}, user("hi")]

    pieces = list(model.stream(messages, (), context()))

    assert pieces == ["Hello", ", world"]
    request = ChatCompletions.requests[0]
    assert (request["path"], request["auth"], request["model"]) == (
        "/v1/chat/completions",
        "Bearer sk-test",
        "local-model",
    )
    assert request["messages"] == messages
    assert request["stream"] is True


def test_openai_model_assembles_a_tool_call_split_across_chunks(openai_server):
    model = OpenAIChat("local-model", base_url=openai_server, api_key=None)

    pieces = list(model.stream([user("clean up")], (DELETE_TEMP_FILES,), context()))

    assert pieces == [ToolCall(id="call_7", name="delete_temp_files", arguments={"directory": "/var/tmp"})]
    assert ChatCompletions.requests[0]["tools"] == [DELETE_TEMP_FILES.schema()]
