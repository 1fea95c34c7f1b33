"""The SQL the ticket changes share: the table, the live statuses, the session lock, the guarded-UPDATE helpers
and the promotion of a session's next head.
"""

from __future__ import annotations

import datetime
import enum
import json
from collections.abc import Iterable

from django.db import connection, transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from agentos_project.core.postgres.prepared import Prepared, together

from .. import router
from ..models import Ticket, TicketStatus
from ..seam import FENCE, SETTLING, Settlement, get_executor

TABLE = Ticket._meta.db_table
_LIVE_SQL = "('queued', 'running', 'paused')"


class AdvisoryLock(enum.StrEnum):
    """Every advisory lock the queue takes, as the SQL expression that takes it until the transaction ends.

    A lock excludes only what takes the same key, and a rolling upgrade runs two builds against one database: a
    key is never renumbered, and a retired one never reused. PostgreSQL keeps single bigint keys (the sessions')
    apart from pairs of int keys (a space, then a key), so the two never meet.
    """

    # A session's changes of its head (accept, finish, sweep, cancel, requeue): a bigint key per session id.
    SESSION = "pg_advisory_xact_lock(hashtextextended(%(session_id)s, 7))"
    # The depth gate (`depth`): space 7, key 1, taken exclusively by an exact accept, shared by fast ones.
    DEPTH = "pg_advisory_xact_lock(7, 1)"
    DEPTH_SHARED = "pg_advisory_xact_lock_shared(7, 1)"
    # A user's claims under fair share's cap (`fair`): space 8, a key per user id; `user_id` is a column there.
    USER = "pg_advisory_xact_lock(8, hashtext(user_id))"


_SESSION_LOCK = Prepared("agentos_session_lock", f"SELECT {AdvisoryLock.SESSION}", {"session_id": "text"})


def session_lock(session_id: str) -> None:
    """Take the session's transaction-scoped advisory lock (released at commit or rollback)."""
    assert connection.in_atomic_block, "session_lock needs a transaction"
    with connection.cursor() as cursor:
        cursor.execute(*_SESSION_LOCK.call({"session_id": session_id}))


_MARK = Prepared("agentos_mark_settling", f"SELECT set_config('{SETTLING}', %(fence)s, true)", {"fence": "text"})


def mirror(settlement: Settlement) -> None:
    """Have the work mirror a ticket change whose guarded change just matched, in the caller's transaction: the
    transaction is marked as settling the ticket (`FENCE` true from then on), and the executor's statements for
    `settlement` (`Executor.settle`) follow in the same round trip; what they do once committed, after the commit.
    A finish does the same in its one message (`ticket_finish`)."""
    assert connection.in_atomic_block, "a ticket change and its mirror commit together"
    fence = f"{settlement.ticket_id}:{settlement.attempt}"
    statements = get_executor().settle(settlement, fence)
    with connection.cursor() as cursor:
        cursor.execute(*together(_MARK.call({"fence": fence}), *statements.calls))
    if statements.after is not None:
        transaction.on_commit(statements.after)


def _seconds(value: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=value)


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def _update_returning(sql: str, params: list) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _while(condition: str, params: Iterable = ()) -> RawSQL:
    """`condition` on the ticket's own columns, as a filter of a query that finds its ticket by the key: tested in a
    sub-select, so the planner takes no index from it (why: `_claim_ctes`)."""
    return RawSQL(f"(SELECT {condition})", list(params), output_field=BooleanField())


_PROMOTE = Prepared(
    "agentos_promote",
    f"""
    UPDATE {TABLE} SET is_head = true, updated_at = statement_timestamp()
    WHERE id = (SELECT id FROM {TABLE} WHERE session_id = %(session_id)s AND serialized AND status IN {_LIVE_SQL}
                ORDER BY session_seq LIMIT 1)
      AND NOT is_head
      AND NOT EXISTS (SELECT 1 FROM {TABLE} WHERE session_id = %(session_id)s AND is_head)
      AND (%(fence)s IS NULL OR {FENCE})  -- in a one-message finish: only if the finish matched
    RETURNING id, status, set_config('agentos.promoted', CASE status WHEN 'queued' THEN id::text ELSE '' END, true)
    """,
    {"session_id": "text", "fence": "text"},
)


def promote_next_head(session_id: str, *, publish: bool = True) -> str | None:
    """Make the session's earliest live serialized ticket its head, if it has none; returns it if it is queued
    (and, with `publish`, sends its message after commit).

    Runs inside the transaction that ended the previous head, under the session lock.
    """
    row = _update_returning(*_PROMOTE.call({"session_id": session_id, "fence": None}))
    if row is None or row[1] != TicketStatus.QUEUED:
        return None
    if publish:
        router.on_commit(row[0])
    return str(row[0])
