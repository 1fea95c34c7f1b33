"""The plans of the statements that change or read one ticket, as PostgreSQL runs them (a prepared statement's
generic plan; one sent as plain SQL, its plan for those values): each finds its ticket by the key, so it reads a
few pages however many tickets are claimable, running, waiting, paused or failed (a scan of those per claim, settle,
poll, heartbeat, sweep, cancel, continue or requeue made each one slower as a queue grew)."""

from __future__ import annotations

import datetime
import re
import uuid

import pytest
from django.db import connection, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from agentos_project.core.postgres.prepared import Prepared, registered
from queueing import selectors, tickets
from queueing.models import Ticket, TicketStatus
from queueing.seam import Claim, Outcome
from tests.support.conf import with_conf

pytestmark = pytest.mark.django_db(transaction=True)

CLAIMABLE = 3000
# The statements the changes below send, by their names less the digest of their SQL.
CLAIM, CLAIM_FAIR, FINISH = "agentos_claim_started", "agentos_claim_started_fair", "agentos_finish"
HAND_OFF = "agentos_settled_handing_off_started"
FEW_PAGES = 40  # a lookup by the key reads a handful; a scan of 3,000 tickets' entries read 67 or more


def _tickets(count: int, **fields) -> list[str]:
    """`count` tickets with `fields`, each of a session of its own: copies of one the ORM makes (its defaults
    filled), made by PostgreSQL in one statement, then the model one deleted."""
    values = {"component_type": "job", "component_id": "fake", "session_seq": 1, "max_attempts": 1, **fields}
    model = Ticket.objects.create(id=uuid.uuid4(), session_id="plan-model", **values)
    copied = [
        f.column for f in Ticket._meta.concrete_fields if not f.generated and f.column not in ("id", "session_id")
    ]
    table, columns = Ticket._meta.db_table, ", ".join(copied)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (id, session_id, {columns}) "
            f"SELECT n.id, 'plan-' || n.id, {columns} FROM {table}, "
            f"(SELECT gen_random_uuid() AS id FROM generate_series(1, %s)) AS n WHERE {table}.id = %s RETURNING id",
            [count, model.id],
        )
        ids = [str(ticket_id) for (ticket_id,) in cursor.fetchall()]
    model.delete()
    return ids


def _statistics_of_finished_tickets_only() -> None:
    """20,000 finished tickets, analyzed: statistics that saw no ticket queued, running or paused."""
    _tickets(20_000, status="completed")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Ticket._meta.db_table}")


def _claimable_tickets(count: int) -> list[str]:
    """`count` queued heads, made after the statistics were taken on a table of finished tickets only (the queue
    grew since the last ANALYZE, as it does in a burst)."""
    _statistics_of_finished_tickets_only()
    return _tickets(count, status="queued", is_head=True)


def _pages_read(statement, values: dict, *, promoted: str = "") -> int:
    """Shared buffers the statement's generic plan touched when run (rolled back)."""
    name = f"agentos_test_plan_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute(statement.prepare.replace(statement.name, name, 1))
            cursor.execute("BEGIN")
            cursor.execute("SELECT set_config('agentos.promoted', %s, true)", [promoted])
            placeholders = ", ".join(["%s"] * len(statement.order))
            cursor.execute(
                f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {name} ({placeholders})", [values[k] for k in statement.order]
            )
            plan = "\n".join(line for (line,) in cursor.fetchall())
            cursor.execute("ROLLBACK")
            cursor.execute(f"DEALLOCATE {name}")
        finally:
            cursor.execute("RESET plan_cache_mode")
    assert _tickets_changed(plan) == 1, f"the ticket was not changed:\n{plan}"
    return _buffers(plan)


def _tickets_changed(plan: str) -> int | None:
    """How many tickets the plan's Update changed ("rows=1", or "rows=1.00" from PostgreSQL 18); None without one.

    An Update inside a statement (a CTE) counts the rows it returns. A statement that is itself an Update shows no
    rows on it without a RETURNING, so there it is the rows its input (the first node under it) gave it: the same
    number here, where no concurrent change can make the Update skip a row its input found."""
    lines = plan.splitlines()
    if lines[0].startswith("Update on queueing_ticket"):
        line = next(line for line in lines if line.startswith("  ->  "))
    else:
        line = next((line for line in lines if "Update on queueing_ticket" in line), None)
    changed = re.search(r"\(actual time=\S+ rows=([\d.]+)", line) if line else None
    return round(float(changed.group(1))) if changed else None


