"""The sweeper's pass, against PostgreSQL and the test Redis: stale leases, lost messages (and not a message being
claimed), retention."""

import dataclasses
import threading

import psycopg2
import pytest
from django.db import OperationalError, connection, connections

from agentos_project.core.conf import current
from queueing import router
from queueing.models import Ticket
from queueing.sweeper import AUTOVACUUM_OFF, lost_messages, sweep_once, warn_if_autovacuum_off
from queueing.tickets import SWEEP_ERROR
from queueing.worker import worker_execute
from tests.support.waiting import wait_until

from .conftest import accept, backdate, broker_messages, claim, snapshot

pytestmark = pytest.mark.django_db


def conf(**changes):
    return dataclasses.replace(current().queue, **changes)


def settle(ticket_id):
    backdate(ticket_id, field="available_at", seconds=10)
    backdate(ticket_id, field="updated_at", seconds=10)


def test_a_claimable_ticket_without_a_live_message_is_found_and_published_again(redis_db):
    lost = accept(session_id="lost-1")  # in this test transaction on_commit never publishes: no message
    behind = accept(session_id="lost-1")
    fresh = accept(session_id="lost-2")
    settle(lost)
    settle(behind)

    assert lost_messages(conf()) == [snapshot(lost)["id"]], "only a settled head; not one behind it, not a fresh one"
    assert sweep_once(conf()).lost_messages == 1
    assert lost_messages(conf()) == []
    assert [m["args"] for m in broker_messages(redis_db)] == [[lost]], "one message, for the lost ticket only"
    assert redis_db.exists(router.MARKER.format(lost)) and not redis_db.exists(router.MARKER.format(fresh))


def test_a_message_marked_live_is_left_alone_until_consumed(redis_db):
    ticket_id = accept(session_id="lost-3")
    settle(ticket_id)
    assert router.publish(ticket_id)

    assert lost_messages(conf()) == []
    router.consumed(ticket_id)
    assert router.consumed_markers.flush()
    assert lost_messages(conf()) == [snapshot(ticket_id)["id"]]


def test_a_stale_lease_without_budget_is_failed_and_one_with_budget_is_dispatched_once_per_grace(redis_db, executor):
    spent, spare = accept(session_id="stale-1"), accept(session_id="stale-2", max_attempts=2)
    claim(spent)
    claim(spare)
    backdate(spent)
    backdate(spare)
    backdate(spare, field="updated_at")

    report = sweep_once(conf(lock_grace_seconds=60))

    assert (report.failed, report.redispatched) == (1, 1)
    assert (snapshot(spent)["status"], snapshot(spent)["error"]) == ("failed", SWEEP_ERROR)
    assert executor.settled(spent) == [("failed", 1, SWEEP_ERROR)]
    assert snapshot(spare)["status"] == "running", "a worker reclaims it when the message arrives"
    assert sweep_once(conf(lock_grace_seconds=60)).redispatched == 0


def test_old_terminal_tickets_are_pruned(redis_db):
    ticket_id = accept(session_id="prune-1")
    Ticket.objects.filter(pk=ticket_id).update(status="cancelled", is_head=False)
    Ticket.objects.filter(pk=ticket_id).update(completed_at=snapshot(ticket_id)["created_at"])
    backdate(ticket_id, field="completed_at", seconds=100)

    assert sweep_once(conf(retention_seconds=60)).pruned == 1
    assert not Ticket.objects.filter(pk=ticket_id).exists()


def test_a_ticket_whose_step_raises_does_not_stop_the_pass(redis_db, executor):
    tickets = [accept(session_id=f"bad-{n}") for n in range(3)]
    for ticket_id in tickets:
        claim(ticket_id)
        backdate(ticket_id)
    executor.refuse.add(tickets[1])

    report = sweep_once(conf(lock_grace_seconds=60))

    assert (report.failed, report.errors) == (2, 1)
    assert [snapshot(t)["status"] for t in tickets] == ["failed", "running", "failed"]
    assert snapshot(tickets[1])["error"] is None, "the raising step rolled back"
    executor.refuse.clear()
    assert sweep_once(conf(lock_grace_seconds=60)).failed == 1, "and is done on the next pass"


