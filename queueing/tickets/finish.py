"""Finish: the end of an attempt by its owner (finish, retry), and whether a cancel was asked of it meanwhile."""

from __future__ import annotations

import dataclasses
import functools

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest, Now

from agentos_project.core.postgres.prepared import Prepared, together

from .. import router
from ..models import TERMINAL, TicketStatus
from ..seam import CLAIMED, FENCE, SETTLING, Claim, Outcome, Settlement, SettleStatements, get_executor
from ..transition_log import changed
from . import fair
from ._sql import _PROMOTE, TABLE, AdvisoryLock, _seconds, _update_returning, mirror
from .claim import _CLAIM_TYPES, _CLAIMED_COLUMNS, _claim_ctes, _claim_from_row, ticket_owned


def ticket_cancel_asked(*, claim: Claim) -> bool:
    """Whether a cancel was asked of the ticket while `claim` still owns it: then a pause or a retry of the attempt
    matches nothing, and the attempt must end the ticket cancelled."""
    return ticket_owned(claim).filter(cancel_requested_at__isnull=False).exists()


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
    WHERE id = %(ticket_id)s  -- by its key, whatever the statistics say (see _claim_ctes): its state is tested apart
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
    """End the attempt `claim` owns: running → completed | failed | cancelled | paused, in one message.

    Fenced: matches only while this worker still owns this attempt; None means a newer attempt or a sweep
    took the ticket, and nothing (ticket or the executor's rows) was written. An outcome that yields to a cancel
    (a pause, a retryable failure) matches only while no cancel was asked: None then too (`ticket_cancel_asked`).
    The executor's writes (`Executor.settle`) go with the ticket's change, in one message that PostgreSQL runs
    as one transaction, committed when this returns: the session lock is held for no round trip. A terminal head
    hands its session to the next ticket: published after commit, or, with `hand_off`, claimed for the same worker
    in the same transaction (its work started there too) and returned, so the caller runs it at once on the same
    thread: no broker round trip, no extra commit.
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
    statements = get_executor().settle(settlement, params["fence"])
    return _finish_in_one_message(claim, params, statements, terminal=terminal, hand_off=hand_off)


_PROMOTED = "nullif(current_setting('agentos.promoted', true), '')::uuid"
_RELEASED = "nullif(current_setting('agentos.released', true), '')::uuid"
# The session lock, and the marks cleared: a caller's transaction may hold them from an earlier finish.
_SETTLE_BEGIN = Prepared(
    "agentos_settle_begin",
    f"SELECT {AdvisoryLock.SESSION}, "
    f"set_config('{SETTLING}', '', true), "
    "set_config('agentos.promoted', '', true), "
    "set_config('agentos.released', '', true)",
    {"session_id": "text"},
)
# With the cap: the run that ended makes room for one held ticket of its user, unless its session's next ticket
# takes that room (promoted, queued: handed off or published).
_RELEASE_ONE = Prepared(
    "agentos_release_after_finish",
    fair.let_in(
        fair.OWNER,
        f"least(1, {fair.room(fair.OWNER)})",
        condition=f"{FENCE} AND {_PROMOTED} IS NULL",
        returning="set_config('agentos.released', h.id::text, true)",
    ),
    {"ticket_id": "uuid", "fence": "text", **fair.FAIR_TYPES},
)


@functools.cache
def _settled_statement(start_sql: str, hand_off: bool) -> Prepared:
    """The last statement of a one-message finish: whether the ticket's change matched, the session's new head
    if it is queued, and (with `hand_off`) that head claimed for this worker, its work started (`start_sql`)."""
    outcome = f"SELECT {FENCE} AS settled, {_PROMOTED} AS promoted, {_RELEASED} AS released"
    if not hand_off:
        return Prepared("agentos_settled_started", outcome, {"fence": "text"})
    sql = f"""{_claim_ctes(start_sql, _PROMOTED)}
                SELECT settled, promoted, released, {_CLAIMED_COLUMNS}
                FROM ({outcome}) AS outcome LEFT JOIN {CLAIMED} ON true"""
    return Prepared("agentos_settled_handing_off_started", sql, {**_CLAIM_TYPES, "fence": "text"})


def _finish_in_one_message(
    claim: Claim, params: dict, statements: SettleStatements, *, terminal: bool, hand_off: bool
) -> Finished | None:
    """`ticket_finish` as one message: the session lock, the guarded change (which marks the transaction with
    FENCE when it matches), the executor's statements and the promotion of the next head (each guarded by FENCE),
    and a last statement that says what happened and claims the new head for a hand-off."""
    calls = [_SETTLE_BEGIN.call(params), _FINISH.call(params), *statements.calls]
    if terminal:
        calls.append(_PROMOTE.call(params))
    if fair.capped():
        calls.append(_RELEASE_ONE.call({**params, **fair.policy()}))
    settled = {"fence": params["fence"], "worker_id": claim.worker_id, "grace": None}
    calls.append(_settled_statement(get_executor().start_sql, hand_off and terminal).call(settled))
    row = _update_returning(*together(*calls))
    matched, promoted, released, *claimed = row
    if not matched:
        return None
    _changed_by(claim, "finish", params["status"])
    if statements.after is not None:
        transaction.on_commit(statements.after)
    if released is not None:
        router.on_commit(released)
    next_claim = None
    if claimed and claimed[0] is not None:
        next_claim = _claim_from_row(promoted, claim.worker_id, tuple(claimed))
    elif promoted is not None:  # not handed off, or not available yet: the broker takes it
        router.on_commit(promoted)
    return Finished(next_claim)


def ticket_retry(*, claim: Claim, outcome: Outcome, delay_seconds: float) -> bool:
    """An attempt failed with budget left: running → queued, available after `delay_seconds`; keeps its place. An
    outcome that resumes (`Outcome.resume`: its attempt made progress the work keeps) is granted one more attempt
    when it has no budget left (`max_attempts` = attempt + 1), as the sweeper resumes a lost one.

    Fenced like `ticket_finish`, and only while no cancel was asked of the ticket. The ticket stays its session's
    head, so the session waits for the retry.
    """
    owned = ticket_owned(claim, unless_cancel_asked=True)
    granted = {"max_attempts": Greatest(F("max_attempts"), F("attempt") + 1)} if outcome.resume else {}
    with transaction.atomic():
        updated = (owned if outcome.resume else owned.filter(attempt__lt=F("max_attempts"))).update(
            status=TicketStatus.QUEUED,
            error=outcome.error,
            locked_by=None,
            locked_at=None,
            available_at=Now() + _seconds(delay_seconds),
            updated_at=Now(),
            **granted,
        )
        if not updated:
            return False
        _changed_by(claim, "retry", TicketStatus.QUEUED, retry_in=f"{delay_seconds:.2f}s")
        mirror(Settlement(claim.ticket_id, TicketStatus.QUEUED, claim.attempt, outcome.error, outcome))
        router.on_commit(claim.ticket_id, countdown=delay_seconds)
        if fair.capped():  # it runs no more until its backoff ends: room for one held ticket of its user meanwhile
            fair.ticket_release_held(owner_of=claim.ticket_id)
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
