"""The one-message finish: an executor that gives its writes as statements (`Executor.settle`) is
settled with the ticket's change, the promotion and the hand-off claim in one message (one transaction, no round
trip between them), each of its statements guarded by `FENCE`."""

from __future__ import annotations

import dataclasses

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agentos_project.core.postgres.prepared import Prepared
from queueing import router
from queueing.seam import FENCE, Outcome, Settlement, SettleStatements, get_executor, register_executor
from queueing.tickets import ticket_finish

from .conftest import BROKER_QUEUE, FakeExecutor, accept, backdate, broker_messages, claim, snapshot

WRITES = "fake_job_writes"
RECORD = Prepared(
    "agentos_test_fake_settle",
    f"INSERT INTO {WRITES} (ticket_id, attempt, what) SELECT %(ticket_id)s, %(attempt)s, %(status)s WHERE {FENCE}",
    {"ticket_id": "uuid", "attempt": "int", "status": "text", "fence": "text"},
)


@dataclasses.dataclass
class StatementExecutor(FakeExecutor):
    """The fake job, started in the claiming statement and settled by statements: both write a row of WRITES."""

    after: list[str] = dataclasses.field(default_factory=list)
    start_sql = f"INSERT INTO {WRITES} (ticket_id, attempt, what) SELECT id, attempt, 'started' FROM claimed"

    def settle(self, settlement: Settlement, fence: str) -> SettleStatements:
        params = {**dataclasses.asdict(settlement), "fence": fence}
        return SettleStatements([RECORD.call(params)], after=lambda: self.after.append(settlement.ticket_id))


@pytest.fixture
def executor(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {WRITES} (ticket_id uuid, attempt int, what text, at serial)")
    fake, previous = StatementExecutor(), get_executor()
    register_executor(fake)
    yield fake
    register_executor(previous)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {WRITES}")


def writes() -> list[tuple[str, int, str]]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT ticket_id::text, attempt, what FROM {WRITES} ORDER BY at")
        return cursor.fetchall()


def statements_sent(captured: CaptureQueriesContext) -> list[str]:
    """What went to the server, less the one-time preparation of statements on this connection."""
    return [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith(("PREPARE", "SELECT 1 FROM pg_prepared_statements"))
    ]


@pytest.mark.parametrize("hand_off", [True, False])
def test_a_head_settles_and_hands_its_session_on_in_one_message(redis_db, executor, hand_off):
    session = f"one-message-{hand_off}"
    head, successor = accept(session_id=session), accept(session_id=session)
    assert router.publisher.flush()
    redis_db.delete(BROKER_QUEUE)
    owner = claim(head)

    with CaptureQueriesContext(connection) as captured:
        finished = ticket_finish(claim=owner, outcome=Outcome("completed"), hand_off=hand_off)
    assert router.publisher.flush()

    assert len(statements_sent(captured)) == 1
    assert (snapshot(head)["status"], snapshot(head)["is_head"], snapshot(successor)["is_head"]) == (
        "completed",
        False,
        True,
    )
    assert executor.after == [head], "called once, after the commit"
    if hand_off:
        assert (finished.next_claim.ticket_id, finished.next_claim.attempt) == (successor, 1)
        assert (snapshot(successor)["status"], snapshot(successor)["locked_by"]) == ("running", "w1")
        assert writes() == [(head, 1, "started"), (head, 1, "completed"), (successor, 1, "started")]
        assert broker_messages(redis_db) == []
    else:
        assert finished.next_claim is None
        assert (snapshot(successor)["status"], snapshot(successor)["attempt"]) == ("queued", 0)
        assert writes() == [(head, 1, "started"), (head, 1, "completed")]
        assert [m["args"] for m in broker_messages(redis_db)] == [[successor]]


def test_a_fenced_attempt_writes_nothing_and_promotes_nothing(redis_db, executor):
    head, successor = accept(session_id="fenced-1", max_attempts=2), accept(session_id="fenced-1")
    lost = claim(head, worker="w1")
    backdate(head)
    newer = claim(head, worker="w2")  # the lease went stale: another worker took the ticket
    before = snapshot(head)

    assert ticket_finish(claim=lost, outcome=Outcome("completed"), hand_off=True) is None

    assert (newer.attempt, snapshot(head)) == (2, before)
    assert snapshot(successor)["is_head"] is False
    assert writes() == [(head, 1, "started"), (head, 2, "started")]
    assert executor.after == []


def test_marks_left_in_a_callers_transaction_by_an_earlier_finish_mislead_no_later_one(redis_db, executor):
    head, successor = accept(session_id="marks-1"), accept(session_id="marks-1")
    alone = accept(session_id="marks-2")
    first, second = claim(head), claim(alone)

    with transaction.atomic():
        handed = ticket_finish(claim=first, outcome=Outcome("completed"), hand_off=True)
        unrelated = ticket_finish(claim=second, outcome=Outcome("completed"), hand_off=True)
        fenced = ticket_finish(claim=second, outcome=Outcome("completed"), hand_off=True)

    assert handed.next_claim.ticket_id == successor
    assert unrelated.next_claim is None, "the first finish's new head is not this one's"
    assert fenced is None, "nor does its mark say that this one matched"
    assert snapshot(successor)["attempt"] == 1
