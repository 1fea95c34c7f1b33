"""The queue on its own: tickets accepted through `ticket_accept` and a fake executor in place of the runs app.

Nothing here (or in any test of this folder) imports `runs` or `agents_registry`: the queue carries jobs it
knows only as tickets, and these tests prove it claims, finishes, retries, sweeps and hands off by itself.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import itertools
import json
import time
import uuid
from collections.abc import Iterator

import pytest
from django.db import OperationalError, connection, transaction
from django.db.models import F

from agentos_project.core.postgres.prepared import Prepared
from queueing import shutdown
from queueing.models import Ticket
from queueing.seam import (
    CLAIMED,
    FENCE,
    Claim,
    LostAttempt,
    NewTicket,
    Outcome,
    Settlement,
    SettleStatements,
    get_executor,
    register_executor,
)
from queueing.tickets import ticket_accept, ticket_cancel, ticket_claim, ticket_finish

UNSTORABLE = "a result the database refuses"
# The fake's own rows, written as the runs app writes its runs: started by the claiming statement, settled by
# statements sent with the ticket's change (a table of the tests only: they may not import runs).
JOBS = "queueing_test_fake_job"
SETTLED = Prepared(
    "agentos_test_fake_settled",
    f"INSERT INTO {JOBS} (ticket_id, attempt, what, at, fake, settlement) "
    f"SELECT %(ticket_id)s, %(attempt)s, %(what)s, statement_timestamp(), %(fake)s, %(settlement)s WHERE {FENCE}",
    {"ticket_id": "uuid", "attempt": "int", "what": "text", "fake": "text", "settlement": "int", "fence": "text"},
)
# What the database refuses every time (SQLSTATE 22P02, a data exception), as it may refuse a real job's writes.
REFUSED = Prepared(
    "agentos_test_fake_refused", f"SELECT %(value)s::int WHERE {FENCE}", {"value": "text", "fence": "text"}
)


@contextlib.contextmanager
def draining_meanwhile() -> Iterator[None]:
    """Be a draining worker (`shutdown.draining()` true) inside the block, without the drain's timer; not after it."""
    shutdown._State.draining.set()
    try:
        yield
    finally:
        shutdown._State.draining.clear()


@pytest.fixture(scope="session", autouse=True)
def jobs_table(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {JOBS} (seq bigserial PRIMARY KEY, ticket_id uuid NOT NULL,"
            " attempt int NOT NULL, what text NOT NULL, at timestamptz NOT NULL, fake text, settlement int)"
        )


@dataclasses.dataclass
class FakeExecutor:
    """Stands in for the runs app; records what the queue asks of it.

    A ticket's payload scripts its attempts: `outcomes` lists the ticket status each attempt asks for
    ("completed", "failed", "paused", "cancelled", "raise" for an executor that raises, "unstorable" for a
    result with a NUL, which the driver cannot send; the last entry repeats), `sleep` the seconds each attempt
    takes. A settle of a ticket in `refuse` fails; a lost attempt of a ticket in `parked` is parked back to paused,
    one of a ticket in `resumed` queued once more, and asking about one in `unanswered` raises.

    As the runs app does, the claiming statement starts the job (`start_sql`: a row in `JOBS`, with the database's
    clock at the claim) and every change of a ticket is mirrored by statements sent with it (`settle`: a row in
    `JOBS` naming the settlement, so `settlements` are those the database kept: none of a change that did not match
    or was rolled back).
    """

    start_sql = (
        f"INSERT INTO {JOBS} (ticket_id, attempt, what, at) "
        f"SELECT id, attempt, 'started', statement_timestamp() FROM {CLAIMED}"
    )
    executed: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    made: dict[int, Settlement] = dataclasses.field(default_factory=dict)
    keys: Iterator[int] = dataclasses.field(default_factory=itertools.count)
    fake: str = dataclasses.field(default_factory=lambda: str(uuid.uuid4()))
    refuse: set[str] = dataclasses.field(default_factory=set)
    parked: set[str] = dataclasses.field(default_factory=set)
    resumed: set[str] = dataclasses.field(default_factory=set)
    unanswered: set[str] = dataclasses.field(default_factory=set)
    forgotten: list[str] = dataclasses.field(default_factory=list)
    cancels: list[str] = dataclasses.field(default_factory=list)

    @property
    def started(self) -> list[tuple[str, int]]:
        """(ticket id, attempt) of every job started, in order: those of this test's tickets (earlier tests' are
        gone, rolled back or flushed)."""
        return [(ticket_id, attempt) for ticket_id, attempt, _ in self._starts()]

    @property
    def started_at(self) -> dict[str, datetime.datetime]:
        """When each of this test's tickets last started, by the database's clock at its claim."""
        return {ticket_id: at for ticket_id, _, at in self._starts()}

    def _starts(self) -> list[tuple[str, int, datetime.datetime]]:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT s.ticket_id::text, s.attempt, s.at FROM {JOBS} AS s JOIN {Ticket._meta.db_table} AS t"
                " ON t.id = s.ticket_id WHERE s.what = 'started' ORDER BY s.seq"
            )
            return cursor.fetchall()

    def execute(self, claim: Claim) -> Outcome:
        self.executed.append((claim.ticket_id, claim.attempt))
        time.sleep(claim.payload.get("sleep", 0))
        outcomes = claim.payload.get("outcomes", ["completed"])
        status = outcomes[min(claim.attempt, len(outcomes)) - 1]
        if status == "raise":
            raise RuntimeError("fake job raised")
        if status == "failed":
            return Outcome(status, error="fake job failed", retryable=claim.payload.get("retryable", True))
        if status == "unstorable":
            return Outcome("completed", result=UNSTORABLE)
        return Outcome(status)

    def settle(self, settlement: Settlement, fence: str) -> SettleStatements:
        unstorable = settlement.outcome is not None and settlement.outcome.result == UNSTORABLE
        key = next(self.keys)  # one each, from threads too (a count's next is atomic)
        self.made[key] = settlement
        values = {"ticket_id": settlement.ticket_id, "attempt": settlement.attempt, "fence": fence}
        values.update(what="\x00" if unstorable else settlement.status, fake=self.fake, settlement=key)
        calls = [SETTLED.call(values)]
        if settlement.ticket_id in self.refuse:
            calls.append(REFUSED.call({"value": "refused", "fence": fence}))
        return SettleStatements(calls)

    @property
    def settlements(self) -> list[Settlement]:
        """The settlements whose rows the database kept (committed, or in the test's own transaction), in order."""
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT settlement FROM {JOBS} WHERE fake = %s ORDER BY seq", [self.fake])
            return [self.made[key] for (key,) in cursor.fetchall()]

    def lost_attempt(self, ticket_id: str) -> LostAttempt:
        if ticket_id in self.unanswered:
            raise OperationalError("the database went away while the executor was asked")
        if ticket_id in self.parked:
            return LostAttempt.PARK
        return LostAttempt.RESUME if ticket_id in self.resumed else LostAttempt.FAIL

    def forget(self, ticket_ids: list[str]) -> None:
        self.forgotten += ticket_ids

    def cancel(self, ticket_id: str) -> str:
        """As the runs app does: the ticket's guarded cancel (at once, or asked of its running attempt)."""
        self.cancels.append(ticket_id)
        previous = ticket_cancel(ticket_id=ticket_id, error="cancelled by the fake")
        return {None: "finished", "running": "requested"}.get(previous, "cancelled")

    def cancelled(self, outcome: Outcome) -> Outcome:
        return Outcome("cancelled", error=f"cancelled instead of {outcome.status}")

    def settled(self, ticket_id: str) -> list[tuple[str, int, str | None]]:
        """(status, attempt, error) of every settlement of `ticket_id`, in order."""
        return [(s.status, s.attempt, s.error) for s in self.settlements if s.ticket_id == ticket_id]