def _buffers(plan: str) -> int:
    """Shared buffers the plan's top node touched: found in PostgreSQL's cache (hit) or not (read); 0 when it
    touched none (planning's own buffers are not counted)."""
    line = re.search(r"Buffers: shared((?: \w+=\d+)+)", plan.split("\nPlanning")[0])
    return sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", line.group(1))) if line else 0


def test_a_claim_reads_a_few_pages_however_many_tickets_are_claimable():
    ids = _claimable_tickets(CLAIMABLE)
    values = {"ticket_id": ids[-1], "worker_id": "w1", "grace": 60.0, "fence": "f"}
    with with_conf("queue", max_running_per_user=0, round_robin_window=0):  # the claim without fair share
        claiming = _statement_of(
            lambda: tickets.ticket_claim(ticket_id=ids[-1], worker_id="w1", grace_seconds=60), CLAIM
        )
    handing_off = _statement_of(lambda: _finish(ids[0], hand_off=True), HAND_OFF)

    claim = _pages_read(claiming, values)
    hand_off = _pages_read(handing_off, {**values, "grace": None}, promoted=ids[-1])

    assert claim < FEW_PAGES, f"the claim read {claim} pages"
    assert hand_off < FEW_PAGES, f"the hand-off claim read {hand_off} pages"


def test_fair_share_reads_a_few_pages_however_many_tickets_its_user_and_others_have():
    """With the cap and the round robin on, a claim also counts its user's running and waiting tickets, marks its
    ticket held or lets in the user's oldest held one; the sweeper's pass finds the users with a held ticket: each
    through `ticket_user_turn`, never a scan of the claimable, held or running tickets of every user."""
    _statistics_of_finished_tickets_only()
    mine = _tickets(CLAIMABLE, status="queued", is_head=True, user_id="big")
    Ticket.objects.filter(pk__in=mine[10:]).update(held=True)
    _tickets(CLAIMABLE, status="running", is_head=True, user_id="others")
    _tickets(CLAIMABLE, status="running", is_head=True, user_id="a-running-one")  # before the others, none held
    _tickets(CLAIMABLE, status="queued", is_head=True, user_id="others", held=True)
    _tickets(10, status="queued", is_head=True, user_id="others")  # no room: what is read, not what is written
    values = {"ticket_id": mine[0], "worker_id": "w1", "grace": 60.0, "cap": 4, "window": 8, "turns": 9}

    with with_conf("queue", max_running_per_user=4, round_robin_window=8):
        claiming = _statement_of(lambda: _claim(mine[0]), CLAIM_FAIR)

    claim = _pages_read(claiming, values)

    # Eight lookups by a key (38 pages here) where the plain claim makes three: a scan of one kind's 3,000 adds 67.
    assert claim < FEW_PAGES + 20, f"the fair claim read {claim} pages"
    _, measured = _statements_measured(lambda: tickets.ticket_release_held(user_id="big"))
    assert _many_pages(measured) == []
    _, measured = _statements_measured(tickets.ticket_release_all_held)
    assert _many_pages(measured) == [], "the sweeper's pass finds the users with a held ticket, not every held one"


def test_a_finish_reads_a_few_pages_however_many_tickets_are_live():
    ids = _claimable_tickets(CLAIMABLE)
    Ticket.objects.filter(pk=ids[-1]).update(status="running", locked_by="w1", attempt=1)
    values = {"ticket_id": ids[-1], "worker_id": "w1", "attempt": 1, "status": "completed", "error": None,
              "terminal": True, "fence": "f", "yields": False}  # fmt: skip

    finishing = _statement_of(lambda: _finish(ids[-1]), FINISH)

    assert _pages_read(finishing, values) < FEW_PAGES


def test_a_finish_reads_a_few_pages_however_many_tickets_are_running():
    """The statistics were taken when nothing ran (a quiet moment, or the VACUUM ANALYZE before a burst); since
    then many tickets passed through running (each one leaves an index entry there until the next VACUUM). A
    finish that found its ticket among the running ones read them all, on every settle."""
    ids = _claimable_tickets(CLAIMABLE)
    Ticket.objects.filter(pk__in=ids).update(status="running", locked_by="w1", attempt=1)
    values = {"ticket_id": ids[-1], "worker_id": "w1", "attempt": 1, "status": "completed", "error": None,
              "terminal": True, "fence": "f", "yields": False}  # fmt: skip

    finishing = _statement_of(lambda: _finish(ids[-1]), FINISH)

    assert _pages_read(finishing, values) < FEW_PAGES


