"""Runs without a ticket, executed in the accepting process: inline runs (background=false), and background runs
with AGENTOS_QUEUE_DURABLE=false (AgentOS' non-durable mode).

At most AGENTOS_MAX_CONCURRENCY background runs execute at once per process; runs beyond the cap wait as PENDING
for a slot. Nothing here survives the process: a run accepted by a process that dies is lost, as AgentOS documents
for this mode. There is no ticket, no per-session order and no idempotency. A process that stops gracefully (uvicorn
after SIGTERM) drains them first (`stop_in_process_runs`), and ends what did not finish with a stored reason, never
leaving a run PENDING or RUNNING for good.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from django.db import close_old_connections, connection, transaction

from agentos_project.core import stopping
from agentos_project.core.conf import current
from agentos_project.core.elastic import ElasticThreads
from agentos_project.core.exceptions import first_line
from agents_registry.context import LegStatus
from queueing.shutdown import INTERRUPTED

from ..models import Run, RunStatus
from ..selectors import run_to_wire
from ..submission import Accepted, Submission
from . import cancel_signal
from .leg import LegResult, cancelled_leg, run_leg
from .sessions import session_own
from .states import (
    run_create,
    run_end_unexecuted,
    run_end_unqueued,
    run_record_leg,
    run_start_unqueued,
    send_statements,
)

log = logging.getLogger("agentos.runs")
UNCAPPED_THREADS = 256


class InProcessRunner:
    """A bounded set of threads that run `execute(run_id=...)` for runs accepted by this process, made as runs
    arrive and ended once idle (`ElasticThreads`).

    `size()` is how many at most (None: UNCAPPED_THREADS), read when the process first uses them.
    """

    def __init__(self, execute: Callable[..., None], size: Callable[[], int | None], name: str = "agentos-run") -> None:
        self._execute_run = execute
        self._size = size
        self._name = name
        self._lock = threading.Lock()
        self._threads: ElasticThreads | None = None
        self._pid: int | None = None
        self.live: set[str] = set()

    def _threads_here(self) -> ElasticThreads:
        with self._lock:
            if self._pid != os.getpid():
                self._threads = ElasticThreads(self._size() or UNCAPPED_THREADS, name=self._name)
                self._pid, self.live = os.getpid(), set()
                _Stop.runners.add(self)
                _Stop.at_exit()
            return self._threads

    def submit(self, run_id) -> None:
        """Run `run_id` on this process's threads once the current transaction commits."""
        transaction.on_commit(lambda: self.start(run_id))

    def start(self, run_id) -> Future:
        """Run `run_id` on the threads now; the future is done when the run has ended. Its id is in `live` until
        then (waiting for a slot, or executing)."""
        threads = self._threads_here()
        with self._lock:
            self.live.add(str(run_id))
        future = threads.submit(self._execute, run_id)
        future.add_done_callback(lambda _: self._ended(str(run_id)))
        return future

    def _ended(self, run_id: str) -> None:
        with self._lock:
            self.live.discard(run_id)

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
    threads (runs.services.unqueued). Not durable, not ordered, no ticket."""
    with transaction.atomic():
        run = _create_run(submission, queued=False)
        runner.submit(run.run_id)
    return Accepted(str(run.run_id), run.session_id, run.status)


def run_execute_unqueued(*, run_id) -> None:
    """Execute a run that has no ticket (inline, or in-process with the durable queue off): one attempt per leg
    (a continue makes another), recorded like a queued run's. A run cancelled while it waited for its slot is
    not started; one cancelled while it ran ends CANCELLED even if it paused or failed meanwhile; one its stopping
    process interrupted ends ERROR, `interrupted by worker shutdown`."""
    if _Stop.draining.is_set():  # it waited for its slot when its process began to stop: it never starts
        _end_interrupted(str(run_id))
        return
    if not run_start_unqueued(run_id=run_id):
        return
    try:
        run = Run.objects.get(pk=run_id)
        wake = threading.Event()  # set by a cancel, and by the stop's interrupt
        with cancel_signal.watcher.watch(run_id, wake=wake) as cancel, _Stop.interruptible(wake):
            timeout = current().queue.timeout_seconds
            stop = lambda: cancel.is_set() or _Stop.interrupted.is_set()  # noqa: E731
            leg = run_leg(run, attempt=run.attempt, timeout_seconds=timeout, cancelled=stop, woken=wake)
        with transaction.atomic():
            # The row locked first: a cancel asked until now is seen here, one asked later finds the run ended.
            asked = Run.objects.select_for_update().values_list("cancel_requested_at", flat=True).get(pk=run_id)
            if (asked or cancel.is_set()) and leg.yields_to_cancel:
                leg = cancelled_leg(leg)
            elif _Stop.interrupted.is_set() and (leg.result is None or leg.result.status == LegStatus.CANCELLED):
                leg = LegResult(leg.sink, leg.journal, error=INTERRUPTED, permanent=True)
            send_statements(run_record_leg(run_id=run_id, attempt=run.attempt, leg=leg, final=True))
    except Exception as error:  # never leave a run without a ticket RUNNING: no sweeper would end it
        with transaction.atomic():
            content = f"Run outcome could not be stored: {first_line(error)}"
            ending = {"status": RunStatus.ERROR, "content": content, "stage": None, "event_role": "error"}
            send_statements(run_end_unexecuted(run_id=run_id, **ending))


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


class _Stop:
    """A stopping process's in-process runs: `draining` once it began to stop (no run starts), `interrupted` once
    the drain window closed (running legs stop at their next checkpoint, woken if they sleep)."""

    draining = threading.Event()
    interrupted = threading.Event()
    runners: set[InProcessRunner] = set()
    wakes: set[threading.Event] = set()
    lock = threading.Lock()

    @classmethod
    def at_exit(cls) -> None:
        stopping.at_stop(stop_in_process_runs)

    @classmethod
    @contextlib.contextmanager
    def interruptible(cls, wake: threading.Event):
        with cls.lock:
            cls.wakes.add(wake)
        if cls.interrupted.is_set():
            wake.set()
        try:
            yield
        finally:
            with cls.lock:
                cls.wakes.discard(wake)

    @classmethod
    def live(cls) -> set[str]:
        return set().union(*(runner.live for runner in list(cls.runners)))


STOPPED_LEG_SECONDS = 2.0  # how long an interrupted leg has to reach a checkpoint and record itself


def stop_in_process_runs(*, window: float | None = None) -> list[str]:
    """Stop this process's in-process runs as it stops (`agentos_project.core.stopping`, registered once it ran one):
    wait up to `window` seconds (AGENTOS_STOP_TIMEOUT_SECONDS less `stopping.WEB_GRACEFUL_SECONDS`) for them to
    end; then interrupt what still executes (it ends ERROR, `interrupted by worker shutdown`, at its next
    checkpoint) and, after STOPPED_LEG_SECONDS more, end the same way every run of the process that is still PENDING
    (waiting for its slot) or RUNNING (blocked in a call: its late record is fenced out). Returns the runs ended
    from here."""
    if window is None:
        window = max(0.0, current().queue.stop_timeout_seconds - stopping.WEB_GRACEFUL_SECONDS)
    _Stop.draining.set()
    if not _wait_for_runs(window):
        log.warning("interrupting %d in-process run(s) at shutdown", len(_Stop.live()))
        _Stop.interrupted.set()
        with _Stop.lock:
            for wake in _Stop.wakes:
                wake.set()
        _wait_for_runs(STOPPED_LEG_SECONDS)
    ended = [run_id for run_id in sorted(_Stop.live()) if _end_interrupted(run_id)]
    connection.close()
    return ended


def _wait_for_runs(seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _Stop.live():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _end_interrupted(run_id: str) -> bool:
    try:
        with transaction.atomic():
            return run_end_unqueued(run_id=run_id, content=INTERRUPTED)
    except Exception:  # the database may be away: the run stays as it is, as it would have without this
        log.exception("run=%s could not be ended at shutdown", run_id)
        return False
