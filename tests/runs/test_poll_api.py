"""GET {prefix}/runs/{run_id}?session_id= (CONTRACT 3.2): the body field by field, and every refusal."""

import json
import re

import pydantic
import pytest

from agents_registry.components import Agent, Team, Workflow
from agents_registry.registry import registry
from queueing.worker import worker_execute
from tests.support.runs import poll, poll_answer, submit

from .conftest import row_counts

pytestmark = pytest.mark.django_db
ISO_MICROSECONDS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")


@pytest.fixture
def accepted(api):
    return submit(api, message="poll me sleep=0", session_id="chat-poll").json()


def test_pending_run_has_exactly_the_base_fields(api, accepted):
    response = poll_answer(api, accepted["run_id"], "chat-poll")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"run_id", "session_id", "agent_id", "status", "created_at", "input", "queue_attempt"}
    assert body["run_id"] == accepted["run_id"]
    assert body["session_id"] == "chat-poll"
    assert body["agent_id"] == "stub-agent"
    assert body["status"] == "PENDING"
    assert isinstance(body["created_at"], int)
    assert body["input"] == {"input_content": "poll me sleep=0"}
    assert body["queue_attempt"] == 0


def test_completed_run_carries_content_events_metrics_and_times(api, accepted):
    assert worker_execute(ticket_id=accepted["run_id"]) is True

    body = poll(api, accepted["run_id"], "chat-poll")

    assert body["status"] == "COMPLETED"
    assert body["queue_attempt"] == 1
    assert body["content"] == "echo: poll me sleep=0 (history: 0 messages)"
    assert [event["event"] for event in body["events"]] == ["RunStarted", "RunCompleted"]
    indexes = [event["event_index"] for event in body["events"]]
    assert indexes[0] == 0 and indexes == sorted(set(indexes))
    assert {event["run_id"] for event in body["events"]} == {accepted["run_id"]}
    assert body["events"][-1]["content"] == body["content"]
    assert set(body["metrics"]) == {"duration"}
    assert ISO_MICROSECONDS.match(body["started_at"]) and ISO_MICROSECONDS.match(body["completed_at"])
    assert "tools" not in body and "cancellation_stage" not in body


def test_errored_run_carries_its_error_in_content(api):
    accepted = submit(api, message="explode sleep=0", session_id="chat-poll").json()
    worker_execute(ticket_id=accepted["run_id"])

    body = poll(api, accepted["run_id"], "chat-poll")

    assert (body["status"], body["content"]) == ("ERROR", "stub model exploded")
    assert body["events"][-1]["event"] == "RunError"


def test_poll_without_session_id_answers_422(api, accepted):
    response = poll_answer(api, accepted["run_id"], None)

    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "session_id"]


@pytest.mark.parametrize(
    ("run_id", "session_id", "prefix"),
    [
        ("00000000-0000-4000-8000-000000000000", "chat-poll", "/agents/stub-agent"),
        ("not-a-uuid", "chat-poll", "/agents/stub-agent"),
        (None, "another-session", "/agents/stub-agent"),
        (None, "chat-poll", "/agents/other-agent"),
    ],
    ids=["unknown", "malformed", "foreign-session", "other-component"],
)
def test_unknown_or_foreign_run_answers_404_run_not_found(api, accepted, run_id, session_id, prefix):
    before = row_counts()

    response = poll_answer(api, run_id or accepted["run_id"], session_id, prefix=prefix)

    assert (response.status_code, response.json()) == (404, {"detail": "Run not found"})
    assert row_counts() == before


def test_run_polled_under_another_kind_answers_404(api, accepted):
    response = poll_answer(api, accepted["run_id"], "chat-poll", prefix="/teams/stub-team")

    assert (response.status_code, response.json()) == (404, {"detail": "Run not found"})


class Verdict(pydantic.BaseModel):
    refundable: bool


class Answering:
    """A model that answers `text` to every prompt."""

    id, provider = "answering", "test"

    def __init__(self, text: str):
        self.text = text

    def stream(self, messages, tools, ctx, response_format=None):
        yield self.text


@pytest.fixture
def structured():
    """A team whose leader, and a workflow whose last step, answer with a `Verdict`."""
    answers = lambda: Agent(id="judge", name="Judge", model=Answering('{"refundable": true}'), output_schema=Verdict)  # noqa: E731
    plain = Agent(id="plain", name="Plain", model=Answering("A1 is late"))
    components = [
        registry.register(Team(id="judges", name="Judges", leader=answers(), members=(plain,))),
        registry.register(Workflow(id="judging", name="Judging", steps=(plain, answers()))),
    ]
    yield
    for component in components:
        registry.unregister(component.kind, component.id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("redis_db", "structured")
@pytest.mark.parametrize(
    ("prefix", "completed"), [("/teams/judges", "TeamRunCompleted"), ("/workflows/judging", "WorkflowCompleted")]
)
def test_a_team_or_workflow_with_an_output_schema_shows_its_object_as_an_agent_does(api, prefix, completed):
    run_id = submit(api, prefix=prefix, message="refund A1?", session_id="chat-verdict").json()["run_id"]
    assert worker_execute(ticket_id=run_id) is True

    body = poll(api, run_id, "chat-verdict", prefix=prefix)
    replay = api.post(f"{prefix}/runs/{run_id}/resume", {"session_id": "chat-verdict"}, format="multipart")
    streamed = [
        json.loads(line[len("data: ") :])
        for line in b"".join(replay).decode().splitlines()
        if line.startswith("data: ")
    ]

    assert (body["content"], body["content_type"]) == ({"refundable": True}, "Verdict")
    [stored] = [event for event in body["events"] if event["event"] == completed]
    [live] = [event for event in streamed if event.get("event") == completed]
    for event in (stored, live):
        assert (event["content"], event["content_type"]) == ({"refundable": True}, "Verdict")
