"""Through a real `celery worker` process: many runs, session history, duplicate messages."""

import re
import threading

import pytest
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient

from agentos_project.conf import current
from queueing.models import Ticket
from queueing.router import publish
from runs.models import FINISHED, Run, RunEvent

from ..conftest import submit_background, wait_until

pytestmark = pytest.mark.slow


def wait_all_finished(run_ids, timeout: float):
    wait_until(
        lambda: Run.objects.filter(pk__in=run_ids, status__in=FINISHED).count() == len(run_ids),
        timeout=timeout,
        interval=0.2,
        what=f"{len(run_ids)} runs to finish",
    )


def test_200_runs_over_20_sessions_complete_with_their_session_history(start_worker):
    start_worker(concurrency=8)
    submitted: dict[str, list[tuple[str, str]]] = {}

    def client_session(number: int):
        client, session = APIClient(), f"e2e-{number}"
        try:
            submitted[session] = [
                (submit_background(client, session, f"turn {k} of {session} sleep=0"), f"turn {k} of {session} sleep=0")
                for k in range(10)
            ]
        finally:
            connection.close()

    threads = [threading.Thread(target=client_session, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    run_ids = [run_id for runs in submitted.values() for run_id, _ in runs]
    assert len(set(run_ids)) == 200

    wait_all_finished(run_ids, timeout=90)

    runs = {str(run.run_id): run for run in Run.objects.filter(pk__in=run_ids)}
    for runs_of_session in submitted.values():
        for k, (run_id, message) in enumerate(runs_of_session):
            run = runs[run_id]
            assert run.status == "COMPLETED", (run_id, run.content)
            assert run.content == f"echo: {message} (history: {2 * k} messages)"
            assert run.attempt == 1
    assert Ticket.objects.filter(pk__in=run_ids, status="completed").count() == 200


def test_duplicated_messages_execute_the_run_once(start_worker):
    api = APIClient()
    generous = current().replace("queue", max_attempts=3)
    with override_settings(AGENTOS=generous):
        queued_first = submit_background(api, "dup-1", "queued twice sleep=0")
        publish(queued_first)
        publish(queued_first)
        worker = start_worker(concurrency=4)
        running = submit_background(api, "dup-2", "duplicated while running sleep=2")
        wait_until(lambda: Run.objects.get(pk=running).status == "RUNNING", timeout=10, what="run to start")
        publish(running)
        publish(running)

    wait_all_finished([queued_first, running], timeout=20)
    wait_until(lambda: worker.log().count("not claimable") >= 4, timeout=10, what="duplicates to be dropped")

    for run_id in (queued_first, running):
        run, ticket = Run.objects.get(pk=run_id), Ticket.objects.get(pk=run_id)
        assert (run.status, run.attempt, ticket.status, ticket.attempt) == ("COMPLETED", 1, "completed", 1)
        assert RunEvent.objects.filter(run_id=run_id, event="RunStarted").count() == 1
        assert (
            len(re.findall(rf"ticket\.(?:re)?claim run_id={run_id} session_id=\S+ status=running", worker.log())) == 1
        )


def test_an_answer_postgres_cannot_store_as_is_ends_at_once_and_its_successor_completes(start_worker):
    start_worker(concurrency=2)
    api = APIClient()
    head = submit_background(api, "nul-e2e", "a \\u0000 b sleep=0")
    successor = submit_background(api, "nul-e2e", "after sleep=0")

    wait_all_finished([head, successor], timeout=10)

    runs = {str(r.run_id): r for r in Run.objects.filter(pk__in=[head, successor])}
    assert (runs[head].status, runs[head].content) == ("COMPLETED", "echo: a \ufffd b sleep=0 (history: 0 messages)")
    assert (runs[successor].status, runs[successor].content) == (
        "COMPLETED",
        "echo: after sleep=0 (history: 2 messages)",
    )
