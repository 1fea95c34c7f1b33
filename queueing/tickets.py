"""Every ticket state change (CONTRACT section 4), each one guarded UPDATE.

A function whose guard matches no row changes nothing and says so by its return value: the caller lost
the race and must not act. Changes that move a session's head (accept, finish, sweep, cancel, requeue)
first take the session's advisory lock, so an accept and the end of the head cannot both miss each other.
Times come from the database clock: `now()` below is PostgreSQL's statement_timestamp(), the clock
Django's `Now()` uses too.

The transition table, which `tests/queueing/test_transitions.py` walks:

    from      event                                  to
    -         accept                                 queued (attempt 0)
    queued    claim (available, head or unordered)   running, attempt+1, locked_by, locked_at=now()
    running   claim of a stale lease, budget left    running, attempt+1, new owner         (reclaim)
    running   heartbeat by owner                     running, locked_at=now()
    running   cancel                                 running, cancel_requested_at=now()    (its attempt stops)
    running   finish by owner                        completed | failed | cancelled | paused
    running   error by owner, budget left            queued, available_at = now + backoff  (retry)
    running   stale, budget spent                    failed                                (sweep)
    running   stale, budget spent, job still paused  paused                                (park)
    running   stale, cancel asked                    cancelled                             (sweep)
    queued    cancel                                 cancelled
    paused    cancel                                 cancelled
    paused    continue                               queued, one more attempt, same session_seq
    failed    requeue                                queued, one more attempt, new session_seq
    cancelled requeue                                queued, one more attempt, new session_seq
    terminal  prune (older than retention)           deleted

Once a cancel was asked of a running ticket, its attempt can no longer pause it, send it back to the queue for a
retry, or be parked: each of those guards wants no cancel asked, and the attempt ends it cancelled instead
(`ticket_cancel_asked`, `queueing.settle`). So a cancel asked while an attempt runs ends the ticket cancelled,
whatever that attempt was about to do, and leaves nothing behind for a later one.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import json
import time
import uuid
from collections.abc import Iterable

from django.db import connection, transaction
from django.db.models import BooleanField, F
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now

from agentos_project.postgres.prepared import Prepared, together

from . import router
from .changes import changed, pruned
from .exceptions import QueueFull
from .models import TERMINAL, Ticket, TicketStatus
from .seam import (
    ADMITTED,
    CLAIMED,
    FENCE,
    GATE,
    ONLY_THE_TICKET,
    SETTLING,
    Admitted,
    Claim,
    NewTicket,
    Outcome,
    Rows,
    Settlement,
    SettleStatements,
    get_executor,
)

SWEEP_ERROR = (
    "Worker lost and attempt budget exhausted; run was not re-executed. "
    "Raise AGENTOS_MAX_ATTEMPTS to let a lost run execute again, or requeue it with POST /queue/jobs/{id}/requeue."
)
TABLE = Ticket._meta.db_table
_LIVE_SQL = "('queued', 'running', 'paused')"


def session_lock(session_id: str) -> None:
    """Take the session's transaction-scoped advisory lock (released at commit or rollback)."""
    assert connection.in_atomic_block, "session_lock needs a transaction"
    with connection.cursor() as cursor:
        cursor.execute(*_SESSION_LOCK.call({"session_id": session_id}))


def _seconds(value: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=value)


FAST, EXACT = "fast", "exact"
DEPTH_LOCK = (7, 1)  # the two-int advisory key space, apart from the sessions' single bigint keys


def ticket_accept(*, ticket: NewTicket, rows: Rows = ONLY_THE_TICKET, max_queue_depth: int = 0) -> Admitted:
    """Insert a `queued` ticket at the back of its session, with the caller's `rows`, in one round trip and one
    transaction, and publish it once that commits.

    Outside a transaction the statements go as one message, which PostgreSQL runs as one transaction that is
    committed (synchronously) when this returns: the session lock first, then the depth lock, then one statement
    that writes the caller's rows and the ticket, each seeing what every earlier holder of the session lock
    committed. `session_seq` is 1 + the largest of the session's live tickets; the ticket is its session's head
    when no live serialized ticket precedes it, and only then (or when unordered) is a message published.
    With `max_queue_depth` > 0 nothing is written when the ticket would make more than that many queued, exact
    under any concurrency (see `_depth_gate`), and `QueueFull` is raised. Inside a caller's transaction it joins
    that transaction.
    """
    # Inside the caller's transaction a shared lock could not be let go of before trying again exactly: exact at once.
    depth = _depth_gate(max_queue_depth, EXACT if connection.in_atomic_block else FAST)
    admitted = _accept_once(ticket, rows, depth)
    if not admitted.accepted and admitted.full and depth.mode == FAST:
        admitted = _accept_once(ticket, rows, _depth_gate(max_queue_depth, EXACT))
    if admitted.full:
        raise QueueFull()
    if admitted.accepted:
        changed("accept", run_id=ticket.id, session_id=ticket.session_id, status=TicketStatus.QUEUED, attempt=0)
        if admitted.publish:
            router.on_commit(ticket.id)
    return admitted


