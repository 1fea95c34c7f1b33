"""An operator's view of real workers: a dead letter found, read and requeued through `/queue`, and `/metrics`
adding up what worker processes counted."""

from __future__ import annotations

import datetime

import pytest
from django.db.models import F

from queueing import metrics
from queueing.models import Ticket
from runs.models import Run
from tests.support.http import metric_samples
from tests.support.runs import submit_background, wait_status
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def samples(api) -> dict[tuple[str, tuple], float]:
    metrics.recorder.flush()
    return metric_samples(api.get("/metrics").content.decode())


def finished(api, run_id: str, session_id: str) -> dict:
    return wait_status(api, run_id, session_id, "COMPLETED", "ERROR", "CANCELLED", timeout=30)


def test_a_dead_letter_is_listed_explained_and_requeued(api, start_worker):
    start_worker(concurrency=2)
    session = "ops-dead"
    run_id = submit_background(api, session, "please explode sleep=0")
    assert finished(api, run_id, session)["status"] == "ERROR"

    dead = api.get("/queue/jobs", {"status": "failed", "session_id": session}).json()
    job = dead["data"][0]
    too_soon = api.post(f"/queue/jobs/{run_id}/requeue")
    Ticket.objects.filter(pk=run_id).update(completed_at=F("completed_at") - datetime.timedelta(hours=1))
    requeued = api.post(f"/queue/jobs/{run_id}/requeue")

    assert dead["meta"]["total_count"] == 1
    assert (job["id"], job["status"], job["attempt"], job["error"]) == (run_id, "failed", 1, "stub model exploded")
    assert too_soon.status_code == 409
    assert requeued.status_code == 200
    assert (requeued.json()["status"], requeued.json()["max_attempts"]) == ("queued", 2)
    again = finished(api, run_id, session)
    assert (again["status"], again["queue_attempt"], again["content"]) == ("ERROR", 2, "stub model exploded")
    assert api.get(f"/queue/jobs/{run_id}").json()["attempt"] == 2


def test_metrics_add_up_what_the_worker_processes_counted(api, start_worker):
    before = samples(api)
    start_worker(concurrency=4)
    start_worker(concurrency=4)
    runs = [(submit_background(api, f"ops-m-{n}", "hi sleep=0"), f"ops-m-{n}") for n in range(4)]
    slow = submit_background(api, "ops-m-slow", "take your time sleep=3")
    for run_id, session in runs:
        assert finished(api, run_id, session)["status"] == "COMPLETED"
    wait_until(lambda: Run.objects.filter(pk=slow, status="RUNNING").exists(), timeout=20, what="the slow run")

    def moved(name: str, **labels) -> float:
        key = (name, tuple(sorted(labels.items())))
        return samples(api).get(key, 0.0) - before.get(key, 0.0)

    wait_until(lambda: moved("agentos_runs_completed_total") == 4, timeout=10, what="4 completions counted")
    after = samples(api)
    in_flight = {labels: value for (name, labels), value in after.items() if name == "agentos_runs_in_flight"}

    assert moved("agentos_runs_accepted_total") == 5
    assert moved("agentos_runs_claimed_total") == 5
    assert moved("agentos_wait_seconds_count") == 5
    assert moved("agentos_run_duration_seconds_count") == 4
    assert moved("agentos_accept_latency_seconds_count") == 5
    assert list(in_flight.values()) == [1.0]
    assert after[("agentos_tickets", (("status", "running"),))] == 1
