"""Workers that die, freeze or are stopped, with real processes and real signals (CONTRACT 4, 6)."""

import re
import signal
import time

import pytest

from queueing.models import Ticket
from queueing.shutdown import INTERRUPTED
from queueing.tickets import SWEEP_ERROR
from runs.models import Run, RunEvent
from tests.support.runs import submit_background
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow
GRACE = {"AGENTOS_LOCK_GRACE_SECONDS": "3", "AGENTOS_POLL_INTERVAL": "0.5"}


def status_of(run_id: str) -> str:
    return Run.objects.get(pk=run_id).status


def wait_stored_status(run_id: str, status: str, timeout: float) -> Run:
    wait_until(lambda: status_of(run_id) == status, timeout=timeout, interval=0.1, what=f"{run_id} to be {status}")
    return Run.objects.get(pk=run_id)


def test_sigkill_without_budget_fails_the_run_visibly_and_the_session_moves_on(start_worker, start_sweeper, api):
    doomed = start_worker(concurrency=1, **GRACE)
    start_sweeper(**GRACE)
    victim = submit_background(api, "kill-1", "long sleep=10", max_attempts=1)
    successor = submit_background(api, "kill-1", "next sleep=0", max_attempts=1)
    bystander = submit_background(api, "kill-2", "other session sleep=0", max_attempts=1)
    wait_stored_status(victim, "RUNNING", timeout=10)

    doomed.signal(signal.SIGKILL)
    killed = time.monotonic()
    start_worker(concurrency=4, **GRACE)

    run = wait_stored_status(victim, "ERROR", timeout=3 + 0.5 + 2 + 1)
    print(f"\nSIGKILL to ERROR: {time.monotonic() - killed:.2f}s (grace 3 s, poll 0.5 s)")
    assert run.content == SWEEP_ERROR
    assert Ticket.objects.get(pk=victim).status == "failed"
    assert wait_stored_status(successor, "COMPLETED", timeout=10).content == "echo: next sleep=0 (history: 0 messages)"
    assert wait_stored_status(bystander, "COMPLETED", timeout=20).attempt == 1


def running_on_a_lone_worker(start_worker, start_sweeper, api, session_id: str, message: str):
    """A worker (one slot) and a sweeper with a 3 s grace, and a run of budget 2 that it is executing now."""
    worker = start_worker(concurrency=1, **GRACE)
    start_sweeper(**GRACE)
    run_id = submit_background(api, session_id, message, max_attempts=2)
    wait_stored_status(run_id, "RUNNING", timeout=10)
    return worker, run_id


def test_sigkill_with_budget_re_executes_the_run_under_the_same_id(start_worker, start_sweeper, api):
    doomed, victim = running_on_a_lone_worker(start_worker, start_sweeper, api, "kill-3", "long sleep=4")

    doomed.signal(signal.SIGKILL)
    start_worker(concurrency=4, **GRACE)

    run = wait_stored_status(victim, "COMPLETED", timeout=3 + 1 + 4 + 6)
    assert (run.attempt, run.content) == (2, "echo: long sleep=4 (history: 0 messages)")
    assert list(RunEvent.objects.filter(run_id=victim, event="RunStarted").values_list("attempt", flat=True)) == [2]


def test_a_frozen_worker_that_wakes_after_being_replaced_writes_nothing(start_worker, start_sweeper, api):
    zombie, victim = running_on_a_lone_worker(start_worker, start_sweeper, api, "zombie-1", "frozen sleep=2")

    zombie.signal(signal.SIGSTOP)
    start_worker(concurrency=4, **GRACE)
    run = wait_stored_status(victim, "COMPLETED", timeout=3 + 1 + 2 + 6)
    ticket = Ticket.objects.filter(pk=victim).values().get()
    events = list(RunEvent.objects.filter(run_id=victim).values_list("event", "attempt"))
    zombie.signal(signal.SIGCONT)

    wait_until(
        lambda: re.search(rf"ticket={victim} attempt=1 fenced", zombie.log()), timeout=10, what="the late finish"
    )
    time.sleep(2)  # let its heartbeat run too
    assert Ticket.objects.filter(pk=victim).values().get() == ticket
    after = Run.objects.get(pk=victim)
    assert (after.status, after.attempt, after.content, after.completed_at) == (
        "COMPLETED",
        2,
        run.content,
        run.completed_at,
    )
    assert list(RunEvent.objects.filter(run_id=victim).values_list("event", "attempt")) == events
    assert {attempt for _, attempt in events} == {2}


