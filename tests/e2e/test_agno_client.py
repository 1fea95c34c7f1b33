"""Agno's own AgentOS client (the `agno` package) against agentos: it streams a run and reads typed events, runs
one inline, and cancels one (CONTRACT 3.6: an AgentOS client must be able to run, stream and cancel)."""

from __future__ import annotations

import asyncio

import pytest
from agno.client import AgentOSClient
from agno.models.response import ToolExecution
from agno.run.agent import RunCompletedEvent, RunContentEvent, RunStartedEvent

from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def run():
    """One event loop for the module: agno's client keeps one httpx client for the process, bound to its loop."""
    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


def test_agnos_client_streams_a_run_as_typed_events(start_web, run):
    web = start_web()
    client = AgentOSClient(base_url=web.url)

    async def stream():
        return [event async for event in client.run_agent_stream("stub-agent", "hi agno sleep=0", session_id="ag-1")]

    events = run(stream())

    assert type(events[0]) is RunStartedEvent
    assert type(events[-1]) is RunCompletedEvent
    assert all(type(event) is RunContentEvent for event in events[1:-1])
    assert "".join(event.content for event in events[1:-1]) == "echo: hi agno sleep=0 (history: 0 messages)"
    assert events[-1].content == "echo: hi agno sleep=0 (history: 0 messages)"
    assert [event.event_index for event in events] == list(range(len(events)))
    assert {event.run_id for event in events} == {events[0].run_id}
    assert events[0].session_id == "ag-1"


def test_agnos_client_runs_inline_and_cancels_a_background_run(start_web, start_worker, run):
    start_worker()
    web = start_web()
    client = AgentOSClient(base_url=web.url)
    accepted = web.post(
        "/agents/stub-agent/runs", message="long sleep=10", session_id="ag-2", background="true", stream="false"
    ).json()
    wait_until(lambda: web.poll(accepted["run_id"], "ag-2")["status"] == "RUNNING", timeout=20, what="the run to start")

    async def use():
        inline = await client.run_agent("stub-agent", "inline sleep=0", session_id="ag-3")
        await client.cancel_agent_run("stub-agent", accepted["run_id"])
        return inline

    inline = run(use())
    cancelled = wait_until(
        lambda: (body := web.poll(accepted["run_id"], "ag-2"))["status"] == "CANCELLED" and body,
        timeout=5,
        what="the run to be cancelled",
    )

    assert (inline.content, inline.session_id, str(inline.status.value)) == (
        "echo: inline sleep=0 (history: 0 messages)",
        "ag-3",
        "COMPLETED",
    )
    assert cancelled["cancellation_stage"] == "EXECUTING"


def test_agnos_client_continues_a_paused_run_through_the_queue(start_web, start_worker, run):
    start_worker()
    web = start_web()
    client = AgentOSClient(base_url=web.url)

    accepted = run(
        client.run_agent("hitl-agent", "please delete scratch sleep=0", session_id="ag-4", background="true")
    )
    paused = wait_until(
        lambda: (body := web.poll(accepted.run_id, "ag-4", "hitl-agent"))["status"] == "PAUSED" and body,
        timeout=20,
        what="the run to pause",
    )
    tools = [ToolExecution.from_dict(tool) for tool in paused["tools"]]
    for tool in tools:
        tool.confirmed = True
    continued = run(
        client.continue_agent_run("hitl-agent", accepted.run_id, tools, session_id="ag-4", background="true")
    )
    done = wait_until(
        lambda: (body := web.poll(accepted.run_id, "ag-4", "hitl-agent"))["status"] == "COMPLETED" and body,
        timeout=20,
        what="the run to complete",
    )

    assert (str(accepted.status.value), continued.run_id, str(continued.status.value)) == (
        "PENDING",
        accepted.run_id,
        "PENDING",
    )
    assert (done["content"], done["queue_attempt"]) == ("done: tool result received", 2)