@dataclasses.dataclass(frozen=True)
class _Gate:
    mode: str | None
    lock: Prepared | None = None
    open: str = "true"
    params: dict = dataclasses.field(default_factory=dict)


_DEPTH_TYPES = {"depth_key1": "int", "depth_key2": "int"}
_SHARED_DEPTH_LOCK = Prepared(
    "agentos_depth_shared", "SELECT pg_advisory_xact_lock_shared(%(depth_key1)s, %(depth_key2)s)", _DEPTH_TYPES
)
_DEPTH_LOCK = Prepared("agentos_depth", "SELECT pg_advisory_xact_lock(%(depth_key1)s, %(depth_key2)s)", _DEPTH_TYPES)
_SESSION_LOCK = Prepared(
    "agentos_session_lock", "SELECT pg_advisory_xact_lock(hashtextextended(%(session_id)s, 7))", {"session_id": "text"}
)


def _depth_gate(max_depth: int, mode: str) -> _Gate:
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
        return _Gate(None)
    room = max_depth - _max_connections()
    if mode == FAST and room > 0:
        lock, limit = _SHARED_DEPTH_LOCK, room
    else:
        mode, lock, limit = EXACT, _DEPTH_LOCK, max_depth
    condition = (
        f"(SELECT count(*) FROM (SELECT 1 FROM {TABLE} WHERE status = 'queued' LIMIT %(depth_limit)s) AS q)"
        " < %(depth_limit)s"
    )
    params = {"depth_key1": DEPTH_LOCK[0], "depth_key2": DEPTH_LOCK[1], "depth_limit": limit}
    return _Gate(mode, lock, condition, params)


