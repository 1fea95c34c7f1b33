"""The test database from outside Django's connection: its URL, a backend killed as a server restart kills it,
and this process's connection pools closed or emptied."""

from __future__ import annotations

from urllib.parse import quote

import psycopg2
from django.db import connection

from agentos_project.core.postgres import pool as postgres


def database_url(settings: dict) -> str:
    """The URL of the database a Django connection's settings name, password included."""
    password = f":{quote(settings['PASSWORD'], safe='')}" if settings["PASSWORD"] else ""
    return f"postgresql://{settings['USER']}{password}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"


def terminate_backend(pid: int) -> None:
    """Kill one PostgreSQL backend from another connection, as a server restart kills every one; returns once it
    has exited (up to 5 s)."""
    admin = psycopg2.connect(**connection.get_connection_params())
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
    finally:
        admin.close()


def close_pools() -> None:
    """Stop pooling in this process and close every idle connection of its pools."""
    with postgres._pools_lock:
        pools = list(postgres._pools.values())
        for pool in pools:
            pool.limit = 0
    for pool in pools:
        pool.clear()


def clear_pools() -> None:
    """Close the idle connections of this process's pools (pooling goes on): the next query opens a new one."""
    with postgres._pools_lock:
        pools = list(postgres._pools.values())
    for pool in pools:
        pool.clear()
