"""Fair share and deadlines with real worker processes (CONTRACT 17), read from the runs' server times."""

import datetime

import pytest
from rest_framework.test import APIClient

from runs.models import FINISHED, Run
from tests.support.conf import with_conf
from tests.support.runs import poll, submit
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def _submitted(api: APIClient, user_id: str, session_id: str, message: str, **fields) -> str:
    response = submit(api, message=message, session_id=session_id, user_id=user_id, **fields)
    assert response.status_code == 202, response.content
    return response.json()["run_id"]


def _finished(run_ids: list[str], timeout: float) -> list[Run]:
    wait_until(
        lambda: Run.objects.filter(pk__in=run_ids, status__in=FINISHED).count() == len(run_ids),
        timeout=timeout,
        what=f"{len(run_ids)} runs to finish",
    )
    return list(Run.objects.filter(pk__in=run_ids))


def _most_at_once(runs: list[Run]) -> int:
    """The most of `runs` running at one moment, from their server times (a start at an end's instant follows it)."""
    edges = sorted([(run.started_at, 1) for run in runs] + [(run.completed_at, -1) for run in runs])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@with_conf("queue", max_running_per_user=2)
def test_two_workers_run_at_most_two_of_a_users_runs_while_other_users_runs_start(start_worker, start_sweeper):
    env = {"AGENTOS_MAX_RUNNING_PER_USER": "2"}
    start_worker(concurrency=4, **env)
    start_worker(concurrency=4, **env)
    start_sweeper(AGENTOS_POLL_INTERVAL="0.5", **env)
    api = APIClient()
    heavy = [_submitted(api, "heavy", f"heavy-{n}", "work sleep=0.3") for n in range(20)]
    light = [_submitted(api, f"light-{n}", f"light-{n}", "work sleep=0.3") for n in range(4)]
    wait_until(lambda: poll(api, heavy[-1], "heavy-19").get("waiting_reason"), timeout=10, what="a held run's reason")
    held = poll(api, heavy[-1], "heavy-19")
    assert held["waiting_reason"] == "user heavy has 2 runs running, the most AGENTOS_MAX_RUNNING_PER_USER=2 allows"

    runs = _finished(heavy + light, timeout=60)

    assert {run.status for run in runs} == {"COMPLETED"}
    heavy_runs = [run for run in runs if run.user_id == "heavy"]
    assert _most_at_once(heavy_runs) == 2, "never more than the cap, and the cap used"
    third_heavy_end = sorted(run.completed_at for run in heavy_runs)[2]
    assert all(run.started_at < third_heavy_end for run in runs if run.user_id != "heavy"), "others start meanwhile"
    assert max(run.attempt for run in runs) == 1, "a run held by the cap spends no attempt"


@with_conf("queue", max_queue_depth=0)
def test_users_take_turns_when_one_submitted_a_thousand_runs_first(start_worker, start_sweeper):
    api = APIClient()
    big = [_submitted(api, "big", f"big-{n}", "bulk sleep=0") for n in range(1000)]
    small = [_submitted(api, f"small-{n}", f"small-{n}-{k}", "chat sleep=0") for n in range(50) for k in range(2)]
    start_worker(concurrency=4)
    start_worker(concurrency=4)
    start_sweeper(AGENTOS_POLL_INTERVAL="0.5")

    runs = _finished(big + small, timeout=240)

    assert {run.status for run in runs} == {"COMPLETED"}
    big_starts = sorted(run.started_at for run in runs if run.user_id == "big")
    small_starts = sorted(run.started_at for run in runs if run.user_id != "big")
    assert small_starts[-1] < big_starts[199], (
        f"the last small user's run started after {sum(s < small_starts[-1] for s in big_starts)} of the big user's"
    )


def test_a_queued_run_past_its_deadline_expires_and_its_session_goes_on(start_worker, start_sweeper):
    start_worker(concurrency=2)
    start_sweeper(AGENTOS_POLL_INTERVAL="5")  # the deadline is kept within a second all the same
    api = APIClient()
    head = _submitted(api, "ana", "expiring", "long sleep=3")
    late = _submitted(api, "ana", "expiring", "stale sleep=0", expires_in="1")
    after = _submitted(api, "ana", "expiring", "next sleep=0")
    started = _submitted(api, "ana", "started", "slow sleep=2", expires_in="1")

    runs = {run.run_id.hex: run for run in _finished([head, late, after, started], timeout=30)}

    expired = runs[late.replace("-", "")]
    assert (expired.status, expired.cancellation_stage, expired.content) == (
        "CANCELLED",
        "PENDING",
        "expired after 1 s in the queue",
    )
    assert expired.started_at is None and expired.attempt == 0, "it never started"
    accepted_at = expired.created_at
    assert expired.completed_at - accepted_at < datetime.timedelta(seconds=2.5), "expired within a second or so"
    assert runs[head.replace("-", "")].status == runs[after.replace("-", "")].status == "COMPLETED"
    assert runs[after.replace("-", "")].content == "echo: next sleep=0 (history: 2 messages)"
    assert runs[started.replace("-", "")].status == "COMPLETED", "a run that started before its deadline completes"
