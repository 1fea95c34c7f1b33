"""Claim and lease: taking a ticket for one attempt, the fence of its writes, its heartbeat and the sweeper's
dispatch note.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Iterable

from django.db.models.functions import Now

from agentos_project.core.postgres.prepared import Prepared, together

from .. import router
from ..models import Ticket, TicketStatus
from ..seam import CLAIMED, Claim, get_executor
from ..transition_log import changed
from . import fair
from ._sql import _LIVE_SQL, TABLE, _json, _update_returning, _while


def ticket_claim(*, ticket_id: str, worker_id: str, grace_seconds: float | None) -> Claim | None:
    """Take a ticket for one attempt: queued → running, or a stale running lease → running (reclaim).

    A queued ticket is claimable when available and its session's head (or unordered); a running one when its
    lease is older than the grace. Either way budget must be left. The same statement re-checks that no live
    ticket of a serialized session precedes it, so even a head flag gone wrong could not break the order.
    Sets attempt+1, locked_by, locked_at = now() (database clock), and starts the executor's work in the same
    statement (its `start_sql`): one round trip, no transaction around it. `grace_seconds=None` takes only a
    queued ticket (no reclaim). Idempotent for redelivered messages: the second claim matches nothing and
    returns None. A queued ticket past its deadline (`expires_at`) is never claimed: the sweeper cancels it.

    With fair share on (`fair`), the same message takes the user's lock first when the cap is on, claims a queued
    ticket only while its user runs fewer than the cap (else marks it held), and lets the user's oldest held
    ticket into the broker's line in its place.
    """
    params = {"ticket_id": ticket_id, "worker_id": worker_id, "grace": grace_seconds}
    fair_share, capped = fair.enabled(), fair.capped()
    statement = _claim_statement(get_executor().start_sql, fair_share, capped)
    if not fair_share:
        row = _update_returning(*statement.call(params))
        return None if row is None else _claim_from_row(ticket_id, worker_id, row)
    params.update(fair.policy())
    calls = [fair.USER_LOCK.call(params)] if capped else []
    row = _update_returning(*together(*calls, statement.call(params)))
    if row is None:
        return None
    *row, released = row
    if released is not None:
        router.on_commit(released)
    return _claim_from_row(ticket_id, worker_id, tuple(row))


def _claim_from_row(ticket_id, worker_id: str, row: tuple) -> Claim:
    """The claim a claiming statement's row (`_CLAIMED_COLUMNS`) describes, its change recorded."""
    attempt, max_attempts, session_id, payload, previous, waited, handed, component_type, component_id = row
    event = "reclaim" if previous == TicketStatus.RUNNING else "claim"
    changed(
        event, run_id=ticket_id, session_id=session_id, status=TicketStatus.RUNNING, attempt=attempt, worker=worker_id
    )
    return Claim(
        str(ticket_id),
        attempt,
        max_attempts,
        worker_id,
        session_id,
        _json(payload),
        waited_seconds=None if waited is None else float(waited),
        handoff_seconds=None if handed is None else float(handed),
        claimed_at=time.monotonic(),
        component=(component_type, component_id),
    )


_CLAIMED_COLUMNS = "attempt, max_attempts, session_id, payload, previous, waited, handed, component_type, component_id"
_CLAIM_TYPES = {"ticket_id": "uuid", "worker_id": "text", "grace": "float8"}


def _claim_ctes(start_sql: str, target: str, capped: bool = False) -> str:
    """The CTEs of a claim of the ticket whose id is the SQL expression `target`: `claimed` (its row, if claimed)
    and `started` (the executor's `start_sql`). `capped`: a queued ticket of a user is claimed only while the user
    runs fewer tickets than `%(cap)s` (a reclaim takes no more room than the lost attempt had)."""
    cap = f"AND (t.status = 'running' OR t.user_id IS NULL OR {fair.running('t.user_id')} < %(cap)s)" if capped else ""
    # The ticket is found by its key, whatever the statistics say: its state is tested in a sub-select, so that no
    # partial index's predicate (live, claimable...) follows from the statement's conditions and the planner never
    # scans such an index instead (the statistics of a queue that has grown since they were taken make that scan
    # look free, and it reads every ticket it holds).
    return f"""
        WITH old AS (SELECT id, status, serialized, created_at, updated_at,
                            attempt = 0 AND available_at = created_at AS fresh  -- never ran, never requeued
                     FROM {TABLE} WHERE id = {target}),
        {CLAIMED} AS (
            UPDATE {TABLE} AS t SET status = 'running', attempt = t.attempt + 1, locked_by = %(worker_id)s,
                   locked_at = statement_timestamp(), updated_at = statement_timestamp(), held = false,
                   expires_at = NULL  -- started: it never expires
            FROM old
            WHERE t.id = {target} AND t.id = old.id AND t.attempt < t.max_attempts
              AND (SELECT (t.status = 'queued' AND t.available_at <= statement_timestamp()
                           AND (t.expires_at IS NULL OR t.expires_at > statement_timestamp())
                           AND (t.is_head OR NOT t.serialized))
                          OR (t.status = 'running' AND %(grace)s IS NOT NULL
                              AND t.locked_at < statement_timestamp() - %(grace)s * interval '1 second'))
              AND NOT (t.serialized AND EXISTS (
                    SELECT 1 FROM {TABLE} AS earlier
                    WHERE earlier.session_id = t.session_id AND earlier.serialized
                      AND earlier.status IN {_LIVE_SQL} AND earlier.session_seq < t.session_seq))
              {cap}
            RETURNING t.id, t.attempt, t.max_attempts, t.session_id, t.payload, old.status AS previous,
                      t.component_type, t.component_id, t.user_id,
                      CASE WHEN old.fresh THEN extract(epoch FROM statement_timestamp() - old.created_at) END
                          AS waited,
                      CASE WHEN old.fresh AND old.serialized AND old.updated_at > old.created_at
                           THEN extract(epoch FROM statement_timestamp() - old.updated_at) END AS handed)
        , started AS ({start_sql})"""