def test_a_lost_attempt_whose_fate_cannot_be_asked_is_left_for_the_next_pass(redis_db, executor):
    ticket_id = accept(session_id="blip-1")
    claim(ticket_id)
    backdate(ticket_id)
    before = snapshot(ticket_id)
    executor.unanswered.add(ticket_id)  # a database blip while the executor is asked

    report = sweep_once(conf(lock_grace_seconds=60))

    assert (report.failed, report.parked, report.resumed, report.errors) == (0, 0, 0, 1)
    assert snapshot(ticket_id) == before, "not failed for good: nothing changed"
    assert executor.settled(ticket_id) == []
    executor.unanswered.clear()
    executor.parked.add(ticket_id)
    assert sweep_once(conf(lock_grace_seconds=60)).parked == 1, "the next pass asks again"
    assert snapshot(ticket_id)["status"] == "paused"


def test_a_stale_lease_whose_job_is_still_paused_at_heart_is_parked_back_to_paused(redis_db, executor):
    parked, failed = accept(session_id="park-1"), accept(session_id="park-2")
    behind = accept(session_id="park-1")
    executor.parked.add(parked)
    for ticket_id in (parked, failed):
        claim(ticket_id)
        backdate(ticket_id)

    report = sweep_once(conf(lock_grace_seconds=60))

    assert (report.parked, report.failed) == (1, 1)
    row = snapshot(parked)
    assert (row["status"], row["locked_by"], row["is_head"], row["attempt"]) == ("paused", None, True, 1)
    assert executor.settled(parked) == [("paused", 1, None)]
    assert snapshot(behind)["is_head"] is False, "the session stays held by the paused run"
    assert snapshot(failed)["status"] == "failed"


def test_the_sweeper_says_so_when_autovacuum_is_off(caplog):
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        off = cursor.fetchone()[0] == "off"

    assert warn_if_autovacuum_off() is off
    assert [r.getMessage() for r in caplog.records if r.name == "agentos.sweeper"] == ([AUTOVACUUM_OFF] if off else [])


@pytest.mark.django_db(transaction=True)
def test_a_message_whose_claim_is_under_way_is_not_taken_for_lost(redis_db):
    ticket_id = accept(session_id="lost-4")
    assert router.publisher.flush()
    settle(ticket_id)  # it waited in the broker as long as a busy worker's backlog makes it
    holder = psycopg2.connect(**connection.get_connection_params())
    with holder.cursor() as cursor:
        cursor.execute("SELECT 1 FROM queueing_ticket WHERE id = %s FOR UPDATE", [ticket_id])  # the claim waits
    claimed = []
    worker = threading.Thread(target=lambda: claimed.append(_execute(ticket_id)))
    worker.start()
    try:
        _wait_until_blocked(holder)
        assert router.consumed_markers.flush()
        assert lost_messages(conf()) == [], "its marker stays until the claim is decided"
    finally:
        holder.rollback()
        holder.close()
        worker.join(10)

    assert claimed == [True]
    assert router.consumed_markers.flush()
    assert not redis_db.exists(router.MARKER.format(ticket_id))


@pytest.mark.django_db(transaction=True)
def test_a_message_whose_claim_failed_leaves_no_marker_so_the_sweeper_sends_it_again(redis_db):
    ticket_id = accept(session_id="lost-5")
    assert router.publisher.flush()
    settle(ticket_id)
    holder = psycopg2.connect(**connection.get_connection_params())
    with holder.cursor() as cursor:
        cursor.execute("SELECT 1 FROM queueing_ticket WHERE id = %s FOR UPDATE", [ticket_id])
    try:
        with pytest.raises(OperationalError, match="lock timeout"):
            _execute(ticket_id, lock_timeout="100ms")  # the database refuses the claim
    finally:
        holder.rollback()
        holder.close()

    assert router.consumed_markers.flush()
    assert lost_messages(conf()) == [snapshot(ticket_id)["id"]]


def _execute(ticket_id: str, *, lock_timeout: str = "0") -> bool:
    """`worker_execute` as a worker thread runs it, on a connection of its own."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [lock_timeout])
        return worker_execute(ticket_id=ticket_id)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        connections.close_all()


def _wait_until_blocked(holder) -> None:
    """Until another backend waits for a lock `holder` holds (asked on a connection of its own: within `holder`'s
    transaction, pg_stat_activity would answer from one snapshot)."""
    pid = holder.get_backend_pid()
    watcher = psycopg2.connect(**connection.get_connection_params())
    watcher.autocommit = True

    def blocked() -> int:
        with watcher.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid])
            return cursor.fetchone()[0]

    try:
        wait_until(blocked, timeout=5, interval=0.01, what="the claim to wait for the row")
    finally:
        watcher.close()
