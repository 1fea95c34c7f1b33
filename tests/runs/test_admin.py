"""The Django admin (CONTRACT 12): read-only sessions, runs with their events, and tickets; requeue and cancel
through the queue's operations, reported row by row."""

import datetime

import pytest
from django.contrib import messages
from django.contrib.auth.models import Permission
from django.db.models.functions import Now

from agentos_project.core.conf import current
from queueing.models import Ticket
from queueing.sweeper import sweep_once
from queueing.tickets import SWEEP_ERROR, ticket_claim
from queueing.worker import worker_execute
from runs.models import Run, Step
from tests.support.conf import with_conf
from tests.support.runs import submit_background, wait_status

TICKETS = "/admin/queueing/ticket/"
AN_HOUR = datetime.timedelta(hours=1)


@pytest.fixture
def operator(client, django_user_model):
    """The test client, logged in as a staff superuser."""
    client.force_login(django_user_model.objects.create_superuser("operator", "operator@example.com", "secret"))
    return client


def act(client, action: str, *ticket_ids: str, url: str = TICKETS):
    """Run a changelist action on the rows selected, as the admin's form posts it; the page it lands on."""
    return client.post(url, {"action": action, "index": "0", "_selected_action": list(ticket_ids)}, follow=True)


def shown(response) -> list[tuple[int, str]]:
    assert response.status_code == 200
    return [(message.level, message.message) for message in response.context["messages"]]


def ticket_row(run_id: str) -> dict:
    return Ticket.objects.filter(pk=run_id).values().get()


def executed(api, session_id: str, message: str) -> str:
    """A run accepted and executed to its end in this process; its id."""
    run_id = submit_background(api, session_id, message)
    assert worker_execute(ticket_id=run_id) is True
    return run_id


def not_requeueable(run_id: str) -> str:
    return f"Not requeued {run_id}: Job {run_id} not found or not in a requeueable state"


@pytest.mark.slow
def test_a_failed_ticket_requeued_from_the_changelist_runs_to_completed(operator, api, start_worker):
    run_id = submit_background(api, "admin-requeue", "hello sleep=0")
    assert ticket_claim(ticket_id=run_id, worker_id="gone", grace_seconds=60) is not None
    Ticket.objects.filter(pk=run_id).update(locked_at=Now() - AN_HOUR)  # its worker died an hour ago
    assert sweep_once(current().queue).failed == 1
    assert (Run.objects.get(pk=run_id).status, ticket_row(run_id)["error"]) == ("ERROR", SWEEP_ERROR)
    Ticket.objects.filter(pk=run_id).update(completed_at=Now() - AN_HOUR)  # past the lease grace
    start_worker(concurrency=2)

    response = act(operator, "requeue", run_id)

    assert shown(response) == [(messages.SUCCESS, f"Requeued {run_id} (attempt budget now 2)")]
    body = wait_status(api, run_id, "admin-requeue", "COMPLETED", timeout=20)
    assert (body["content"], body["queue_attempt"]) == ("echo: hello sleep=0 (history: 0 messages)", 2)
    ticket = ticket_row(run_id)
    assert (ticket["status"], ticket["attempt"], ticket["max_attempts"], ticket["error"]) == ("completed", 2, 2, None)


@pytest.mark.django_db
def test_requeue_refuses_a_completed_ticket_and_says_so(operator, api):
    run_id = executed(api, "admin-done", "done sleep=0")
    before = ticket_row(run_id)

    response = act(operator, "requeue", run_id)

    assert shown(response) == [(messages.ERROR, not_requeueable(run_id))]
    assert before["status"] == "completed"
    assert ticket_row(run_id) == before
    assert Run.objects.get(pk=run_id).status == "COMPLETED"


@pytest.mark.django_db
@with_conf("queue", lock_grace_seconds=60.0)
def test_force_requeues_a_ticket_failed_just_now_which_the_plain_requeue_refuses(operator, api):
    run_id = executed(api, "admin-force", "explode sleep=0")
    failed = ticket_row(run_id)
    assert (failed["status"], failed["attempt"], failed["max_attempts"]) == ("failed", 1, 1)

    refused = act(operator, "requeue", run_id)

    assert shown(refused) == [
        (
            messages.WARNING,
            f"Not requeued {run_id}: Job {run_id} failed within the last 60s and its worker may still be executing; "
            "retry after the lock grace elapses, or pass force=true to override.",
        )
    ]
    assert ticket_row(run_id) == failed

    forced = act(operator, "requeue_force", run_id)

    assert shown(forced) == [(messages.SUCCESS, f"Requeued {run_id} (attempt budget now 2)")]
    ticket = ticket_row(run_id)
    assert (ticket["status"], ticket["attempt"], ticket["max_attempts"], ticket["completed_at"]) == (
        "queued",
        1,
        2,
        None,
    )
    assert Run.objects.get(pk=run_id).status == "PENDING"


