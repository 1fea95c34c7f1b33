"""POST {prefix}/runs (CONTRACT 3.1): accepted submissions, field by field, and every refusal writing nothing."""

import json
import uuid

import psycopg2
import pytest
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

from agentos_project.core.conf import current
from queueing import router
from queueing.models import Ticket
from runs.models import AgentSession, Run
from tests.support.runs import submit
from tests.support.waiting import in_threads

pytestmark = pytest.mark.django_db


def committed_elsewhere(run_id: str) -> tuple:
    """What another connection sees of the run's rows: (session, run, ticket) statuses, None where missing."""
    other = psycopg2.connect(**connection.get_connection_params())
    try:
        with other.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT session_id FROM runs_agentsession WHERE session_id = r.session_id), r.status, "
                "(SELECT status FROM queueing_ticket WHERE id = r.run_id) FROM runs_run AS r WHERE r.run_id = %s",
                [run_id],
            )
            return cursor.fetchone()
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fmt", ["multipart", "json"])
def test_background_submit_answers_202_only_once_its_rows_are_committed(api, fmt, redis_db):
    response = submit(api, fmt=fmt, message="hello sleep=0", session_id="chat-1", user_id="ana")

    assert response.status_code == 202
    body = response.json()
    assert committed_elsewhere(body["run_id"]) == ("chat-1", "PENDING", "queued"), "visible to any connection"
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
    assert ticket.payload == {  # AgentOS' job payload (input, kwargs, scope), the submission beside it
        "input": "hello sleep=0",
        "kwargs": {},
        "scope": {"user_id": "ana", "version": None, "pinned": None, "source": "registry"},
        "stream": False,
        "background": True,
        "session_state": None,
        "metadata": None,
    }
    assert AgentSession.objects.get(pk="chat-1").component_id == "stub-agent"
    assert router.publisher.flush()
    assert redis_db.llen("agentos") == 1, "and it was published"


@pytest.mark.django_db(transaction=True)
def test_a_jobs_payload_on_the_queue_is_agentos_with_the_runs_arguments_as_kwargs(api, redis_db):
    fields = {"session_state": '{"cart": ["A1"]}', "metadata": '{"via": "app"}'}
    run_id = submit(api, message="hi sleep=0", session_id="chat-kw", **fields).json()["run_id"]

    payload = api.get(f"/queue/jobs/{run_id}").json()["payload"]

    assert (payload["input"], payload["kwargs"]) == (
        "hi sleep=0",
        {"session_state": {"cart": ["A1"]}, "metadata": {"via": "app"}},
    )
    assert payload["scope"] == {"user_id": None, "version": None, "pinned": None, "source": "registry"}


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


@pytest.mark.django_db(transaction=True)
def test_forty_parallel_submits_to_a_queue_of_five_get_exactly_five_202s(redis_db):
    def client(number: int) -> int:
        return submit(APIClient(), message=f"run {number}", session_id=f"depth-{number}").status_code

    with override_settings(AGENTOS=current().replace("queue", max_queue_depth=5)):
        answers = in_threads(40, client)

    assert sorted(answers) == [202] * 5 + [429] * 35
    assert (Run.objects.count(), Ticket.objects.filter(status="queued").count()) == (5, 5)


@pytest.mark.parametrize("fmt", ["multipart", "json"])
def test_a_null_json_field_is_no_value(api, fmt):
    null = "null" if fmt == "multipart" else None

    response = submit(api, fmt=fmt, message="hi", session_state=null, metadata=null)

    assert response.status_code == 202
    run = Run.objects.get(pk=response.json()["run_id"])
    assert (run.session_state_input, run.metadata) == (None, None)
