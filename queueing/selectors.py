"""Reads of the queue (no state changes here).

The reads of one ticket by its id (`ticket_seconds_until_available`, `ticket_waiting_on`) find it by the key and
test its state in a sub-select, as the claim does (tickets.claim._claim_ctes): otherwise statistics taken when few
tickets were queued make a scan of every queued one look cheaper.
"""

from __future__ import annotations

import dataclasses
import json
import uuid

from django.db import connection
from django.db.models import F

from agentos_project.core.conf import current

from .models import Ticket, TicketStatus
from .seam import Claim


def ticket_by_idempotency_key(*, scope: str, key: str) -> Ticket | None:
    """The ticket accepted under this Idempotency-Key in this scope (the user id, "" for anonymous)."""
    return Ticket.objects.filter(idempotency_scope=scope, idempotency_key=key).first()


def ticket_seconds_until_available(*, ticket_id) -> float | None:
    """For a queued ticket that may run but whose backoff has not ended: seconds left (database clock); else None."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT extract(epoch FROM available_at - statement_timestamp()) FROM {Ticket._meta.db_table} "
            "WHERE id = %s AND (SELECT status = 'queued' AND (is_head OR NOT serialized) AND NOT held "
            "AND available_at > statement_timestamp())",
            [ticket_id],
        )
        row = cursor.fetchone()
    return float(row[0]) if row else None


def ticket_waiting_on(*, ticket_id) -> str | None:
    """What a waiting ticket waits for (CONTRACT 5.3): its session's head (the running or paused holder, else the
    earliest queued ticket ahead of it). None when the ticket is not waiting behind another."""
    table = Ticket._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT head.id FROM {table} AS head WHERE head.session_id = t.session_id AND head.is_head) "
            f"FROM {table} AS t WHERE t.id = %s AND (SELECT t.status = 'queued' AND t.serialized AND NOT t.is_head)",
            [ticket_id],
        )
        row = cursor.fetchone()
    return str(row[0]) if row and row[0] is not None else None


@dataclasses.dataclass(frozen=True)
class UserCap:
    """A queued ticket held by its user's cap: the user, how many of its tickets run, and the one running longest."""

    user_id: str
    running: int
    longest: str


def ticket_user_cap(*, ticket_id, cap: int) -> UserCap | None:
    """For a queued ticket that may run (its session's head, or unordered) whose user runs `cap` tickets or more:
    why it waits (CONTRACT 17). None otherwise, or when `cap` is 0 (off)."""
    if cap <= 0:
        return None
    table = Ticket._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT t.user_id, count(r.id), (array_agg(r.id ORDER BY r.updated_at, r.id))[1]
            FROM {table} AS t JOIN {table} AS r ON r.user_id = t.user_id AND r.turn = 'r'
            WHERE t.id = %s AND (SELECT t.turn IN ('w', 'h'))  -- by its key
            GROUP BY t.user_id HAVING count(r.id) >= %s
            """,
            [ticket_id, cap],
        )
        row = cursor.fetchone()
    return None if row is None else UserCap(row[0], row[1], str(row[2]))


def ticket_running_for(*, worker_id: str, session_id: str, exclude: set[str]) -> Claim | None:
    """A ticket of `session_id` running under `worker_id` that this process is not running (`exclude`): the one a
    settling commit claimed for it as a hand-off, when the commit's answer was lost, as its claim (with its
    component, as every claim has it). None if there is none. A hand-off claims only a serialized session's head,
    of which one at most runs: an unordered ticket another thread of the worker claimed (and does not yet show in
    `exclude`) is never adopted, so two threads never run one attempt."""
    row = (
        Ticket.objects.filter(
            session_id=session_id, status=TicketStatus.RUNNING, locked_by=worker_id, serialized=True, is_head=True
        )
        .exclude(pk__in=exclude)
        .values_list("pk", "attempt", "max_attempts", "payload", "component_type", "component_id")
        .first()
    )
    if row is None:
        return None
    ticket_id, attempt, max_attempts, payload, component_type, component_id = row
    return Claim(
        str(ticket_id), attempt, max_attempts, worker_id, session_id, payload, component=(component_type, component_id)
    )


JOB_STATUSES = ("queued", "running", "completed", "failed", "cancelled", "paused")  # AgentOS' order, for its texts
SORTABLE = (
    "created_at",
    "updated_at",
    "completed_at",
    "status",
    "attempt",
    "component_type",
    "component_id",
    "user_id",
)


def is_ticket_id(value) -> bool:
    """Whether `value` can name a ticket at all (a UUID), so a lookup by it does not raise."""
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True


def ticket_get(*, ticket_id: str) -> Ticket | None:
    """The ticket with this id; None when there is none or the id is not a UUID."""
    return Ticket.objects.filter(pk=ticket_id).first() if is_ticket_id(ticket_id) else None


MAX_OFFSET = 2**63 - 1  # a page's OFFSET is a bigint in PostgreSQL: a larger one is an error, not an empty page


def tickets_page(
    *,
    statuses: list[str] | None = None,
    session_ids: list[str] | None = None,
    user_id: str | None = None,
    limit: int = 20,
    page: int = 1,
    sort_by: str = "created_at",
    descending: bool = True,
) -> tuple[list[Ticket], int]:
    """One page of tickets matching every filter given (a list matches any of its values), and how many match in
    all. Sorted by `sort_by` (created_at when it is not one of SORTABLE), empty values last, then by id, so pages
    never overlap. The caller keeps the page's offset, (page - 1) * limit, within MAX_OFFSET."""
    tickets = Ticket.objects.all()
    if statuses:
        tickets = tickets.filter(status__in=statuses)
    if session_ids:
        tickets = tickets.filter(session_id__in=session_ids)
    if user_id is not None:
        tickets = tickets.filter(user_id=user_id)
    field = F(sort_by if sort_by in SORTABLE else "created_at")
    order = field.desc(nulls_last=True) if descending else field.asc(nulls_last=True)
    rows = list(tickets.order_by(order, "id")[(page - 1) * limit : page * limit])
    return rows, tickets.count()


