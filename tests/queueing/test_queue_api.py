"""`/queue` (CONTRACT 3.7, 14): the jobs list with its filters, paging and sorting, one job, requeue, stats."""

from __future__ import annotations

import datetime
import json
import uuid

import pytest
from django.db.models import F

from queueing.models import Ticket
from queueing.seam import Outcome
from queueing.settle import settle_attempt
from queueing.tickets import ticket_cancel, ticket_retry
from queueing.worker import worker_execute
from tests.support.conf import with_conf

from .conftest import EMPTY_STATS, accept, backdate, claim, ended, finish, snapshot

pytestmark = pytest.mark.django_db
STATUSES = "('queued', 'running', 'completed', 'failed', 'cancelled', 'paused')"
JOB_KEYS = {
    "id", "component_type", "component_id", "session_id", "job_type", "user_id", "status", "attempt",
    "max_attempts", "session_seq", "idempotency_key", "available_at", "locked_by", "locked_at", "error",
    "created_at", "updated_at", "completed_at", "payload",
}  # fmt: skip


def failed(session_id: str, *, long_ago: bool = True) -> str:
    ticket_id = ended(session_id, "failed", error="boom")
    if long_ago:
        backdate(ticket_id, field="completed_at")
    return ticket_id


def completed(session_id: str) -> str:
    return ended(session_id, "completed")


def ids(response) -> list[str]:
    return [job["id"] for job in response.json()["data"]]


def test_a_job_is_its_ticket_on_the_wire(api, session_id):
    ticket_id = failed(session_id, long_ago=False)
    row = snapshot(ticket_id)

    job = api.get(f"/queue/jobs/{ticket_id}").json()

    assert set(job) == JOB_KEYS
    assert job == {
        "id": ticket_id,
        "component_type": "job",
        "component_id": "fake",
        "session_id": session_id,
        "job_type": "run",
        "user_id": None,
        "status": "failed",
        "attempt": 1,
        "max_attempts": 1,
        "session_seq": 1,
        "idempotency_key": None,
        "available_at": int(row["available_at"].timestamp()),
        "locked_by": None,
        "locked_at": None,  # both null once settled
        "error": "boom",
        "created_at": int(row["created_at"].timestamp()),
        "updated_at": int(row["updated_at"].timestamp()),
        "completed_at": int(row["completed_at"].timestamp()),
        "payload": {"outcomes": ["failed"], "sleep": 0},
    }


def test_a_job_stored_before_the_message_was_named_input_shows_it_as_input(api, session_id):
    """A ticket accepted with the message as `message` (before this version, or by an older replica during a
    rolling upgrade) shows AgentOS' job payload all the same."""
    ticket_id = accept(session_id=session_id, user_id="ada")
    stored = {"message": "hi", "stream": False, "background": True, "session_state": {"n": 1}, "metadata": None}
    Ticket.objects.filter(pk=ticket_id).update(payload=stored)

    shown = api.get(f"/queue/jobs/{ticket_id}").json()["payload"]
    [listed] = [job["payload"] for job in api.get("/queue/jobs").json()["data"] if job["id"] == ticket_id]

    assert (
        shown
        == listed
        == {
            "input": "hi",
            "kwargs": {"session_state": {"n": 1}},
            "scope": {"user_id": "ada", "version": None, "pinned": None, "source": "registry"},
            "stream": False,
            "background": True,
            "session_state": {"n": 1},
            "metadata": None,
        }
    )
    assert snapshot(ticket_id)["payload"] == stored, "shown so, not rewritten"


def test_only_a_running_job_shows_its_lock(api, session_id):
    running = claim(accept(session_id=f"{session_id}-running"))
    retrying = claim(accept(session_id=f"{session_id}-retrying", max_attempts=2))
    ticket_retry(claim=retrying, outcome=Outcome("failed", error="again", retryable=True), delay_seconds=60)
    settled = {status: ended(f"{session_id}-{status}", status) for status in ("completed", "failed", "paused")}
    settled["queued"] = retrying.ticket_id
    settled["cancelled"] = settled.pop("paused")
    assert ticket_cancel(ticket_id=settled["cancelled"], error="cancelled while paused")

    listed = {job["id"]: job for job in api.get("/queue/jobs", {"limit": 1000}).json()["data"]}
    shown = {job_id: api.get(f"/queue/jobs/{job_id}").json() for job_id in [running.ticket_id, *settled.values()]}

    lease = snapshot(running.ticket_id)
    assert {status: snapshot(job_id)["status"] for status, job_id in settled.items()} == {
        status: status for status in settled
    }
    for job in (listed[running.ticket_id], shown[running.ticket_id]):
        assert (job["locked_by"], job["locked_at"]) == ("w1", int(lease["locked_at"].timestamp()))
    for job_id in settled.values():
        assert (listed[job_id]["locked_by"], listed[job_id]["locked_at"]) == (None, None)
        assert (shown[job_id]["locked_by"], shown[job_id]["locked_at"]) == (None, None)


