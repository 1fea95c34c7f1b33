"""One run's way through the code: the project's files one streamed background run passes through, from its submit
to the hand-off of its session's next run (`python manage.py way`).

In this one process: the web as `serve` runs it (uvicorn with agentos's protocol, the ASGI application) on a thread,
a client that submits the run streamed and reads its stream to its end while a second run of the session waits
behind it, and the worker's code for the first run's message (`worker_execute`: claim, leg, settle, and the
hand-off that claims the second run on the same thread). A profile hook on every thread notes each function
called; a first round loads and warms everything, the second is counted, so only the run's way is, not start-up.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import requests

APPS = ("agentos_project", "queueing", "runs", "agents_registry")
ROOT = Path(__file__).resolve().parents[1]


class Calls:
    """The project's files in which a function was called while `counting`."""

    def __init__(self):
        self.counting = False
        self.files: set[str] = set()

    def hook(self, frame, event, _arg):
        if event == "call" and self.counting:
            self.files.add(frame.f_code.co_filename)

    def project_files(self) -> list[str]:
        inside = []
        for name in self.files:
            path = Path(name)
            if path.is_relative_to(ROOT) and path.relative_to(ROOT).parts[0] in APPS:
                inside.append(str(path.relative_to(ROOT)))
        return sorted(inside)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _serve(port: int) -> threading.Thread:
    import uvicorn

    config = uvicorn.Config(
        "agentos_project.asgi:application",
        host="127.0.0.1",
        port=port,
        http="agentos_project.httpserver:HttpToolsProtocol",
        lifespan="on",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="way-web", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the web did not start within 30 s")
        time.sleep(0.05)
    return thread


def _round(base: str, agent: str) -> None:
    """A streamed background run and a second one behind it in its session, the first executed here."""
    from queueing.models import Ticket
    from queueing.worker import worker_execute

    session = f"way-{uuid.uuid4()}"
    url = f"{base}/agents/{agent}/runs"
    fields = {"message": "hello", "session_id": session, "background": "true"}
    frames: list[bytes] = []

    def read_stream():
        with requests.post(url, data={**fields, "stream": "true"}, stream=True, timeout=30) as stream:
            stream.raise_for_status()
            frames.extend(stream.iter_lines())  # to the stream's end

    reader = threading.Thread(target=read_stream, name="way-client")
    reader.start()
    deadline = time.monotonic() + 30
    while (first := Ticket.objects.filter(session_id=session).values_list("pk", flat=True).first()) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the streamed run was not accepted within 30 s")
        time.sleep(0.01)
    requests.post(url, data={**fields, "stream": "false"}, timeout=30).raise_for_status()
    worker = threading.Thread(target=worker_execute, kwargs={"ticket_id": str(first)}, name="way-worker")
    worker.start()
    reader.join(30)
    worker.join(30)
    if Ticket.objects.filter(session_id=session).exclude(status="completed").exists():
        raise RuntimeError(f"session {session}: not every run completed")


def way(agent: str = "stub-agent") -> list[str]:
    """The project's files one run's way passes through (the second of two rounds)."""
    calls = Calls()
    sys.setprofile(calls.hook)
    threading.setprofile(calls.hook)
    try:
        port = _free_port()
        _serve(port)
        base = f"http://127.0.0.1:{port}"
        _round(base, agent)
        calls.counting = True
        _round(base, agent)
        calls.counting = False
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return calls.project_files()