@functools.cache
def _max_connections_of(alias: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        return int(cursor.fetchone()[0])


def _max_connections() -> int:
    return _max_connections_of(connection.alias)


_TICKET_TYPES = {
    "ticket_id": "uuid",
    "component_type": "text",
    "component_id": "text",
    "session_id": "text",
    "user_id": "text",
    "max_attempts": "int",
    "serialized": "boolean",
    "idempotency_key": "text",
    "idempotency_scope": "text",
    "request_digest": "text",
    "payload": "jsonb",
    "depth_limit": "int",
}
_accepts: dict[tuple[str, str | None], Prepared] = {}


def _accept_statement(rows: Rows, gate: _Gate) -> Prepared:
    key = (rows.name, gate.mode)
    if key not in _accepts:
        answers = ", ".join((*rows.answers, "(SELECT publish FROM ticket)"))
        sql = f"""
            WITH {GATE} AS (SELECT {gate.open} AS open),
            {rows.ctes},
            line AS (SELECT coalesce(max(session_seq), 0) AS last_seq,
                            coalesce(bool_or(serialized), false) AS occupied
                     FROM {TABLE} WHERE session_id = %(session_id)s AND status IN {_LIVE_SQL}),
            ticket AS (
                INSERT INTO {TABLE} (id, component_type, component_id, session_id, user_id, status, attempt,
                                     max_attempts, session_seq, serialized, is_head, idempotency_key,
                                     idempotency_scope, request_digest, payload)
                SELECT %(ticket_id)s, %(component_type)s, %(component_id)s, %(session_id)s, %(user_id)s, 'queued', 0,
                       %(max_attempts)s, line.last_seq + 1, %(serialized)s, %(serialized)s AND NOT line.occupied,
                       %(idempotency_key)s, %(idempotency_scope)s, %(request_digest)s, %(payload)s
                FROM {ADMITTED}, line
                RETURNING is_head OR NOT serialized AS publish)
            SELECT (SELECT open FROM {GATE}), EXISTS (SELECT 1 FROM ticket), {answers}
        """
        _accepts[key] = Prepared(
            f"agentos_accept_{rows.name}_{gate.mode or 'uncapped'}", sql, {**_TICKET_TYPES, **rows.types}
        )
    return _accepts[key]


def _accept_once(ticket: NewTicket, rows: Rows, gate: _Gate) -> Admitted:
    params = {
        **rows.params,
        **gate.params,
        "ticket_id": ticket.id,
        "component_type": ticket.component_type,
        "component_id": ticket.component_id,
        "session_id": ticket.session_id,
        "user_id": ticket.user_id,
        "max_attempts": ticket.max_attempts,
        "serialized": ticket.serialized,
        "idempotency_key": ticket.idempotency_key,
        "idempotency_scope": ticket.idempotency_scope,
        "request_digest": ticket.request_digest,
        "payload": json.dumps(ticket.payload),
    }
    calls = [_SESSION_LOCK.call(params)]
    if gate.lock is not None:
        calls.append(gate.lock.call(params))
    sql, values = together(*calls, _accept_statement(rows, gate).call(params))
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        opened, accepted, *answers, publish = cursor.fetchone()
    return Admitted(accepted=accepted, full=not opened, answers=tuple(answers), publish=bool(publish))


def ticket_claim(*, ticket_id: str, worker_id: str, grace_seconds: float) -> Claim | None:
    """Take a ticket for one attempt: queued → running, or a stale running lease → running (reclaim).

    A queued ticket is claimable when available and its session's head (or unordered); a running one when its
    lease is older than the grace. Either way budget must be left. The same statement re-checks that no live
    ticket of a serialized session precedes it, so even a head flag gone wrong could not break the order.
    Sets attempt+1, locked_by, locked_at = now() (database clock), and lets the executor mark its job started
    in the same transaction. Idempotent for redelivered messages: the second claim matches nothing and
    returns None.
    """
    if _start_sql():
        return _claim(ticket_id=ticket_id, worker_id=worker_id, grace_seconds=grace_seconds)
    with transaction.atomic():
        claim = _claim(ticket_id=ticket_id, worker_id=worker_id, grace_seconds=grace_seconds)
        if claim is not None:
            get_executor().start(claim)
    return claim


def _claim(*, ticket_id: str, worker_id: str, grace_seconds: float | None) -> Claim | None:
    """The claim statement, which also starts the job when the executor gives `start_sql` (else the caller calls
    `start` in the same transaction); `grace_seconds=None` takes only a queued ticket (no reclaim)."""
    params = {"ticket_id": ticket_id, "worker_id": worker_id, "grace": grace_seconds}
    sql, values = _claim_statement(_start_sql()).call(params)
    row = _update_returning(sql, values)
    return None if row is None else _claimed(ticket_id, worker_id, row)


def _claimed(ticket_id, worker_id: str, row: tuple) -> Claim:
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
_claims: dict[str | None, Prepared] = {}


def _claiming(start_sql: str | None, target: str) -> str:
    """The CTEs of a claim of the ticket whose id is the SQL expression `target`: `claimed` (its row, if claimed)
    and, with the executor's `start_sql`, `started`."""
    started = f", started AS ({start_sql})" if start_sql else ""
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
                   locked_at = statement_timestamp(), updated_at = statement_timestamp()
            FROM old
            WHERE t.id = {target} AND t.id = old.id AND t.attempt < t.max_attempts
              AND (SELECT (t.status = 'queued' AND t.available_at <= statement_timestamp()
                           AND (t.is_head OR NOT t.serialized))
                          OR (t.status = 'running' AND %(grace)s IS NOT NULL
                              AND t.locked_at < statement_timestamp() - %(grace)s * interval '1 second'))
              AND NOT (t.serialized AND EXISTS (
                    SELECT 1 FROM {TABLE} AS earlier
                    WHERE earlier.session_id = t.session_id AND earlier.serialized
                      AND earlier.status IN {_LIVE_SQL} AND earlier.session_seq < t.session_seq))
            RETURNING t.id, t.attempt, t.max_attempts, t.session_id, t.payload, old.status AS previous,
                      t.component_type, t.component_id,
                      CASE WHEN old.fresh THEN extract(epoch FROM statement_timestamp() - old.created_at) END
                          AS waited,
                      CASE WHEN old.fresh AND old.serialized AND old.updated_at > old.created_at
                           THEN extract(epoch FROM statement_timestamp() - old.updated_at) END AS handed)
        {started}"""


def _claim_statement(start_sql: str | None) -> Prepared:
    if start_sql not in _claims:
        sql = f"{_claiming(start_sql, '%(ticket_id)s')} SELECT {_CLAIMED_COLUMNS} FROM {CLAIMED}"
        name = "agentos_claim_started" if start_sql else "agentos_claim"
        _claims[start_sql] = Prepared(name, sql, _CLAIM_TYPES)
    return _claims[start_sql]


def _start_sql() -> str | None:
    return getattr(get_executor(), "start_sql", None)


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def _update_returning(sql: str, params: list) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _while(condition: str, params: Iterable = ()) -> RawSQL:
    """`condition` on the ticket's own columns, as a filter of a query that finds its ticket by the key: tested in a
    sub-select, so the planner takes no index from it (why: `_claiming`)."""
    return RawSQL(f"(SELECT {condition})", list(params), output_field=BooleanField())


def ticket_owned(claim: Claim, *, unless_cancel_asked: bool = False):
    """The ticket, only while `claim` still owns it (running, this worker, this attempt): the fence of every write.
    `unless_cancel_asked`: and only while no cancel was asked of it."""
    condition = "status = 'running' AND locked_by = %s AND attempt = %s"
    if unless_cancel_asked:
        condition += " AND cancel_requested_at IS NULL"
    return Ticket.objects.filter(_while(condition, [claim.worker_id, claim.attempt]), pk=claim.ticket_id)


def ticket_cancel_asked(*, claim: Claim) -> bool:
    """Whether a cancel was asked of the ticket while `claim` still owns it: then a pause or a retry of the attempt
    matches nothing, and the attempt must end the ticket cancelled."""
    return ticket_owned(claim).filter(cancel_requested_at__isnull=False).exists()


def ticket_heartbeat(*, worker_id: str, claims: Iterable[tuple[str, int]]) -> int:
    """Refresh the leases of the attempts `worker_id` is executing now (locked_at = now()); returns how many.

    Only the (ticket id, attempt) pairs named are touched, so a lease whose attempt this process abandoned
    goes stale as it should. Idempotent.
    """
    claims = [(uuid.UUID(str(ticket_id)), attempt) for ticket_id, attempt in claims]
    named = [f"{ticket_id}:{attempt}" for ticket_id, attempt in claims]  # as PostgreSQL writes a uuid: lowercase
    owned = _while("status = 'running' AND locked_by = %s AND id::text || ':' || attempt = ANY(%s)", [worker_id, named])
    return Ticket.objects.filter(owned, pk__in=[ticket_id for ticket_id, _ in claims]).update(locked_at=Now())


def ticket_note_dispatch(*, ticket_id: str) -> bool:
    """Record that a stale running ticket was dispatched for reclaim (updated_at = now()), so the sweeper sends
    it one message per grace rather than one per pass. Changes no state."""
    return bool(Ticket.objects.filter(_while("status = 'running'"), pk=ticket_id).update(updated_at=Now()))


@dataclasses.dataclass(frozen=True)
class Finished:
    """A settled attempt. `next_claim`: the session's new head, claimed for the caller when it asked to hand off."""

    next_claim: Claim | None = None


