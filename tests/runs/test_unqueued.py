"""AGENTOS_QUEUE_DURABLE=false: background runs execute in the accepting process, bounded, with no ticket."""

import threading

import pytest
from django.test import override_settings

from agentos_project.core.conf import current
from agentos_project.core.elastic import ElasticThreads
from queueing.models import Ticket
from runs.models import Run
from runs.services.unqueued import InProcessRunner
from tests.support.runs import submit_background
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_runs_execute_in_process_one_slot_at_a_time_beyond_the_cap(api):
    with override_settings(AGENTOS=current().replace("queue", durable=False, max_concurrency=1)):
        first = submit_background(api, "inproc-1", "first sleep=0.5")
        second = submit_background(api, "inproc-2", "second sleep=0")

        wait_until(lambda: Run.objects.get(pk=first).status == "RUNNING", timeout=5, what="the first run to start")
        assert Run.objects.get(pk=second).status == "PENDING", "beyond the cap a run waits for a slot"
        wait_until(
            lambda: Run.objects.filter(pk__in=[first, second], status="COMPLETED").count() == 2,
            timeout=10,
            what="both runs to complete",
        )

    runs = {str(r.run_id): r for r in Run.objects.filter(pk__in=[first, second])}
    assert runs[second].started_at >= runs[first].completed_at
    assert runs[second].content == "echo: second sleep=0 (history: 0 messages)"
    assert not Ticket.objects.exists()


def test_the_in_process_runner_holds_at_most_its_size_of_threads_and_ends_them_once_idle():
    release, running = threading.Event(), []
    runner = InProcessRunner(execute=lambda run_id: (running.append(run_id), release.wait(5)), size=lambda: 2)
    executor = runner._threads_here()
    executor.idle_seconds = 0.2

    futures = [runner.start(n) for n in range(3)]
    wait_until(lambda: len(running) == 2, timeout=5, what="two runs at once")
    release.set()
    for future in futures:
        future.result(timeout=5)

    assert (type(executor), executor.max_workers, sorted(running)) == (ElasticThreads, 2, [0, 1, 2])
    wait_until(lambda: not executor._threads, timeout=5, what="the idle threads to end")
