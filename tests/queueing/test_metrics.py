"""`/metrics` (CONTRACT 12): Prometheus text that parses, counters that move by what happened, gauges read from
the tickets, and one structured log line per state change."""

from __future__ import annotations

import datetime
import logging
import re
import time

import jwt
import pytest
import redis
from django.db import transaction
from django.db.models.functions import Now

from agentos_project.core.conf import current
from agentos_project.core.coordination import redis_connection
from queueing import metrics
from queueing.models import Ticket
from queueing.seam import NewTicket
from queueing.sweeper import sweep_once
from queueing.tickets import ticket_accept, ticket_continue, ticket_prune, ticket_requeue
from queueing.worker import execute_claim
from tests.support.conf import with_conf
from tests.support.http import metric_samples

from .conftest import accept, backdate, claim, finish

pytestmark = pytest.mark.django_db(transaction=True)


def scrape(api) -> dict[tuple[str, tuple], float]:
    """Every sample of `/metrics`, by (name, sorted labels), once every increment made so far has been sent."""
    metrics.recorder.flush()
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    return metric_samples(response.content.decode())


def moved(before: dict, after: dict, name: str, **labels) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


COUNTED = ["accepted", "claimed", "completed", "failed", "cancelled", "paused", "continued", "retried", "requeued"]


def test_counters_move_by_what_happened(api, session_id, executor):
    before = scrape(api)
    done = accept(session_id=session_id)
    execute_claim(claim(done))
    paused = accept(session_id=f"{session_id}-p")
    finish(claim(paused), "paused")
    ticket_continue(ticket_id=paused)
    retried = accept(session_id=f"{session_id}-r", outcomes=("failed", "failed"), max_attempts=2)
    execute_claim(claim(retried))
    dead = accept(session_id=f"{session_id}-d")
    finish(claim(dead), "failed", error="boom")
    ticket_requeue(ticket_id=dead, grace_seconds=60, force=True)
    executor.cancel(accept(session_id=f"{session_id}-c"))

    after = scrape(api)

    assert {name: moved(before, after, f"agentos_runs_{name}_total") for name in COUNTED} == {
        "accepted": 5,
        "claimed": 4,
        "completed": 1,
        "failed": 1,
        "cancelled": 1,
        "paused": 1,
        "continued": 1,
        "retried": 1,
        "requeued": 1,
    }
    assert moved(before, after, "agentos_run_duration_seconds_count") == 2
    assert moved(before, after, "agentos_wait_seconds_count") == 2  # observed when execution starts


def test_the_work_registers_counters_of_its_own_beside_the_queues(api, monkeypatch):
    monkeypatch.setattr(metrics, "COUNTERS", dict(metrics.COUNTERS))
    before = scrape(api)

    metrics.register_counters({"fake_widgets": "Widgets the fake job made"})
    metrics.register_counters({"fake_widgets": "a second description is not taken"})
    metrics.recorder.count("fake_widgets", 3)
    text = (metrics.recorder.flush(), api.get("/metrics").content.decode())[1]

    assert "# HELP agentos_runs_fake_widgets_total Widgets the fake job made" in text
    assert moved(before, metric_samples(text), "agentos_runs_fake_widgets_total") == 3
    assert moved(before, metric_samples(text), "agentos_runs_accepted_total") == 0


@with_conf("queue", lock_grace_seconds=3)
def test_a_sweep_counts_as_swept_and_failed(api, session_id):
    before = scrape(api)
    lost = accept(session_id=session_id)
    claim(lost, worker="gone")
    backdate(lost)

    sweep_once(current().queue)
    after = scrape(api)

    assert moved(before, after, "agentos_runs_swept_total") == 1
    assert moved(before, after, "agentos_runs_failed_total") == 1


def test_a_handed_over_session_observes_its_hand_off(api, session_id):
    before = scrape(api)
    first, second = accept(session_id=session_id), accept(session_id=session_id)

    handed = execute_claim(claim(first), hand_off=True)
    assert handed is not None and handed.ticket_id == second
    execute_claim(handed)
    after = scrape(api)

    assert moved(before, after, "agentos_handoff_latency_seconds_count") == 1
    assert moved(before, after, "agentos_handoff_latency_seconds_bucket", le="+Inf") == 1
    assert moved(before, after, "agentos_handoff_latency_seconds_sum") < 1