@pytest.mark.django_db
def test_requeue_reports_each_selected_row(operator, api):
    done = executed(api, "admin-many-1", "done sleep=0")
    cancelled = submit_background(api, "admin-many-2", "never sleep=0")
    assert shown(act(operator, "cancel", cancelled)) == [(messages.SUCCESS, f"Cancelled {cancelled}")]

    response = act(operator, "requeue", done, cancelled)

    assert set(shown(response)) == {
        (messages.ERROR, not_requeueable(done)),
        (messages.SUCCESS, f"Requeued {cancelled} (attempt budget now 1)"),
    }
    assert (ticket_row(cancelled)["status"], ticket_row(done)["status"]) == ("queued", "completed")


@pytest.mark.django_db
def test_cancel_cancels_a_queued_ticket_and_reports_a_finished_one(operator, api):
    done = executed(api, "admin-cancel-1", "done sleep=0")
    waiting = submit_background(api, "admin-cancel-2", "wait sleep=0")
    done_before = ticket_row(done)

    response = act(operator, "cancel", done, waiting)

    assert set(shown(response)) == {
        (messages.SUCCESS, f"Cancelled {waiting}"),
        (messages.WARNING, f"Not cancelled {done}: it had already finished"),
    }
    run = Run.objects.get(pk=waiting)
    assert (run.status, run.content, run.cancellation_stage) == ("CANCELLED", "cancelled before execution", "PENDING")
    assert ticket_row(waiting)["status"] == "cancelled"
    assert ticket_row(done) == done_before


@pytest.mark.django_db
def test_cancel_of_a_running_ticket_is_requested_of_its_worker(operator, api, redis_db):
    run_id = submit_background(api, "admin-cancel-3", "long sleep=10")
    assert ticket_claim(ticket_id=run_id, worker_id="elsewhere", grace_seconds=60) is not None

    response = act(operator, "cancel", run_id)

    assert shown(response) == [
        (messages.INFO, f"Cancel requested for running {run_id}; its worker stops it at the next checkpoint")
    ]
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.cancel_requested_at is not None) == ("RUNNING", True)
    assert ticket_row(run_id)["status"] == "running"


@pytest.mark.django_db
def test_the_run_admin_cancels_too(operator, api):
    run_id = submit_background(api, "admin-cancel-4", "wait sleep=0")

    response = act(operator, "cancel", run_id, url="/admin/runs/run/")

    assert shown(response) == [(messages.SUCCESS, f"Cancelled {run_id}")]
    assert Run.objects.get(pk=run_id).status == "CANCELLED"


@pytest.mark.django_db
def test_the_run_change_page_shows_its_events_read_only(operator, api):
    run_id = executed(api, "admin-events", "events sleep=0")
    before = Run.objects.filter(pk=run_id).values().get()

    page = operator.get(f"/admin/runs/run/{run_id}/change/")

    assert page.status_code == 200
    html = page.content.decode()
    assert html.index("RunStarted") < html.index("RunCompleted")
    assert 'name="events-0-event"' not in html and 'name="_save"' not in html
    steps, events = page.context["inline_admin_formsets"]
    assert list(steps) == [], "a run of one model call journals nothing"
    assert [form.original.event for form in events] == ["RunStarted", "RunCompleted"]
    assert (events.has_add_permission, events.has_change_permission, events.has_delete_permission) == (
        False,
        False,
        False,
    )
    assert operator.get("/admin/runs/run/add/").status_code == 403
    assert operator.post(f"/admin/runs/run/{run_id}/change/", {"status": "ERROR"}).status_code == 403
    assert operator.get(f"/admin/runs/run/{run_id}/delete/").status_code == 403
    assert Run.objects.filter(pk=run_id).values().get() == before


@pytest.mark.django_db
def test_tickets_and_sessions_cannot_be_added_changed_or_deleted(operator, api):
    run_id = submit_background(api, "admin-locked", "wait sleep=0")
    before = ticket_row(run_id)

    assert operator.get(f"{TICKETS}{run_id}/change/").status_code == 200
    assert operator.post(f"{TICKETS}{run_id}/change/", {"status": "completed"}).status_code == 403
    assert operator.get(f"{TICKETS}add/").status_code == 403
    assert operator.get(f"{TICKETS}{run_id}/delete/").status_code == 403
    assert operator.get("/admin/runs/agentsession/admin-locked/change/").status_code == 200
    assert operator.get("/admin/runs/agentsession/add/").status_code == 403
    assert operator.get("/admin/runs/agentsession/admin-locked/delete/").status_code == 403
    actions = [name for name, _ in operator.get(TICKETS).context["action_form"].fields["action"].choices]
    assert actions == ["", "requeue", "requeue_force", "cancel"]
    assert ticket_row(run_id) == before


