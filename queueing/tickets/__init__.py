"""Every ticket state change (CONTRACT section 4), each one guarded UPDATE.

A function whose guard matches no row changes nothing and says so by its return value: the caller lost
the race and must not act. Changes that move a session's head (accept, finish, sweep, cancel, requeue)
first take the session's advisory lock, so an accept and the end of the head cannot both miss each other.
Times come from the database clock: `now()` below is PostgreSQL's statement_timestamp(), the clock
Django's `Now()` uses too.

The transition table, which `tests/queueing/test_transitions.py` walks:

    from      event                                  to
    -         accept                                 queued (attempt 0); held when its user has no room
    queued    claim (available, head or unordered,   running, attempt+1, locked_by, locked_at=now(),
              before its deadline, user under cap)   deadline cleared
    queued    claim refused by its user's cap        queued, held
    queued    held, its user has room                queued, not held (let in: published)
    queued    deadline passed                        cancelled                             (expire)
    running   claim of a stale lease, budget left    running, attempt+1, new owner         (reclaim)
    running   heartbeat by owner                     running, locked_at=now()
    running   cancel                                 running, cancel_requested_at=now()    (its attempt stops)
    running   finish by owner                        completed | failed | cancelled | paused
    running   error by owner, budget left            queued, available_at = now + backoff  (retry)
    running   interrupted, kept progress, no budget  queued, one more attempt, same place  (retry, resume)
    running   stale, budget spent                    failed                                (sweep)
    running   stale, budget spent, work still paused paused                                (park)
    running   stale, budget spent, work kept progress queued, one more attempt, same place (resume)
    running   stale, cancel asked                    cancelled                             (sweep)
    queued    cancel                                 cancelled
    paused    cancel                                 cancelled
    paused    continue                               queued, one more attempt, same session_seq
    failed    requeue                                queued, one more attempt, new session_seq
    cancelled requeue                                queued, one more attempt, new session_seq
    terminal  prune (older than retention)           deleted

Which of the three changes a stale ticket without budget gets (sweep, park, resume) is the work's executor's answer,
asked in the transaction that makes it (`ticket_sweep_lost`).

Once a cancel was asked of a running ticket, its attempt can no longer pause it, retry it or have it parked: those
guards want no cancel asked, and the attempt ends it cancelled instead (`ticket_cancel_asked`, `queueing.settle`).

Inside: `accept` (with `depth`, its depth gate), `claim` (claim, lease, heartbeat), `finish` (finish, retry, cancel
asked), `sweep` (stale tickets, deadlines, prune), `operator` (cancel, continue, requeue), `fair` (the per-user cap
and round robin: held tickets and letting them in), and `_sql`, the SQL they share.
"""

from ._sql import TABLE, promote_next_head, session_lock
from .accept import ticket_accept
from .claim import ticket_claim, ticket_heartbeat, ticket_note_dispatch, ticket_owned
from .depth import EXACT, FAST
from .fair import ticket_release_all_held, ticket_release_held
from .finish import Finished, ticket_cancel_asked, ticket_finish, ticket_retry
from .operator import RequeueResult, ticket_cancel, ticket_continue, ticket_requeue
from .sweep import (
    SWEEP_ERROR,
    expired_text,
    ticket_cancel_stale,
    ticket_expire,
    ticket_fail_stale,
    ticket_park_stale,
    ticket_prune,
    ticket_resume_stale,
    ticket_sweep_lost,
)

__all__ = [
    "EXACT",
    "FAST",
    "SWEEP_ERROR",
    "TABLE",
    "Finished",
    "RequeueResult",
    "expired_text",
    "promote_next_head",
    "session_lock",
    "ticket_accept",
    "ticket_cancel",
    "ticket_cancel_asked",
    "ticket_cancel_stale",
    "ticket_claim",
    "ticket_continue",
    "ticket_expire",
    "ticket_fail_stale",
    "ticket_finish",
    "ticket_heartbeat",
    "ticket_note_dispatch",
    "ticket_owned",
    "ticket_park_stale",
    "ticket_prune",
    "ticket_release_all_held",
    "ticket_release_held",
    "ticket_requeue",
    "ticket_resume_stale",
    "ticket_retry",
    "ticket_sweep_lost",
]