_FINISH = Prepared(
    "agentos_finish",
    f"""
    UPDATE {TABLE} SET status = %(status)s, error = %(error)s, locked_by = NULL, locked_at = NULL,
           is_head = is_head AND NOT %(terminal)s,
           completed_at = CASE WHEN %(terminal)s THEN statement_timestamp() END, updated_at = statement_timestamp()
    WHERE id = %(ticket_id)s  -- by its key, whatever the statistics say (see _claiming): its state is tested apart
      AND (SELECT status = 'running' AND locked_by = %(worker_id)s AND attempt = %(attempt)s
                  AND (NOT %(yields)s OR cancel_requested_at IS NULL))  -- a pause gives way to a cancel asked
    RETURNING set_config('{SETTLING}', %(fence)s, true)  -- FENCE, for the rest of the transaction
    """,
    {
        "yields": "boolean",
        "status": "text",
        "error": "text",
        "terminal": "boolean",
        "ticket_id": "uuid",
        "worker_id": "text",
        "attempt": "int",
        "fence": "text",
    },
)


def ticket_finish(*, claim: Claim, outcome: Outcome, hand_off: bool = False) -> Finished | None:
    """End the attempt `claim` owns: running → completed | failed | cancelled | paused, in one short transaction.

    Fenced: matches only while this worker still owns this attempt; None means a newer attempt or a sweep
    took the ticket, and nothing (ticket or the executor's rows) was written. An outcome that yields to a cancel
    (a pause, a retryable failure) matches only while no cancel was asked: None then too (`ticket_cancel_asked`).
    The executor's writes go in the same transaction. A terminal head hands its session to the next ticket:
    published after commit, or, with `hand_off`, claimed for the same worker in the same transaction (its job
    started there too) and returned, so the caller runs it at once on the same thread: no broker round trip, no
    extra commit.

    When the executor gives its writes as statements (`settle_statements`), the whole change is one message that
    PostgreSQL runs as one transaction, committed when this returns: the session lock is held for no round trip.
    """
    assert outcome.status in (*TERMINAL, TicketStatus.PAUSED)
    terminal = outcome.status != TicketStatus.PAUSED
    params = {
        "session_id": claim.session_id,
        "yields": outcome.yields_to_cancel,
        "status": outcome.status,
        "error": outcome.error,
        "terminal": terminal,
        "ticket_id": claim.ticket_id,
        "worker_id": claim.worker_id,
        "attempt": claim.attempt,
        "fence": f"{claim.ticket_id}:{claim.attempt}",
    }
    settlement = Settlement(claim.ticket_id, outcome.status, claim.attempt, outcome.error, outcome)
    statements = _settle_statements(settlement, params["fence"])
    if statements is not None:
        return _finish_in_one_message(claim, params, statements, terminal=terminal, hand_off=hand_off)
    with transaction.atomic():
        updated = _update_returning(*together(_SESSION_LOCK.call(params), _FINISH.call(params)))  # one round trip
        if not updated:
            return None
        _changed_by(claim, "finish", outcome.status)
        get_executor().settle(settlement)
        next_ticket_id = promote_next_head(claim.session_id, publish=not hand_off) if terminal else None
        next_claim = None
        if hand_off and next_ticket_id is not None:
            next_claim = _claim(ticket_id=next_ticket_id, worker_id=claim.worker_id, grace_seconds=None)
            if next_claim is None:  # not available yet: leave it to the broker
                router.on_commit(next_ticket_id)
            elif not _start_sql():
                get_executor().start(next_claim)
    return Finished(next_claim)