class _Undone(Exception):
    pass


NOT_EXPLAINABLE = ("SAVEPOINT", "RELEASE", "ROLLBACK", "PREPARE", "DEALLOCATE", "SET ", "BEGIN", "COMMIT")


def _statements_measured(call) -> tuple[object, list[tuple[int, str]]]:
    """`call()`'s result, then (shared buffers, plan) of each statement it sent, measured from the state before it:
    `call()` runs in a transaction rolled back, then each statement is re-run as it was sent (each of a message's on
    its own) under EXPLAIN
    (ANALYZE, BUFFERS) in another one, rolled back too."""
    assert not connection.in_atomic_block
    result = None
    with CaptureQueriesContext(connection) as queries:
        try:
            with transaction.atomic():
                result = call()
                raise _Undone
        except _Undone:
            pass
    statements = [
        sql for query in queries.captured_queries for sql in query["sql"].split(";\n")  # a message's statements
        if not sql.lstrip().upper().startswith(NOT_EXPLAINABLE)
    ]  # fmt: skip
    measured = []
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            for sql in statements:
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")
                plan = "\n".join(line for (line,) in cursor.fetchall())
                measured.append((_buffers(plan), plan))
        finally:
            cursor.execute("ROLLBACK")
    return result, measured


def _statement_of(change, name: str) -> Prepared:
    """The prepared statement `name` (less its digest) that `change()` sends, as the registry of statements made
    has it (`prepared.registered`): made by the change itself, with the work's SQL in it where the change has it.
    `change()` runs in a transaction rolled back."""
    with CaptureQueriesContext(connection) as queries:
        try:
            with transaction.atomic():
                change()
                raise _Undone
        except _Undone:
            pass
    sent = {found for query in queries.captured_queries for found in re.findall(r"EXECUTE (\w+)", query["sql"])}
    [full] = [found for found in sent if found.rsplit("_", 1)[0] == name]
    return registered()[full]


def _claim(ticket_id: str) -> None:
    tickets.ticket_claim(ticket_id=ticket_id, worker_id="w1", grace_seconds=60)


def _finish(ticket_id: str, *, hand_off: bool = False) -> None:
    owner = Claim(ticket_id, attempt=1, max_attempts=1, worker_id="w1", session_id=f"plan-{ticket_id}", payload={})
    tickets.ticket_finish(claim=owner, outcome=Outcome("completed"), hand_off=hand_off)


def _many_pages(*measured: list[tuple[int, str]]) -> list[int]:
    """The pages read by each statement of `measured` that read FEW_PAGES or more (an empty list: none did)."""
    return [pages for statements in measured for pages, _ in statements if pages >= FEW_PAGES]


def _changed_one_ticket(measured: list[tuple[int, str]]) -> bool:
    return any(_tickets_changed(plan) == 1 for _, plan in measured)


def test_a_read_of_one_waiting_ticket_reads_a_few_pages_however_many_tickets_wait():
    """The statistics were taken before the queue grew; a waiting run's poll (what it waits on) and an early
    message's check (how long until it may run) find their ticket by the key, not among all the queued ones."""
    _statistics_of_finished_tickets_only()
    head = _tickets(1, status="running", is_head=True, attempt=1, locked_by="w1")[0]
    session_id = Ticket.objects.get(pk=head).session_id
    waiting = [str(uuid.uuid4()) for _ in range(CLAIMABLE)]
    Ticket.objects.bulk_create(
        Ticket(id=ticket_id, component_type="job", component_id="fake", session_id=session_id,
               session_seq=2 + n, max_attempts=1, status="queued")
        for n, ticket_id in enumerate(waiting)
    )  # fmt: skip
    early = _tickets(CLAIMABLE, status="queued", is_head=True)  # all of them in their retry's backoff
    Ticket.objects.filter(pk__in=early).update(available_at=Now() + datetime.timedelta(minutes=5))

    assert selectors.ticket_waiting_on(ticket_id=waiting[-1]) == head
    assert 240 < selectors.ticket_seconds_until_available(ticket_id=early[-1]) <= 300
    _, waiting_on = _statements_measured(lambda: selectors.ticket_waiting_on(ticket_id=waiting[-1]))
    _, until = _statements_measured(lambda: selectors.ticket_seconds_until_available(ticket_id=early[-1]))

    assert _many_pages(waiting_on, until) == [], "a read of one ticket read many pages"
    assert len(waiting_on) == len(until) == 1


