"""POST {prefix}/runs (CONTRACT 3.1): accepted submissions, field by field, and every refusal writing nothing."""

import json
import uuid

import pytest
from django.test import override_settings

from agentos_project.conf import current
from queueing.models import Ticket
from runs.models import AgentSession, Run

from .conftest import row_counts, submit

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("fmt", ["multipart", "json"])
def test_background_submit_answers_202_with_committed_rows(api, fmt, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as published:
        response = submit(api, fmt=fmt, message="hello sleep=0", session_id="chat-1", user_id="ana")

    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"run_id", "session_id", "status"}
    assert body["session_id"] == "chat-1"
    assert body["status"] == "PENDING"
    run = Run.objects.get(pk=body["run_id"])
    assert (run.session_id, run.component_type, run.component_id, run.user_id) == (
        "chat-1",
        "agent",
        "stub-agent",
        "ana",
    )
    assert (run.status, run.input_content, run.background, run.stream, run.attempt) == (
        "PENDING",
        "hello sleep=0",
        True,
        False,
        0,
    )
    ticket = Ticket.objects.get(pk=body["run_id"])
    assert (ticket.status, ticket.attempt, ticket.max_attempts, ticket.session_seq) == ("queued", 0, 1, 1)
    assert (ticket.session_id, ticket.user_id, ticket.is_head, ticket.serialized) == ("chat-1", "ana", True, True)
    assert ticket.payload == {
        "message": "hello sleep=0",
        "stream": False,
        "background": True,
        "session_state": None,
        "metadata": None,
    }
    assert AgentSession.objects.get(pk="chat-1").component_id == "stub-agent"
    assert len(published) == 1


def test_urlencoded_form_is_accepted(api):
    response = api.post(
        "/agents/stub-agent/runs",
        "message=hi+there&background=true&stream=false&session_id=s-form",
        content_type="application/x-www-form-urlencoded",
    )

    assert response.status_code == 202
    assert Run.objects.get(pk=response.json()["run_id"]).input_content == "hi there"


@pytest.mark.parametrize("session_field", [{}, {"session_id": ""}])
def test_missing_or_empty_session_id_gets_a_new_uuid4(api, session_field):
    response = submit(api, message="hi", **session_field)

    assert response.status_code == 202
    assert uuid.UUID(response.json()["session_id"]).version == 4
    assert AgentSession.objects.filter(pk=response.json()["session_id"]).exists()


def test_session_state_and_metadata_are_parsed_from_json_strings(api):
    response = submit(
        api, message="hi", session_state=json.dumps({"cart": [1, 2]}), metadata=json.dumps({"source": "test"})
    )

    run = Run.objects.get(pk=response.json()["run_id"])
    assert run.session_state_input == {"cart": [1, 2]}
    assert run.metadata == {"source": "test"}


def test_json_body_takes_objects_for_json_fields(api):
    response = submit(api, fmt="json", message="hi", session_state={"a": 1}, background=True, stream=False)

    assert response.status_code == 202
    assert Run.objects.get(pk=response.json()["run_id"]).session_state_input == {"a": 1}


def test_later_submission_of_a_session_queues_behind_the_first(api):
    first = submit(api, message="one", session_id="chat-seq").json()
    second = submit(api, message="two", session_id="chat-seq").json()

    tickets = {str(t.id): t for t in Ticket.objects.filter(session_id="chat-seq")}
    assert (tickets[first["run_id"]].session_seq, tickets[first["run_id"]].is_head) == (1, True)
    assert (tickets[second["run_id"]].session_seq, tickets[second["run_id"]].is_head) == (2, False)


@pytest.mark.parametrize(("prefix", "kind"), [("/teams/stub-team", "team"), ("/workflows/stub-workflow", "workflow")])
def test_teams_and_workflows_share_the_wire_format(api, prefix, kind):
    response = submit(api, prefix=prefix, message="hi")

    assert response.status_code == 202
    ticket = Ticket.objects.get(pk=response.json()["run_id"])
    assert (ticket.component_type, ticket.component_id) == (kind, prefix.rsplit("/", 1)[1])


