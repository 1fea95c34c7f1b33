"""A team's own Agno agents and teams, from the module it gives `agno.os.AgentOS`, run by a real `serve` (web,
worker, sweeper) through the queue, on the tests' fake OpenAI server, driven by Agno's own AgentOS client."""

from __future__ import annotations

import copy
import json
import signal

import pytest
import requests
from agno.client import AgentOSClient
from agno.run.agent import RunCompletedEvent, RunContentEvent, RunOutput, RunStartedEvent
from agno.run.requirement import RunRequirement
from agno.run.team import TeamRunOutput
from agno.run.workflow import WorkflowRunOutput

from agents_registry.journal import OUTCOME_UNKNOWN
from runs.models import AgentSession, Run, RunEvent
from tests.support.waiting import wait_until

from ..fake_openai import Answer

pytestmark = pytest.mark.django_db(transaction=True)
APP = "tests.agents_registry.user_modules.agno_app:agent_os"
HELPER = "/agents/agno-helper"


@pytest.fixture
def agno_serve(start_serve, fake_openai):
    """`serve` with the Agno app module as a team sets it: one variable."""
    return start_serve(AGENTOS_COMPONENTS=APP, FAKE_OPENAI_URL=fake_openai.url)


def test_an_agno_agent_streams_through_the_queue_and_answers_its_poll(agno_serve, fake_openai, run):
    fake_openai.answer(Answer(text="Hello from Agno", usage={"input": 12, "output": 3}))
    client = AgentOSClient(base_url=agno_serve.url)

    async def stream():
        events = client.run_agent_stream("agno-helper", "hi", session_id="agno-1", background="true")
        return [event async for event in events]

    events = run(stream())

    assert (type(events[0]), type(events[-1])) == (RunStartedEvent, RunCompletedEvent)
    assert "".join(event.content for event in events if type(event) is RunContentEvent) == "Hello from Agno"
    assert events[-1].content == "Hello from Agno"
    assert [event.event_index for event in events] == list(range(len(events)))
    run_id = events[0].run_id
    assert {event.run_id for event in events} == {run_id}
    polled = agno_serve.wait_status(run_id, "agno-1", "COMPLETED", prefix=HELPER)
    assert (polled["content"], polled["agent_id"], polled["queue_attempt"]) == ("Hello from Agno", "agno-helper", 1)
    assert {key: polled["metrics"][key] for key in ("input_tokens", "output_tokens", "total_tokens")} == {
        "input_tokens": 12,
        "output_tokens": 3,
        "total_tokens": 15,
    }
    stored = list(RunEvent.objects.filter(run_id=run_id).values_list("event", flat=True))
    assert stored.count("RunCompleted") == 1 and "RunError" not in stored
    listed = {agent["id"]: agent for agent in agno_serve.get("/agents")}
    assert listed["agno-helper"]["model"] == {"id": "gpt-fake", "provider": "OpenAI"}
    assert "editors" in [team["id"] for team in agno_serve.get("/config")["teams"]]
    assert fake_openai.requests[0]["messages"] == [  # Agno's own system message: its description, instructions
        {"role": "developer", "content": "Answers with what the session said before.\nBe brief."},
        {"role": "user", "content": "hi"},
    ]


def test_an_agno_runs_session_state_comes_in_with_the_submit_and_out_with_the_run(agno_serve, fake_openai):
    fake_openai.answer(Answer(text="Noted."))
    fields = {"message": "hi", "session_id": "agno-state", "background": "true", "stream": "false"}
    fields["session_state"] = json.dumps({"city": "Lyon"})

    accepted = requests.post(f"{agno_serve.url}{HELPER}/runs", data=fields, timeout=30)
    agno_serve.wait_status(accepted.json()["run_id"], "agno-state", "COMPLETED", prefix=HELPER)

    assert AgentSession.objects.get(pk="agno-state").session_state == {"city": "Lyon"}


def test_agnos_history_settings_choose_from_the_runs_agentos_kept(agno_serve, fake_openai):
    fake_openai.respond(lambda request: Answer(text=f"answer to {request['messages'][-1]['content']}"))

    for number in range(4):
        run_id = agno_serve.submitted("agno-history", f"question {number}", prefix=HELPER)
        agno_serve.wait_status(run_id, "agno-history", "COMPLETED", prefix=HELPER)

    asked = [[(m["role"], m["content"]) for m in request["messages"][1:]] for request in fake_openai.requests]
    assert asked[3] == [  # num_history_runs=2: exactly the last two runs, as Agno on its own db sends them
        ("user", "question 1"),
        ("assistant", "answer to question 1"),
        ("user", "question 2"),
        ("assistant", "answer to question 2"),
        ("user", "question 3"),
    ]
    assert asked[2][:2] == [("user", "question 0"), ("assistant", "answer to question 0")]
    last = Run.objects.filter(session_id="agno-history").order_by("-completed_at").first()
    assert last.run_messages[0]["agno_run"]["content"] == "answer to question 3"


