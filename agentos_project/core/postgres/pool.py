"""A process's pools of PostgreSQL connections (psycopg2), one per set of connection parameters: idle connections
reused, open ones capped, waiting threads served first come, first served. Django's side of them is `base`.

A connection given back idle and healthy is kept for reuse, and taking one is checked without a round trip
(`_alive`): a server restart costs a reconnect, not an error. A pool's `size` (`POOL_SIZE`, `AGENTOS_DB_POOL_SIZE`)
caps the connections a process has open: a thread that needs one more waits, in the order threads came, then gets
PoolExhausted (an OperationalError: a 503 for a request, a retried settle for a worker) once it has waited `timeout`
seconds and no waiter was served for as long: a stuck pool fails fast, a busy one (a thousand runs' claims arriving
at once) serves everyone in turn. A `reserved()` thread (the lease heartbeat) never waits: it may open one connection
beyond the cap. A connection dropped unclosed frees its place when collected.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import threading
import time
import weakref

import psycopg2
from django.db import OperationalError
from psycopg2 import extensions

IDLE_LIMIT = 32
WAKE_SECONDS = 5.0
_local = threading.local()


def reserved() -> None:
    """Let this thread open a connection beyond the cap (for the one thread whose work cannot wait: the heartbeat)."""
    _local.reserved = True


class PoolExhausted(OperationalError):
    pass


class Waiter(threading.Condition):
    """A thread waiting in a `ConnectionPool` (on the pool's lock): served with a connection, or with None (a
    place to open one in)."""

    def __init__(self, lock) -> None:
        super().__init__(lock)
        self.served = False
        self.connection = None

    def serve(self, connection) -> None:
        self.connection, self.served = connection, True
        self.notify()


class Line(collections.deque):
    """The waiters of a pool, oldest first; `served_at` is when one was last served (the line moved)."""

    served_at = 0.0

    def popleft(self) -> Waiter:
        self.served_at = time.monotonic()
        return super().popleft()


class ConnectionPool:
    def __init__(self, limit: int = IDLE_LIMIT, size: int | None = None, timeout: float = 10.0):
        self.limit = limit
        self.size = size
        self.timeout = timeout
        self.idle: list = []
        self.open = 0
        self.lock = threading.RLock()  # a connection collected while the lock is held frees its place (`_free`)
        self._waiters: Line = Line()
        self._places: dict[int, weakref.finalize] = {}

    @property
    def waiting(self) -> int:
        """How many threads are waiting in `take` for a connection or a place right now (read-only)."""
        return len(self._waiters)

    def take(self):
        """A healthy idle connection, or None: the caller may open a new one (and must `count` it). Waits while
        the cap is reached; raises PoolExhausted once it has waited `timeout` and the line has not moved for as
        long.

        Waiting threads are served in the order they came: a connection given back, or a place freed, goes to
        the one that has waited longest, and no thread takes an idle connection or a free place while others
        wait. Otherwise a thread that gives its connection back and at once needs one again (a worker thread
        between the statements of a run and of the next it was handed) wins it over and over, and a thread that
        arrived meanwhile can wait for seconds (a claim waiting so long that the sweeper sends its message again).
        """
        connection = self._take_or_wait(time.monotonic() + self.timeout)
        if connection is None or _alive(connection):
            return connection
        self._reopen(connection)
        return None

    def _take_or_wait(self, deadline: float):
        with self.lock:
            if not self._waiters or getattr(_local, "reserved", False):  # the heartbeat never queues
                if self.idle:
                    return self.idle.pop()
                if self._may_open():
                    self.open += 1  # the caller opens it; `discard` gives the place back if that fails
                    return None
            waiter = Waiter(self.lock)
            self._waiters.append(waiter)
            self._serve_waiting()  # what a collection freed meanwhile (a dropped connection's place) is served now
            try:
                while not waiter.served:
                    remaining = max(deadline, self._waiters.served_at + self.timeout) - time.monotonic()
                    if remaining <= 0:
                        raise PoolExhausted(f"all {self.size} database connections of this process are in use")
                    # Asleep until served, or the line may have stalled: thousands of waiters each waking every
                    # second kept the GIL busy. A wake-up lost to a collection inside wait costs WAKE_SECONDS.
                    waiter.wait(min(remaining, WAKE_SECONDS))
            except BaseException:
                self._leave(waiter)
                raise
            return waiter.connection

    def _leave(self, waiter: Waiter) -> None:
        """`waiter` gives up (lock held): out of the queue, and what it was served meanwhile goes to the next."""
        if not waiter.served:
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
        elif waiter.connection is not None and self.limit > 0:
            self.idle.append(waiter.connection)
        elif waiter.connection is not None:  # pooling has stopped (`limit` 0)
            self.close(waiter.connection)
        else:
            self.open -= 1
        self._serve_waiting()

    def _reopen(self, connection) -> None:
        """`connection` went bad while idle: close it and keep its place for the one the caller opens instead."""
        with self.lock:
            finalizer = self._places.pop(id(connection), None)
        if finalizer is not None:
            finalizer.detach()
        with contextlib.suppress(psycopg2.Error):
            connection.close()

    def _serve_waiting(self) -> None:
        """Idle connections and free places go to the longest waiters (lock held)."""
        while self._waiters and (self.idle or self._has_place()):
            if self.idle:
                self._waiters.popleft().serve(self.idle.pop())
            else:
                self.open += 1  # the waiter opens a connection in it
                self._waiters.popleft().serve(None)

    def _has_place(self) -> bool:
        return self.size is None or self.open < self.size

    def _may_open(self) -> bool:
        return self._has_place() or getattr(_local, "reserved", False)

    def count(self, connection) -> None:
        """`connection` was opened in the place `take` made for it; it frees that place when closed or collected."""
        with self.lock:
            self._places[id(connection)] = weakref.finalize(connection, self._free, id(connection))

    def discard(self) -> None:
        """The connection `take` made a place for could not be opened."""
        with self.lock:
            self.open -= 1
            self._serve_waiting()

    def give(self, connection) -> bool:
        """Keep `connection` for reuse if it is open, outside any transaction, counted by this pool (not one a
        forked child inherited) and the pool is not over its cap (a reserved thread's extra connection is
        closed, so the reserve stays one); False means close it."""
        if connection.closed or connection.get_transaction_status() != extensions.TRANSACTION_STATUS_IDLE:
            return False
        with self.lock:
            over_cap = self.size is not None and self.open > self.size
            if id(connection) not in self._places or over_cap or self.limit <= 0:
                return False
            if self._waiters:
                self._waiters.popleft().serve(connection)
                return True
            if len(self.idle) >= self.limit:
                return False
            self.idle.append(connection)
        return True

    def close(self, connection) -> None:
        """Close `connection` (not kept) and free its place."""
        try:
            connection.close()
        finally:
            with self.lock:
                finalizer = self._places.pop(id(connection), None)
            if finalizer is not None:
                finalizer()

    def _free(self, key: int) -> None:
        with self.lock:
            self._places.pop(key, None)
            self.open -= 1
            self._serve_waiting()

    def clear(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for connection in idle:
            self.close(connection)


def _alive(connection) -> bool:
    """Whether an idle connection may be handed out, without a round trip: an idle connection the server has not
    written to since is healthy as far as anyone can tell without asking; one the server closed (a restart, an
    idle timeout, a terminated backend) or wrote to (its termination notice) has something to read.

    poll, not select: select refuses a descriptor above 1,023 (a worker with thousands of runs in flight has
    that many), and its arrays on the C stack leave 12 KB of each calling thread's stack resident."""
    if connection.closed:
        return False
    try:
        poller = select.poll()
        poller.register(connection.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError, psycopg2.Error):
        return False


_pools: dict[str, ConnectionPool] = {}
_pools_lock = threading.Lock()


def _forget_inherited_connections() -> None:
    """In a forked child, idle connections belong to the parent: drop them without closing the parent's sockets."""
    for pool in _pools.values():
        for finalizer in pool._places.values():
            finalizer.detach()
        pool.idle, pool.open, pool._places, pool._waiters = [], 0, {}, collections.deque()
        pool.lock = threading.RLock()


os.register_at_fork(after_in_child=_forget_inherited_connections)


def pool_for(conn_params: dict, *, size: int | None = None, timeout: float = 10.0) -> ConnectionPool:
    key = repr(sorted((k, str(v)) for k, v in conn_params.items()))
    with _pools_lock:
        return _pools.setdefault(key, ConnectionPool(size=size, timeout=timeout))


def pool_of(settings_dict: dict, conn_params: dict) -> ConnectionPool:
    """The pool of the database entry `settings_dict` (its POOL_SIZE and POOL_TIMEOUT)."""
    return pool_for(conn_params, size=settings_dict.get("POOL_SIZE"), timeout=settings_dict.get("POOL_TIMEOUT", 10.0))