def _settle_statements(settlement: Settlement, fence: str) -> SettleStatements | None:
    statements = getattr(get_executor(), "settle_statements", None)
    return statements(settlement, fence) if statements is not None and _start_sql() else None


_PROMOTED = "nullif(current_setting('agentos.promoted', true), '')::uuid"
# The session lock, and both marks cleared: a caller's transaction may hold them from an earlier finish.
_SETTLE_BEGIN = Prepared(
    "agentos_settle_begin",
    "SELECT pg_advisory_xact_lock(hashtextextended(%(session_id)s, 7)), "
    f"set_config('{SETTLING}', '', true), "
    "set_config('agentos.promoted', '', true)",
    {"session_id": "text"},
)
_settled: dict[tuple[str | None, bool], Prepared] = {}


def _settled_statement(start_sql: str | None, hand_off: bool) -> Prepared:
    """The last statement of a one-message finish: whether the ticket's change matched, the session's new head
    if it is queued, and (with `hand_off`) that head claimed for this worker, its job started."""
    key = (start_sql, hand_off)
    if key not in _settled:
        outcome = f"SELECT {FENCE} AS settled, {_PROMOTED} AS promoted"
        if hand_off:
            sql = f"""{_claiming(start_sql, _PROMOTED)}
                SELECT settled, promoted, {_CLAIMED_COLUMNS} FROM ({outcome}) AS outcome LEFT JOIN {CLAIMED} ON true"""
        else:
            sql = outcome
        name = f"agentos_settled{'_handing_off' if hand_off else ''}{'_started' if start_sql else ''}"
        _settled[key] = Prepared(name, sql, {**_CLAIM_TYPES, "fence": "text"} if hand_off else {"fence": "text"})
    return _settled[key]