def queue_stats() -> dict:
    """`GET /queue/stats`: tickets by status (the statuses present only, as AgentOS counts them) and the oldest
    queued ticket's age in whole seconds (None if none), an integer as AgentOS' is; beyond AgentOS, fair share: the
    users with the most runs running (`running_by_user`, the top TOP_USERS), the runs held by the cap and those held
    for their user's turn, and the runs expired in the queue (of the tickets retention keeps)."""
    health = queue_health(details=False)
    counts = {status: count for status, count in health.counts.items() if count}
    oldest = health.oldest_queued_age_seconds
    fair = fair_share()
    return {
        "counts": counts,
        "oldest_queued_age_seconds": None if oldest is None else int(oldest),
        "running_by_user": fair.running_by_user,
        "held_by_cap": fair.held_by_cap,
        "held_for_turn": fair.held_for_turn,
        "expired": fair.expired,
    }


TOP_USERS = 10


@dataclasses.dataclass(frozen=True)
class FairShare:
    running_by_user: dict[str, int]
    held_by_cap: int
    held_for_turn: int
    expired: int


def fair_share(*, cap: int | None = None) -> FairShare:
    """How users share the workers now: the TOP_USERS users with the most tickets running, the claimable queued
    tickets of users at the cap (`AGENTOS_MAX_RUNNING_PER_USER`, the settings' unless given), the held tickets of
    the others (waiting for their user's turn in the broker's line), and the tickets expired in the queue."""
    cap = current().queue.max_running_per_user if cap is None else cap
    table = Ticket._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH running AS (SELECT user_id, count(*) AS n FROM {table} WHERE turn = 'r' GROUP BY user_id),
                 turns AS (SELECT user_id, count(*) AS claimable, count(*) FILTER (WHERE turn = 'h') AS held
                           FROM {table} WHERE turn IN ('w', 'h') GROUP BY user_id)
            SELECT coalesce(sum(turns.claimable) FILTER (WHERE %s > 0 AND coalesce(running.n, 0) >= %s), 0),
                   coalesce(sum(turns.held) FILTER (WHERE NOT (%s > 0 AND coalesce(running.n, 0) >= %s)), 0),
                   (SELECT count(*) FROM {table} WHERE status = 'cancelled' AND error LIKE 'expired after %%'),
                   (SELECT coalesce(json_agg(json_build_array(user_id, n)), '[]') FROM
                        (SELECT user_id, n FROM running ORDER BY n DESC, user_id LIMIT %s) AS top)
            FROM turns LEFT JOIN running USING (user_id)
            """,
            [cap, cap, cap, cap, TOP_USERS],
        )
        held_by_cap, held_for_turn, expired, top = cursor.fetchone()
    top = json.loads(top) if isinstance(top, str) else top
    return FairShare({user: count for user, count in top}, int(held_by_cap), int(held_for_turn), expired)


@dataclasses.dataclass(frozen=True)
class Hold:
    sessions: int = 0
    oldest_age_seconds: float = 0.0
    waiting: int = 0


@dataclasses.dataclass(frozen=True)
class QueueHealth:
    counts: dict[str, int]
    oldest_queued_age_seconds: float | None
    held: dict[str, Hold] = dataclasses.field(default_factory=dict)
    in_flight: dict[str, int] = dataclasses.field(default_factory=dict)


_HOLDS = f"""
    SELECT CASE WHEN head.status = 'paused' THEN 'paused' ELSE 'retrying' END AS reason, count(*),
           coalesce(extract(epoch FROM statement_timestamp() - min(head.updated_at)), 0),
           coalesce(sum((SELECT count(*) FROM {Ticket._meta.db_table} AS t
                         WHERE t.session_id = head.session_id AND t.status = 'queued' AND NOT t.is_head)), 0)
    FROM {Ticket._meta.db_table} AS head
    WHERE head.is_head
      AND (head.status = 'paused'
           OR (head.status = 'queued' AND head.attempt > 0 AND head.available_at > statement_timestamp()))
    GROUP BY 1
"""


def queue_health(*, details: bool = True) -> QueueHealth:
    """What the gauges of `/metrics` show, read in one go: tickets by status, the oldest queued age, and with
    `details` the sessions held by a paused head or by one waiting for its retry backoff (how many, the oldest
    hold's age, the runs queued behind them) and the running tickets per worker."""
    table = Ticket._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT status, count(*) FROM {table} GROUP BY status")
        counts = {status: 0 for status in JOB_STATUSES} | dict(cursor.fetchall())
        cursor.execute(
            f"SELECT extract(epoch FROM statement_timestamp() - min(created_at)) FROM {table} WHERE status = 'queued'"
        )
        oldest = cursor.fetchone()[0]
        oldest = None if oldest is None else round(float(oldest), 3)
        if not details:
            return QueueHealth(counts, oldest)
        cursor.execute(_HOLDS)
        held = {
            reason: Hold(sessions, float(age), int(waiting)) for reason, sessions, age, waiting in cursor.fetchall()
        }
        cursor.execute(f"SELECT locked_by, count(*) FROM {table} WHERE status = 'running' GROUP BY locked_by")
        in_flight = {worker or "-": count for worker, count in cursor.fetchall()}
    return QueueHealth(counts, oldest, {"paused": Hold(), "retrying": Hold(), **held}, in_flight)