HITL = "tests.agents_registry.user_modules.agno_hitl:agent_os"


@pytest.fixture
def hitl_serve(start_serve, fake_openai, tmp_path):
    """`serve` with the human-in-the-loop app; what its tools ran is in the file `serve.ran` names."""
    ran = tmp_path / "ran.txt"
    serve = start_serve(AGENTOS_COMPONENTS=HITL, FAKE_OPENAI_URL=fake_openai.url, AGNO_RAN_FILE=str(ran))
    serve.ran = lambda: ran.read_text().splitlines() if ran.exists() else []
    return serve


def paused_requirements(serve, run, client, agent: str, message: str, session: str):
    accepted = run(client.run_agent(agent, message, session_id=session, background="true"))
    polled = serve.wait_status(accepted.run_id, session, "PAUSED", prefix=f"/agents/{agent}")
    return accepted.run_id, polled, RunOutput.from_dict(copy.deepcopy(polled)).active_requirements  # it takes keys


def test_a_confirmed_agno_tool_pauses_its_run_and_runs_once_when_continued(hitl_serve, fake_openai, run):
    fake_openai.answer(
        Answer(tool_calls=[("call_1", "delete_file", {"path": "/tmp/x"})]), Answer(text="Deleted /tmp/x.")
    )
    client = AgentOSClient(base_url=hitl_serve.url)
    run_id, polled, requirements = paused_requirements(hitl_serve, run, client, "clerk", "delete /tmp/x", "agno-c1")

    assert [(r.tool_execution.tool_name, r.tool_execution.tool_args) for r in requirements] == [
        ("delete_file", {"path": "/tmp/x"})
    ]
    assert [tool["tool_call_id"] for tool in polled["tools"]] == ["call_1"]
    assert hitl_serve.ran() == [], "nothing ran before the confirmation"
    for requirement in requirements:
        requirement.confirm()
    tools = [requirement.tool_execution for requirement in requirements]
    continued = run(client.continue_agent_run("clerk", run_id, tools, session_id="agno-c1", background="true"))
    done = hitl_serve.wait_status(run_id, "agno-c1", "COMPLETED", prefix="/agents/clerk")

    assert (continued.run_id, done["content"], done["queue_attempt"]) == (run_id, "Deleted /tmp/x.", 2)
    assert hitl_serve.ran() == ["deleted /tmp/x"]
    events = [event["event"] for event in done["events"]]
    assert events.count("RunPaused") == 1 and events.count("RunContinued") == 1 and events.count("RunCompleted") == 1


def test_an_agno_tool_the_client_executes_and_one_asking_for_user_input_continue(hitl_serve, fake_openai, run):
    client = AgentOSClient(base_url=hitl_serve.url)
    fake_openai.answer(
        Answer(tool_calls=[("call_r", "restart_service", {"name": "nginx"})]), Answer(text="nginx is back.")
    )
    run_id, _, requirements = paused_requirements(hitl_serve, run, client, "operator", "restart nginx", "agno-x1")
    requirements[0].set_external_execution_result("nginx restarted on the client")
    tools = [requirement.tool_execution for requirement in requirements]
    run(client.continue_agent_run("operator", run_id, tools, session_id="agno-x1", background="true"))
    restarted = hitl_serve.wait_status(run_id, "agno-x1", "COMPLETED", prefix="/agents/operator")

    fake_openai.answer(Answer(tool_calls=[("call_m", "send_email", {"subject": "Hello"})]), Answer(text="Sent."))
    run_id, _, requirements = paused_requirements(hitl_serve, run, client, "mailer", "email Ada", "agno-u1")
    asked = [(field.name, field.value) for field in requirements[0].user_input_schema]
    requirements[0].provide_user_input({"to_address": "ada@example.com"})
    tools = [requirement.tool_execution for requirement in requirements]
    run(client.continue_agent_run("mailer", run_id, tools, session_id="agno-u1", background="true"))
    sent = hitl_serve.wait_status(run_id, "agno-u1", "COMPLETED", prefix="/agents/mailer")

    assert restarted["content"] == "nginx is back."
    told = [m for m in fake_openai.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in told] == ["nginx restarted on the client"]
    assert (asked, sent["content"]) == ([("subject", "Hello"), ("to_address", None)], "Sent.")
    assert hitl_serve.ran() == ["sent 'Hello' to ada@example.com"], "the client's restart never ran here"