def test_sigterm_drains_short_runs_and_requeues_or_fails_long_ones(start_worker, api):
    drain = {"AGENTOS_LOCK_GRACE_SECONDS": "8", "AGENTOS_STOP_TIMEOUT_SECONDS": "2", "AGENTOS_RETRY_DELAY_SECONDS": "1"}
    worker = start_worker(concurrency=4, **drain)
    short = submit_background(api, "term-1", "short sleep=1", max_attempts=1)
    spent = submit_background(api, "term-2", "long sleep=20", max_attempts=1)
    spare = submit_background(api, "term-3", "long sleep=3", max_attempts=2)
    for run_id in (short, spent, spare):
        wait_stored_status(run_id, "RUNNING", timeout=10)

    worker.signal(signal.SIGTERM)
    assert worker.process.wait(15) == 0

    assert status_of(short) == "COMPLETED"
    failed = Run.objects.get(pk=spent)
    assert (failed.status, failed.content) == ("ERROR", INTERRUPTED)
    assert Ticket.objects.get(pk=spent).error == INTERRUPTED
    requeued = Ticket.objects.get(pk=spare)
    assert (requeued.status, requeued.error, requeued.attempt) == ("queued", INTERRUPTED, 1)
    assert status_of(spare) == "PENDING"

    start_worker(concurrency=4, **drain)
    assert wait_stored_status(spare, "COMPLETED", timeout=15).attempt == 2


def test_an_exploding_run_is_retried_with_backoff_then_fails(start_worker, api):
    worker = start_worker(concurrency=2, AGENTOS_RETRY_DELAY_SECONDS="0.3")
    run_id = submit_background(api, "retry-1", "explode sleep=0", max_attempts=3)

    run = wait_stored_status(run_id, "ERROR", timeout=20)

    assert (run.content, run.attempt) == ("stub model exploded", 3)
    ticket = Ticket.objects.get(pk=run_id)
    assert (ticket.status, ticket.attempt, ticket.error) == ("failed", 3, "stub model exploded")
    started = list(RunEvent.objects.filter(run_id=run_id, event="RunStarted").values_list("attempt", flat=True))
    assert started == [1, 2, 3]
    assert list(RunEvent.objects.filter(run_id=run_id, event="RunError").values_list("attempt", flat=True)) == [3]
    delays = [
        float(d)
        for d in re.findall(
            rf"ticket\.retry run_id={run_id} session_id=\S+ status=queued attempt=\d worker=\S+ retry_in=([\d.]+)s",
            worker.log(),
        )
    ]
    assert len(delays) == 2
    assert 0 <= delays[0] <= 0.3 and 0 <= delays[1] <= 0.6, "full jitter under a ceiling that doubles"


def test_sigterm_while_a_head_runs_publishes_its_successor_for_another_worker(start_worker, api):
    drain = {"AGENTOS_LOCK_GRACE_SECONDS": "8", "AGENTOS_STOP_TIMEOUT_SECONDS": "3"}
    leaving = start_worker(concurrency=2, **drain)
    head = submit_background(api, "term-4", "head sleep=2", max_attempts=1)
    successor = submit_background(api, "term-4", "successor sleep=10", max_attempts=1)
    wait_stored_status(head, "RUNNING", timeout=10)

    leaving.signal(signal.SIGTERM)
    assert leaving.process.wait(15) == 0

    assert status_of(head) == "COMPLETED"
    ticket = Ticket.objects.get(pk=successor)
    assert (ticket.status, ticket.attempt, status_of(successor)) == ("queued", 0, "PENDING"), "not started, not failed"
    assert not re.search(rf"ticket\.claim run_id={successor} session_id=\S+ status=running", leaving.log()), (
        "never claimed there"
    )
    staying = start_worker(concurrency=2, **drain)
    run = wait_stored_status(successor, "COMPLETED", timeout=20)
    assert run.attempt == 1
    assert re.search(
        rf"ticket\.claim run_id={successor} session_id=\S+ status=running attempt=1 worker=\S+", staying.log()
    )
