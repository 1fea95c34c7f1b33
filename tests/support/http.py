"""Our servers over HTTP: a free port, runs submitted to a server and polled (`RunsOverHttp`), SSE frames and
Prometheus samples read from answers, and the ASGI server's side of a streamed response (`AsgiServer`)."""

from __future__ import annotations

import asyncio
import json
import socket

import requests
from prometheus_client.parser import text_string_to_metric_families

from .runs import STUB_AGENT
from .waiting import wait_until


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text answer, by (name, sorted labels), parsed by prometheus-client."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


class RunsOverHttp:
    """A server of ours the test reaches over HTTP at `url`: background runs submitted to it and polled."""

    url: str

    def get(self, path: str, **params):
        """The JSON of a 200 answer to GET `path`; None for any other answer, or none (a server in an outage)."""
        try:
            response = requests.get(f"{self.url}{path}", params=params, timeout=5)
        except requests.RequestException:
            return None
        return response.json() if response.status_code == 200 else None

    def submit(
        self, session_id: str, message: str, *, prefix: str = STUB_AGENT, headers: dict[str, str] | None = None
    ) -> requests.Response:
        """POST a background, non-streaming run to `{prefix}/runs` as a form; the answer."""
        return requests.post(
            f"{self.url}{prefix}/runs",
            data={"message": message, "session_id": session_id, "background": "true", "stream": "false"},
            headers=headers,
            timeout=30,
        )

    def submitted(self, session_id: str, message: str, *, prefix: str = STUB_AGENT) -> str:
        """Submit as `submit` does; the run_id, once the answer is the 202 of an accepted run."""
        response = self.submit(session_id, message, prefix=prefix)
        assert response.status_code == 202, response.text
        return response.json()["run_id"]

    def poll(self, run_id: str, session_id: str, *, prefix: str = STUB_AGENT) -> dict:
        """The run's body as GET `{prefix}/runs/{run_id}` answers it (asserting the 200)."""
        response = requests.get(f"{self.url}{prefix}/runs/{run_id}", params={"session_id": session_id}, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    def wait_status(
        self,
        run_id: str,
        session_id: str,
        *statuses: str,
        prefix: str = STUB_AGENT,
        timeout: float = 20,
        interval: float = 0.05,
        through_errors: bool = False,
    ) -> dict:
        """Poll the run until its status is one of `statuses`; its body then. `through_errors`: an answer other than
        200, or none, is polled again (as `get` reads it) instead of failing the test."""

        def reached():
            if through_errors:
                body = self.get(f"{prefix}/runs/{run_id}", session_id=session_id)
            else:
                body = self.poll(run_id, session_id, prefix=prefix)
            return body and body["status"] in statuses and body

        return wait_until(
            reached, timeout=timeout, interval=interval, what=f"run {run_id} to be {' or '.join(statuses)}"
        )


def sse_frames(response: requests.Response):
    """The frames of a `text/event-stream` response as they arrive: (event name, data) pairs, and
    ("keepalive", None) for a keepalive comment."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    buffer = b""
    for chunk in response.iter_content(chunk_size=None):
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            text = block.decode()
            if text.startswith(":"):
                yield ("keepalive" if text == ": keepalive" else text, None)
                continue
            fields = dict(line.split(": ", 1) for line in text.split("\n"))
            yield fields["event"], json.loads(fields["data"])


class AsgiServer:
    """The ASGI server's side of one streamed response, as uvicorn behaves: once the body is complete, `receive`
    answers `http.disconnect`."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self._complete = asyncio.Event()

    async def receive(self) -> dict:
        await self._complete.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self._complete.set()
        self.sent.append(message)
