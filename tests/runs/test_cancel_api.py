"""`POST .../cancel` (CONTRACT 3.3, 9) and the refusals of `POST .../resume` (3.5), in-process."""

from __future__ import annotations

import json
import uuid

import pytest

from queueing.models import Ticket
from queueing.tickets import RequeueResult, ticket_claim, ticket_requeue
from queueing.worker import execute_claim, worker_execute, worker_identity
from runs.events import publish
from runs.models import Run, RunEvent
from runs.services import cancel_signal
from tests.support.conf import with_conf
from tests.support.http import free_port
from tests.support.waiting import wait_until

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
    assert publish.sender.flush()
    published = [json.loads(raw) for raw in redis_db.zrange(publish.buffer_key(waiting), 0, -1)]
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
    assert cancel_signal.cancel_requested(run_id)


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
    assert not cancel_signal.cancel_requested(run_id)


def test_cancel_of_a_finished_run_changes_nothing(api, redis_db):
    run_id = accept_run(session_id="cx-5")
    Run.objects.filter(pk=run_id).update(status="COMPLETED", content="done")
    Ticket.objects.filter(pk=run_id).update(status="completed", is_head=False)

    api.post(f"{RUNS}/{run_id}/cancel")

    assert state(run_id) == ("COMPLETED", None, "done", "completed")
    assert not cancel_signal.cancel_requested(run_id)


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


def test_a_run_cancelled_while_running_and_then_requeued_really_executes_again(api, redis_db):
    run_id = accept_run(session_id="cx-6", message="hello sleep=0")
    claim = ticket_claim(ticket_id=run_id, worker_id=worker_identity(), grace_seconds=60)
    api.post(f"{RUNS}/{run_id}/cancel")  # running: the cancel goes through the intent
    execute_claim(claim)
    cancelled = Run.objects.get(pk=run_id)
    assert (cancelled.status, cancelled.cancellation_stage) == ("CANCELLED", "EXECUTING")

    assert ticket_requeue(ticket_id=run_id, grace_seconds=60, force=True) == RequeueResult.REQUEUED
    requeued = Run.objects.get(pk=run_id)
    assert (requeued.status, requeued.cancel_requested_at) == ("PENDING", None)
    assert not cancel_signal.cancel_requested(run_id)
    assert worker_execute(ticket_id=run_id) is True

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.content, run.attempt) == ("COMPLETED", "echo: hello sleep=0 (history: 0 messages)", 2)
    indices = list(RunEvent.objects.filter(run_id=run_id).values_list("event", "event_index"))
    assert [name for name, _ in indices] == ["RunStarted", "RunCancelled", "RunStarted", "RunCompleted"]
    assert [index for _, index in indices] == sorted({index for _, index in indices})
    assert publish.sender.flush()
    live = [json.loads(raw)["event"] for raw in redis_db.zrange(publish.buffer_key(run_id), 0, -1)]
    assert (live.count("RunStarted"), live[-1]) == (2, "RunCompleted")  # one history, both legs


def test_a_paused_run_without_a_ticket_is_cancelled_at_once_with_stage_paused(api, redis_db):
    run_id = accept_run(session_id="cx-7")
    Ticket.objects.filter(pk=run_id).delete()
    Run.objects.filter(pk=run_id).update(queued=False, status="PAUSED", attempt=1)

    api.post(f"{RUNS}/{run_id}/cancel")

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancellation_stage, run.content) == (
        "CANCELLED",
        "PAUSED",
        "cancelled while paused awaiting continuation",
    )
    assert RunEvent.objects.get(run_id=run_id).event == "RunCancelled"


def test_a_cancel_asked_while_redis_is_down_reaches_the_running_leg_through_the_database(api, redis_db, caplog):
    """Redis down for the web and the executing process alike: no intent is stored, no announcement heard; the
    watcher, which cannot even subscribe, still finds the cancel in PostgreSQL within its second."""
    run_id = accept_run(session_id="cx-8")
    ticket_claim(ticket_id=run_id, worker_id=worker_identity(), grace_seconds=60)
    watcher = cancel_signal.Watcher()  # this test's executing process: the cancel's own notify does not reach it
    try:
        with with_conf("services", redis_url=f"redis://127.0.0.1:{free_port()}/0"):
            with watcher.watch(run_id, look_up=False) as cancelled:
                response = api.post(f"{RUNS}/{run_id}/cancel")
                wait_until(cancelled.is_set, timeout=5, what="the watcher to find the cancel in the database")
            subscribed = watcher.listening.is_set()
    finally:
        watcher.stop()

    assert (response.status_code, response.json()) == (200, {})
    assert not subscribed, "the watcher never had Redis"
    assert f"run={run_id} cancellation intent not stored" in caplog.text
    assert "cancellation watcher lost Redis" in caplog.text
    assert Ticket.objects.get(pk=run_id).cancel_requested_at is not None
