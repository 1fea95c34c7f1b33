"""Accept: a `queued` ticket at the back of its session, with the caller's rows, in one statement."""

from __future__ import annotations

import json

from django.db import connection

from agentos_project.core.postgres.prepared import Prepared, together

from .. import router
from ..exceptions import QueueFull
from ..models import TicketStatus
from ..seam import ADMITTED, GATE, ONLY_THE_TICKET, Admitted, NewTicket, Rows
from ..transition_log import changed
from . import depth, fair
from ._sql import _LIVE_SQL, _SESSION_LOCK, TABLE


def ticket_accept(*, ticket: NewTicket, rows: Rows = ONLY_THE_TICKET, max_queue_depth: int = 0) -> Admitted:
    """Insert a `queued` ticket at the back of its session, with the caller's `rows`, in one round trip and one
    transaction, and publish it once that commits.

    Outside a transaction the statements go as one message, which PostgreSQL runs as one transaction that is
    committed (synchronously) when this returns: the session lock first, then the depth lock, then one statement
    that writes the caller's rows and the ticket, each seeing what every earlier holder of the session lock
    committed. `session_seq` is 1 + the largest of the session's live tickets; the ticket is its session's head
    when no live serialized ticket precedes it, and only then (or when unordered) is a message published, unless
    its user has no room in the broker's line (`fair`): then it is written held, and let in later.
    With a `ticket.ttl_seconds` it must start within as many seconds or be cancelled (its `expires_at`).
    With `max_queue_depth` > 0 nothing is written when the ticket would make more than that many queued, exact
    under any concurrency (see `depth_gate`), and `QueueFull` is raised. Inside a caller's transaction it joins
    that transaction.
    """
    # Inside the caller's transaction a shared lock could not be let go of before trying again exactly: exact at once.
    gate = depth.depth_gate(max_queue_depth, depth.EXACT if connection.in_atomic_block else depth.FAST)
    admitted = _accept_once(ticket, rows, gate)
    if not admitted.accepted and admitted.full and gate.mode == depth.FAST:
        admitted = _accept_once(ticket, rows, depth.depth_gate(max_queue_depth, depth.EXACT))
    if admitted.full:
        raise QueueFull()
    if admitted.accepted:
        changed("accept", run_id=ticket.id, session_id=ticket.session_id, status=TicketStatus.QUEUED, attempt=0)
        if admitted.publish:
            router.on_commit(ticket.id)
    return admitted


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
    "ttl": "float8",
    "depth_limit": "int",
}
_accepts: dict[tuple[str, str | None], Prepared] = {}


def _accept_statement(rows: Rows, gate: depth.DepthGate, fair_share: bool) -> Prepared:
    key = (rows.name, gate.mode, fair_share)
    if key not in _accepts:
        answers = ", ".join((*rows.answers, "(SELECT publish FROM ticket)"))
        # Held: it could run at once, but its user's turns in the broker's line are taken.
        held = (
            f"%(user_id)s IS NOT NULL AND (NOT %(serialized)s OR NOT line.occupied) AND {fair.room('%(user_id)s')} <= 0"
            if fair_share
            else "false"
        )
        sql = f"""
            WITH {GATE} AS (SELECT {gate.open} AS open),
            {rows.ctes},
            line AS (SELECT coalesce(max(session_seq), 0) AS last_seq,
                            coalesce(bool_or(serialized), false) AS occupied
                     FROM {TABLE} WHERE session_id = %(session_id)s AND status IN {_LIVE_SQL}),
            ticket AS (
                INSERT INTO {TABLE} (id, component_type, component_id, session_id, user_id, status, attempt,
                                     max_attempts, session_seq, serialized, is_head, idempotency_key,
                                     idempotency_scope, request_digest, payload, held, ttl_seconds, expires_at)
                SELECT %(ticket_id)s, %(component_type)s, %(component_id)s, %(session_id)s, %(user_id)s, 'queued', 0,
                       %(max_attempts)s, line.last_seq + 1, %(serialized)s, %(serialized)s AND NOT line.occupied,
                       %(idempotency_key)s, %(idempotency_scope)s, %(request_digest)s, %(payload)s, {held}, %(ttl)s,
                       statement_timestamp() + %(ttl)s * interval '1 second'
                FROM {ADMITTED}, line
                RETURNING (is_head OR NOT serialized) AND NOT held AS publish)
            SELECT (SELECT open FROM {GATE}), EXISTS (SELECT 1 FROM ticket), {answers}
        """
        types = {**_TICKET_TYPES, **rows.types, **(fair.FAIR_TYPES if fair_share else {})}
        name = f"agentos_accept_{rows.name}_{gate.mode or 'uncapped'}{'_fair' if fair_share else ''}"
        _accepts[key] = Prepared(name, sql, types)
    return _accepts[key]


def _accept_once(ticket: NewTicket, rows: Rows, gate: depth.DepthGate) -> Admitted:
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
        "ttl": ticket.ttl_seconds,
    }
    fair_share = fair.enabled()
    if fair_share:
        params.update(fair.policy())
    calls = [_SESSION_LOCK.call(params)]
    if gate.lock is not None:
        calls.append(gate.lock.call(params))
    sql, values = together(*calls, _accept_statement(rows, gate, fair_share).call(params))
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        opened, accepted, *answers, publish = cursor.fetchone()
    return Admitted(accepted=accepted, full=not opened, answers=tuple(answers), publish=bool(publish))
