"""`POST .../cancel` (CONTRACT 3.3, 9) and the refusals of `POST .../resume` (3.5), in-process."""

from __future__ import annotations

import json
import uuid

import pytest

from queueing.models import Ticket
from queueing.tickets import ticket_claim
from runs import cancellation, eventbus
from runs.models import Run, RunEvent

from .conftest import accept_run, row_counts

pytestmark = pytest.mark.django_db(transaction=True)
RUNS = "/agents/stub-agent/runs"


def state(run_id: str) -> tuple:
    run = Run.objects.get(pk=run_id)
    return run.status, run.cancellation_stage, run.content, Ticket.objects.get(pk=run_id).status


def test_cancel_of_a_run_waiting_behind_its_head_is_immediate(api, redis_db):
    head, waiting, last = (accept_run(session_id="cx-1") for _ in range(3))

    response = api.post(f"{RUNS}/{waiting}/cancel?session_id=cx-1")

    assert (response.status_code, response.json()) == (200, {})
    assert state(waiting) == ("CANCELLED", "PENDING", "cancelled before execution", "cancelled")
    assert [state(head)[0], state(last)[0]] == ["PENDING", "PENDING"]
    assert Ticket.objects.get(pk=head).is_head and not Ticket.objects.get(pk=last).is_head
    stored = list(RunEvent.objects.filter(run_id=waiting).values_list("event", "event_index"))
    assert stored == [("RunCancelled", 0)]
    assert eventbus.sender.flush()
    published = [json.loads(raw) for raw in redis_db.zrange(eventbus.buffer_key(waiting), 0, -1)]
    assert [(event["event"], event["content"]) for event in published] == [
        ("RunCancelled", "cancelled before execution")
    ]


def test_cancel_of_the_head_hands_its_session_to_the_next_run(api):
    head, second = accept_run(session_id="cx-2"), accept_run(session_id="cx-2")

    api.post(f"{RUNS}/{head}/cancel")

    assert state(head)[:2] == ("CANCELLED", "PENDING")
    assert Ticket.objects.get(pk=second).is_head


def test_cancel_of_a_running_run_stores_an_intent_and_leaves_the_ticket_to_its_worker(api, redis_db):
    run_id = accept_run(session_id="cx-3")
    claim = ticket_claim(ticket_id=run_id, worker_id="w-1", grace_seconds=60)

    response = api.post(f"{RUNS}/{run_id}/cancel")

    assert (response.status_code, response.json()) == (200, {})
    assert claim is not None and Ticket.objects.get(pk=run_id).status == "running"
    assert Run.objects.get(pk=run_id).status == "RUNNING"
    assert cancellation.cancel_requested(run_id)


@pytest.mark.parametrize(
    "path",
    [
        f"{RUNS}/{uuid.uuid4()}/cancel",  # unknown
        f"{RUNS}/not-a-uuid/cancel",
        "/agents/other-agent/runs/{run_id}/cancel",  # another component's run
        f"{RUNS}/{{run_id}}/cancel?session_id=someone-else",  # another session's run
    ],
)
def test_a_cancel_that_names_no_run_of_its_own_answers_200_and_changes_nothing(api, redis_db, path):
    run_id = accept_run(session_id="cx-4")
    before = row_counts(), state(run_id)

    response = api.post(path.format(run_id=run_id))

    assert (response.status_code, response.json()) == (200, {})
    assert (row_counts(), state(run_id)) == before
    assert not cancellation.cancel_requested(run_id)


def test_cancel_of_a_finished_run_changes_nothing(api, redis_db):
    run_id = accept_run(session_id="cx-5")
    Run.objects.filter(pk=run_id).update(status="COMPLETED", content="done")
    Ticket.objects.filter(pk=run_id).update(status="completed", is_head=False)

    api.post(f"{RUNS}/{run_id}/cancel")

    assert state(run_id) == ("COMPLETED", None, "done", "completed")
    assert not cancellation.cancel_requested(run_id)


def test_cancel_of_an_unknown_component_is_404(api):
    response = api.post(f"/agents/nobody/runs/{uuid.uuid4()}/cancel")

    assert (response.status_code, response.json()) == (404, {"detail": "Agent not found"})


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"last_event_index": "3"}, (400, {"detail": "session_id is required for this action"})),
        ({"session_id": "", "last_event_index": "3"}, (400, {"detail": "session_id is required for this action"})),
        (
            {"session_id": "s", "last_event_index": "three"},
            (
                422,
                {
                    "detail": [
                        {
                            "type": "invalid",
                            "loc": ["body", "last_event_index"],
                            "msg": "A valid integer is required.",
                            "input": "three",
                        }
                    ]
                },
            ),
        ),
        (
            {"session_id": "s", "last_event_index": "-2"},
            (
                422,
                {
                    "detail": [
                        {
                            "type": "min_value",
                            "loc": ["body", "last_event_index"],
                            "msg": "Ensure this value is greater than or equal to -1.",
                            "input": "-2",
                        }
                    ]
                },
            ),
        ),
    ],
)
def test_resume_refusals(api, fields, expected):
    response = api.post(f"{RUNS}/{uuid.uuid4()}/resume", fields, format="multipart")

    assert (response.status_code, response.json()) == expected


def test_resume_of_an_unknown_component_is_404(api):
    response = api.post(f"/teams/nobody/runs/{uuid.uuid4()}/resume", {"session_id": "s"}, format="multipart")

    assert (response.status_code, response.json()) == (404, {"detail": "Team not found"})