def delegating(request: dict) -> Answer:
    """The fake model as a team's leader, its member and a workflow's steps use it: each asks by the tools offered."""
    offered = [tool["function"]["name"] for tool in request.get("tools") or ()]
    first = request["messages"][-1]["role"] == "user"
    if "delegate_task_to_member" in offered and first:
        return Answer(tool_calls=[("call_d", "delegate_task_to_member", {"member_id": "files-clerk", "task": "rm x"})])
    if "delete_file" in offered and first:
        return Answer(tool_calls=[("call_1", "delete_file", {"path": "/tmp/x"})])
    return Answer(text="all tidy")


def test_an_agno_team_whose_member_pauses_continues_on_the_members_requirement(hitl_serve, fake_openai, run):
    fake_openai.respond(delegating)
    client = AgentOSClient(base_url=hitl_serve.url)

    accepted = run(client.run_team("office", "tidy /tmp", session_id="agno-t1", background="true"))
    polled = hitl_serve.wait_status(accepted.run_id, "agno-t1", "PAUSED", prefix="/teams/office")
    requirements = TeamRunOutput.from_dict(copy.deepcopy(polled)).active_requirements
    asked = [(r.tool_execution.tool_name, r.member_agent_id) for r in requirements]
    for requirement in requirements:
        requirement.confirm()
    run(client.continue_team_run("office", accepted.run_id, requirements, session_id="agno-t1", background="true"))
    done = hitl_serve.wait_status(accepted.run_id, "agno-t1", "COMPLETED", prefix="/teams/office")

    assert asked == [("delete_file", "files-clerk")]
    assert (done["content"], done["queue_attempt"], hitl_serve.ran()) == ("all tidy", 2, ["deleted /tmp/x"])
    members = {event["run_id"] for event in done["events"] if event.get("agent_id") == "files-clerk"}
    assert len(members) == 1 and members != {accepted.run_id}, "the member's events keep its own run id"
    assert {event.get("parent_run_id") for event in done["events"] if event["run_id"] in members} == {accepted.run_id}
    ended = [event["event"] for event in done["events"] if event["run_id"] == accepted.run_id]
    assert (ended.count("TeamRunPaused"), ended.count("TeamRunCompleted"), ended[-1]) == (1, 1, "TeamRunCompleted")


def test_an_agno_workflow_whose_step_pauses_continues_on_its_step_requirement(hitl_serve, fake_openai, run):
    fake_openai.respond(delegating)
    client = AgentOSClient(base_url=hitl_serve.url)

    accepted = run(client.run_workflow("tidy", "tidy /tmp", session_id="agno-w1", background="true"))
    polled = hitl_serve.wait_status(accepted.run_id, "agno-w1", "PAUSED", prefix="/workflows/tidy")
    [step] = WorkflowRunOutput.from_dict(copy.deepcopy(polled)).steps_requiring_executor_resolution
    asked = [RunRequirement.from_dict(requirement) for requirement in step.executor_requirements]
    for requirement in asked:
        requirement.confirm()
    step.executor_requirements = [requirement.to_dict() for requirement in asked]
    run(client.continue_workflow_run("tidy", accepted.run_id, [step], session_id="agno-w1", background="true"))
    done = hitl_serve.wait_status(accepted.run_id, "agno-w1", "COMPLETED", prefix="/workflows/tidy")

    assert (step.step_name, [r.tool_execution.tool_name for r in asked]) == ("clean", ["delete_file"])
    assert (done["content"], done["queue_attempt"], hitl_serve.ran()) == ("all tidy", 2, ["deleted /tmp/x"])
    told = [event["event"] for event in done["events"] if event["run_id"] == accepted.run_id]
    assert told.count("WorkflowPaused") == 1 and told[-1] == "WorkflowCompleted"