def _finish_in_one_message(
    claim: Claim, params: dict, statements: SettleStatements, *, terminal: bool, hand_off: bool
) -> Finished | None:
    """`ticket_finish` as one message: the session lock, the guarded change (which marks the transaction with
    FENCE when it matches), the executor's statements and the promotion of the next head (each guarded by FENCE),
    and a last statement that says what happened and claims the new head for a hand-off."""
    calls = [_SETTLE_BEGIN.call(params), _FINISH.call(params), *statements.calls]
    if terminal:
        calls.append(_PROMOTE.call(params))
    settled = {"fence": params["fence"], "worker_id": claim.worker_id, "grace": None}
    calls.append(_settled_statement(_start_sql(), hand_off and terminal).call(settled))
    row = _update_returning(*together(*calls))
    matched, promoted, *claimed = row
    if not matched:
        return None
    _changed_by(claim, "finish", params["status"])
    if statements.after is not None:
        transaction.on_commit(statements.after)
    next_claim = None
    if claimed and claimed[0] is not None:
        next_claim = _claimed(promoted, claim.worker_id, tuple(claimed))
    elif promoted is not None:  # not handed off, or not available yet: the broker takes it
        router.on_commit(promoted)
    return Finished(next_claim)


def ticket_retry(*, claim: Claim, outcome: Outcome, delay_seconds: float) -> bool:
    """An attempt failed with budget left: running → queued, available after `delay_seconds`; keeps its place.

    Fenced like `ticket_finish`, and only while no cancel was asked of the ticket. The ticket stays its session's
    head, so the session waits for the retry.
    """
    with transaction.atomic():
        updated = (
            ticket_owned(claim, unless_cancel_asked=True)
            .filter(attempt__lt=F("max_attempts"))
            .update(
                status=TicketStatus.QUEUED,
                error=outcome.error,
                locked_by=None,
                locked_at=None,
                available_at=Now() + _seconds(delay_seconds),
                updated_at=Now(),
            )
        )
        if not updated:
            return False
        _changed_by(claim, "retry", TicketStatus.QUEUED, retry_in=f"{delay_seconds:.2f}s")
        get_executor().settle(Settlement(claim.ticket_id, TicketStatus.QUEUED, claim.attempt, outcome.error, outcome))
        router.on_commit(claim.ticket_id, countdown=delay_seconds)
    return True


def _changed_by(claim: Claim, event: str, status: str, **more) -> None:
    changed(
        event,
        run_id=claim.ticket_id,
        session_id=claim.session_id,
        status=status,
        attempt=claim.attempt,
        worker=claim.worker_id,
        **more,
    )


def ticket_fail_stale(*, ticket_id: str, grace_seconds: float) -> bool:
    """Sweep: a running ticket whose lease is stale and whose budget is spent → failed with `SWEEP_ERROR`.

    Guarded on the stale lease, so a live owner's heartbeat or a concurrent sweeper makes it a no-op.
    The executor marks the job failed in the same transaction; the session's next ticket is released.
    """
    with transaction.atomic():
        ticket = _change_stale_spent(
            ticket_id,
            grace_seconds,
            status=TicketStatus.FAILED,
            error=SWEEP_ERROR,
            is_head=False,
            completed_at=Now(),
        )
        if ticket is None:
            return False
        changed("sweep", run_id=ticket_id, status=TicketStatus.FAILED, **ticket)
        get_executor().settle(Settlement(str(ticket_id), TicketStatus.FAILED, ticket["attempt"], SWEEP_ERROR))
        promote_next_head(ticket["session_id"])
    return True


def _change_stale_spent(ticket_id: str, grace_seconds: float, **changes) -> dict | None:
    """Under the session's lock, apply `changes` to the ticket if it is running with a lease older than the grace,
    no budget left and no cancel asked; its session_id, attempt and lost worker if it was, else None (a heartbeat,
    another sweep or a cancel won)."""
    return _change_stale(ticket_id, grace_seconds, "attempt >= max_attempts AND cancel_requested_at IS NULL", changes)


def _change_stale(ticket_id: str, grace_seconds: float, condition: str, changes: dict) -> dict | None:
    """Under the session's lock, apply `changes` (and clear the lease) to the ticket if it is running with a lease
    older than the grace and `condition` holds; its session_id, attempt and lost worker if it was, else None."""
    ticket = Ticket.objects.filter(pk=ticket_id).values("session_id", "attempt", worker=F("locked_by")).first()
    if ticket is None:
        return None
    session_lock(ticket["session_id"])
    stale = _while(
        f"status = 'running' AND {condition} AND locked_at < statement_timestamp() - %s * interval '1 second'",
        [grace_seconds],
    )
    updated = Ticket.objects.filter(stale, pk=ticket_id).update(
        locked_by=None, locked_at=None, updated_at=Now(), **changes
    )
    return ticket if updated else None