@pytest.mark.django_db
def test_a_staff_user_who_may_only_view_tickets_gets_no_actions(client, django_user_model, api):
    viewer = django_user_model.objects.create_user("viewer", password="secret", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_ticket"))
    client.force_login(viewer)
    run_id = submit_background(api, "admin-viewer", "wait sleep=0")
    before = ticket_row(run_id)

    page = client.get(TICKETS)
    response = act(client, "cancel", run_id)

    assert page.status_code == 200 and page.context["action_form"] is None
    assert response.status_code == 200
    assert ticket_row(run_id) == before


def listed(client, url: str, **query) -> list[str]:
    response = client.get(url, query)
    assert response.status_code == 200
    return [str(row.pk) for row in response.context["cl"].result_list]


@pytest.mark.django_db
def test_ticket_search_by_run_id_and_by_session_id_returns_the_row(operator, api):
    first = submit_background(api, "admin-search-a", "one sleep=0")
    second = submit_background(api, "admin-search-b", "two sleep=0")

    assert listed(operator, TICKETS, q=first) == [first]
    assert listed(operator, TICKETS, q=f" {first.upper()} ") == [first]
    assert listed(operator, TICKETS, q=first[:13]) == [first]
    assert listed(operator, TICKETS, q="admin-search-b") == [second]
    assert listed(operator, TICKETS, q="search-") == [second, first]
    assert listed(operator, TICKETS, q="no-such-session") == []
    assert listed(operator, "/admin/runs/run/", q=second) == [second]
    assert listed(operator, "/admin/runs/run/", q="admin-search-a") == [first]
    assert listed(operator, "/admin/runs/agentsession/", q="search-b") == ["admin-search-b"]


@pytest.mark.django_db
def test_tickets_filter_by_status_component_and_session(operator, api):
    done = executed(api, "admin-filter-a", "done sleep=0")
    waiting = submit_background(api, "admin-filter-b", "wait sleep=0")

    assert listed(operator, TICKETS, status="completed") == [done]
    assert listed(operator, TICKETS, status="queued", component_id="stub-agent") == [waiting]
    assert listed(operator, TICKETS, session="admin-filter-b") == [waiting]
    assert listed(operator, TICKETS, component_type="team") == []
    assert listed(operator, "/admin/runs/run/", status="COMPLETED") == [done]


@pytest.mark.django_db
def test_the_run_change_page_shows_its_journal_with_what_a_retry_replayed(operator, api):
    run_id = executed(api, "admin-steps", "steps sleep=0")
    for position, (kind, tool, attempt, replays) in enumerate([("model", None, 1, 1), ("tool", "refund", 2, 0)]):
        Step.objects.create(
            run_id=run_id, leg=0, position=position, kind=kind, fingerprint="f" * 32, status="completed",
            tool=tool, attempt=attempt, replays=replays, output={"content": "ok"}, duration=0.01,
        )  # fmt: skip

    page = operator.get(f"/admin/runs/run/{run_id}/change/")

    steps, _ = page.context["inline_admin_formsets"]
    shown = [(f.original.kind, f.original.tool, f.original.attempt, f.original.replays) for f in steps]
    assert shown == [("model", None, 1, 1), ("tool", "refund", 2, 0)]
    assert (steps.has_add_permission, steps.has_change_permission, steps.has_delete_permission) == (False,) * 3
    assert "Journal steps" in page.content.decode()


@pytest.mark.django_db
def test_a_queued_runs_deadline_shows_on_its_page_and_in_the_ticket_list(operator, api):
    response = api.post(
        "/agents/stub-agent/runs",
        {"message": "late sleep=0", "session_id": "admin-deadline", "background": "true", "stream": "false",
         "expires_in": "90"},
    )  # fmt: skip
    run_id = response.json()["run_id"]
    deadline = Ticket.objects.get(pk=run_id).expires_at

    run_page = operator.get(f"/admin/runs/run/{run_id}/change/")
    tickets = operator.get(TICKETS)

    assert run_page.status_code == tickets.status_code == 200
    assert "Queue deadline:" in run_page.content.decode()
    assert run_page.context["adminform"].model_admin.queue_deadline(Run.objects.get(pk=run_id)) == deadline
    assert "deadline" in tickets.context["cl"].list_display
    assert tickets.context["cl"].model_admin.deadline(Ticket.objects.get(pk=run_id)) == deadline
    assert worker_execute(ticket_id=run_id) is True
    assert run_page.context["adminform"].model_admin.queue_deadline(Run.objects.get(pk=run_id)) == "-"