def test_inline_run_answers_the_run_body_and_is_not_queued(api):
    response = submit(api, fmt="json", message="inline sleep=0", background=False, stream=False, session_id="s-in")

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "COMPLETED"
    assert body["content"] == "echo: inline sleep=0 (history: 0 messages)"
    assert body["agent_id"] == "stub-agent"
    assert not Ticket.objects.exists()
    assert AgentSession.objects.get(pk="s-in").messages == [
        {"role": "user", "content": "inline sleep=0"},
        {"role": "assistant", "content": "echo: inline sleep=0 (history: 0 messages)"},
    ]


def field_error(response) -> tuple:
    detail = response.json()["detail"]
    assert isinstance(detail, list) and len(detail) == 1
    return detail[0]["loc"], detail[0]["type"]


@pytest.mark.parametrize(
    ("fields", "loc", "kind"),
    [
        ({}, ["body", "message"], "missing"),
        ({"message": "   "}, ["body", "message"], "invalid"),
        ({"message": ""}, ["body", "message"], "blank"),
        ({"message": "hi", "background": "maybe"}, ["body", "background"], "invalid"),
        ({"message": "hi", "stream": "perhaps"}, ["body", "stream"], "invalid"),
        ({"message": "hi", "session_state": "{not json"}, ["body", "session_state"], "invalid"),
        ({"message": "hi", "session_state": "[1, 2]"}, ["body", "session_state"], "invalid"),
        ({"message": "hi", "metadata": "nope"}, ["body", "metadata"], "invalid"),
    ],
)
def test_malformed_fields_answer_422_naming_the_field_and_write_nothing(api, fields, loc, kind):
    before = row_counts()
    body = {"background": "true", "stream": "false", **fields}

    response = api.post("/agents/stub-agent/runs", body, format="multipart")

    assert response.status_code == 422
    assert field_error(response) == (loc, kind)
    assert row_counts() == before


def test_malformed_json_body_answers_422(api):
    before = row_counts()

    response = api.post("/agents/stub-agent/runs", '{"message": "hi",', content_type="application/json")

    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"
    assert row_counts() == before


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        ("/agents/nobody/runs", "Agent not found"),
        ("/teams/nobody/runs", "Team not found"),
        ("/workflows/stub-agent/runs", "Workflow not found"),
    ],
)
def test_unknown_component_answers_404_and_writes_nothing(api, path, detail):
    before = row_counts()

    response = api.post(path, {"message": "hi", "background": "true", "stream": "false"}, format="multipart")

    assert (response.status_code, response.json()) == (404, {"detail": detail})
    assert row_counts() == before


def test_component_without_store_refuses_background_with_400(api, storeless_agent):
    before = row_counts()

    response = submit(api, prefix="/agents/storeless-agent", message="hi")

    assert response.status_code == 400
    assert response.json() == {"detail": "Background execution requires a database to be configured on the agent"}
    assert row_counts() == before


def test_full_queue_answers_429_and_writes_nothing(api):
    with override_settings(AGENTOS=current().replace("queue", max_queue_depth=2)):
        assert submit(api, message="one").status_code == 202
        assert submit(api, message="two").status_code == 202
        before = row_counts()

        response = submit(api, message="three")

    assert (response.status_code, response.json()) == (429, {"detail": "Job queue is full"})
    assert row_counts() == before


def test_body_over_one_mebibyte_answers_413_and_writes_nothing(api):
    before = row_counts()

    response = api.post(
        "/agents/stub-agent/runs",
        json.dumps({"message": "x" * (1024 * 1024 + 1), "background": True, "stream": False}),
        content_type="application/json",
    )

    assert response.status_code == 413
    assert "1 MiB" in response.json()["detail"]
    assert row_counts() == before
