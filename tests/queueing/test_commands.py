"""The operators' management commands (CONTRACT 12): their exact output, exit codes and what each changes."""

from __future__ import annotations

import datetime
import io
import json
import subprocess
import sys
import uuid

import pytest
from django.core.management import CommandError, call_command
from django.db.models.functions import Now

from agentos_project.core.conf import current
from queueing.management.commands import prune_jobs
from queueing.management.tables import moment
from queueing.models import Ticket
from queueing.selectors import JOB_STATUSES, queue_stats
from queueing.serializers import ticket_to_wire
from queueing.tickets import ticket_cancel
from tests.support.processes import ROOT, process_env

from .conftest import EMPTY_STATS, accept, backdate, claim, ended, snapshot

pytestmark = pytest.mark.django_db


def run(*args: str) -> list[str]:
    """The command's stdout lines; fails the test if it writes to stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue().splitlines()


def refused(*args: str) -> tuple[int, str]:
    """The exit code and message of a command that fails."""
    with pytest.raises(CommandError) as caught:
        run(*args)
    return caught.value.returncode, str(caught.value)


def grace_text(ticket_id: str) -> str:
    return (
        f"Job {ticket_id} failed within the last {current().queue.lock_grace_seconds:g}s and its worker may still be "
        "executing; retry after the lock grace elapses, or pass force=true to override."
    )


def test_queue_stats_prints_every_status_the_oldest_queued_age_holds_and_workers(session_id):
    paused = ended(session_id, "paused")
    behind = accept(session_id=session_id)
    backdate(behind, field="created_at", seconds=3600)
    backdate(paused, field="updated_at", seconds=120)
    claim(accept(session_id=f"{session_id}-run"), "w1")
    ended(f"{session_id}-done", "completed")

    assert run("queue_stats") == [
        "status     tickets",
        "---------  -------",
        "queued           1",
        "running          1",
        "completed        1",
        "failed           0",
        "cancelled        0",
        "paused           1",
        "oldest queued: 3600s",
        "",
        "held by        sessions  oldest hold  queued behind",
        "-------------  --------  -----------  -------------",
        "paused head           1  120s                     1",
        "retry backoff         0  -                        0",
        "",
        "held by the user cap: 0",
        "held for their user's turn: 0",
        "expired in the queue: 0",
        "",
        "worker  running",
        "------  -------",
        "w1            1",
    ]


def test_queue_stats_on_an_empty_queue_says_nothing_runs_and_json_is_the_api_answer():
    lines = run("queue_stats")
    assert lines[2:9] == [f"{status:9}        0" for status in JOB_STATUSES] + ["oldest queued: -"]
    assert lines[-1] == "no ticket is running"

    answer = json.loads("\n".join(run("queue_stats", "--json")))
    assert answer == queue_stats() == EMPTY_STATS


def test_queue_jobs_status_failed_is_the_dead_letter_list_newest_first(session_id):
    first = ended(session_id, "failed", error="boom")
    second = ended(session_id, "failed", error="boom\nTraceback (most recent call last): ...")
    ended(session_id, "completed")
    backdate(first, field="created_at", seconds=60)
    created = {ticket_id: moment(snapshot(ticket_id)["created_at"]) for ticket_id in (first, second)}

    assert run("queue_jobs", "--status", "failed") == [
        f"{'id':36}  status  attempt  session_id  session_seq  component  created              error",
        f"{'-' * 36}  ------  -------  ----------  -----------  ---------  -------------------  -----",
        f"{second}  failed  1/1      {session_id}            1  job/fake   {created[second]}  boom…",
        f"{first}  failed  1/1      {session_id}            1  job/fake   {created[first]}  boom",
        "2 of 2 ticket(s)",
    ]
    assert run("queue_jobs", "--status", "failed", "--asc", "--limit", "1", "--page", "2")[2:] == [
        f"{second}  failed  1/1      {session_id}            1  job/fake   {created[second]}  boom…",
        "1 of 2 ticket(s), page 2 of 2",
    ]


def test_queue_jobs_filters_by_session_and_user_and_says_when_nothing_matches(session_id):
    ticket_id = accept(session_id=session_id)
    accept(session_id=f"{session_id}-other")

    assert [line.split()[0] for line in run("queue_jobs", "--session", session_id)[2:]] == [ticket_id, "1"]
    assert run("queue_jobs", "--user", "nobody") == ["no tickets match"]
    assert run("queue_jobs", "--status", "paused", "--status", "failed") == ["no tickets match"]
    assert run("queue_jobs", "--session", session_id, "--page", "3") == ["no tickets on page 3 of 1 (1 match)"]


def test_queue_jobs_json_is_the_api_page(session_id):
    ticket_id = ended(session_id, "failed", error="boom")

    answer = json.loads("\n".join(run("queue_jobs", "--status", "failed", "--json")))
    took = answer["meta"].pop("search_time_ms")
    assert answer == {
        "data": [ticket_to_wire(Ticket.objects.get(pk=ticket_id))],
        "meta": {"page": 1, "limit": 20, "total_pages": 1, "total_count": 1},
    }
    assert isinstance(took, float) and took >= 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--status", "failed", "--status", "bogus"),
            "Invalid status 'bogus'; expected one of "
            "('queued', 'running', 'completed', 'failed', 'cancelled', 'paused')",
        ),
        (("--session", ""), "session_id and user_id must not be empty"),
        (("--user", ""), "session_id and user_id must not be empty"),
        (("--limit", "0"), "--limit must be 1 to 1000 and --page at least 1 (got 0 and 1)"),
        (("--limit", "1001"), "--limit must be 1 to 1000 and --page at least 1 (got 1001 and 1)"),
        (("--page", "0"), "--limit must be 1 to 1000 and --page at least 1 (got 20 and 0)"),
        (
            ("--page", "1000000000000000000"),
            "page 1000000000000000000 is out of range: (page - 1) * limit must be at most 9223372036854775807",
        ),
    ],
)
def test_queue_jobs_refuses_a_bad_filter_as_a_usage_error_with_the_api_text(args, message):
    assert refused("queue_jobs", *args) == (2, message)


def test_requeue_of_an_old_dead_letter_gives_one_more_attempt_at_the_back_of_its_session(session_id, executor):
    ticket_id = ended(session_id, "failed", error="boom")
    backdate(ticket_id, field="completed_at", seconds=3600)
    waiting = accept(session_id=session_id)

    assert run("requeue", ticket_id) == [f"requeued {ticket_id}: queued, attempt 1 of 2, session_seq 2"]
    after = snapshot(ticket_id)
    assert (after["status"], after["attempt"], after["max_attempts"], after["session_seq"]) == ("queued", 1, 2, 2)
    assert (after["is_head"], snapshot(waiting)["is_head"]) == (False, True)
    assert executor.settled(ticket_id)[-1] == ("queued", 0, None)


def test_requeue_of_a_just_failed_ticket_exits_3_unless_forced(session_id):
    ticket_id = ended(session_id, "failed", error="boom")
    before = snapshot(ticket_id)

    assert refused("requeue", ticket_id) == (3, grace_text(ticket_id))
    assert snapshot(ticket_id) == before
    assert run("requeue", ticket_id, "--force") == [f"requeued {ticket_id}: queued, attempt 1 of 2, session_seq 1"]
    assert snapshot(ticket_id)["status"] == "queued"


def test_requeue_of_a_completed_or_unknown_ticket_exits_1(session_id):
    ticket_id = ended(session_id, "completed")
    before = snapshot(ticket_id)
    unknown = str(uuid.uuid4())

    assert refused("requeue", ticket_id) == (1, f"Job {ticket_id} not found or not in a requeueable state")
    assert refused("requeue", unknown) == (1, f"Job {unknown} not found or not in a requeueable state")
    assert refused("requeue", "not-a-uuid") == (1, "Job not-a-uuid not found or not in a requeueable state")
    assert snapshot(ticket_id) == before


def test_cancel_run_of_a_queued_ticket_cancels_it(session_id, executor):
    ticket_id = accept(session_id=session_id)

    assert run("cancel_run", ticket_id) == [f"cancelled {ticket_id}"]
    assert snapshot(ticket_id)["status"] == "cancelled"
    assert executor.cancels == [ticket_id]


def test_cancel_run_of_a_finished_or_running_ticket_exits_0_and_of_an_unknown_one_exits_1(
    session_id, executor, monkeypatch
):
    done = ended(session_id, "completed")
    assert run("cancel_run", done) == [f"{done} already finished; nothing to cancel"]
    assert snapshot(done)["status"] == "completed"

    running = accept(session_id=f"{session_id}-run")
    claim(running)
    monkeypatch.setattr(executor, "cancel", lambda ticket_id: "requested")  # the runs app's answer for a running job
    assert run("cancel_run", running) == [
        f"cancel requested for {running}: it is running; its worker stops it at the next checkpoint"
    ]

    unknown = str(uuid.uuid4())
    assert refused("cancel_run", unknown) == (1, f"Job queue job {unknown} not found")


def test_prune_jobs_deletes_only_terminal_tickets_older_than_the_window_never_paused(session_id, monkeypatch):
    old = [
        ended(f"{session_id}-c", "completed"),
        ended(f"{session_id}-f", "failed", error="boom"),
        accept(session_id=f"{session_id}-x"),
    ]
    ticket_cancel(ticket_id=old[2], error="cancelled by the test")
    recent = ended(f"{session_id}-r", "completed")
    paused = ended(f"{session_id}-p", "paused")
    queued = accept(session_id=f"{session_id}-q")
    for ticket_id in old:
        backdate(ticket_id, field="completed_at", seconds=3600)
    for ticket_id in (paused, queued):
        backdate(ticket_id, field="created_at", seconds=3600)
        backdate(ticket_id, field="updated_at", seconds=3600)
    # A paused ticket has no completed_at; give it an old one to prove the status guard, not a NULL, keeps it.
    Ticket.objects.filter(pk=paused).update(completed_at=Now() - datetime.timedelta(hours=1))
    monkeypatch.setattr(prune_jobs, "BATCH", 2)  # three old tickets: two batches

    retention = current().queue.retention_seconds
    assert run("prune_jobs") == [f"pruned 0 ticket(s) older than {retention:.15g}s"]
    assert run("prune_jobs", "--older-than", "600") == ["pruned 3 ticket(s) older than 600s"]
    assert {str(pk) for pk in Ticket.objects.values_list("pk", flat=True)} == {recent, paused, queued}
    assert refused("prune_jobs", "--older-than", "-1") == (2, "--older-than must be at least 0 (got -1)")


def test_sweep_prints_one_line_per_step(session_id, redis_db):
    stale = accept(session_id=session_id)
    claim(stale)
    backdate(stale)

    assert run("sweep") == [
        "sweep                                     count",
        "----------------------------------------  -----",
        "stale leases failed (no attempt left)         1",
        "stale leases parked back to paused            0",
        "stale leases queued again (work kept)         0",
        "stale leases cancelled (cancel asked)         0",
        "queued runs expired (deadline passed)         0",
        "held runs let in (their user had room)        0",
        "stale leases dispatched for a reclaim         0",
        "lost messages published again                 0",
        "terminal tickets pruned (past retention)      0",
        "steps that raised (see the log)               0",
    ]
    assert snapshot(stale)["status"] == "failed"


def test_sweep_exits_1_when_a_step_raised(session_id, redis_db, executor):
    stale = accept(session_id=session_id)
    claim(stale)
    backdate(stale)
    executor.refuse.add(stale)  # its settle raises: the sweep's step for it rolls back

    code, message = refused("sweep")

    assert (code, message) == (1, "1 sweep step(s) raised; see the log")
    assert snapshot(stale)["status"] == "running"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("requeue", "{id}"), 1, "Job {id} not found or not in a requeueable state"),
        (("queue_jobs", "--status", "bogus"), 2, "Invalid status 'bogus'; expected one of {statuses}"),
    ],
)
def test_manage_py_exits_with_the_command_code(transactional_db, args, code, message):
    ticket_id, statuses = str(uuid.uuid4()), "('queued', 'running', 'completed', 'failed', 'cancelled', 'paused')"
    command = [sys.executable, "manage.py", *(arg.format(id=ticket_id) for arg in args)]
    done = subprocess.run(command, cwd=ROOT, env=process_env(), capture_output=True, text=True, timeout=120)

    assert (done.returncode, done.stdout) == (code, "")
    assert done.stderr.splitlines()[-1] == f"CommandError: {message.format(id=ticket_id, statuses=statuses)}"
