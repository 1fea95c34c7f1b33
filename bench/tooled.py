"""The journal scenario's agent and its model: `tooled-agent`, whose runs make four model calls and three tool
calls, its twin of Agno's own classes (`agno-tooled-agent`, scenario agno), and a fake OpenAI-compatible server that
answers instantly.

The server is stateless: it reads the step from the request itself, the number of tool results after the last
user message (0: call `look_up`, 1: `quote`, 2: `book`, then the answer), and streams its answer as
Chat Completions chunks with their usage. Every answer is built once per model name and step, then sent as one
write on a kept-alive connection, so the model costs the run next to nothing. Start it in a process of its own:

    python -m bench.tooled --port 7792

and the serve under test with `AGENTOS_COMPONENTS=bench.tooled:components
AGENTOS_BENCH_MODEL_URL=http://127.0.0.1:7792/v1`. Nothing here needs Django.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from agents_registry.sdk import Agent, OpenAIChat

AGENT_ID = "tooled-agent"
AGNO_AGENT_ID = "agno-tooled-agent"
ANSWER = "Booked: room 12 at Hotel Lisboa, 3 nights, 360 EUR."
CALLS = (
    ("call_1", "look_up", {"city": "Lisbon"}),
    ("call_2", "quote", {"hotel": "Hotel Lisboa", "nights": 3}),
    ("call_3", "book", {"quote_id": "q-360"}),
)
USAGE = {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}
BASE_DIR = Path(__file__).resolve().parent.parent


def look_up(city: str) -> str:
    """Find a hotel in a city."""
    return f"Hotel Lisboa, {city}: rooms free"


def quote(hotel: str, nights: int) -> str:
    """Quote a stay at a hotel."""
    return f"q-360: {nights} nights at {hotel}, 360 EUR"


def book(quote_id: str) -> str:
    """Book a quoted stay."""
    return f"booked {quote_id}: room 12"


def components() -> list:
    """`tooled-agent` on the fake model that AGENTOS_BENCH_MODEL_URL names; and, with Agno installed, its twin made
    of Agno's own `Agent` and `OpenAIChat` (`agno-tooled-agent`, the same tools), which agentos runs as it is."""
    url = os.environ["AGENTOS_BENCH_MODEL_URL"]
    model = OpenAIChat("bench-model", base_url=url, api_key="bench", max_retries=0)
    found = [Agent(id=AGENT_ID, name="Tooled", model=model, tools=[look_up, quote, book])]
    try:
        from agno.agent import Agent as AgnoAgent
        from agno.models.openai import OpenAIChat as AgnoOpenAIChat
    except ImportError:
        return found
    agno_model = AgnoOpenAIChat(id="bench-model", base_url=url, api_key="bench", max_retries=0)
    return [*found, AgnoAgent(id=AGNO_AGENT_ID, name="Agno tooled", model=agno_model, tools=[look_up, quote, book])]


def tool_results(messages: list[dict]) -> int:
    """How many tool results follow the last user message."""
    count = 0
    for message in reversed(messages):
        if message.get("role") == "user":
            break
        count += message.get("role") == "tool"
    return count


@functools.lru_cache(maxsize=64)
def streamed_answer(model: str, step: int) -> bytes:
    """The SSE body answering at `step`: a tool call of CALLS (its arguments split over two chunks, as providers
    send them), or ANSWER in two pieces; then the usage chunk and `[DONE]`."""
    if step < len(CALLS):
        call_id, name, arguments = CALLS[step]
        text = json.dumps(arguments)
        half = len(text) // 2
        first = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": text[:half]}}
        deltas = [{"tool_calls": [first]}, {"tool_calls": [{"index": 0, "function": {"arguments": text[half:]}}]}]
        finish = "tool_calls"
    else:
        deltas = [{"role": "assistant", "content": ANSWER[:8]}, {"content": ANSWER[8:]}]
        finish = "stop"
    chunks = [_chunk(model, [{"index": 0, "delta": delta, "finish_reason": None}]) for delta in deltas]
    chunks.append(_chunk(model, [{"index": 0, "delta": {}, "finish_reason": finish}]))
    chunks.append({**_chunk(model, []), "usage": USAGE})
    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def _chunk(model: str, choices: list) -> dict:
    return {"id": "bench", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices}


class Handler(BaseHTTPRequestHandler):
    """`POST /v1/chat/completions`, streamed; HTTP/1.1, so the worker's client keeps its connection."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self.path.endswith("/chat/completions") or not body.get("stream"):
            return self._send(400, "application/json", b'{"error": {"message": "streamed chat completions only"}}')
        answer = streamed_answer(body.get("model", ""), min(tool_results(body["messages"]), len(CALLS)))
        self._send(200, "text/event-stream", answer)

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ModelServer:
    """The fake model in this process, on 127.0.0.1:`port` (0: a free one), served by a thread for the span of a
    `with`."""

    def __init__(self, port: int = 0):
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ModelServer:
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.server.shutdown()
        self.server.server_close()


class ModelProcess:
    """`python -m bench.tooled --port <port>` for the span of a `with`: its CPU is its own (`bench.cpu`'s kind
    `model`), not the benchmark client's."""

    def __init__(self, port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}/v1"
        self.command = [sys.executable, "-m", "bench.tooled", "--port", str(port)]
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> ModelProcess:
        with socket.socket() as probe:  # else an old server there would answer for this one, which could not start
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", self.port))
            except OSError as error:
                raise RuntimeError(f"the fake model's port {self.port} is taken: {error}") from error
        self.process = subprocess.Popen(self.command, cwd=str(BASE_DIR), start_new_session=True)
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the fake model ({' '.join(self.command)}) did not start")
            time.sleep(0.1)
        return self

    def _answers(self) -> bool:
        request = urllib.request.Request(f"{self.url}/chat/completions", data=b"{}", method="POST")
        try:
            urllib.request.urlopen(request, timeout=1).close()
        except urllib.error.HTTPError as refused:
            refused.close()
            return True  # it answered: 400 to a request that does not stream
        except OSError:
            return False
        return True

    def __exit__(self, *_) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tooled", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=7792)
    server = ModelServer(parser.parse_args().port).server
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