def test_gauges_are_read_from_the_tickets(api, session_id):
    Ticket.objects.all().delete()
    paused = accept(session_id=session_id)
    finish(claim(paused), "paused")
    accept(session_id=session_id)
    accept(session_id=session_id)
    retrying = accept(session_id=f"{session_id}-r", outcomes=("failed", "completed"), max_attempts=2)
    execute_claim(claim(retrying, worker="w-r"))
    Ticket.objects.filter(pk=retrying).update(available_at=Now() + datetime.timedelta(minutes=10))
    running = accept(session_id=f"{session_id}-x")
    claim(running, worker="w-9")
    backdate(paused, field="updated_at", seconds=300)

    samples = scrape(api)

    tickets = {dict(labels)["status"]: value for (name, labels), value in samples.items() if name == "agentos_tickets"}
    assert tickets == {"queued": 3, "running": 1, "paused": 1, "completed": 0, "failed": 0, "cancelled": 0}
    assert samples[("agentos_sessions_held", (("reason", "paused"),))] == 1
    assert samples[("agentos_sessions_held_waiting_runs", (("reason", "paused"),))] == 2
    assert 300 <= samples[("agentos_sessions_held_oldest_age_seconds", (("reason", "paused"),))] < 310
    assert samples[("agentos_runs_in_flight", (("worker", "w-9"),))] == 1
    assert samples[("agentos_sessions_held", (("reason", "retrying"),))] == 1
    assert samples[("agentos_sessions_held_waiting_runs", (("reason", "retrying"),))] == 0
    assert samples[("agentos_metrics_store_up", ())] == 1


def ticket_lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "agentos.tickets"]


def test_one_log_line_per_state_change(session_id, caplog):
    caplog.set_level(logging.INFO, logger="agentos.tickets")
    ticket_id = accept(session_id=session_id)
    owner = claim(ticket_id, worker="w-log")
    finish(owner, "completed")

    assert ticket_lines(caplog) == [
        f"ticket.accept run_id={ticket_id} session_id={session_id} status=queued attempt=0 worker=-",
        f"ticket.claim run_id={ticket_id} session_id={session_id} status=running attempt=1 worker=w-log",
        f"ticket.finish run_id={ticket_id} session_id={session_id} status=completed attempt=1 worker=w-log",
    ]
    assert caplog.records[-1].ticket == {
        "event": "finish",
        "run_id": ticket_id,
        "session_id": session_id,
        "status": "completed",
        "attempt": 1,
        "worker": "w-log",
    }


def test_cancel_continue_requeue_retry_and_prune_log_a_line_each(session_id, caplog, executor):
    paused = accept(session_id=session_id)
    finish(claim(paused, worker="w-a"), "paused")
    retried = accept(session_id=f"{session_id}-r", outcomes=("failed", "completed"), max_attempts=2)
    caplog.set_level(logging.INFO, logger="agentos.tickets")
    caplog.clear()

    ticket_continue(ticket_id=paused)
    execute_claim(claim(retried, worker="w-r"))
    cancelled = accept(session_id=f"{session_id}-c")
    executor.cancel(cancelled)
    ticket_requeue(ticket_id=cancelled, grace_seconds=60)
    executor.cancel(cancelled)
    backdate(cancelled, field="completed_at")
    ticket_prune(retention_seconds=60)

    lines = ticket_lines(caplog)
    assert f"ticket.continue run_id={paused} session_id={session_id} status=queued attempt=1 worker=-" in lines
    retry = [line for line in lines if line.startswith(f"ticket.retry run_id={retried} ")]
    assert len(retry) == 1
    assert re.fullmatch(
        rf"ticket\.retry run_id={retried} session_id={session_id}-r status=queued attempt=1 worker=w-r "
        r"retry_in=[\d.]+s",
        retry[0],
    )
    assert [line.split(" ")[0] for line in lines if f"run_id={cancelled}" in line] == [
        "ticket.accept",
        "ticket.cancel",
        "ticket.requeue",
        "ticket.cancel",
    ]
    assert lines[-1] == "ticket.prune deleted=1"


@with_conf("queue", lock_grace_seconds=3)
def test_a_sweep_logs_the_lost_worker(session_id, caplog):
    lost = accept(session_id=session_id)
    claim(lost, worker="gone")
    backdate(lost)
    caplog.set_level(logging.INFO, logger="agentos.tickets")
    caplog.clear()

    sweep_once(current().queue)

    assert ticket_lines(caplog) == [
        f"ticket.sweep run_id={lost} session_id={session_id} status=failed attempt=1 worker=gone"
    ]


def test_nothing_is_logged_or_counted_for_a_change_that_rolls_back(api, session_id, caplog):
    caplog.set_level(logging.INFO, logger="agentos.tickets")
    before = scrape(api)
    with pytest.raises(RuntimeError), transaction.atomic():
        ticket_accept(
            ticket=NewTicket(
                id="00000000-0000-0000-0000-0000000000aa",
                component_type="job",
                component_id="fake",
                session_id=session_id,
                user_id=None,
                payload={},
                serialized=True,
                max_attempts=1,
            )
        )
        raise RuntimeError("the caller's transaction fails")
    after = scrape(api)

    assert moved(before, after, "agentos_runs_accepted_total") == 0
    assert [r for r in caplog.records if r.name == "agentos.tickets"] == []


