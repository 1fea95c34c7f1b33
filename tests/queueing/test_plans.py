"""The claim's plans, as PostgreSQL runs its prepared statements for good (the generic plan): a claim finds its
ticket by the key, so it reads a few pages however many tickets are claimable (a scan of the claimable ones
per claim made every claim slower as a queue grew)."""

from __future__ import annotations

import re
import uuid

import pytest
from django.db import connection

from queueing.models import Ticket
from queueing.tickets import _FINISH, _claim_statement, _settled_statement

pytestmark = pytest.mark.django_db(transaction=True)

CLAIMABLE = 3000


def _tickets(count: int, **fields) -> list[str]:
    ids = [str(uuid.uuid4()) for _ in range(count)]
    Ticket.objects.bulk_create(
        Ticket(id=ticket_id, component_type="job", component_id="fake", session_id=f"plan-{ticket_id}",
               session_seq=1, max_attempts=1, **fields)
        for ticket_id in ids
    )  # fmt: skip
    return ids


def _claimable_tickets(count: int) -> list[str]:
    """`count` queued heads, made after the statistics were taken on a table of finished tickets only (the queue
    grew since the last ANALYZE, as it does in a burst)."""
    _tickets(20_000, status="completed")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Ticket._meta.db_table}")
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
    changed = re.search(r"Update on queueing_ticket t?\s*\(cost=[^)]*\) \(actual time=\S+ rows=(\d+)", plan)
    assert changed and changed.group(1) == "1", f"the ticket was not changed:\n{plan}"
    return int(re.search(r"Buffers: shared hit=(\d+)", plan).group(1))


@pytest.mark.parametrize("start_sql", [None, "SELECT 1 FROM claimed"], ids=["claim", "claim that starts the job"])
def test_a_claim_reads_a_few_pages_however_many_tickets_are_claimable(start_sql):
    ids = _claimable_tickets(CLAIMABLE)
    values = {"ticket_id": ids[-1], "worker_id": "w1", "grace": 60.0, "fence": "f"}

    claim = _pages_read(_claim_statement(start_sql), values)
    hand_off = _pages_read(_settled_statement(start_sql, True), {**values, "grace": None}, promoted=ids[-1])

    assert claim < 40, f"the claim read {claim} pages"
    assert hand_off < 40, f"the hand-off claim read {hand_off} pages"


def test_a_finish_reads_a_few_pages_however_many_tickets_are_live():
    ids = _claimable_tickets(CLAIMABLE)
    Ticket.objects.filter(pk=ids[-1]).update(status="running", locked_by="w1", attempt=1)
    values = {"ticket_id": ids[-1], "worker_id": "w1", "attempt": 1, "status": "completed", "error": None,
              "terminal": True, "fence": "f"}  # fmt: skip

    assert _pages_read(_FINISH, values) < 40