@pytest.mark.parametrize("job_id", [str(uuid.uuid4()), "not-a-uuid"])
def test_an_unknown_job_is_404_with_the_contract_text(api, job_id):
    response = api.get(f"/queue/jobs/{job_id}")

    assert response.status_code == 404
    assert response.json() == {"detail": f"Job queue job {job_id} not found"}


def test_status_failed_is_the_dead_letter_list(api, session_id):
    dead = [failed(session_id), failed(f"{session_id}-b")]
    completed(f"{session_id}-c")
    accept(session_id=f"{session_id}-d")

    response = api.get("/queue/jobs", {"status": "failed"})

    assert response.status_code == 200
    assert sorted(ids(response)) == sorted(dead)
    meta = response.json()["meta"]
    assert {key: meta[key] for key in ("page", "limit", "total_pages", "total_count")} == {
        "page": 1,
        "limit": 20,
        "total_pages": 1,
        "total_count": 2,
    }
    assert isinstance(meta["search_time_ms"], float) and meta["search_time_ms"] >= 0


def test_filters_repeat_and_combine(api, session_id):
    first, second, other = session_id, f"{session_id}-2", f"{session_id}-3"
    a, b, c = failed(first), completed(second), failed(other)
    Ticket.objects.filter(pk=c).update(user_id="ada")

    both_sessions = api.get(f"/queue/jobs?session_id={first}&session_id={second}")
    two_statuses = api.get(f"/queue/jobs?status=failed&status=completed&session_id={first}&session_id={other}")
    by_user = api.get("/queue/jobs", {"user_id": "ada"})

    assert sorted(ids(both_sessions)) == sorted([a, b])
    assert sorted(ids(two_statuses)) == sorted([a, c])
    assert ids(by_user) == [c]


def test_pages_are_sorted_and_never_overlap(api, session_id):
    tickets = [accept(session_id=f"{session_id}-{n}") for n in range(5)]
    for offset, ticket_id in enumerate(tickets):  # distinct, known creation times
        Ticket.objects.filter(pk=ticket_id).update(created_at=F("created_at") - datetime.timedelta(minutes=10 - offset))
    query = {"session_id": [f"{session_id}-{n}" for n in range(5)], "limit": 2}

    pages = [api.get("/queue/jobs", {**query, "page": page}) for page in (1, 2, 3, 4)]
    ascending = api.get("/queue/jobs", {**query, "limit": 5, "sort_order": "asc"})

    assert [ids(page) for page in pages] == [tickets[4:2:-1], tickets[2:0:-1], tickets[:1], []]
    assert [page.json()["meta"]["total_pages"] for page in pages] == [3, 3, 3, 3]
    assert ids(ascending) == tickets


def test_sort_by_attempt_and_an_unknown_field_falls_back_to_created_at(api, session_id):
    queued, done = accept(session_id=session_id), completed(f"{session_id}-b")
    query = {"session_id": [session_id, f"{session_id}-b"]}

    by_attempt = api.get("/queue/jobs", {**query, "sort_by": "attempt", "sort_order": "asc"})
    unknown = api.get("/queue/jobs", {**query, "sort_by": "payload; drop table"})

    assert ids(by_attempt) == [queued, done]
    assert ids(unknown) == [done, queued]


def test_an_unknown_status_is_400_naming_the_statuses(api):
    response = api.get("/queue/jobs?status=failed&status=bogus")

    assert response.status_code == 400
    assert response.json() == {"detail": f"Invalid status 'bogus'; expected one of {STATUSES}"}


def test_filters_are_taken_as_sent(api):
    padded = api.get("/queue/jobs?status=%20failed")

    assert padded.status_code == 400
    assert padded.json() == {"detail": f"Invalid status ' failed'; expected one of {STATUSES}"}
    assert api.get("/queue/jobs?session_id=%20").status_code == 200