def test_increments_redis_refuses_are_sent_once_it_answers(api, session_id):
    before = scrape(api)
    with with_conf("services", redis_url="redis://127.0.0.1:1/0"):  # nothing listens there
        for _ in range(3):
            metrics.recorder.count("requeued")
        assert metrics.recorder.flush(timeout=5) is False
        down = api.get("/metrics").content.decode()
    after = scrape(api)

    assert "agentos_metrics_store_up 0.0" in down
    assert "agentos_runs_requeued_total" not in down  # left out, not shown as a reset to 0
    assert "agentos_tickets{" in down
    assert moved(before, after, "agentos_runs_requeued_total") == 3


def test_a_batch_sent_again_after_a_lost_reply_counts_once(api, monkeypatch):
    before = scrape(api)
    sent = []

    class ReplyLostOnce:
        """Redis as the recorder reaches it: the first batch is applied, but its reply never comes back."""

        def eval(self, script, keys, *arguments):
            sent.append(arguments[keys:])
            answer = redis_connection().eval(script, keys, *arguments)
            if len(sent) == 1:
                raise redis.ConnectionError("the reply was lost")
            return answer

        def __getattr__(self, name):  # anything else: as Redis answers
            return getattr(redis_connection(), name)

    monkeypatch.setattr(metrics, "redis_connection", ReplyLostOnce)
    recorder = metrics.Recorder()
    recorder.count("requeued", 2)

    assert recorder.flush(timeout=5) is True
    assert sent == [(1, "c:requeued", 2), (1, "c:requeued", 2)], "the same batch, sent again with its number"
    assert moved(before, scrape(api), "agentos_runs_requeued_total") == 2


def test_a_requeued_ticket_that_never_ran_adds_no_wait(api, session_id, executor):
    ticket_id = accept(session_id=session_id)
    executor.cancel(ticket_id)
    backdate(ticket_id, field="created_at", seconds=3600)
    ticket_requeue(ticket_id=ticket_id, grace_seconds=60)
    before = scrape(api)

    execute_claim(claim(ticket_id))
    after = scrape(api)

    assert moved(before, after, "agentos_run_duration_seconds_count") == 1
    assert moved(before, after, "agentos_wait_seconds_count") == 0


def test_metrics_answer_text_whatever_the_client_accepts(api):
    response = api.get("/metrics", HTTP_ACCEPT="text/plain")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")


@with_conf("queue", max_running_per_user=1, round_robin_window=1)
def test_fair_share_shows_running_per_user_held_runs_and_expirations(api, redis_db):
    before = scrape(api)
    ana = [accept(session_id=f"fair-ana-{n}", user_id="ana") for n in range(3)]
    claim(ana[0])
    for n in range(3):
        accept(session_id=f"fair-bo-{n}", user_id="bo")
    late = accept(session_id="fair-late", ttl_seconds=5)
    Ticket.objects.filter(pk=late).update(expires_at=Now())
    sweep_once(current().queue)

    after = scrape(api)

    assert after[("agentos_user_runs_running", (("user_id", "ana"),))] == 1
    assert ("agentos_user_runs_running", (("user_id", "bo"),)) not in after
    assert after[("agentos_runs_held", (("reason", "cap"),))] == 2, "ana's two others"
    assert after[("agentos_runs_held", (("reason", "turn"),))] == 2, "bo's second and third wait their turn"
    assert moved(before, after, "agentos_runs_expired_total") == 1


SECRET = "a-string-secret-at-least-256-bits-long"
CREDENTIALS = {
    "jwt_verification_keys": (SECRET,),
    "jwt_algorithm": "HS256",
    "security_key": "s3cret",
    "admin_token": "adm1n",
}

NAMING = ("agentos_user_runs_running", "agentos_runs_in_flight")  # the series that name users and workers


def jwt_of(*scopes: str) -> str:
    return jwt.encode({"sub": "bo", "scopes": list(scopes), "exp": int(time.time()) + 600}, SECRET, algorithm="HS256")


@pytest.mark.parametrize(
    ("bearer", "operator"),
    [
        (lambda: jwt_of(), False),
        (lambda: jwt_of("agents:read"), False),
        (lambda: jwt_of("metrics:read"), True),
        (lambda: jwt_of("agent_os:admin"), True),
        (lambda: "s3cret", True),
        (lambda: "adm1n", True),
    ],
    ids=["a plain token", "another scope", "metrics:read", "admin scope", "the security key", "the admin token"],
)
def test_only_an_operator_sees_user_ids_and_worker_names(api, redis_db, bearer, operator):
    Ticket.objects.all().delete()
    claim(accept(session_id="seen-ana", user_id="ana"), worker="host-1:4242:w")

    with with_conf("security", **CREDENTIALS):
        metrics.recorder.flush()
        response = api.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {bearer()}")

    assert response.status_code == 200
    samples = metric_samples(response.content.decode())
    named = {key: value for key, value in samples.items() if key[0] in NAMING}
    assert named == (
        {
            ("agentos_user_runs_running", (("user_id", "ana"),)): 1,
            ("agentos_runs_in_flight", (("worker", "host-1:4242:w"),)): 1,
        }
        if operator
        else {}
    )
    assert samples[("agentos_tickets", (("status", "running"),))] == 1, "what names nobody is shown to every caller"
