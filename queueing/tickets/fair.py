"""Fair share between users (CONTRACT 17): the per-user cap on running tickets, and the round robin of the broker.

A ticket has a user's turn when it runs or may run (queued, its session's head or unordered) and has a `user_id`;
anonymous tickets take no turn, so neither rule touches them (a run without a user has no identity to count
against: with JWT every run has one, the token's subject). Two rules, both kept by the database:

- The cap (`AGENTOS_MAX_RUNNING_PER_USER`): a claim of a queued ticket matches only while its user has fewer
  running than the cap, counted after taking the user's advisory lock in the same message, so two claims of one
  user never both see room for one. A claim refused for the cap marks the ticket `held` instead.
- The round robin (`AGENTOS_ROUND_ROBIN_WINDOW`): at most that many of a user's claimable tickets wait in the
  broker at once (`waiting`: queued, not held, available); an accept beyond that writes its ticket `held` and
  publishes nothing. Each claim of a user's ticket lets the user's oldest held ticket in (held = false, published),
  at the back of the broker's line: a user with a thousand runs has a few messages in the line, behind which
  every other user's arrive, so workers take users in turn. The window is not exact (an accept does not lock
  the user): it only orders the broker's line; the cap is exact.

A held ticket is let in when its user has room (`room`): at the claim of one of its tickets, at the end of one
(with the cap), and by the sweeper's pass for whatever those missed (`ticket_release_all_held`). So a held ticket
never waits on a message that is not coming.
"""

from __future__ import annotations

from django.db import connection

from agentos_project.core.conf import current
from agentos_project.core.postgres.prepared import Prepared

from .. import router
from ._sql import TABLE, AdvisoryLock

_NO_LIMIT = "2147483647"
# What `room` reads besides the user: the policy's two numbers, and how far a count need go.
FAIR_TYPES = {"cap": "int", "window": "int", "turns": "int"}
# A ticket's `turn` (computed by PostgreSQL from its user, status, head and held flags): running, waiting in the
# broker's line, held. The reads below find a user's tickets by (user_id, turn) only, so `ticket_user_turn` is the one
# index that serves them: no other partial index's predicate follows from their conditions, whatever the statistics.
RUNNING, WAITING, HELD = "'r'", "'w'", "'h'"


def policy() -> dict:
    """The fair-share parameters of the statements (`FAIR_TYPES`) as the settings have them."""
    queue = current().queue
    return {
        "cap": queue.max_running_per_user,
        "window": queue.round_robin_window,
        "turns": max(queue.max_running_per_user, queue.round_robin_window) + 1,
    }


def enabled() -> bool:
    """Whether either rule is on: when neither is, no statement holds, counts or lets in anything."""
    queue = current().queue
    return queue.max_running_per_user > 0 or queue.round_robin_window > 0


def capped() -> bool:
    return current().queue.max_running_per_user > 0


def running(user: str) -> str:
    """SQL: how many tickets of the user (an SQL expression) run now, counted up to what either rule needs."""
    return f"""(SELECT count(*) FROM (SELECT 1 FROM {TABLE} AS r WHERE r.user_id = {user} AND r.turn = {RUNNING}
                                       LIMIT %(turns)s) AS r)"""


def waiting(user: str, *, besides: str = "NULL") -> str:
    """SQL: how many claimable tickets of the user (an SQL expression) wait in the broker's line now (not held,
    available), `besides` the ticket whose id that expression is; counted up to what either rule needs."""
    return f"""(SELECT count(*) FROM (SELECT 1 FROM {TABLE} AS w WHERE w.user_id = {user} AND w.turn = {WAITING}
                                       AND w.available_at <= statement_timestamp()
                                       AND w.id IS DISTINCT FROM {besides} LIMIT %(turns)s) AS w)"""


def room(user: str, *, starting: int = 0, besides: str = "NULL") -> str:
    """SQL: how many more of the user's tickets may join the broker's line: the window less those waiting there,
    and with the cap, the cap less those running (and `starting`, being claimed now) and waiting. Each rule's
    count is made only when the rule is on."""
    waits = waiting(user, besides=besides)
    return f"""least(CASE WHEN %(window)s > 0 THEN %(window)s - {waits} ELSE {_NO_LIMIT} END,
                     CASE WHEN %(cap)s > 0 THEN %(cap)s - {running(user)} - {starting} - {waits}
                          ELSE {_NO_LIMIT} END)"""


