"""Outages with real processes: the broker flushed or down, PostgreSQL down (CONTRACT 6)."""

import datetime
import time

import psutil
import pytest
import requests
from rest_framework.test import APIClient

from agentos_project.embedded import EmbeddedRedis
from queueing import router
from runs.models import Run
from tests.support.http import free_port, sse_frames
from tests.support.runs import submit_background
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
FAST_SWEEP = {"AGENTOS_POLL_INTERVAL": "0.5"}
THROUGH_OUTAGES = {"interval": 0.2, "through_errors": True}  # polls of a server in an outage


def test_runs_queued_when_the_broker_is_flushed_all_complete(start_worker, start_sweeper, redis_db):
    api = APIClient()
    run_ids = [submit_background(api, f"flush-{n % 50}", f"queued {n} sleep=0") for n in range(100)]
    assert router.publisher.flush()
    assert redis_db.llen("agentos") == 50, "one message per session head"

    redis_db.flushdb()
    flushed = time.monotonic()
    start_sweeper(**FAST_SWEEP)
    start_worker(concurrency=8, **FAST_SWEEP)
    wait_until(
        lambda: Run.objects.filter(pk__in=run_ids, status="COMPLETED").count() == 100,
        timeout=60,
        interval=0.2,
        what="the 100 runs to complete after the flush",
    )
    print(f"\n100 runs completed {time.monotonic() - flushed:.2f}s after FLUSHDB")


def test_submits_while_redis_is_down_are_accepted_and_run_once_redis_returns(start_serve, tmp_path):
    redis_server = EmbeddedRedis(tmp_path, f"redis://127.0.0.1:{free_port()}/0")
    url = redis_server.start()
    try:
        serve = start_serve(REDIS_URL=url, CELERY_BROKER_URL=url, **FAST_SWEEP)
        redis_server.stop()

        started = time.monotonic()
        accepted = []
        for n in range(100):
            response = serve.submit(f"redis-down-{n % 50}", f"while down {n} sleep=0")
            assert response.status_code == 202, response.text
            accepted.append((response.json()["run_id"], f"redis-down-{n % 50}"))
        print(f"\n100 submits while Redis was down: {time.monotonic() - started:.2f}s")
        time.sleep(1)
        assert serve.poll(*accepted[0])["status"] == "PENDING"

        redis_server = EmbeddedRedis(tmp_path, url)
        assert redis_server.start() == url
        returned = time.monotonic()
        wait_until(
            lambda: Run.objects.filter(pk__in=[r for r, _ in accepted], status="COMPLETED").count() == 100,
            timeout=60,
            interval=0.2,
            what="the 100 runs to complete after Redis returned",
        )
        print(f"100 runs completed {time.monotonic() - returned:.2f}s after Redis returned")
        assert serve.poll(*accepted[-1])["content"] == "echo: while down 99 sleep=0 (history: 2 messages)"
    finally:
        redis_server.stop()


def test_postgres_down_answers_503_and_workers_carry_on_when_it_returns(throwaway_postgres, start_serve):
    postgres = throwaway_postgres
    serve = start_serve(DATABASE_URL=postgres.url, **FAST_SWEEP)
    children = {p.pid for p in psutil.Process(serve.pid).children()}
    first = serve.submit("pg-1", "before sleep=0").json()
    serve.wait_status(first["run_id"], "pg-1", "COMPLETED", timeout=20, **THROUGH_OUTAGES)

    postgres.stop()
    response = serve.submit("pg-2", "while down sleep=0")
    assert response.status_code == 503
    assert response.json() == {"detail": "Database unavailable; the run was not accepted, retry shortly"}

    postgres.start()
    again = wait_until(
        lambda: (r := serve.submit("pg-2", "after sleep=0")).status_code == 202 and r.json(),
        timeout=30,
        interval=0.5,
        what="submits to be accepted again",
    )
    body = serve.wait_status(again["run_id"], "pg-2", "COMPLETED", timeout=30, **THROUGH_OUTAGES)
    assert body["content"] == "echo: after sleep=0 (history: 0 messages)"
    assert serve.process.poll() is None
    assert {p.pid for p in psutil.Process(serve.pid).children()} == children, "no child died or was restarted"


def test_a_run_that_ends_while_postgres_restarts_completes_and_hands_its_session_on(throwaway_postgres, start_serve):
    postgres = throwaway_postgres
    serve = start_serve(DATABASE_URL=postgres.url, **FAST_SWEEP)
    head = serve.submit("restart-1", "head sleep=3").json()
    successor = serve.submit("restart-1", "successor sleep=0").json()
    running = serve.wait_status(head["run_id"], "restart-1", "RUNNING", timeout=20, **THROUGH_OUTAGES)
    started = datetime.datetime.fromisoformat(running["started_at"]).timestamp()

    postgres.stop()
    time.sleep(max(0.0, started + 4 - time.time()))  # the agent ends (and settling fails) while it is down
    postgres.start()
    returned = time.time()

    done = serve.wait_status(head["run_id"], "restart-1", "COMPLETED", timeout=30, **THROUGH_OUTAGES)
    after = serve.wait_status(successor["run_id"], "restart-1", "COMPLETED", timeout=30, **THROUGH_OUTAGES)
    completed = datetime.datetime.fromisoformat(done["completed_at"]).timestamp()
    print(f"\nPostgreSQL back to the stranded run's completion: {completed - returned:.2f}s")
    assert done["content"] == "echo: head sleep=3 (history: 0 messages)"
    assert done["queue_attempt"] == 1
    assert datetime.datetime.fromisoformat(after["started_at"]).timestamp() - returned < 1.0
    assert after["content"] == "echo: successor sleep=0 (history: 2 messages)"


def test_a_stream_waiting_while_postgres_restarts_goes_on_to_its_runs_end(throwaway_postgres, start_serve):
    postgres = throwaway_postgres
    serve = start_serve(DATABASE_URL=postgres.url, AGENTOS_STREAM_KEEPALIVE_SECONDS="0.3", **FAST_SWEEP)
    head = serve.submit("restart-2", "head sleep=3").json()
    serve.wait_status(head["run_id"], "restart-2", "RUNNING", timeout=20, **THROUGH_OUTAGES)
    response = requests.post(
        f"{serve.url}/agents/stub-agent/runs",
        data={"message": "streamed sleep=0", "session_id": "restart-2", "background": "true"},
        stream=True,
        timeout=60,
    )
    frames = sse_frames(response)
    assert next(frames) == ("keepalive", None)

    postgres.stop()  # the stream's checks of the database fail meanwhile
    time.sleep(2)
    postgres.start()
    rest = list(frames)

    names = [name for name, _ in rest]
    assert names[-1] == "RunCompleted"
    assert rest[-1][1]["content"] == "echo: streamed sleep=0 (history: 2 messages)"
    assert names.count("keepalive") >= 3 and "RunStarted" in names
    assert "stream cannot ask the database" in serve.log()  # it did meet the outage