@pytest.mark.parametrize(("page", "limit"), [(10**18, 20), (2**63 + 1, 1), (2**62, 3)])
def test_a_page_whose_offset_postgresql_cannot_hold_is_400(api, page, limit):
    response = api.get("/queue/jobs", {"page": page, "limit": limit})

    assert response.status_code == 400
    assert response.json() == {
        "detail": f"page {page} is out of range: (page - 1) * limit must be at most 9223372036854775807"
    }


def test_the_last_page_postgresql_can_hold_is_an_empty_page(api, session_id):
    accept(session_id=session_id)

    response = api.get("/queue/jobs", {"page": 2**63, "limit": 1, "session_id": session_id})

    assert response.status_code == 200
    assert (response.json()["data"], response.json()["meta"]["total_count"]) == ([], 1)


@pytest.mark.parametrize("query", ["session_id=", "session_id=s&session_id=", "user_id="])
def test_an_empty_session_or_user_filter_is_400(api, query):
    response = api.get(f"/queue/jobs?{query}")

    assert response.status_code == 400
    assert response.json() == {"detail": "session_id and user_id must not be empty"}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("page=0", "page"),
        ("sort_order=up", "sort_order"),
    ],
)
def test_paging_out_of_range_is_422_with_field_errors(api, query, field):
    response = api.get(f"/queue/jobs?{query}")

    assert response.status_code == 422
    assert [error["loc"] for error in response.json()["detail"]] == [["query", field]]


NUL = {"type": "null_characters_not_allowed", "msg": "Null characters are not allowed.", "input": "\x00"}


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("status=%00", {**NUL, "loc": ["query", "status", 0]}),
        ("status=failed&status=%00", {**NUL, "loc": ["query", "status", 1]}),
        ("session_id=s1&session_id=%00", {**NUL, "loc": ["query", "session_id", 1]}),
    ],
)
def test_a_bad_value_of_a_repeatable_parameter_is_a_field_error_naming_its_place(api, query, error):
    response = api.get(f"/queue/jobs?{query}")

    assert (response.status_code, response.json()) == (422, {"detail": [error]})


def test_a_bad_item_of_a_list_in_a_body_is_a_field_error_naming_its_place(api):
    body = json.dumps({"status": ["failed", ["queued"]]})

    response = api.generic("GET", "/queue/jobs", body, content_type="application/json")

    assert (response.status_code, response.json()) == (
        422,
        {
            "detail": [
                {"type": "invalid", "loc": ["query", "status", 1], "msg": "Not a valid string.", "input": ["queued"]}
            ]
        },
    )


def test_limit_at_its_bounds_is_accepted(api):
    assert api.get("/queue/jobs?limit=1").status_code == 200
    assert api.get("/queue/jobs?limit=1000").status_code == 200


def test_requeue_gives_one_more_attempt_at_the_back_of_its_session(api, session_id, executor):
    dead = failed(session_id)
    waiting = accept(session_id=session_id)

    response = api.post(f"/queue/jobs/{dead}/requeue")

    assert response.status_code == 200
    job = response.json()
    assert (job["id"], job["status"], job["attempt"], job["max_attempts"]) == (dead, "queued", 1, 2)
    assert (job["session_seq"], job["completed_at"], job["locked_by"]) == (2, None, None)
    assert snapshot(waiting)["session_seq"] == 1
    assert snapshot(waiting)["is_head"] is True and snapshot(dead)["is_head"] is False
    assert executor.settled(dead)[-1] == ("queued", 0, None)


@pytest.mark.parametrize("clear", ["true", "false"])
def test_requeue_of_a_job_cancelled_while_it_ran_really_executes_it_again(api, session_id, executor, clear):
    """With or without clear_cancellation, the cancel asked of the job's last attempt is forgotten (AgentOS
    re-cancels the re-driven attempt unless asked to clear: CONTRACT 3.7, beyond): its next attempt pauses."""
    ticket_id = accept(session_id=session_id, outcomes=("paused", "paused"))
    owner = claim(ticket_id)
    outcome = executor.execute(owner)
    assert executor.cancel(ticket_id) == "requested"
    settle_attempt(owner, outcome)  # its pause gives way to the cancel asked meanwhile
    cancelled = snapshot(ticket_id)

    job = api.post(f"/queue/jobs/{ticket_id}/requeue?clear_cancellation={clear}").json()
    requeued = snapshot(ticket_id)
    assert worker_execute(ticket_id=ticket_id) is True

    assert (cancelled["status"], cancelled["cancel_requested_at"] is not None) == ("cancelled", True)
    assert (job["status"], job["attempt"], job["max_attempts"]) == ("queued", 1, 2)
    assert (requeued["cancel_requested_at"], requeued["is_head"]) == (None, True)
    assert executor.executed == [(ticket_id, 1), (ticket_id, 2)]
    assert (snapshot(ticket_id)["status"], snapshot(ticket_id)["attempt"]) == ("paused", 2)