def let_in(user: str, limit: str, *, condition: str = "true", returning: str = "h.id") -> str:
    """SQL: an UPDATE letting in up to `limit` (an SQL expression) of the user's held tickets, oldest first, when
    `condition` holds; it returns `returning` of each. `limit` (the user's room: counts) is worked out only when the
    user has a held ticket, as the filter of the first one found. The numbering's frame is ROWS: with the default
    (RANGE) PostgreSQL 15 reads all of the user's held tickets to number the first. A held ticket two of them pick
    is let in by one.
    It leaves `updated_at` alone: that is when the ticket last moved in its session (a hand-off's start)."""
    oldest = f"""SELECT n.id FROM (SELECT n.id, row_number() OVER (ORDER BY n.created_at ROWS UNBOUNDED
                                                                 PRECEDING) AS place
                                FROM {TABLE} AS n WHERE n.user_id = {user} AND n.turn = {HELD}
                                ORDER BY n.created_at LIMIT %(turns)s) AS n
                 WHERE n.place <= {limit}"""
    return _releasing(oldest, condition=condition, returning=returning)


def _releasing(candidates: str, *, condition: str = "true", returning: str = "h.id") -> str:
    """SQL: the UPDATE letting in the held tickets among `candidates` (a query of ids) when `condition` holds."""
    return f"""
        UPDATE {TABLE} AS h SET held = false
        WHERE h.id IN ({candidates})
          AND (SELECT h.turn = {HELD}) AND {condition}  -- by its key: re-read if another let it in meanwhile
        RETURNING {returning}"""


_RELEASE = Prepared(
    "agentos_release_held",
    let_in("%(user_id)s", room("%(user_id)s")),
    {"user_id": "text", **FAIR_TYPES},
)
# The user of the ticket `%(ticket_id)s`, as an SQL expression.
OWNER = f"(SELECT user_id FROM {TABLE} WHERE id = %(ticket_id)s)"
_RELEASE_OWNERS = Prepared(
    "agentos_release_held_of_owner",
    let_in(OWNER, room(OWNER)),
    {"ticket_id": "uuid", **FAIR_TYPES},
)


def ticket_release_held(*, user_id: str | None = None, owner_of: str | None = None) -> list[str]:
    """Let in as many held tickets of the user (or of the user of the ticket `owner_of`) as it has room for, and
    publish them once the transaction commits (at once outside one); their ids. Nothing for an anonymous user
    or with both rules off."""
    if (user_id is None and owner_of is None) or not enabled():
        return []
    if owner_of is not None:
        return _published(*_RELEASE_OWNERS.call({"ticket_id": owner_of, **policy()}))
    return _published(*_RELEASE.call({"user_id": user_id, **policy()}))


def _published(sql: str, values) -> list[str]:
    """Run a let-in statement; publish the tickets it let in once the transaction commits; their ids."""
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        released = [str(row[0]) for row in cursor.fetchall()]
    for ticket_id in released:
        router.on_commit(ticket_id)
    return released


# Every user's held tickets it has room for, in one statement: the sweeper's pass. The users with a held ticket are
# found one after the other through `ticket_user_turn` (a skip scan: one probe per such user, however many tickets
# each holds), not by reading every held ticket; each one's room is counted once.
_EACH_USERS_OLDEST = f"""SELECT n.id FROM (SELECT user_id FROM u WHERE user_id IS NOT NULL) AS u
    CROSS JOIN LATERAL (SELECT n.id FROM {TABLE} AS n WHERE n.user_id = u.user_id AND n.turn = {HELD}
                        ORDER BY n.created_at LIMIT greatest(0, {room("u.user_id")})) AS n"""
_RELEASE_ALL = Prepared(
    "agentos_release_all_held",
    f"""
    WITH RECURSIVE u AS (
        (SELECT user_id FROM {TABLE} WHERE turn = {HELD} ORDER BY user_id LIMIT 1)
        UNION ALL
        SELECT (SELECT n.user_id FROM {TABLE} AS n WHERE n.turn = {HELD} AND n.user_id > u.user_id
                ORDER BY n.user_id LIMIT 1)
        FROM u WHERE u.user_id IS NOT NULL)
    {_releasing(_EACH_USERS_OLDEST)}
    """,
    FAIR_TYPES,
)


def ticket_release_all_held() -> list[str]:
    """Let in the held tickets of every user that has room for them (what the claims, the ends of runs and the
    cancels did not), publishing them once the transaction commits; their ids. With both rules off (turned off
    while tickets were held) every user has room: nothing stays held."""
    return _published(*_RELEASE_ALL.call(policy()))


# Taken before a claim when the cap is on: the claims of one user are counted one after the other.
USER_LOCK = Prepared(
    "agentos_user_lock",
    f"SELECT {AdvisoryLock.USER} FROM {TABLE} WHERE id = %(ticket_id)s AND user_id IS NOT NULL",
    {"ticket_id": "uuid"},
)
