"""Runs without a ticket, executed in the accepting process: inline runs (background=false), and background runs
with AGENTOS_QUEUE_DURABLE=false (AgentOS' non-durable mode).

At most AGENTOS_MAX_CONCURRENCY background runs execute at once per process; runs beyond the cap wait as PENDING
for a slot. Nothing here survives the process: a run accepted by a process that dies is lost, as AgentOS documents
for this mode. There is no ticket, no per-session order and no idempotency.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future

from django.db import close_old_connections, connection, transaction

from agentos_project.conf import current
from agentos_project.elastic import ElasticExecutor
from agentos_project.exceptions import first_line

from ..models import Run, RunStatus
from ..selectors import run_to_wire
from ..submission import Accepted, Submission
from . import cancel_signal
from .leg import cancelled_leg, run_leg
from .sessions import session_own
from .states import run_create, run_end_unexecuted, run_record_leg, run_start_unqueued

log = logging.getLogger("agentos.runs")
UNCAPPED_THREADS = 256


class InProcessRunner:
    """A bounded pool of threads that run `execute(run_id=...)` for runs accepted by this process, made as runs
    arrive and ended once idle (`ElasticExecutor`).

    `size()` is the pool's size (None: UNCAPPED_THREADS), read when the process first uses it.
    """

    def __init__(self, execute: Callable[..., None], size: Callable[[], int | None], name: str = "agentos-run") -> None:
        self._execute_run = execute
        self._size = size
        self._name = name
        self._lock = threading.Lock()
        self._pool: ElasticExecutor | None = None
        self._pid: int | None = None

    def _executor(self) -> ElasticExecutor:
        with self._lock:
            if self._pid != os.getpid():
                self._pool = ElasticExecutor(self._size() or UNCAPPED_THREADS, name=self._name)
                self._pid = os.getpid()
            return self._pool

    def submit(self, run_id) -> None:
        """Run `run_id` on this process's bounded pool once the current transaction commits."""
        transaction.on_commit(lambda: self.start(run_id))

    def start(self, run_id) -> Future:
        """Run `run_id` on the pool now; the future is done when the run has ended."""
        return self._executor().submit(self._execute, run_id)

    def _execute(self, run_id):
        close_old_connections()
        try:
            return self._execute_run(run_id=run_id)
        except Exception:
            log.exception("run=%s failed in-process", run_id)
            raise
        finally:
            connection.close()


def _create_run(submission: Submission, *, queued: bool) -> Run:
    component = submission.component
    session_own(
        session_id=submission.session_id,
        component_type=component.kind,
        component_id=component.id,
        user_id=submission.user_id,
    )
    return run_create(submission=submission, queued=queued)


def run_submit_in_process(*, submission: Submission) -> Accepted:
    """AGENTOS_QUEUE_DURABLE=false: the run row commits, then the run waits for a slot of this process's bounded
    pool (runs.services.unqueued). Not durable, not ordered, no ticket."""
    with transaction.atomic():
        run = _create_run(submission, queued=False)
        runner.submit(run.run_id)
    return Accepted(str(run.run_id), run.session_id, run.status)


def run_execute_unqueued(*, run_id) -> None:
    """Execute a run that has no ticket (inline, or in-process with the durable queue off): one attempt per leg
    (a continue makes another), recorded like a queued run's. A run cancelled while it waited for its slot is
    not started; one cancelled while it ran ends CANCELLED even if it paused or failed meanwhile."""
    if not run_start_unqueued(run_id=run_id):
        return
    try:
        run = Run.objects.get(pk=run_id)
        with cancel_signal.watcher.watch(run_id) as cancel:
            timeout = current().queue.timeout_seconds
            leg = run_leg(run, attempt=run.attempt, timeout_seconds=timeout, cancelled=cancel.is_set, woken=cancel)
        with transaction.atomic():
            # The row locked first: a cancel asked until now is seen here, one asked later finds the run ended.
            asked = Run.objects.select_for_update().values_list("cancel_requested_at", flat=True).get(pk=run_id)
            if (asked or cancel.is_set()) and leg.yields_to_cancel:
                leg = cancelled_leg(leg)
            run_record_leg(run_id=run_id, attempt=run.attempt, leg=leg, final=True)
    except Exception as error:  # never leave a run without a ticket RUNNING: no sweeper would end it
        with transaction.atomic():
            content = f"Run outcome could not be stored: {first_line(error)}"
            run_end_unexecuted(run_id=run_id, status=RunStatus.ERROR, content=content, stage=None, event_role="error")


runner = InProcessRunner(execute=run_execute_unqueued, size=lambda: current().queue.max_concurrency)


def run_execute_inline(*, run_id) -> dict:
    """An inline run, executed; returns its poll body."""
    run_execute_unqueued(run_id=run_id)
    return run_to_wire(Run.objects.get(pk=run_id))


inline_runner = InProcessRunner(execute=run_execute_inline, size=lambda: None, name="agentos-inline")


def run_start_inline(*, submission: Submission) -> tuple[Run, Future]:
    """Start a run in this process for the request that waits on it (background=false): not queued, not ordered.

    The run row commits first; the returned future is done when the run has ended. The caller cancels the run
    (`run_cancel_by_id`) if its client goes away.
    """
    with transaction.atomic():
        run = _create_run(submission, queued=False)
    return run, inline_runner.start(run.run_id)
