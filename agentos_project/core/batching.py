"""Work handed to a thread of the process's own, in order, so that the caller (a request, a worker thread, a run
loop) never waits on a broker or on Redis.

A subclass says what to do with what has queued up (`handle`, given up to `batch` items at a time), and may
`pause` after each batch: what arrives meanwhile waits for the next batch without waking the thread, so a busy
process pays one wake-up (two context switches) per pause instead of one per item. The thread and its queue are
made on first use in a process, a forked child included; a process that exits sends what it owes first (for up
to 5 s).
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time

log = logging.getLogger("agentos")


class BatchingThread:
    name = "agentos-batching"
    batch = 1
    pause = 0.0  # seconds the thread rests after each batch

    def __init__(self) -> None:
        self._start_lock = threading.Lock()
        self._owner_pid: int | None = None

    def _start(self) -> None:
        with self._start_lock:
            if self._owner_pid == os.getpid():
                return
            self._queue: queue.SimpleQueue = queue.SimpleQueue()
            self._idle = threading.Condition()
            self._pending = 0
            self._paused_until = 0.0  # a subclass may pause after a failure; a forked child starts unpaused
            threading.Thread(target=self._run, name=self.name, daemon=True).start()
            atexit.register(self.flush, 5)
            self._owner_pid = os.getpid()

    def put(self, item) -> None:
        """Queue `item` for the thread; returns at once."""
        if self._owner_pid != os.getpid():
            self._start()
        with self._idle:
            self._pending += 1
        self._queue.put(item)

    def handle(self, items: list) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while len(items) < self.batch:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self.handle(items)
            except Exception:  # never let one batch stop the thread
                log.exception("%s: %d item(s) not handled", self.name, len(items))
            finally:
                with self._idle:
                    self._pending -= len(items)
                    self._idle.notify_all()
            if self.pause:
                time.sleep(self.pause)

    def flush(self, timeout: float = 10) -> bool:
        """Wait until every item queued so far was handled (or dropped); False on timeout."""
        if self._owner_pid != os.getpid():
            return True
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)