@pytest.mark.parametrize("status", ["queued", "paused"])
def test_a_cancel_reads_a_few_pages_however_many_tickets_wait(status):
    ids = _claimable_tickets(CLAIMABLE)
    if status != "queued":
        Ticket.objects.filter(pk__in=ids).update(status=status)

    previous, measured = _statements_measured(lambda: tickets.ticket_cancel(ticket_id=ids[-1], error="cancelled"))

    assert previous == status
    assert _changed_one_ticket(measured)
    assert _many_pages(measured) == []


def test_a_continue_reads_a_few_pages_however_many_tickets_are_paused():
    ids = _claimable_tickets(CLAIMABLE)
    Ticket.objects.filter(pk__in=ids).update(status="paused")

    continued, measured = _statements_measured(lambda: tickets.ticket_continue(ticket_id=ids[-1]))

    assert continued is True
    assert _changed_one_ticket(measured)
    assert _many_pages(measured) == []


def _running_tickets(count: int, *, lease_age: datetime.timedelta = datetime.timedelta(0), **fields) -> list[str]:
    """`count` tickets running for w1 (attempt 1, their lease taken `lease_age` ago), made after statistics that saw
    none running: every attempt leaves an entry in the state's index until the next VACUUM."""
    ids = _claimable_tickets(count)
    Ticket.objects.filter(pk__in=ids).update(
        status="running", locked_by="w1", attempt=1, locked_at=Now() - lease_age, **fields
    )
    return ids


def test_a_heartbeat_and_a_retry_read_a_few_pages_however_many_tickets_are_running():
    ids = _running_tickets(CLAIMABLE, max_attempts=3)
    claim = Claim(ids[-1], 1, 3, "w1", Ticket.objects.get(pk=ids[-1]).session_id, {})
    failed = Outcome(TicketStatus.FAILED, error="boom", retryable=True)

    refreshed, beat = _statements_measured(
        lambda: tickets.ticket_heartbeat(worker_id="w1", attempts=[(ids[-1], 1), (ids[0].upper(), 1), (ids[1], 2)])
    )
    retried, retry = _statements_measured(lambda: tickets.ticket_retry(claim=claim, outcome=failed, delay_seconds=1))

    assert refreshed == 2  # the third names an attempt that is not running
    assert [_tickets_changed(plan) for _, plan in beat] == [2]
    assert retried is True
    assert _changed_one_ticket(retry)
    assert _many_pages(beat, retry) == []


def test_the_sweepers_changes_read_a_few_pages_however_many_tickets_are_running():
    """A reclaim's dispatch note and the end of a lost attempt without budget (failed, or parked again)."""
    ids = _running_tickets(CLAIMABLE, lease_age=datetime.timedelta(minutes=5))

    noted, note = _statements_measured(lambda: tickets.ticket_note_dispatch(ticket_id=ids[-1]))
    swept, sweep = _statements_measured(lambda: tickets.ticket_fail_stale(ticket_id=ids[-1], grace_seconds=60))
    parked, park = _statements_measured(lambda: tickets.ticket_park_stale(ticket_id=ids[-1], grace_seconds=60))

    assert noted is swept is parked is True
    assert all(_changed_one_ticket(measured) for measured in (note, sweep, park))
    assert _many_pages(note, sweep, park) == []


def test_a_requeue_reads_a_few_pages_however_many_tickets_have_failed():
    ids = _claimable_tickets(CLAIMABLE)
    Ticket.objects.filter(pk__in=ids).update(
        status="failed", is_head=False, attempt=1, completed_at=Now() - datetime.timedelta(minutes=5)
    )
    Ticket.objects.filter(pk=ids[0]).update(completed_at=Now())

    requeued, measured = _statements_measured(lambda: tickets.ticket_requeue(ticket_id=ids[-1], grace_seconds=60))
    too_recent, refused = _statements_measured(lambda: tickets.ticket_requeue(ticket_id=ids[0], grace_seconds=60))

    assert requeued == tickets.RequeueResult.REQUEUED
    assert too_recent == tickets.RequeueResult.TOO_RECENT
    assert _changed_one_ticket(measured)
    assert _many_pages(measured, refused) == []
