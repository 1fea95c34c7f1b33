"""Django's PostgreSQL backend (psycopg2) on this process's connection pools (`pool`).

Under ASGI each request runs on a thread of its own, so Django's persistent connections are never reused and each
request would open one (docs/benchmarks.md has the cost). Here a connection closed idle and healthy goes back to its
pool, and connecting takes one from it. Also: a thread's connection given back before a long wait
(`release_connection`), and a web process's pool warmed as it starts (`warm`).
"""

from __future__ import annotations

import threading
import time

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.postgresql import base

from .pool import pool_of


def release_connection() -> None:
    """Before a long wait outside any transaction (a model or a tool call): give this thread's connection back to
    the pool and forget its Django wrapper too, made again at the thread's next statement (about 10 µs). A worker
    holds a thread per run in flight, thousands of them waiting so, and a wrapper with its helpers is ~4.5 KB.
    Inside a transaction, nothing: the connection is the transaction's."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    if wrapper.in_atomic_block:
        return
    wrapper.close()
    del connections[DEFAULT_DB_ALIAS]


def warm(count: int, *, hold_seconds: float = 1.0) -> int:
    """Open up to `count` connections of the default database at once and leave them idle in this process's pool,
    so the first burst of requests after a start does not open one per request while the others wait (PostgreSQL
    starting a backend for each); returns how many were opened.

    Only places free under the pool's cap are used, and none is held for more than `hold_seconds`: a request that
    arrives meanwhile waits at most that long. A database that does not answer costs nothing but the attempt:
    connections are then opened on demand, as without this.
    """
    from django.db import connection  # each thread's own

    pool = pool_of(connection.settings_dict, connection.get_connection_params())
    with pool.lock:
        free = count if pool.size is None else pool.size - pool.open
    count = max(0, min(count, free))
    opened, release, reported = [], threading.Event(), threading.Semaphore(0)

    def hold() -> None:
        try:
            connection.ensure_connection()
            opened.append(True)
        except Exception:  # a database not up yet, or the places taken meanwhile: left to the requests
            pass
        finally:
            reported.release()
        release.wait(hold_seconds)  # held together, so each thread opens a connection of its own
        connection.close()  # into the idle pool

    threads = [threading.Thread(target=hold, name=f"agentos-pool-warm-{n}", daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + hold_seconds
    for _ in threads:
        if not reported.acquire(timeout=max(0.0, deadline - time.monotonic())):
            break
    release.set()
    deadline = time.monotonic() + hold_seconds  # those that opened one put it back at once; no one waits longer
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return len(opened)


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        self._pool = pool_of(self.settings_dict, conn_params)
        connection = self._pool.take()
        if connection is not None:
            self.isolation_level = base.IsolationLevel.READ_COMMITTED
            return connection
        try:
            connection = super().get_new_connection(conn_params)
        except BaseException:
            self._pool.discard()
            raise
        self._pool.count(connection)
        return connection

    def _close(self):
        connection = self.connection
        pool = getattr(self, "_pool", None)
        if connection is None or pool is None:
            return super()._close()
        if not self.in_atomic_block and pool.give(connection):
            return None
        with self.wrap_database_errors:
            pool.close(connection)