def test_a_cancel_stops_a_running_agno_run_at_its_next_checkpoint(hitl_serve, fake_openai, run):
    fake_openai.answer(Answer(tool_calls=[("call_c", "count_slowly", {"to": 3})]), Answer(text="never asked"))
    client = AgentOSClient(base_url=hitl_serve.url)
    accepted = run(client.run_agent("counter", "count to 3", session_id="agno-x9", background="true"))
    wait_until(lambda: hitl_serve.ran() == ["counting to 3"], timeout=20, what="the tool to start")

    run(client.cancel_agent_run("counter", accepted.run_id))
    cancelled = hitl_serve.wait_status(accepted.run_id, "agno-x9", "CANCELLED", prefix="/agents/counter")

    assert cancelled["cancellation_stage"] == "EXECUTING"
    assert len(fake_openai.requests) == 1, "Agno stopped at the checkpoint after the tool: no second model call"
    assert hitl_serve.ran() == ["counting to 3", "counted to 3"], "a started tool is not killed, as in Agno"
    told = [event["event"] for event in cancelled["events"]]
    assert (told.count("RunCancelled"), told[-1], "RunCompleted" in told) == (1, "RunCancelled", False), told


def booking(request: dict) -> Answer:
    """The fake model as the booker uses it, asked again by a later attempt: its answer by the tool results so far."""
    told = [message for message in request["messages"] if message["role"] == "tool"]
    if not told:
        return Answer(tool_calls=[("call_1", "reserve_seat", {"flight": "LH 400"})])
    if len(told) == 1:
        return Answer(tool_calls=[("call_2", "send_email", {"to": "ada@example.com"})])
    return Answer(text=f"Booked; the email: {told[-1]['content']}")


def test_an_agno_run_killed_inside_a_tool_resumes_without_repeating_the_one_completed(
    start_web, start_worker, start_sweeper, fake_openai, tmp_path
):
    ran, hang = tmp_path / "ran.txt", tmp_path / "hang"
    hang.touch()
    env = {
        "AGENTOS_COMPONENTS": "tests.agents_registry.user_modules.agno_ledger",
        "FAKE_OPENAI_URL": fake_openai.url,
        "AGNO_RAN_FILE": str(ran),
        "LEDGER_HANG": str(hang),
        "AGENTOS_MAX_ATTEMPTS": "2",
        "AGENTOS_LOCK_GRACE_SECONDS": "3",
        "AGENTOS_POLL_INTERVAL": "0.5",
    }
    fake_openai.respond(booking)
    web = start_web(**env)
    start_sweeper(**env)
    worker = start_worker(concurrency=1, **env)
    lines = lambda: ran.read_text().splitlines() if ran.exists() else []  # noqa: E731

    run_id = web.submitted("agno-trip", "book LH 400", prefix="/agents/booker")
    wait_until(lambda: lines() == ["reserved LH 400", "emailed ada@example.com"], timeout=30, what="send_email")
    worker.signal(signal.SIGKILL)
    hang.unlink()
    start_worker(concurrency=1, **env)
    polled = web.wait_status(run_id, "agno-trip", "COMPLETED", prefix="/agents/booker", timeout=40)

    assert lines() == ["reserved LH 400", "emailed ada@example.com"], "neither tool ran again"
    unknown = OUTCOME_UNKNOWN.format(tool="send_email", call_id="-")
    assert polled["content"] == f"Booked; the email: {unknown}"
    assert polled["queue_attempt"] == 2
    assert [(s["kind"], s["tool"], s["status"], s["attempt"]) for s in polled["steps"]] == [
        ("tool", "reserve_seat", "completed", 1),
        ("tool", "send_email", "completed", 2),
    ]
    assert AgentSession.objects.get(pk="agno-trip").session_state == {"seat": "12A on LH 400"}


def test_an_agno_agents_async_tools_run_on_the_workers_thread(agno_serve, fake_openai):
    fake_openai.answer(
        Answer(tool_calls=[("call_1", "look_up", {"code": "A1"}), ("call_2", "count", {"item": "mug"})]),
        Answer(text="A1 shipped; 3 mugs left."),
    )

    run_id = agno_serve.submitted("agno-async", "A1 and mugs?", prefix="/agents/agno-shop")
    polled = agno_serve.wait_status(run_id, "agno-async", "COMPLETED", "ERROR", prefix="/agents/agno-shop")
    assert polled["status"] == "COMPLETED", polled.get("content")

    assert polled["content"] == "A1 shipped; 3 mugs left."
    told = [m["content"] for m in fake_openai.requests[1]["messages"] if m["role"] == "tool"]
    assert told == ["order A1 shipped", "mug: 3 in stock"]
    assert [(step["tool"], step["status"]) for step in polled["steps"]] == [
        ("look_up", "completed"),
        ("count", "completed"),
    ]
