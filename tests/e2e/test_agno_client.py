"""Agno's own AgentOS client (the `agno` package) against agentos: it streams a run and reads typed events, runs
one inline, cancels one (CONTRACT 3.6: an AgentOS client must be able to run, stream and cancel), and confirms
the tool calls of paused agents, teams and workflows as Agno's human-in-the-loop docs do: read the paused run's
requirements, confirm them, continue with them (CONTRACT 11)."""

from __future__ import annotations

import logging

import pytest
from agno.client import AgentOSClient
from agno.run.agent import RunCompletedEvent, RunContentEvent, RunOutput, RunStartedEvent
from agno.run.requirement import RunRequirement
from agno.run.team import RunCompletedEvent as TeamRunCompletedEvent
from agno.run.team import RunContinuedEvent as TeamRunContinuedEvent
from agno.run.team import RunPausedEvent as TeamRunPausedEvent
from agno.run.team import TeamRunOutput
from agno.run.workflow import (
    StepExecutorContinuedEvent,
    StepExecutorPausedEvent,
    WorkflowCompletedEvent,
    WorkflowPausedEvent,
    WorkflowRunOutput,
)
from agno.workflow.types import StepRequirement

from tests.support.runs import HITL_AGENT
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
DELETE = "please delete scratch sleep=0"