def ticket_park_stale(*, ticket_id: str, grace_seconds: float) -> bool:
    """Sweep: a running ticket whose lease is stale, whose budget is spent, and whose executor says its job is
    still paused at heart (a continuation leg that died before recording anything) → paused, so it can be
    continued again. Guarded like `ticket_fail_stale`; it stays its session's head, so the session stays held.
    """
    with transaction.atomic():
        ticket = _change_stale_spent(ticket_id, grace_seconds, status=TicketStatus.PAUSED)
        if ticket is None:
            return False
        changed("park", run_id=ticket_id, status=TicketStatus.PAUSED, **ticket)
        settlement = Settlement(str(ticket_id), TicketStatus.PAUSED, ticket["attempt"], previous=TicketStatus.RUNNING)
        get_executor().settle(settlement)
    return True


def ticket_cancel(*, ticket_id: str, error: str, paused_error: str | None = None) -> str | None:
    """Cancel a ticket: queued or paused → cancelled at once; running → cancel asked (`cancel_requested_at`), for
    its attempt to end it cancelled. Returns the status it had, or None when it had ended (or is unknown).

    One statement for the three, so no change of the ticket can slip between them: a running ticket that pauses
    meanwhile is cancelled as paused, one whose cancel was asked first can no longer pause (`ticket_finish`).
    `error` is the ticket's error afterwards (`paused_error`, when given, for a ticket that was paused). Releases
    the session's next ticket when the cancelled one was the head. Asking again of a running ticket keeps the
    first time asked.
    """
    with transaction.atomic():
        session_id = Ticket.objects.filter(pk=ticket_id).values_list("session_id", flat=True).first()
        if session_id is None:
            return None
        session_lock(session_id)
        row = _update_returning(
            f"""
            WITH old AS (SELECT id, status, attempt FROM {TABLE}  -- by its key (see _claiming)
                         WHERE id = %s AND (SELECT status IN {_LIVE_SQL}) FOR UPDATE)
            UPDATE {TABLE} AS t SET
                   status = CASE old.status WHEN 'running' THEN 'running' ELSE 'cancelled' END,
                   error = CASE old.status WHEN 'running' THEN t.error WHEN 'paused' THEN %s ELSE %s END,
                   is_head = t.is_head AND old.status = 'running',
                   cancel_requested_at = CASE old.status WHEN 'running'
                                         THEN coalesce(t.cancel_requested_at, statement_timestamp()) END,
                   completed_at = CASE WHEN old.status <> 'running' THEN statement_timestamp() END,
                   updated_at = CASE old.status WHEN 'running' THEN t.updated_at ELSE statement_timestamp() END
            FROM old WHERE t.id = old.id
            RETURNING old.status, old.attempt, t.error
            """,
            [ticket_id, paused_error or error, error],
        )
        if row is None:
            return None
        previous, attempt, error = row
        if previous == TicketStatus.RUNNING:
            changed("cancel_ask", run_id=ticket_id, session_id=session_id, status=previous, attempt=attempt)
            return previous
        changed("cancel", run_id=ticket_id, session_id=session_id, status=TicketStatus.CANCELLED, attempt=attempt)
        get_executor().settle(Settlement(str(ticket_id), TicketStatus.CANCELLED, attempt, error, previous=previous))
        promote_next_head(session_id)
    return previous


def ticket_cancel_stale(*, ticket_id: str, grace_seconds: float) -> bool:
    """Sweep: a running ticket whose cancel was asked and whose lease is stale (its worker was lost before the
    attempt could end it) → cancelled, whatever budget is left: nothing runs it again to be cancelled.

    Guarded on the stale lease, so a live owner's heartbeat or a concurrent sweeper makes it a no-op. The executor
    mirrors it (previous status running) in the same transaction; the session's next ticket is released.
    """
    with transaction.atomic():
        ended = {"status": TicketStatus.CANCELLED, "is_head": False, "completed_at": Now()}
        ticket = _change_stale(ticket_id, grace_seconds, "cancel_requested_at IS NOT NULL", ended)
        if ticket is None:
            return False
        changed("sweep", run_id=ticket_id, status=TicketStatus.CANCELLED, **ticket)
        get_executor().settle(Settlement(str(ticket_id), ended["status"], ticket["attempt"], previous="running"))
        promote_next_head(ticket["session_id"])
    return True


