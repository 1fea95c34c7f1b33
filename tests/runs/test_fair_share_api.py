"""Fair share and deadlines through the API (CONTRACT 17): `expires_in` on submit, a run expired in the queue as the
poll shows it, and a run held by its user's cap."""

import pytest
from django.db.models.functions import Now

from agentos_project.core.conf import current
from queueing import tickets
from queueing.models import Ticket
from queueing.sweeper import sweep_once
from runs.models import Run
from tests.support.conf import with_conf
from tests.support.runs import poll, submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("fmt", ["multipart", "json"])
def test_expires_in_gives_the_queued_run_a_deadline(api, fmt, redis_db):
    response = submit(api, fmt=fmt, message="hi sleep=0", session_id=f"deadline-{fmt}", expires_in="2.5")

    assert response.status_code == 202, response.content
    ticket = Ticket.objects.get(pk=response.json()["run_id"])
    assert ticket.ttl_seconds == 2.5
    assert (ticket.expires_at - ticket.created_at).total_seconds() == pytest.approx(2.5, abs=0.01)
    assert ticket.payload["expires_in"] == 2.5


@with_conf("queue", queue_ttl_seconds=30.0)
def test_without_expires_in_the_default_deadline_applies(api, redis_db):
    run_id = submit(api, message="hi sleep=0", session_id="deadline-default").json()["run_id"]

    assert Ticket.objects.get(pk=run_id).ttl_seconds == 30.0
    assert "expires_in" not in Ticket.objects.get(pk=run_id).payload


def test_without_either_a_run_waits_as_long_as_it_takes(api, redis_db):
    run_id = submit(api, message="hi sleep=0", session_id="no-deadline").json()["run_id"]

    ticket = Ticket.objects.get(pk=run_id)
    assert (ticket.ttl_seconds, ticket.expires_at) == (None, None)


def test_a_run_expired_in_the_queue_polls_cancelled_at_stage_pending(api, redis_db):
    head = submit(api, message="first sleep=0", session_id="expiring").json()["run_id"]
    late = submit(api, message="second sleep=0", session_id="expiring", expires_in=1).json()["run_id"]
    Ticket.objects.filter(pk=late).update(expires_at=Now())

    assert sweep_once(current().queue).expired == 1

    body = poll(api, late, "expiring")
    assert (body["status"], body["cancellation_stage"], body["content"]) == (
        "CANCELLED",
        "PENDING",
        "expired after 1 s in the queue",
    )
    assert "started_at" not in body
    assert [event["event"] for event in body["events"]] == ["RunCancelled"]
    assert poll(api, head, "expiring")["status"] == "PENDING"
    assert Run.objects.get(pk=late).attempt == 0


def test_an_idempotent_retry_with_another_deadline_is_another_request(api, redis_db):
    key = {"HTTP_IDEMPOTENCY_KEY": "deadline-key"}
    first = submit(api, message="hi sleep=0", session_id="deadline-idem", expires_in=5, environ=key)
    again = submit(api, message="hi sleep=0", session_id="deadline-idem", expires_in=5, environ=key)
    other = submit(api, message="hi sleep=0", session_id="deadline-idem", expires_in=6, environ=key)

    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["run_id"] == first.json()["run_id"]
    assert (other.status_code, other.json()) == (422, {"detail": "Idempotency-Key was reused with a different request"})


@with_conf("queue", max_running_per_user=1, round_robin_window=0)
def test_a_run_held_by_its_users_cap_says_what_it_waits_on(api, redis_db):
    running = submit(api, message="one sleep=0", session_id="capped-1", user_id="ana").json()["run_id"]
    held = submit(api, message="two sleep=0", session_id="capped-2", user_id="ana").json()["run_id"]
    other = submit(api, message="three sleep=0", session_id="free-1", user_id="bo").json()["run_id"]
    assert tickets.ticket_claim(ticket_id=running, worker_id="w1", grace_seconds=60) is not None

    body = poll(api, held, "capped-2")

    assert body["status"] == "PENDING"
    assert body["waiting_on"] == running
    assert body["waiting_reason"] == "user ana has 1 runs running, the most AGENTOS_MAX_RUNNING_PER_USER=1 allows"
    assert "waiting_on" not in poll(api, other, "free-1"), "another user's run waits for a worker only"


def test_a_run_behind_its_session_head_waits_on_the_head_as_before(api, redis_db):
    head = submit(api, message="one sleep=0", session_id="line-1", user_id="ana").json()["run_id"]
    behind = submit(api, message="two sleep=0", session_id="line-1", user_id="ana").json()["run_id"]

    body = poll(api, behind, "line-1")

    assert body["waiting_on"] == head
    assert "waiting_reason" not in body
