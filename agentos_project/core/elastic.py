"""Threads made as work arrives that end once idle a while: a `concurrent.futures` executor (`ElasticThreads`).

A thread once started costs memory for as long as it lives: its stack pages, its Python frame stack, glibc's cache
of freed blocks (about 7 of each size), which grows with every piece of work the thread runs. A
`ThreadPoolExecutor` keeps every thread it ever made, so a process that once ran 3,000 things at once keeps 3,000
threads and their memory for good. Here a thread that found no work for `IDLE_SECONDS` ends and gives all that
back; the next burst makes new ones (about 0.1 ms each).
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future

IDLE_SECONDS = 5.0


class ElasticThreads:
    """A `concurrent.futures` executor of at most `max_workers` threads, each made when work finds no idle one and
    ended once it has waited `idle_seconds` for work. Work runs in the order it was submitted."""

    def __init__(self, max_workers: int, *, idle_seconds: float = IDLE_SECONDS, name: str = "agentos-pool"):
        if max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        self.max_workers, self.idle_seconds, self.name = max_workers, idle_seconds, name
        self._queue: collections.deque = collections.deque()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._idle = 0  # threads waiting in `_next` for work
        self._threads: set[threading.Thread] = set()
        self._made = 0
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.append((future, fn, args, kwargs))
            if len(self._queue) > self._idle and len(self._threads) < self.max_workers:
                self._start_thread()  # the idle threads have more than they can take
            self._work.notify()
        return future

    def _start_thread(self) -> None:
        """Start one more thread (lock held). If the system refuses one, the work waits for a thread there is; with
        none, it is taken back and the refusal raised to the caller."""
        self._made += 1
        thread = threading.Thread(target=self._serve, name=f"{self.name}-{self._made}", daemon=True)
        self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError:
            self._threads.discard(thread)
            if not self._threads:
                self._queue.pop()
                raise

    def _serve(self) -> None:
        while (item := self._next()) is not None:
            _run(*item)
            del item  # nothing of the work outlives it while the thread waits

    def _next(self):
        """The next work, or None when this thread ends (idle too long, or shut down), which it leaves then."""
        with self._lock:
            while not self._queue:
                if self._shutdown:
                    break
                self._idle += 1
                try:
                    woken = self._work.wait(self.idle_seconds)
                finally:
                    self._idle -= 1
                if not woken and not self._queue:
                    break
            else:
                return self._queue.popleft()
            self._threads.discard(threading.current_thread())
            return None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._queue:
                    self._queue.popleft()[0].cancel()
            self._work.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                thread.join()


def _run(future: Future, fn, args, kwargs) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as error:
        future.set_exception(error)
    else:
        future.set_result(result)
