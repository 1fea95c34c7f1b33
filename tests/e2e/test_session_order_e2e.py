"""Per-session order through HTTP and real worker processes (CONTRACT 5, the seed scenario)."""

import random
import threading
from collections import defaultdict

import pytest
from django.db import connection
from rest_framework.test import APIClient

from queueing.models import Ticket
from queueing.router import publish
from runs.models import FINISHED, Run
from tests.support.runs import poll, submit_background
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow


def test_seed_scenario_three_runs_on_one_session_one_on_another(start_worker):
    start_worker(concurrency=8)
    api = APIClient()
    a = submit_background(api, "chat-1", "A sleep=1")
    b = submit_background(api, "chat-1", "B sleep=1")
    c = submit_background(api, "chat-1", "C sleep=1")
    d = submit_background(api, "chat-2", "D sleep=1")

    wait_until(lambda: poll(api, a, "chat-1")["status"] == "RUNNING", timeout=10, what="A to start")
    for waiting in (b, c):
        body = poll(api, waiting, "chat-1")
        assert (body["status"], body["waiting_on"]) == ("PENDING", a)
        publish(waiting)  # a duplicate, early message must not start it
    wait_until(
        lambda: Run.objects.filter(pk__in=[a, b, c, d], status__in=FINISHED).count() == 4,
        timeout=20,
        what="the four runs to finish",
    )

    runs = {run_id: Run.objects.get(pk=run_id) for run_id in (a, b, c, d)}
    assert {run.status for run in runs.values()} == {"COMPLETED"}
    assert runs[b].started_at >= runs[a].completed_at, "B starts when A ends"
    assert runs[c].started_at >= runs[b].completed_at, "C starts when B ends"
    assert runs[d].started_at < runs[a].completed_at, "D overlaps A"
    assert runs[c].content == "echo: C sleep=1 (history: 4 messages)"
    assert "waiting_on" not in poll(api, b, "chat-1")


def test_randomized_sessions_execute_in_order_without_overlap_across_two_workers(start_worker):
    start_worker(concurrency=8)
    start_worker(concurrency=8)
    rng = random.Random(20261129)
    plan = {
        f"rand-{n}": [
            f"run {k} sleep={rng.choice(['0', '0.05', '0.1', '0.2'])}{' explode' if rng.random() < 0.1 else ''}"
            for k in range(rng.randint(5, 10))
        ]
        for n in range(50)
    }
    sessions = list(plan)
    run_ids: dict[str, list[str]] = defaultdict(list)

    def client_thread(mine: list[str]):
        client = APIClient()
        try:
            # interleave this thread's sessions, each session's runs in order
            for k in range(10):
                for session in mine:
                    if k < len(plan[session]):
                        run_ids[session].append(submit_background(client, session, plan[session][k]))
        finally:
            connection.close()

    threads = [threading.Thread(target=client_thread, args=(sessions[i::5],)) for i in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [run_id for ids in run_ids.values() for run_id in ids]
    wait_until(
        lambda: Run.objects.filter(pk__in=everything, status__in=FINISHED).count() == len(everything),
        timeout=120,
        interval=0.25,
        what=f"{len(everything)} runs to finish",
    )

    runs = {str(r.run_id): r for r in Run.objects.filter(pk__in=everything)}
    seqs = dict(Ticket.objects.filter(pk__in=everything).values_list("pk", "session_seq"))
    for session, ids in run_ids.items():
        places = [seqs[runs[run_id].run_id] for run_id in ids]
        assert all(b in (a + 1, 1) for a, b in zip(places, places[1:], strict=False)), (
            f"{session}: each run is placed right behind the one before, or first when the session had drained"
        )
        for k, run_id in enumerate(ids):
            run = runs[run_id]
            expected = "ERROR" if "explode" in plan[session][k] else "COMPLETED"
            assert run.status == expected, (session, k, run.content)
            if k:
                previous = runs[ids[k - 1]]
                assert run.started_at >= previous.completed_at, f"{session}: run {k} overlapped run {k - 1}"
    spans = sorted((r.started_at, r.completed_at) for r in runs.values())
    overlapping = sum(1 for (s1, e1), (s2, _) in zip(spans, spans[1:], strict=False) if s2 < e1)
    assert overlapping > len(spans) // 4, "runs of different sessions ran concurrently"
