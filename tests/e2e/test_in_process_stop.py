"""Runs a web process executes itself (AGENTOS_QUEUE_DURABLE=false, and inline runs) when that process is stopped
gracefully (SIGTERM to a real uvicorn): drained within the stop timeout, or ended with a stored reason, never left
PENDING or RUNNING for good."""

from __future__ import annotations

import signal
import threading

import pytest
import requests

from queueing.shutdown import INTERRUPTED
from runs.models import Run, RunEvent
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def background(web, session_id: str, message: str) -> str:
    answer = web.post("/agents/stub-agent/runs", message=message, session_id=session_id, background="true",
                      stream="false")  # fmt: skip
    assert answer.status_code == 202, answer.text
    return answer.json()["run_id"]


def stopped(web) -> bool:
    """SIGTERM, as a process manager stops it; True once it exited (uvicorn ends by raising the signal again)."""
    web.signal(signal.SIGTERM)
    return web.process.wait(timeout=30) in (0, -signal.SIGTERM)


def test_a_stopping_web_lets_its_in_process_runs_finish_within_the_stop_timeout(start_web):
    web = start_web(
        AGENTOS_QUEUE_DURABLE="false", AGENTOS_STOP_TIMEOUT_SECONDS="8", AGENTOS_LOCK_GRACE_SECONDS="10"
    )  # a drain window of 3 s: the stop timeout less the 5 s uvicorn may give open connections
    run_id = background(web, "stop-1", "hello sleep=1")
    wait_until(lambda: Run.objects.get(pk=run_id).status == "RUNNING", timeout=10, what="the run to start")

    assert stopped(web)

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content) == ("COMPLETED", "echo: hello sleep=1 (history: 0 messages)")


def test_a_stopping_web_ends_what_it_cannot_finish_with_a_stored_reason(start_web):
    web = start_web(AGENTOS_QUEUE_DURABLE="false", AGENTOS_MAX_CONCURRENCY="1", AGENTOS_STOP_TIMEOUT_SECONDS="2")
    running = background(web, "stop-2", "think long sleep=60")
    waiting = background(web, "stop-3", "waits for a slot sleep=0")
    inline: list[object] = []

    def inline_client():  # its server goes away under it: an error, or an answer cut short
        try:
            fields = {"message": "inline sleep=60", "stream": "false", "session_id": "stop-4"}
            inline.append(requests.post(f"{web.url}/agents/stub-agent/runs", data=fields, timeout=60))
        except requests.RequestException as error:
            inline.append(error)

    client = threading.Thread(target=inline_client)
    client.start()
    wait_until(lambda: Run.objects.filter(status="RUNNING").count() == 2, timeout=10, what="two runs executing")
    assert Run.objects.get(pk=waiting).status == "PENDING"

    assert stopped(web)
    client.join(10)
    assert inline, "the inline client got its answer or its error"

    for run_id in (running, waiting):
        run = Run.objects.get(pk=run_id)
        assert (run.status, run.content) == ("ERROR", INTERRUPTED), run_id
        last = RunEvent.objects.filter(run_id=run_id).order_by("-event_index").first()
        assert (last.event, last.data["content"]) == ("RunError", INTERRUPTED), "its stream's end is stored"
    inline_run = Run.objects.get(session_id="stop-4")
    assert inline_run.status in ("CANCELLED", "ERROR"), "its client went away with the server: it ended"
    assert Run.objects.filter(status__in=("PENDING", "RUNNING")).count() == 0
