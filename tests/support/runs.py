"""Runs submitted and polled in-process, through Django's test client, as a client of the API does."""

from __future__ import annotations

from contextlib import nullcontext

from django.http import HttpResponse
from rest_framework.test import APIClient

from .conf import with_conf
from .waiting import wait_until

STUB_AGENT = "/agents/stub-agent"
HITL_AGENT = "/agents/hitl-agent"


def submit(
    api: APIClient, *, prefix: str = STUB_AGENT, fmt: str = "multipart", environ: dict[str, str] | None = None, **fields
) -> HttpResponse:
    """POST `{prefix}/runs` in-process, background and not streamed unless `fields` say otherwise; the answer.
    `environ`: request headers by their WSGI names (HTTP_IDEMPOTENCY_KEY)."""
    body = {"background": "true", "stream": "false", **fields}
    return api.post(f"{prefix}/runs", body, format=fmt, **(environ or {}))


def submit_background(api: APIClient, session_id: str, message: str, *, max_attempts: int | None = None) -> str:
    """Submit a background, non-streaming stub-agent run in-process; returns its run_id (asserting the 202).
    `max_attempts`: the run's attempt budget, instead of the queue's setting."""
    budget = with_conf("queue", max_attempts=max_attempts) if max_attempts is not None else nullcontext()
    with budget:
        response = submit(api, message=message, session_id=session_id)
    assert response.status_code == 202, response.content
    return response.json()["run_id"]


def poll_answer(api: APIClient, run_id: str, session_id: str | None, *, prefix: str = STUB_AGENT) -> HttpResponse:
    """GET `{prefix}/runs/{run_id}` in-process, with `session_id` unless it is None; the answer."""
    return api.get(f"{prefix}/runs/{run_id}", {"session_id": session_id} if session_id is not None else {})


def poll(api: APIClient, run_id: str, session_id: str, *, prefix: str = STUB_AGENT) -> dict:
    """The run's body as GET `{prefix}/runs/{run_id}` answers it in-process."""
    return poll_answer(api, run_id, session_id, prefix=prefix).json()


def wait_status(
    api: APIClient, run_id: str, session_id: str, *statuses: str, prefix: str = STUB_AGENT, timeout: float = 20
) -> dict:
    """Poll the run in-process until its status is one of `statuses`; its body then."""
    return wait_until(
        lambda: (body := poll(api, run_id, session_id, prefix=prefix))["status"] in statuses and body,
        timeout=timeout,
        what=f"run {run_id} to be {' or '.join(statuses)}",
    )