def ticket_continue(*, ticket_id: str) -> bool:
    """Continue a paused ticket: paused → queued with one more attempt, same row, same `session_seq`.

    It stays its session's head, so nothing overtakes it; published after commit. Idempotent: a second
    continue finds it queued and changes nothing (returns False).
    """
    with transaction.atomic():
        row = _update_returning(
            f"""
            UPDATE {TABLE} SET status = 'queued', max_attempts = max_attempts + 1,
                   available_at = statement_timestamp(), updated_at = statement_timestamp()
            WHERE id = %s AND (SELECT status = 'paused')  -- by its key (see _claiming)
            RETURNING session_id, attempt
            """,
            [ticket_id],
        )
        if row is None:
            return False
        changed("continue", run_id=ticket_id, session_id=row[0], status=TicketStatus.QUEUED, attempt=row[1])
        router.on_commit(ticket_id)
    return True


class RequeueResult(enum.Enum):
    REQUEUED = "requeued"
    NOT_REQUEUEABLE = "not_requeueable"
    TOO_RECENT = "too_recent"


def ticket_requeue(*, ticket_id: str, grace_seconds: float, force: bool = False) -> RequeueResult:
    """A dead letter back in line: failed | cancelled → queued with exactly one more attempt, at the back, the cancel
    asked of its last attempt (if any) forgotten.

    A ticket failed less than `grace_seconds` ago may still have a live (presumed dead) worker: refused
    unless `force`. Takes the session lock; the new `session_seq` is 1 + the largest live one, and the
    ticket is its session's head when no live serialized ticket remains.
    """
    with transaction.atomic():
        session_id = Ticket.objects.filter(pk=ticket_id).values_list("session_id", flat=True).first()
        if session_id is None:
            return RequeueResult.NOT_REQUEUEABLE
        session_lock(session_id)
        recent = "t.status = 'failed' AND t.completed_at > statement_timestamp() - %s * interval '1 second'"
        row = _update_returning(
            f"""
            WITH line AS (SELECT coalesce(max(session_seq), 0) AS last_seq,
                                 coalesce(bool_or(serialized), false) AS occupied
                          FROM {TABLE} WHERE session_id = %s AND status IN {_LIVE_SQL}),
                 old AS (SELECT id, status FROM {TABLE} WHERE id = %s FOR UPDATE)
            UPDATE {TABLE} AS t SET status = 'queued', max_attempts = t.attempt + 1,
                   session_seq = line.last_seq + 1, is_head = t.serialized AND NOT line.occupied,
                   available_at = statement_timestamp(), locked_by = NULL, locked_at = NULL, completed_at = NULL,
                   cancel_requested_at = NULL, updated_at = statement_timestamp()
            FROM line, old
            WHERE t.id = %s AND t.id = old.id  -- by its key (see _claiming): its state is tested apart
              AND (SELECT t.status IN ('failed', 'cancelled') AND (%s OR NOT ({recent})))
            RETURNING t.is_head OR NOT t.serialized, old.status, t.attempt
            """,
            [session_id, ticket_id, ticket_id, force, grace_seconds],
        )
        if row is None:
            dead = Ticket.objects.filter(_while("status IN ('failed', 'cancelled')"), pk=ticket_id)
            return RequeueResult.TOO_RECENT if dead.exists() else RequeueResult.NOT_REQUEUEABLE
        publish, previous, attempt = row
        changed("requeue", run_id=ticket_id, session_id=session_id, status=TicketStatus.QUEUED, attempt=attempt)
        get_executor().settle(Settlement(str(ticket_id), TicketStatus.QUEUED, 0, previous=previous))
        if publish:
            router.on_commit(ticket_id)
    return RequeueResult.REQUEUED


def ticket_prune(*, retention_seconds: float, batch: int = 1000) -> int:
    """Delete up to `batch` terminal tickets completed more than `retention_seconds` ago; paused never."""
    old = Ticket.objects.filter(status__in=TERMINAL, completed_at__lt=Now() - _seconds(retention_seconds))
    ids = list(old.values_list("pk", flat=True)[:batch])
    deleted, _ = old.filter(pk__in=ids).delete()  # re-checked: one requeued meanwhile is not deleted
    pruned(deleted)
    return deleted


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
