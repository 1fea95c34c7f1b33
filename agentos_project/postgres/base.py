"""Django's PostgreSQL backend (psycopg2) with a small process-wide pool of idle connections.

Under ASGI every request runs on a thread of its own, so Django's persistent connections cannot be reused
and each request would open a connection (about 6 ms here, a third of an accept). This backend puts a
closed connection back into a pool when it is idle and healthy, and takes one from the pool on connect,
checking it with a round trip first, so a server restart costs a reconnect rather than an error.
"""

from __future__ import annotations

import os
import threading

import psycopg2
from django.db.backends.postgresql import base
from psycopg2 import extensions

IDLE_LIMIT = 32


class IdlePool:
    def __init__(self, limit: int = IDLE_LIMIT):
        self.limit = limit
        self.idle: list = []
        self.lock = threading.Lock()

    def take(self):
        """A healthy idle connection, or None."""
        while True:
            with self.lock:
                if not self.idle:
                    return None
                connection = self.idle.pop()
            if _alive(connection):
                return connection
            connection.close()

    def give(self, connection) -> bool:
        """Keep `connection` for reuse if it is open and outside any transaction; False means close it."""
        if connection.closed or connection.get_transaction_status() != extensions.TRANSACTION_STATUS_IDLE:
            return False
        with self.lock:
            if len(self.idle) >= self.limit:
                return False
            self.idle.append(connection)
        return True

    def clear(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for connection in idle:
            connection.close()


def _alive(connection) -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        connection.rollback()
    except psycopg2.Error:
        return False
    return not connection.closed


_pools: dict[str, IdlePool] = {}
_pools_lock = threading.Lock()


def _forget_inherited_connections() -> None:
    """In a forked child, idle connections belong to the parent: drop them without closing the parent's sockets."""
    for pool in _pools.values():
        pool.idle = []
        pool.lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited_connections)


def pool_for(conn_params: dict) -> IdlePool:
    key = repr(sorted((k, str(v)) for k, v in conn_params.items()))
    with _pools_lock:
        return _pools.setdefault(key, IdlePool())


def close_pools() -> None:
    """Stop pooling in this process and close every idle connection (before dropping a database)."""
    with _pools_lock:
        pools = list(_pools.values())
        for pool in pools:
            pool.limit = 0
    for pool in pools:
        pool.clear()


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        self._pool = pool_for(conn_params)
        connection = self._pool.take()
        if connection is None:
            return super().get_new_connection(conn_params)
        self.isolation_level = base.IsolationLevel.READ_COMMITTED
        return connection

    def _close(self):
        connection = self.connection
        pool = getattr(self, "_pool", None)
        if connection is not None and pool is not None and not self.in_atomic_block and pool.give(connection):
            return None
        return super()._close()