@pytest.fixture(autouse=True)
def executor():
    fake, previous = FakeExecutor(), get_executor()
    register_executor(fake)
    yield fake
    register_executor(previous)


def accept(
    *,
    session_id: str = "s-1",
    serialized: bool = True,
    max_attempts: int = 1,
    outcomes: tuple[str, ...] = ("completed",),
    sleep: float = 0,
    max_queue_depth: int = 0,
    user_id: str | None = None,
    ttl_seconds: float | None = None,
) -> str:
    """Accept a fake job in a transaction of its own; returns its ticket id."""
    ticket_id = str(uuid.uuid4())
    with transaction.atomic():
        ticket = NewTicket(
            id=ticket_id,
            component_type="job",
            component_id="fake",
            session_id=session_id,
            user_id=user_id,
            payload={"outcomes": list(outcomes), "sleep": sleep},
            serialized=serialized,
            max_attempts=max_attempts,
            ttl_seconds=ttl_seconds,
        )
        ticket_accept(ticket=ticket, max_queue_depth=max_queue_depth)
    return ticket_id


def ended(session_id: str, status: str, *, error: str | None = None, worker: str = "w1") -> str:
    """A ticket of its own that ran once and ended `status`; its id."""
    ticket_id = accept(session_id=session_id, outcomes=(status,))
    finish(claim(ticket_id, worker), status, error=error)
    return ticket_id


def snapshot(ticket_id: str) -> dict:
    return Ticket.objects.filter(pk=ticket_id).values().first()


def backdate(ticket_id: str, *, seconds: float = 3600, field: str = "locked_at") -> None:
    """Move a ticket's lease or completion time into the past (instead of sleeping through a grace)."""
    Ticket.objects.filter(pk=ticket_id).update(**{field: F(field) - datetime.timedelta(seconds=seconds)})


def set_budget(ticket_id: str, max_attempts: int) -> None:
    Ticket.objects.filter(pk=ticket_id).update(max_attempts=max_attempts)


def claim(ticket_id: str, worker: str = "w1", grace: float = 60):
    return ticket_claim(ticket_id=ticket_id, worker_id=worker, grace_seconds=grace)


def finish(owner, status: str, error: str | None = None):
    return ticket_finish(claim=owner, outcome=Outcome(status, error=error))


@pytest.fixture
def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


BROKER_QUEUE = "agentos"
# `GET /queue/stats` of a queue without a ticket: AgentOS' two fields, then fair share's (CONTRACT 17).
EMPTY_STATS = {
    "counts": {},
    "oldest_queued_age_seconds": None,
    "running_by_user": {},
    "held_by_cap": 0,
    "held_for_turn": 0,
    "expired": 0,
}


def broker_messages(redis_db, queue: str = BROKER_QUEUE) -> list[dict]:
    """The Celery messages waiting in a queue of the test broker, oldest first: (args, kwargs, headers)."""
    messages = []
    for raw in reversed(redis_db.lrange(queue, 0, -1)):
        envelope = json.loads(raw)
        args, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        messages.append({"args": args, "kwargs": kwargs, "headers": envelope["headers"]})
    return messages
