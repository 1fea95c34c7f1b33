"""A fake OpenAI-compatible server: a real HTTP server answering `POST /v1/chat/completions`, streamed or not, from
a script the test gives it. Each answer of the script is used once, in order (the last one repeats); it records
every request it was sent."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclasses.dataclass
class Answer:
    """One answer: `text` (split into `chunks` deltas when streamed), `tool_calls` as (id, name, arguments), the
    `reasoning` deltas before the text, the `usage` it reports; or an error `status` with its `error` message.
    `delay`: seconds the server waits before answering (a slow model, for a test that kills a worker meanwhile)."""

    text: str = ""
    tool_calls: list[tuple[str, str, dict]] = dataclasses.field(default_factory=list)
    reasoning: str = ""
    usage: dict | None = None
    status: int = 200
    error: str = ""
    chunks: int = 2
    delay: float = 0.0


class FakeOpenAI:
    def __init__(self) -> None:
        self.script: list[Answer] = [Answer(text="Hello, world")]
        self.responder: Callable[[dict], Answer] | None = None
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, *answers: Answer) -> None:
        """Script the next requests' answers."""
        with self._lock:
            self.script, self.responder = list(answers), None

    def respond(self, responder: Callable[[dict], Answer]) -> None:
        """Answer each request by what it asks (`responder(request)`), as a model does, rather than in order."""
        with self._lock:
            self.responder = responder

    def next_answer(self, request: dict) -> Answer:
        with self._lock:
            self.requests.append(request)
            if self.responder is not None:
                return self.responder(request)
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {name.lower(): value for name, value in self.headers.items()}
                request = {"path": self.path, "auth": headers.get("authorization"), "headers": headers}
                answer = fake.next_answer({**request, **body})
                time.sleep(answer.delay)
                if answer.status != 200:
                    return self._send(answer.status, {"error": {"message": answer.error, "type": "invalid_request"}})
                if body.get("stream"):
                    return self._stream(body, answer)
                return self._send(200, _completion(body, answer))

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict, answer: Answer) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for delta in _deltas(answer):
                    self._event(_chunk(body, [{"index": 0, "delta": delta, "finish_reason": None}]))
                if answer.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
                    self._event({**_chunk(body, []), "usage": _usage(answer.usage)})
                self.wfile.write(b"data: [DONE]\n\n")

            def _event(self, payload: dict) -> None:
                self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())

        return Handler


def _deltas(answer: Answer) -> list[dict]:
    deltas = [{"role": "assistant", "content": None, "reasoning_content": answer.reasoning}] if answer.reasoning else []
    if answer.text:
        size = max(1, -(-len(answer.text) // answer.chunks))
        deltas += [{"content": answer.text[i : i + size]} for i in range(0, len(answer.text), size)]
    for index, (call_id, name, arguments) in enumerate(answer.tool_calls):
        text = json.dumps(arguments)
        half = len(text) // 2  # a call's arguments split across two chunks, as providers send them
        first = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": text[:half]},
        }
        deltas += [{"tool_calls": [first]}, {"tool_calls": [{"index": index, "function": {"arguments": text[half:]}}]}]
    return deltas


def _chunk(body: dict, choices: list) -> dict:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": body["model"], "choices": choices}


def _usage(usage: dict) -> dict:
    spent = {"prompt_tokens": usage.get("input", 0), "completion_tokens": usage.get("output", 0)}
    spent["total_tokens"] = spent["prompt_tokens"] + spent["completion_tokens"]
    if usage.get("reasoning"):
        spent["completion_tokens_details"] = {"reasoning_tokens": usage["reasoning"]}
    return spent


def _completion(body: dict, answer: Answer) -> dict:
    message = {"role": "assistant", "content": answer.text or None}
    if answer.tool_calls:
        message["tool_calls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
            for call_id, name, arguments in answer.tool_calls
        ]
    completion = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }
    if answer.usage is not None:
        completion["usage"] = _usage(answer.usage)
    return completion
