"""The depth gate: how an accept admits against `AGENTOS_MAX_QUEUE_DEPTH`, exact under any concurrency."""

from __future__ import annotations

import dataclasses
import functools

from django.db import connection

from agentos_project.core.postgres.prepared import Prepared

from ._sql import TABLE, AdvisoryLock

FAST, EXACT = "fast", "exact"


@dataclasses.dataclass(frozen=True)
class DepthGate:
    """How one accept admits: `mode` (FAST, EXACT, or None when uncapped), the advisory `lock` it takes after its
    session lock, the SQL condition `open` it writes under, and that condition's `params`."""

    mode: str | None
    lock: Prepared | None = None
    open: str = "true"
    params: dict = dataclasses.field(default_factory=dict)


_SHARED_DEPTH_LOCK = Prepared("agentos_depth_shared", f"SELECT {AdvisoryLock.DEPTH_SHARED}", {})
_DEPTH_LOCK = Prepared("agentos_depth", f"SELECT {AdvisoryLock.DEPTH}", {})


def depth_gate(max_depth: int, mode: str) -> DepthGate:
    """How an accept admits against `AGENTOS_MAX_QUEUE_DEPTH`: the lock it takes and the condition it writes under.

    Exact: under an exclusive lock that every capped accept takes (after its session lock), count the queued
    tickets; each count sees every accept that held the lock before (committed or rolled back by then).
    Fast, when the queue is far from full: under a *shared* lock, count at most `max_depth - H` queued tickets,
    where H is the server's `max_connections`, and admit when fewer are seen. The accepts that hold the shared
    lock at once are fewer than H (each holds a connection), and none can hold it while an exact one holds the
    exclusive lock, so the queued tickets plus those in flight stay below `max_depth`: the one with the latest
    snapshot saw fewer than `max_depth - H`, and every other in flight took the lock before that snapshot. Seeing
    as many, an accept tries again, exactly. So the exact path (one accept at a time) serves only a queue that is
    nearly full.
    """
    if max_depth <= 0:
        return DepthGate(None)
    room = max_depth - max_connections()
    if mode == FAST and room > 0:
        lock, limit = _SHARED_DEPTH_LOCK, room
    else:
        mode, lock, limit = EXACT, _DEPTH_LOCK, max_depth
    condition = (
        f"(SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE status = 'queued' LIMIT %(depth_limit)s) AS q)"
        " < %(depth_limit)s"
    )
    params = {"depth_limit": limit}
    return DepthGate(mode, lock, condition, params)


@functools.cache
def _max_connections_of(alias: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        return int(cursor.fetchone()[0])


def max_connections() -> int:
    """The database server's `max_connections` (read once per connection alias): the most accepts in flight."""
    return _max_connections_of(connection.alias)
