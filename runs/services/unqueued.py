"""AGENTOS_QUEUE_DURABLE=false: background runs execute in the accepting process (AgentOS' non-durable mode).

At most AGENTOS_MAX_CONCURRENCY run at once per process; runs beyond the cap wait as PENDING for a slot.
Nothing here survives the process: a run accepted by a process that dies is lost, as AgentOS documents
for this mode. There is no ticket, no per-session order and no idempotency.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import close_old_connections, connection, transaction

log = logging.getLogger("agentos.runs")
UNCAPPED_THREADS = 256


class InProcessRunner:
    """A bounded pool of threads that run `execute(run_id=...)` for runs accepted by this process.

    `size()` is the pool's size (None: UNCAPPED_THREADS), read when the process first uses it.
    """

    def __init__(self, execute: Callable[..., None], size: Callable[[], int | None], name: str = "agentos-run") -> None:
        self._execute_run = execute
        self._size = size
        self._name = name
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pid: int | None = None

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(self._size() or UNCAPPED_THREADS, self._name)
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