@functools.cache
def _claim_statement(start_sql: str, fair_share: bool = False, capped: bool = False) -> Prepared:
    if not fair_share:
        sql = f"{_claim_ctes(start_sql, '%(ticket_id)s')} SELECT {_CLAIMED_COLUMNS} FROM {CLAIMED}"
        return Prepared("agentos_claim_started", sql, _CLAIM_TYPES)
    # Refused for the cap: held, until the user has room. Claimed: the user's oldest held ticket takes its place in
    # the broker's line, if the user has room with this one running.
    hold = f"""
        , capped AS (
            UPDATE {TABLE} AS c SET held = true
            WHERE c.id = %(ticket_id)s
              AND (SELECT c.turn = {fair.WAITING} AND c.available_at <= statement_timestamp())  -- by its key
              AND {fair.running("c.user_id")} >= %(cap)s
            RETURNING c.id)"""
    user, claimed_id = f"(SELECT user_id FROM {CLAIMED})", f"(SELECT id FROM {CLAIMED})"
    fresh = f"EXISTS (SELECT 1 FROM {CLAIMED} WHERE previous = 'queued')"
    let_in = fair.let_in(user, f"least(1, {fair.room(user, starting=1, besides=claimed_id)})", condition=fresh)
    sql = f"""{_claim_ctes(start_sql, "%(ticket_id)s", capped)} {hold if capped else ""}
        , released AS ({let_in})
        SELECT {_CLAIMED_COLUMNS}, (SELECT id FROM released LIMIT 1) FROM {CLAIMED}"""
    return Prepared("agentos_claim_started_fair", sql, {**_CLAIM_TYPES, **fair.FAIR_TYPES})


def ticket_owned(claim: Claim, *, unless_cancel_asked: bool = False):
    """The ticket, only while `claim` still owns it (running, this worker, this attempt): the fence of every write.
    `unless_cancel_asked`: and only while no cancel was asked of it."""
    condition = "status = 'running' AND locked_by = %s AND attempt = %s"
    if unless_cancel_asked:
        condition += " AND cancel_requested_at IS NULL"
    return Ticket.objects.filter(_while(condition, [claim.worker_id, claim.attempt]), pk=claim.ticket_id)


def ticket_heartbeat(*, worker_id: str, attempts: Iterable[tuple[str, int]]) -> int:
    """Refresh the leases of the attempts `worker_id` is executing now (locked_at = now()); returns how many.

    Only the (ticket id, attempt) pairs named are touched, so a lease whose attempt this process abandoned
    goes stale as it should. Idempotent.
    """
    attempts = [(uuid.UUID(str(ticket_id)), attempt) for ticket_id, attempt in attempts]
    named = [f"{ticket_id}:{attempt}" for ticket_id, attempt in attempts]  # as PostgreSQL writes a uuid: lowercase
    owned = _while("status = 'running' AND locked_by = %s AND id::text || ':' || attempt = ANY(%s)", [worker_id, named])
    return Ticket.objects.filter(owned, pk__in=[ticket_id for ticket_id, _ in attempts]).update(locked_at=Now())


def ticket_note_dispatch(*, ticket_id: str) -> bool:
    """Record that a stale running ticket was dispatched for reclaim (updated_at = now()), so the sweeper sends
    it one message per grace rather than one per pass. Changes no state."""
    return bool(Ticket.objects.filter(_while("status = 'running'"), pk=ticket_id).update(updated_at=Now()))
