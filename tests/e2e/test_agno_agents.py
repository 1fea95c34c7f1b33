"""A team's own Agno agents and teams, from the module it gives `agno.os.AgentOS`, run by a real `serve` (web,
worker, sweeper) through the queue, on the tests' fake OpenAI server, driven by Agno's own AgentOS client."""

from __future__ import annotations

import pytest
from agno.client import AgentOSClient
from agno.run.agent import RunCompletedEvent, RunContentEvent, RunStartedEvent

from runs.models import Run, RunEvent

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
    assert fake_openai.requests[0]["messages"] == [  # Agno's own system message: its description, instructions
        {"role": "developer", "content": "Answers with what the session said before.\nBe brief."},
        {"role": "user", "content": "hi"},
    ]


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