@pytest.fixture
def agno_errors():
    """The errors Agno's client logs, as their messages (an event it does not know is logged and skipped). Its
    logger does not propagate to the root, so pytest's capture does not see it."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Collect(level=logging.ERROR)
    logging.getLogger("agno").addHandler(handler)
    yield messages
    logging.getLogger("agno").removeHandler(handler)


def confirmed(requirements: list[RunRequirement]) -> list[RunRequirement]:
    for requirement in requirements:
        requirement.confirm()
    return requirements


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


def test_agnos_client_confirms_an_agents_polled_requirements_and_continues_with_their_tools(
    start_web, start_worker, run, agno_errors
):
    start_worker()
    web = start_web()
    client = AgentOSClient(base_url=web.url)

    accepted = run(client.run_agent("hitl-agent", DELETE, session_id="ag-4", background="true"))
    paused = RunOutput.from_dict(web.wait_status(accepted.run_id, "ag-4", "PAUSED", prefix=HITL_AGENT))
    requirements = confirmed(paused.active_requirements)
    continued = run(
        client.continue_agent_run(
            "hitl-agent",
            accepted.run_id,
            [requirement.tool_execution for requirement in requirements],
            session_id="ag-4",
            background="true",
        )
    )
    done = web.wait_status(accepted.run_id, "ag-4", "COMPLETED", prefix=HITL_AGENT)

    assert [r.tool_execution.tool_name for r in requirements] == ["delete_temp_files"]
    assert [r.tool_execution.tool_call_id for r in requirements] == [tool.tool_call_id for tool in paused.tools]
    assert (str(accepted.status.value), continued.run_id, str(continued.status.value)) == (
        "PENDING",
        accepted.run_id,
        "PENDING",
    )
    assert (done["content"], done["queue_attempt"]) == ("done: tool result received", 2)
    assert RunOutput.from_dict(done).active_requirements == []
    assert agno_errors == []


def test_agnos_client_confirms_a_team_members_tool_from_the_polled_requirements(
    start_web, start_worker, run, agno_errors
):
    start_worker()
    web = start_web()
    client = AgentOSClient(base_url=web.url)

    accepted = run(client.run_team("stub-team", DELETE, session_id="ag-t1", background="true"))
    paused = TeamRunOutput.from_dict(web.wait_status(accepted.run_id, "ag-t1", "PAUSED", prefix="/teams/stub-team"))
    requirements = paused.active_requirements
    asked = [(r.tool_execution.tool_name, r.member_agent_id, r.member_agent_name) for r in requirements]
    continued = run(
        client.continue_team_run(
            "stub-team", accepted.run_id, confirmed(requirements), session_id="ag-t1", background="true"
        )
    )
    done = web.wait_status(accepted.run_id, "ag-t1", "COMPLETED", prefix="/teams/stub-team")

    assert asked == [("delete_temp_files", "stub-member-1", "Member 1")]
    assert (continued.run_id, continued.status) == (accepted.run_id, "PENDING")
    assert (done["content"], done["queue_attempt"]) == (f"echo: {DELETE} (history: 0 messages)", 2)
    member_results = [e["tool"]["result"] for e in done["events"] if e["event"] == "ToolCallCompleted"]
    assert member_results == ["deleted temporary files in /tmp"]
    assert TeamRunOutput.from_dict(done).active_requirements == []
    assert agno_errors == []


def test_agnos_client_streams_a_teams_pause_and_its_confirmed_continuation(start_web, start_worker, run, agno_errors):
    start_worker()
    web = start_web()
    client = AgentOSClient(base_url=web.url)

    async def first_leg():
        return [e async for e in client.run_team_stream("stub-team", DELETE, session_id="ag-t2", background="true")]

    before = run(first_leg())
    requirements = confirmed(before[-1].active_requirements)

    async def second_leg():
        continuing = client.continue_team_run_stream(
            "stub-team", before[-1].run_id, requirements, session_id="ag-t2", background="true"
        )
        return [event async for event in continuing]

    after = run(second_leg())

    assert type(before[-1]) is TeamRunPausedEvent
    assert [r.tool_execution.tool_name for r in requirements] == ["delete_temp_files"]
    assert (type(after[0]), type(after[-1])) == (TeamRunContinuedEvent, TeamRunCompletedEvent)
    assert after[-1].content == f"echo: {DELETE} (history: 0 messages)"
    assert [event.event_index for event in before + after] == list(range(len(before) + len(after)))
    assert agno_errors == []


def test_agnos_client_confirms_a_workflow_steps_tool_from_the_polled_step_requirements(
    start_web, start_worker, run, agno_errors
):
    start_worker()
    web = start_web()
    client = AgentOSClient(base_url=web.url)

    accepted = run(client.run_workflow("stub-workflow", DELETE, session_id="ag-w1", background="true"))
    paused = WorkflowRunOutput.from_dict(
        web.wait_status(accepted.run_id, "ag-w1", "PAUSED", prefix="/workflows/stub-workflow")
    )
    [step] = paused.steps_requiring_executor_resolution
    asked = [RunRequirement.from_dict(requirement) for requirement in step.executor_requirements]
    step.executor_requirements = [requirement.to_dict() for requirement in confirmed(asked)]
    continued = run(
        client.continue_workflow_run("stub-workflow", accepted.run_id, [step], session_id="ag-w1", background="true")
    )
    done = WorkflowRunOutput.from_dict(  # parses every stored event: an unknown one raises
        web.wait_status(accepted.run_id, "ag-w1", "COMPLETED", prefix="/workflows/stub-workflow")
    )

    assert (paused.is_paused, step.step_name, step.step_index, step.executor_name) == (True, "Step 1", 0, "Step 1")
    assert [r.tool_execution.tool_name for r in asked] == ["delete_temp_files"]
    assert (continued.run_id, continued.status) == (accepted.run_id, "PENDING")
    assert done.content == "echo: done: tool result received (history: 0 messages)"
    assert done.steps_requiring_executor_resolution == []
    assert agno_errors == []


def test_agnos_client_streams_a_workflows_pause_and_its_confirmed_continuation(
    start_web, start_worker, run, agno_errors
):
    start_worker()
    web = start_web()
    client = AgentOSClient(base_url=web.url)

    async def first_leg():
        streaming = client.run_workflow_stream("stub-workflow", DELETE, session_id="ag-w2", background="true")
        return [event async for event in streaming]

    before = run(first_leg())
    [step] = [StepRequirement.from_dict(requirement) for requirement in before[-1].step_requirements]
    asked = [RunRequirement.from_dict(requirement) for requirement in step.executor_requirements]
    step.executor_requirements = [requirement.to_dict() for requirement in confirmed(asked)]

    async def second_leg():
        continuing = client.continue_workflow_run_stream(
            "stub-workflow", before[-1].run_id, [step], session_id="ag-w2", background="true"
        )
        return [event async for event in continuing]

    after = run(second_leg())

    assert [type(event) for event in before[-2:]] == [StepExecutorPausedEvent, WorkflowPausedEvent]
    asked_ids = [requirement.tool_execution.tool_call_id for requirement in asked]
    assert [r["tool_execution"]["tool_call_id"] for r in before[-2].executor_requirements] == asked_ids
    assert (type(after[0]), type(after[-1])) == (StepExecutorContinuedEvent, WorkflowCompletedEvent)
    assert after[-1].content == "echo: done: tool result received (history: 0 messages)"
    assert [event.event_index for event in before + after] == list(range(len(before) + len(after)))
    assert agno_errors == []