def test_requeue_within_the_grace_is_409_unless_forced(api, session_id):
    ticket_id = failed(session_id, long_ago=False)

    refused = api.post(f"/queue/jobs/{ticket_id}/requeue")
    untouched = snapshot(ticket_id)
    forced = api.post(f"/queue/jobs/{ticket_id}/requeue?force=true")

    assert refused.status_code == 409
    assert refused.json() == {
        "detail": f"Job {ticket_id} failed within the last 60s and its worker may still be executing; "
        "retry after the lock grace elapses, or pass force=true to override."
    }
    assert untouched["status"] == "failed"
    assert forced.status_code == 200 and forced.json()["status"] == "queued"


@with_conf("queue", lock_grace_seconds=5)
def test_the_409_names_the_grace_in_force(api, session_id):
    ticket_id = failed(session_id, long_ago=False)

    assert (
        api.post(f"/queue/jobs/{ticket_id}/requeue")
        .json()["detail"]
        .startswith(f"Job {ticket_id} failed within the last 5s ")
    )


@pytest.mark.parametrize("state", ["queued", "running", "completed", "paused", "unknown", "bad-id"])
def test_only_failed_or_cancelled_jobs_are_requeueable(api, session_id, state):
    if state in ("unknown", "bad-id"):
        ticket_id = str(uuid.uuid4()) if state == "unknown" else "bad-id"
    else:
        ticket_id = accept(session_id=session_id)
        if state != "queued":
            owner = claim(ticket_id)
            if state != "running":
                finish(owner, state)
    before = snapshot(ticket_id) if state not in ("unknown", "bad-id") else None

    response = api.post(f"/queue/jobs/{ticket_id}/requeue", {"force": "true", "clear_cancellation": "true"})

    assert response.status_code == 400
    assert response.json() == {"detail": f"Job {ticket_id} not found or not in a requeueable state"}
    if before is not None:
        assert snapshot(ticket_id) == before


def test_requeue_refuses_a_non_boolean_force(api, session_id):
    ticket_id = failed(session_id)

    response = api.post(f"/queue/jobs/{ticket_id}/requeue?force=maybe")

    assert response.status_code == 422
    assert snapshot(ticket_id)["status"] == "failed"


def test_stats_count_the_statuses_present_only_and_the_oldest_queued_age(api, session_id):
    Ticket.objects.all().delete()
    queued = accept(session_id=session_id)
    backdate(queued, field="created_at", seconds=120)
    failed(f"{session_id}-b")
    failed(f"{session_id}-c")

    stats = api.get("/queue/stats").json()

    assert stats["counts"] == {"queued": 1, "failed": 2}
    assert 120 <= stats["oldest_queued_age_seconds"] < 130
    assert type(stats["oldest_queued_age_seconds"]) is int, "whole seconds, as AgentOS counts them"


def test_stats_of_an_empty_queue(api):
    Ticket.objects.all().delete()

    assert api.get("/queue/stats").json() == EMPTY_STATS


@with_conf("queue", durable=False)
@pytest.mark.parametrize("path", ["/queue/jobs", "/queue/stats", f"/queue/jobs/{uuid.uuid4()}"])
def test_every_queue_endpoint_is_503_without_the_durable_queue(api, path):
    response = api.get(path)

    assert response.status_code == 503
    assert response.json() == {
        "detail": "Queue not available: the durable queue is disabled (AGENTOS_QUEUE_DURABLE=false)."
    }


@with_conf("queue", durable=False)
def test_requeue_is_503_without_the_durable_queue(api, session_id):
    ticket_id = failed(session_id)

    assert api.post(f"/queue/jobs/{ticket_id}/requeue").status_code == 503
    assert snapshot(ticket_id)["status"] == "failed"
